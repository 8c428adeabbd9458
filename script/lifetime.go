package script

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The lifetime of the tensors a script sees.
//
// JavaScript has no destructors and the engine must not leave large
// buffers to a garbage collector, so every tensor handed to the script
// belongs to a list that releases it at a well-defined moment:
//
//   - Each host call runs in a scope of its own: the temporaries of a
//     composite op (a loss, an attention block) go back to the pool when
//     the call returns; only its results reach the script.
//   - tensor.scope(fn) releases every tensor created while fn runs, except
//     those fn returns (a tensor, or arrays and plain objects of them),
//     which move to the enclosing scope — TensorFlow.js's tidy.
//   - Outside any scope, tensors belong to the current generation, and a
//     generation ends at each backward pass. With AutoRelease:
//   - A step's activations (tensors made by ops autograd recorded) go
//     back once a backward pass has consumed the graph that made them, at
//     the start of the next forward pass: the first op recorded after that
//     backward from inputs that are not themselves consumed (a metric
//     computed from the outputs after backward is not a forward). Until
//     then they stay usable, so a loop may read its outputs after
//     backward; the next step's forward then runs without them, as
//     PyTorch's does once Python has dropped the last step's variables.
//   - Every other tensor of a generation (data, masks, what no backward
//     consumed) is released when the next generation ends: it stays
//     usable through the following step and is given back at its
//     backward. Tensors created before the first backward that autograd
//     did not record (data, constants: the script's setup) are never
//     released automatically.
//   - Small tensors (at most smallTensorBytes of memory: losses, metrics,
//     a best value, a running total, a batch of labels) are not released
//     with their generation but handed to Go's garbage collector, which
//     gives their memory back once the script no longer refers to them:
//     the common cases of a value kept across steps work without keep(),
//     while the memory that matters (activations) still goes back at
//     a known moment.
//   - t.keep() takes a tensor out of every list; t.release() releases it
//     now. Parameters, gradients, optimizer state and loaded files are
//     owned by the engine and never released by these lists.
//
// Autograd keeps what it needs for backward on its own references, so
// releasing the script's handle on an activation never breaks a backward
// pass: it only stops the memory from outliving it.
type lifetime struct {
	r      *Runtime
	auto   bool
	gen    int          // backward passes so far
	gens   []tensorList // gens[g] holds generation g's tensors (nil once released)
	scopes []*tensorList
	nextID int
	// consumed says that a backward pass ran since the last forward began:
	// the activations whose graph it consumed go back when the next
	// forward begins (releaseConsumed).
	consumed bool

	// collected holds the small tensors whose script handles the garbage
	// collector found unreachable; the runtime's goroutine releases them
	// (the memory pools are not safe for the collector's goroutine).
	collectedMu sync.Mutex
	collected   []*tensor.Tensor
	// handed holds the tensors left to the collector and not yet
	// collected, which the script's end releases.
	handed map[*tensor.Tensor]struct{}
}

// smallTensorBytes is the most memory a tensor may hold and still be left
// to the garbage collector when its generation ends (see above): a few
// thousand numbers, far below what activations take.
const smallTensorBytes = 4096

type tensorList struct {
	id      int
	tensors []*jsTensor
}

func (l *lifetime) init(r *Runtime, auto bool) {
	l.r = r
	l.auto = auto
	l.gens = []tensorList{l.newList()}
}

func (l *lifetime) newList() tensorList {
	l.nextID++
	return tensorList{id: l.nextID}
}

// track puts a new tensor into the innermost scope or the current
// generation.
func (l *lifetime) track(t *jsTensor) {
	t.recorded = !t.t.IsLeaf()
	if l.consumed && t.recorded && !t.t.FromConsumedGraph() {
		l.consumed = false
		l.releaseConsumed()
	}
	list := &l.gens[l.gen]
	if n := len(l.scopes); n > 0 {
		list = l.scopes[n-1]
	}
	t.owner = list.id
	t.gen = l.gen
	list.tensors = append(list.tensors, t)
}

// release gives back every tensor still owned by list.
func (l *lifetime) release(list *tensorList, why string) {
	for i, t := range list.tensors {
		if t.owner == list.id {
			t.releaseWith(why)
		}
		list.tensors[i] = nil
	}
	list.tensors = list.tensors[:0]
}

// backward ends the current generation, as a backward pass begins; with
// AutoRelease it releases the previous one (never generation 0, the
// setup). backwardDone follows when the pass has ended.
func (l *lifetime) backward() {
	l.gen++
	l.gens = append(l.gens, l.newList())
	old := l.gen - 2
	if l.auto && old >= 1 && old < len(l.gens) {
		l.handOverSmall(&l.gens[old])
		why := fmt.Sprintf("automatically at backward pass %d (it was made before backward pass %d; tensors over %d bytes made in a step are given back two backward passes later: call .keep() on those that must live longer)", l.gen, old+1, smallTensorBytes)
		l.release(&l.gens[old], why)
	}
	l.releaseCollected()
}

// backwardDone: the activations the pass consumed go back when the next
// forward begins. (Not during the pass: a checkpointed segment's
// recomputation records ops too, and the outputs must outlive backward.)
func (l *lifetime) backwardDone() { l.consumed = l.auto }

// releaseConsumed gives back the activations of the finished passes: the
// tensors, in every generation and in none of the scopes, that recorded
// ops made and a backward pass has consumed the graph of. Small ones are
// left to the garbage collector, as at a generation's end. The lists drop
// what they no longer own, so that generation 0 (the setup and the first
// step) does not grow.
func (l *lifetime) releaseConsumed() {
	why := fmt.Sprintf("automatically when the forward pass after backward pass %d began (backward had used the graph that made it; activations over %d bytes are given back when the next forward begins: call .keep() on those that must live longer)", l.gen, smallTensorBytes)
	for g := range l.gens {
		list := &l.gens[g]
		kept := list.tensors[:0]
		for _, t := range list.tensors {
			if t == nil || t.owner != list.id || t.released != "" {
				continue
			}
			if t.recorded && t.t.GraphConsumed() {
				if t.t.StorageBytes() <= smallTensorBytes {
					l.handOver(t)
				} else {
					t.releaseWith(why)
				}
				continue
			}
			kept = append(kept, t)
		}
		clear(list.tensors[len(kept):])
		list.tensors = kept
	}
}

// handOverSmall takes list's small tensors out of it and leaves them to
// the garbage collector: each is released once its script handle is
// unreachable.
func (l *lifetime) handOverSmall(list *tensorList) {
	for _, t := range list.tensors {
		if t == nil || t.owner != list.id || t.released != "" || t.t.StorageBytes() > smallTensorBytes {
			continue
		}
		l.handOver(t)
	}
}

// handOver takes t out of its list and leaves it to the garbage collector.
func (l *lifetime) handOver(t *jsTensor) {
	t.owner = 0
	if l.handed == nil {
		l.handed = map[*tensor.Tensor]struct{}{}
	}
	l.handed[t.t] = struct{}{}
	runtime.AddCleanup(t, l.collect, t.t)
}

// collect runs on the garbage collector's goroutine.
func (l *lifetime) collect(t *tensor.Tensor) {
	l.collectedMu.Lock()
	l.collected = append(l.collected, t)
	l.collectedMu.Unlock()
}

// releaseCollected releases the small tensors the collector found.
func (l *lifetime) releaseCollected() {
	l.collectedMu.Lock()
	done := l.collected
	l.collected = nil
	l.collectedMu.Unlock()
	for _, t := range done {
		delete(l.handed, t)
		t.Release()
	}
}

// scope runs fn with a new innermost scope and returns what fn returned,
// whose tensors move to the enclosing scope.
func (l *lifetime) scope(fn func() any) (result any) {
	// result is fn's value as exported by goja (see collectTensors).
	list := l.openScope()
	defer func() { l.closeScope(list, collectTensors(result), "at the end of the tensor.scope that made it") }()
	return fn()
}

// openScope opens a new innermost scope (a training program's
// scope_open; tensor.scope in scripts).
func (l *lifetime) openScope() *tensorList {
	list := l.newList()
	l.scopes = append(l.scopes, &list)
	return &list
}

// closeScope closes list, the innermost scope, releasing its tensors but
// those of kept, which move to the enclosing scope; why says when they
// went in errors.
func (l *lifetime) closeScope(list *tensorList, kept []*jsTensor, why string) {
	l.scopes = l.scopes[:len(l.scopes)-1]
	for _, t := range kept {
		if t.owner == list.id {
			l.track(t)
		}
	}
	l.release(list, why)
}

// unreleased counts the alive tensors that the lists hold and will not
// give back by themselves, with the bytes they view: generation 0's (made
// before the first backward pass outside any scope), or, without
// AutoRelease, every generation's. (Views of one storage are counted once
// each: the bytes may exceed the memory they take.)
func (l *lifetime) unreleased() (n int, bytes int64) {
	gens := l.gens
	if l.auto {
		gens = gens[:min(1, len(gens))]
	}
	for g := range gens {
		list := &gens[g]
		for _, t := range list.tensors {
			if t == nil || t.owner != list.id || t.released != "" || t.t.Released() {
				continue
			}
			n++
			bytes += int64(t.t.Numel()) * int64(t.t.DType().Size())
		}
	}
	return n, bytes
}

// keep takes t out of every list.
func (l *lifetime) keep(t *jsTensor) {
	t.owner = 0
	delete(l.handed, t.t)
	t.t.Persist()
}

// releaseAll gives back everything the script still holds (at exit).
func (l *lifetime) releaseAll() {
	l.releaseCollected()
	for t := range l.handed {
		t.Release()
	}
	l.handed = nil
	for i := range l.gens {
		l.release(&l.gens[i], "when the script ended")
	}
	for _, s := range l.scopes {
		l.release(s, "when the script ended")
	}
}

// collectTensors finds the tensors in a value returned from a scope (as
// exported by goja): a tensor, or arrays and plain objects holding tensors,
// at any depth.
func collectTensors(v any) []*jsTensor {
	var out []*jsTensor
	seen := map[uintptr]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case *jsTensor:
			out = append(out, x)
		case []any:
			p := reflect.ValueOf(x).Pointer()
			if len(x) == 0 || seen[p] {
				return
			}
			seen[p] = true
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			p := reflect.ValueOf(x).Pointer()
			if seen[p] {
				return
			}
			seen[p] = true
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}
