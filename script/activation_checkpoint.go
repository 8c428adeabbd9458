package script

import (
	"fmt"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// activationCheckpoint is nn.utils.checkpoint(fn, ...args)
// (torch.utils.checkpoint.checkpoint): fn(...args) runs keeping none of
// its activations, and backward runs it again (engine/tensor's
// Checkpoint). The tensors among args are the segment's inputs; other
// arguments pass through unchanged. fn returns one tensor. Every tensor fn
// makes is released when it returns (its graph keeps what backward needs
// until Checkpoint frees it), so the memory of the segment's activations
// really goes back rather than waiting for the generation's end.
func (r *Runtime) activationCheckpoint(call goja.FunctionCall) goja.Value {
	const fn = "nn.utils.checkpoint"
	f, ok := goja.AssertFunction(call.Argument(0))
	if !ok {
		r.throwf("%s(fn, ...args): fn must be a function, got %s", fn, describe(call.Argument(0)))
	}
	// A copy: goja reuses its argument stack once this call returns, and
	// the recomputation in backward needs the arguments again.
	args := append([]goja.Value(nil), call.Arguments[1:]...)
	var inputs []*tensor.Tensor
	var at []int // where each input is among args
	for i, a := range args {
		if j := asJSTensor(a); j != nil {
			inputs = append(inputs, r.live(fn, j))
			at = append(at, i)
		}
	}
	forward := true
	var thrown any // a JavaScript exception of the first forward, rethrown as is
	run := func(ins []*tensor.Tensor) (out *tensor.Tensor, err error) {
		first := forward
		forward = false
		vals := args
		if !first { // the recomputation: the engine's detached inputs
			vals = append([]goja.Value(nil), args...)
			for k, i := range at {
				vals[i] = r.borrow(ins[k])
			}
		}
		defer func() {
			if p := recover(); p != nil {
				if first {
					thrown = p
				}
				err = fmt.Errorf("%s: %v", fn, p)
			}
		}()
		r.life.scope(func() any {
			v, ferr := f(goja.Undefined(), vals...)
			if ferr != nil {
				panic(ferr)
			}
			j := asJSTensor(v)
			if j == nil {
				r.throwf("%s: fn must return one tensor, got %s", fn, describe(v))
			}
			out = r.live(fn, j)
			return v.Export()
		})
		return out, nil
	}
	out, err := r.rt.Checkpoint(run, inputs...)
	if thrown != nil {
		panic(thrown)
	}
	if err != nil {
		r.throw(err)
	}
	return r.wrap(out)
}
