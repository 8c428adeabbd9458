package script

import (
	"fmt"
	"reflect"
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
//     generation ends at each backward pass. With AutoRelease, the tensors
//     of a generation are released when the next one ends: a training
//     step's tensors stay usable through the following step and are given
//     back at its backward. Tensors created before the first backward
//     (data, constants: the script's setup) are never released
//     automatically.
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
}

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

// backward ends the current generation; with AutoRelease it releases the
// previous one (never generation 0, the setup).
func (l *lifetime) backward() {
	l.gen++
	l.gens = append(l.gens, l.newList())
	old := l.gen - 2
	if l.auto && old >= 1 && old < len(l.gens) {
		why := fmt.Sprintf("automatically at backward pass %d (it was made before backward pass %d; call .keep() on tensors that must live longer)", l.gen, old+1)
		l.release(&l.gens[old], why)
	}
}

// scope runs fn with a new innermost scope and returns what fn returned,
// whose tensors move to the enclosing scope.
func (l *lifetime) scope(fn func() any) (result any) {
	// result is fn's value as exported by goja (see collectTensors).
	list := l.newList()
	l.scopes = append(l.scopes, &list)
	defer func() {
		l.scopes = l.scopes[:len(l.scopes)-1]
		kept := collectTensors(result)
		for _, t := range kept {
			if t.owner == list.id {
				l.track(t)
			}
		}
		l.release(&list, "at the end of the tensor.scope that made it")
	}()
	return fn()
}

// keep takes t out of every list.
func (l *lifetime) keep(t *jsTensor) {
	t.owner = 0
	t.t.Persist()
}

// releaseAll gives back everything the script still holds (at exit).
func (l *lifetime) releaseAll() {
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
