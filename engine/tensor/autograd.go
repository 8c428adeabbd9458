package tensor

import (
	"container/heap"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// node is one recorded op in the autograd graph. It keeps what its backward
// needs and nothing else: edges to the producers of its inputs, the tensors
// it saved, and the function that maps the gradient of its output to the
// gradients of its inputs.
type node struct {
	op   string
	seq  uint64 // creation order; later ops run first in backward
	next []edge
	// backward returns one gradient per edge (nil where none flows). It
	// may return its argument or the same tensor for several inputs.
	backward func(g *Tensor) []*Tensor
	// into, when set, adds the gradient of input i into acc in place,
	// with the very values acc + backward(g)[i] would have: backward
	// uses it instead of making a gradient the size of the input when
	// the input already has one accumulating (a tied embedding's lookup,
	// whose dense gradient is all zeros but a few rows; the views of a
	// split, narrow or select, all zeros but their region).
	into    func(g *Tensor, i int, acc *Tensor) error
	saved   []savedTensor
	freed   bool
	pre     []preHook // run before backward (OnBackward)
	intoErr error     // a failure of into

	// Bookkeeping of one backward pass.
	pass  uint64
	deps  int
	grad  *Tensor
	index int // position in the ready heap
}

// edge leads from a node to the producer of one input: another node, a leaf
// that accumulates gradients, or nothing (an input that needs no gradient).
type edge struct {
	node  *node
	leaf  *Tensor
	shape []int // the input's shape and type, to check returned gradients
	dt    DType
}

func (e edge) live() bool { return e.node != nil || e.leaf != nil }

type savedTensor struct {
	t       *Tensor
	version uint32
}

// record attaches a node for op to out when autograd must track it: grad
// mode is on and some input requires a gradient. It returns nil otherwise.
// The caller saves what backward needs with save and sets backward.
func (out *Tensor) record(op string, inputs ...*Tensor) *node {
	rt := out.rt
	if rt.noGrad > 0 || out.err != nil {
		return nil
	}
	need := false
	for _, in := range inputs {
		if in != nil && in.requiresGrad {
			need = true
			break
		}
	}
	if !need {
		return nil
	}
	if rt.trace != nil {
		rt.trace.op()
	}
	rt.seq++
	n := &node{op: op, seq: rt.seq, next: make([]edge, len(inputs))}
	for i, in := range inputs {
		if in == nil || !in.requiresGrad {
			continue
		}
		e := edge{shape: in.shape, dt: in.dt}
		if in.fn != nil {
			e.node = in.fn
		} else {
			e.leaf = in
		}
		n.next[i] = e
	}
	out.fn = n
	out.requiresGrad = true
	return n
}

// castGrads makes backward return each input's gradient in that input's
// type, for ops that promote mixed-type inputs before computing.
func (n *node) castGrads(inputs ...*Tensor) {
	inner := n.backward
	n.backward = func(g *Tensor) []*Tensor {
		grads := inner(g)
		for i, gi := range grads {
			if gi != nil && i < len(inputs) && inputs[i] != nil && gi.dt != inputs[i].dt {
				grads[i] = gi.To(inputs[i].dt)
			}
		}
		return grads
	}
}

// needs reports whether input i wants a gradient.
func (n *node) needs(i int) bool { return n.next[i].live() }

// save keeps a reference to t for backward; writes to t's storage after this
// point make backward fail instead of computing wrong gradients.
func (n *node) save(t *Tensor) *Tensor {
	r := t.ref()
	n.saved = append(n.saved, savedTensor{r, t.st.version.Load()})
	return r
}

func (n *node) free() {
	for _, s := range n.saved {
		s.t.Release()
	}
	n.saved = nil
	n.pre = nil
	n.backward = nil
	n.freed = true
}

// leafState is a leaf's bookkeeping in a backward pass, put aside while a
// nested pass runs.
type leafState struct {
	leaf    *Tensor
	pass    uint64
	deps    int
	pending *Tensor
}

// gradHook is a gradient-ready callback of a leaf.
type gradHook struct {
	id int64
	fn func(*Tensor)
}

// hookIDs numbers hooks across every runtime (ranks register concurrently).
var hookIDs atomic.Int64

// OnGradReady registers fn to run during backward as soon as t's gradient
// is final for that pass (every op that used t has contributed), with t as
// argument; t.Grad() holds the accumulated gradient. DDP launches gradient
// communication from these callbacks. It returns a function that removes
// the hook.
func (t *Tensor) OnGradReady(fn func(p *Tensor)) (remove func()) {
	id := hookIDs.Add(1)
	t.hooks = append(t.hooks, gradHook{id, fn})
	return func() {
		t.hooks = slices.DeleteFunc(t.hooks, func(h gradHook) bool { return h.id == id })
	}
}

// BackwardOptions tune Backward.
type BackwardOptions struct {
	// Grad is the gradient of the output; nil means 1 for a one-element
	// output (the usual loss.backward()).
	Grad *Tensor
	// RetainGraph keeps the saved tensors so that backward can run again
	// through the same graph.
	RetainGraph bool
}

// Backward computes the gradients of the one-element tensor t with respect
// to every leaf that requires a gradient and accumulates them into the
// leaves' Grad, as torch's loss.backward().
func (t *Tensor) Backward() error { return t.BackwardWith(BackwardOptions{}) }

// BackwardWith is Backward with a given output gradient or a retained graph.
func (t *Tensor) BackwardWith(opt BackwardOptions) (err error) {
	if t == nil {
		return errNil
	}
	if t.err != nil {
		return t.err
	}
	if !t.requiresGrad {
		return fmt.Errorf("tensor: backward: the tensor does not require grad and has no grad_fn")
	}
	rt := t.rt
	if t.released.Load() {
		return fmt.Errorf("tensor: backward: the output tensor was released")
	}
	var g *Tensor
	if opt.Grad == nil {
		if t.Numel() != 1 {
			return fmt.Errorf("tensor: backward: grad can be implicitly created only for one-element outputs, not shape %v", t.shape)
		}
		g = rt.full("backward", t.dt, t.shape, 1)
	} else {
		if opt.Grad.err != nil {
			return opt.Grad.err
		}
		if !slices.Equal(opt.Grad.shape, t.shape) {
			return fmt.Errorf("tensor: backward: gradient of shape %v for an output of shape %v", opt.Grad.shape, t.shape)
		}
		g = opt.Grad.To(t.dt)
	}
	if g.err != nil {
		return g.err
	}
	if ts := rt.trace; ts != nil {
		defer ts.backward(time.Now())
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tensor: backward: internal error: %v", r)
		}
	}()
	restore := rt.SetGradEnabled(false)
	defer restore()
	// Backward runs without autocast: each op's gradient in the types its
	// forward used (a checkpointed segment's recomputation sets its own).
	ac := rt.autocast
	rt.autocast = nil
	defer func() { rt.autocast = ac }()
	own := g.ref()
	g.Release()
	if t.fn == nil { // a leaf: its gradient is the given one
		return rt.accumulateLeaf(t, own)
	}
	return rt.runBackward(t.fn, own, opt.RetainGraph)
}

func (rt *Runtime) runBackward(root *node, g *Tensor, retain bool) error {
	rt.pass++
	pass := rt.pass
	// A backward pass may run inside another (activation checkpointing
	// recomputes a segment and runs its backward from the outer pass). A
	// leaf both passes reach keeps the outer pass's count and pending
	// gradient, put aside here and restored when this pass ends; the
	// inner pass accumulates its own gradient into the leaf directly.
	rt.active = append(rt.active, pass)
	var stashed []leafState
	defer func() {
		rt.active = rt.active[:len(rt.active)-1]
		for _, s := range stashed {
			s.leaf.pass, s.leaf.deps, s.leaf.pending = s.pass, s.deps, s.pending
		}
	}()
	// Count, for every node and leaf reachable from root, how many edges
	// lead to it: it is ready when that many gradients have arrived.
	var graph []*node
	stack := []*node{root}
	root.pass, root.deps = pass, 0
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		graph = append(graph, n)
		if n.freed {
			return fmt.Errorf("tensor: backward: trying to backward through the graph a second time (op %s); its saved tensors were freed after the first backward — pass RetainGraph", n.op)
		}
		for _, e := range n.next {
			switch {
			case e.node != nil:
				if e.node.pass != pass {
					e.node.pass, e.node.deps, e.node.grad = pass, 0, nil
					stack = append(stack, e.node)
				}
				e.node.deps++
			case e.leaf != nil:
				if e.leaf.pass != pass {
					if slices.Contains(rt.active[:len(rt.active)-1], e.leaf.pass) {
						stashed = append(stashed, leafState{e.leaf, e.leaf.pass, e.leaf.deps, e.leaf.pending})
					}
					e.leaf.pass, e.leaf.deps = pass, 0
					e.leaf.pending = nil
				}
				e.leaf.deps++
			}
		}
	}
	cleanup := func() {
		for _, n := range graph {
			if n.grad != nil {
				n.grad.Release()
				n.grad = nil
			}
			for _, e := range n.next {
				if e.leaf != nil && e.leaf.pending != nil {
					e.leaf.pending.Release()
					e.leaf.pending = nil
				}
			}
			if !retain {
				n.free()
			}
		}
	}
	defer cleanup()

	root.grad = g
	ready := &nodeHeap{root}
	for ready.Len() > 0 {
		n := heap.Pop(ready).(*node)
		for _, h := range n.pre {
			if err := h.fn(); err != nil {
				return err
			}
		}
		var grads []*Tensor
		if n.grad != nil {
			var err error
			if n.into != nil && rt.addInto(n, pass) {
				// every gradient went into its accumulator
			} else if grads, err = rt.applyNode(n); err != nil {
				return err
			}
			if err := n.intoErr; err != nil {
				return err
			}
		}
		for i, e := range n.next {
			if !e.live() {
				continue
			}
			var gi *Tensor // owned from here on: accumulate consumes it
			if i < len(grads) {
				gi, grads[i] = grads[i], nil
			}
			if gi != nil && (!slices.Equal(gi.shape, e.shape) || gi.dt != e.dt) {
				gi.Release()
				return fmt.Errorf("tensor: backward of %s returned a %v gradient of shape %v for a %v input of shape %v", n.op, gi.dt, gi.shape, e.dt, e.shape)
			}
			if e.node != nil {
				if gi != nil {
					var err error
					if e.node.grad, err = accumulate(e.node.grad, gi); err != nil {
						return err
					}
				}
				if e.node.deps--; e.node.deps == 0 {
					// Ready even when no gradient reached it: its inputs
					// must still learn that nothing more will come.
					heap.Push(ready, e.node)
				}
				continue
			}
			leaf := e.leaf
			if gi != nil {
				var err error
				if leaf.pending, err = accumulate(leaf.pending, gi); err != nil {
					return err
				}
			}
			if leaf.deps--; leaf.deps == 0 && leaf.pending != nil {
				p := leaf.pending
				leaf.pending = nil
				if err := rt.accumulateLeaf(leaf, p); err != nil {
					return err
				}
			}
		}
		for _, gi := range grads { // gradients for inputs that need none
			gi.Release()
		}
		if n.grad != nil {
			n.grad.Release()
			n.grad = nil
		}
		if !retain {
			n.free()
		}
	}
	return nil
}

// addInto adds n's gradients into the accumulators already waiting for
// them (n.into), when every input that needs one has an accumulator this
// pass made, of its type, contiguous and shared with nobody; it reports
// whether it did (n.intoErr holds a failure).
func (rt *Runtime) addInto(n *node, pass uint64) bool {
	accs := make([]*Tensor, len(n.next))
	for i, e := range n.next {
		var acc *Tensor
		switch {
		case !e.live():
			continue
		case e.node != nil:
			acc = e.node.grad
		case e.leaf.pass == pass:
			acc = e.leaf.pending
		}
		if acc == nil || acc.dt != e.dt || !acc.IsContiguous() || acc.st.refs.Load() != 1 || !slices.Equal(acc.shape, e.shape) {
			return false
		}
		accs[i] = acc
	}
	sc := rt.OpenScope()
	defer sc.Close()
	for i, acc := range accs {
		if acc == nil {
			continue
		}
		if err := n.into(n.grad, i, acc); err != nil {
			n.intoErr = fmt.Errorf("tensor: backward of %s: %w", n.op, err)
			break
		}
	}
	return true
}

// applyNode runs n's backward inside a scope of its own so that the
// temporaries it creates are released at once; only the returned gradients
// survive, as references owned by the engine.
func (rt *Runtime) applyNode(n *node) ([]*Tensor, error) {
	for _, s := range n.saved {
		if s.t.st.version.Load() != s.version {
			return nil, fmt.Errorf("tensor: backward: a tensor saved by %s for the gradient computation was modified by an in-place operation", n.op)
		}
	}
	sc := rt.OpenScope()
	defer sc.Close()
	grads := n.backward(n.grad)
	out := make([]*Tensor, len(grads))
	for i, gi := range grads {
		if gi == nil {
			continue
		}
		if gi.err != nil { // even where no gradient is needed: the op failed
			for _, o := range out {
				o.Release()
			}
			return nil, fmt.Errorf("tensor: backward of %s: %w", n.op, gi.err)
		}
		if n.needs(i) {
			out[i] = gi.ref()
		}
	}
	return out, nil
}

// accumulate adds g into acc and returns the new accumulator. It takes
// ownership of g (an engine-owned reference): the first gradient to arrive
// becomes the accumulator without a copy. The sum is done in place when
// acc's storage is not shared with anything else.
func accumulate(acc, g *Tensor) (*Tensor, error) {
	if acc == nil {
		return g, nil
	}
	defer g.Release()
	if acc.st.refs.Load() == 1 && acc.IsContiguous() {
		if err := acc.addInPlace(g); err != nil {
			return nil, err
		}
		return acc, nil
	}
	var sum *Tensor
	sc := acc.rt.OpenScope()
	s := acc.Add(g)
	if s.err == nil {
		sum = s.ref()
	}
	sc.Close()
	if s.err != nil {
		return nil, s.err
	}
	acc.Release()
	return sum, nil
}

// accumulateLeaf adds the pass's gradient p into leaf.Grad and fires the
// leaf's gradient-ready hooks.
func (rt *Runtime) accumulateLeaf(leaf, p *Tensor) error {
	if leaf.grad == nil {
		if p.IsContiguous() && p.st.refs.Load() == 1 {
			leaf.grad = p
		} else {
			sc := rt.OpenScope()
			// A gradient of the leaf's own: a contiguous copy (Clone makes
			// one whatever p's layout; Contiguous then Clone copied twice).
			c := p.Clone()
			if c.err == nil {
				leaf.grad = c.ref()
			}
			sc.Close()
			p.Release()
			if c.err != nil {
				return c.err
			}
		}
	} else if leaf.grad.st.zeroPending && leaf.grad.coversStorage() {
		// The gradient was zeroed and not touched since: the pass's
		// gradient replaces it instead of being added to zeros.
		var err error
		if p.IsContiguous() && p.coversStorage() && p.st.refs.Load() == 1 && leaf.grad.st.refs.Load() == 1 {
			old := leaf.grad.st
			leaf.grad.st = p.st // p's reference moves to the gradient
			p.st = nil
			p.released.Store(true)
			rt.live.Add(-1)
			leaf.grad.st.version.Add(1)
			old.zeroPending = false
			old.release()
		} else {
			err = leaf.grad.CopyFrom(p)
			p.Release()
		}
		if err != nil {
			return fmt.Errorf("tensor: backward: accumulating the gradient of %s: %w", leaf.label(), err)
		}
	} else {
		err := leaf.grad.addInPlace(p)
		p.Release()
		if err != nil {
			return fmt.Errorf("tensor: backward: accumulating the gradient of %s: %w", leaf.label(), err)
		}
	}
	rt.inGradHooks++
	for _, h := range slices.Clone(leaf.hooks) {
		h.fn(leaf)
	}
	rt.inGradHooks--
	for rt.inGradHooks == 0 && len(rt.afterGradHooks) > 0 {
		after := rt.afterGradHooks
		rt.afterGradHooks = nil
		for _, f := range after {
			f()
		}
	}
	return nil
}

// AfterGradHooks runs fn once every gradient-ready hook (OnGradReady) of
// the leaf whose hooks are running has run, or at once outside them. DDP
// launches a bucket that reduces gradients in place from it, so that the
// hooks registered after its own still read the leaf's gradient as it
// was accumulated.
func (rt *Runtime) AfterGradHooks(fn func()) {
	if rt.inGradHooks == 0 {
		fn()
		return
	}
	rt.afterGradHooks = append(rt.afterGradHooks, fn)
}

// nodeHeap orders ready nodes by creation, latest first, as PyTorch's
// engine does on one device: gradients then become ready roughly in reverse
// order of the forward pass, which is what DDP's buckets are built for.
type nodeHeap []*node

func (h nodeHeap) Len() int           { return len(h) }
func (h nodeHeap) Less(i, j int) bool { return h[i].seq > h[j].seq }
func (h nodeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *nodeHeap) Push(x any) { n := x.(*node); n.index = len(*h); *h = append(*h, n) }
func (h *nodeHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	*h = old[:len(old)-1]
	return n
}
