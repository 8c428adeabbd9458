package tensor

import "fmt"

// Checkpoint runs fn on inputs and keeps none of the activations inside it
// (torch.utils.checkpoint): the output is recorded as one op whose backward
// runs fn again, with the random generator as it was, and then the
// backward of that recomputation, which accumulates the gradients of the
// parameters fn uses and returns those of the inputs. The gradients are
// the ones without checkpointing, bit for bit on the CPU; the memory of
// fn's activations is held only while its backward runs, for the price of
// a second forward.
//
// Unlike PyTorch's reentrant form, the output requires a gradient when
// fn's does, even if no input does (the first block of a model, fed the
// data itself): fn runs recorded once, and the graph it made is freed at
// once, so that its parameters still get gradients. fn must return one
// tensor and be deterministic given the generator; an input changed in
// place before backward is an error, as for any saved tensor.
func (rt *Runtime) Checkpoint(fn func(inputs []*Tensor) (*Tensor, error), inputs ...*Tensor) (*Tensor, error) {
	for i, in := range inputs {
		if in == nil {
			return nil, fmt.Errorf("tensor: checkpoint: input %d is nil", i)
		}
		if in.err != nil {
			return nil, in.err
		}
	}
	rng := rt.gen.State()
	acType, autocast := rt.AutocastType()
	start := rt.seq
	// fn's tensors live in a scope of their own, closed once its graph is
	// freed: that is what gives their memory back.
	sc := rt.OpenScope()
	defer sc.Close()
	out, err := fn(inputs)
	if err == nil && out == nil {
		err = fmt.Errorf("tensor: checkpoint: the function returned no tensor")
	}
	if err == nil {
		err = out.err
	}
	if err != nil {
		return nil, err
	}
	if !out.requiresGrad || out.fn == nil {
		sc.Keep(out)
		return out, nil // nothing recorded: no-grad mode, or nothing in fn needs a gradient
	}
	freeSegment(out.fn, start)
	res := out.Detach()
	sc.Keep(res)
	n := res.record("checkpoint", inputs...)
	if n == nil { // only parameters inside fn need gradients
		rt.seq++
		n = &node{op: "checkpoint", seq: rt.seq, next: make([]edge, len(inputs))}
		res.fn, res.requiresGrad = n, true
	}
	saved := make([]*Tensor, len(inputs))
	for i, in := range inputs {
		saved[i] = n.save(in)
	}
	n.backward = func(g *Tensor) []*Tensor {
		grads := make([]*Tensor, len(saved))
		fail := func(err error) []*Tensor {
			grads[0] = rt.failErr("checkpoint", err)
			return grads
		}
		if len(grads) == 0 {
			grads = make([]*Tensor, 1) // room for an error
		}
		detached := make([]*Tensor, len(saved))
		for i, in := range saved {
			detached[i] = in.Detach()
			if n.needs(i) { // (the saved reference does not carry requiresGrad)
				if err := detached[i].SetRequiresGrad(true); err != nil {
					return fail(err)
				}
			}
		}
		restore := rt.SetGradEnabled(true)
		now := rt.gen.State()
		rt.gen.SetState(rng)
		var again *Tensor
		recompute := func() (err error) { again, err = fn(detached); return err }
		var err error
		if autocast { // the forward's autocast region, with a cast cache of its own
			err = rt.Autocast(acType, recompute)
		} else {
			err = recompute()
		}
		rt.gen.SetState(now)
		restore()
		switch {
		case err != nil:
			return fail(fmt.Errorf("recomputing the forward: %w", err))
		case again == nil:
			return fail(fmt.Errorf("recomputing the forward: the function returned no tensor"))
		case again.err != nil:
			return fail(fmt.Errorf("recomputing the forward: %w", again.err))
		case !again.requiresGrad:
			return fail(fmt.Errorf("recomputing the forward: its output needs no gradient this time (the function is not deterministic?)"))
		}
		err = again.BackwardWith(BackwardOptions{Grad: g})
		// The recomputed output is done with: its memory goes back now,
		// whoever else holds a handle on it (a script's generation would
		// keep it for two more steps).
		again.Release()
		if err != nil {
			return fail(err)
		}
		for i, d := range detached {
			if n.needs(i) {
				// The gradient moves from the detached input (a leaf that
				// would hold it as long as anything holds the leaf) to
				// this node's scope, which applyNode takes it from.
				grads[i] = d.grad
				d.grad = nil
				if grads[i] != nil && rt.scope != nil {
					rt.scope.add(grads[i])
				}
			}
		}
		return grads
	}
	return res, nil
}

// freeSegment frees the nodes recorded after seq start that lead to root:
// the graph a checkpointed function made, whose saved activations are what
// checkpointing gives back.
func freeSegment(root *node, start uint64) {
	stack := []*node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.freed || n.seq <= start {
			continue
		}
		for _, e := range n.next {
			if e.node != nil {
				stack = append(stack, e.node)
			}
		}
		n.free()
	}
}
