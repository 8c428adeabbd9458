package script

import (
	"fmt"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// distModule is require("zeroeng").dist: the rank's place in the job and
// the collectives of the group of all ranks. Collectives return futures;
// dist.newGroup(ranks) returns a group object with the same collectives.
func (r *Runtime) distModule() *goja.Object {
	pg := r.opts.Group
	if pg == nil {
		// A runtime outside a job is a world of one rank, which Close
		// ends (its communication queue is a goroutine).
		w, _ := dist.NewWorld(1, dist.Options{Trace: r.opts.Trace})
		r.ownWorld = w
		pg = w.Group(0)
	}
	r.group = pg
	m := r.processGroupObject(pg)
	must(m.Set("rank", r.opts.Rank))
	must(m.Set("worldSize", max(1, r.opts.WorldSize)))
	must(m.Set("localRank", r.opts.LocalRank))
	must(m.Set("localWorldSize", max(1, r.opts.LocalWorldSize)))
	r.method(m, "isInitialized", func(goja.FunctionCall) goja.Value { return r.vm.ToValue(true) })
	// commTime(): seconds this rank's communication queues have been busy
	// (cumulative; null where the backend does not count).
	r.method(m, "commTime", func(goja.FunctionCall) goja.Value { return r.commTime(pg) })
	return m
}

// processGroupObject exposes one process group's collectives:
//
//	allReduce(t, op = "sum")            → future of t, reduced in place
//	broadcast(t, src)                   → future of t
//	reduceScatter(out, input, op)       → future of out
//	allGather(out, input)               → future of out (out: a tensor of size × input, or an array of tensors)
//	allToAll(out, input)                → future of out
//	barrier()                           → future
//	send(t, dst), recv(t, src)          → futures
//	broadcastObject(value, src)         → src's value (JSON-encodable)
//	gatherObject(value, dst = 0)        → array of every rank's value on dst, null elsewhere
//	newGroup(ranks)                     → a group (null on ranks outside it)
func (r *Runtime) processGroupObject(pg dist.ProcessGroup) *goja.Object {
	g := r.vm.NewObject()
	if r.groups == nil {
		r.groups = map[*goja.Object]dist.ProcessGroup{}
	}
	r.groups[g] = pg
	must(g.Set("rank", pg.Rank()))
	must(g.Set("size", pg.Size()))
	tensorArg := func(fn, what string, v goja.Value) *tensor.Tensor { return r.unwrap("dist."+fn, what, v) }
	opArg := func(fn string, v goja.Value) dist.ReduceOp {
		if isMissing(v) {
			return dist.Sum
		}
		op, err := dist.ParseReduceOp(v.String())
		if err != nil {
			r.throwf("dist.%s: %v", fn, err)
		}
		return op
	}
	r.fn(g, "allReduce", func(call goja.FunctionCall) goja.Value {
		t := tensorArg("allReduce", "the tensor", call.Argument(0))
		return r.collective(pg.AllReduce(t, opArg("allReduce", call.Argument(1))), call.Argument(0), t)
	})
	r.fn(g, "broadcast", func(call goja.FunctionCall) goja.Value {
		t := tensorArg("broadcast", "the tensor", call.Argument(0))
		return r.collective(pg.Broadcast(t, r.intArg("dist.broadcast", "src", call, 1, 0)), call.Argument(0), t)
	})
	r.fn(g, "reduceScatter", func(call goja.FunctionCall) goja.Value {
		out := tensorArg("reduceScatter", "the output", call.Argument(0))
		in := tensorArg("reduceScatter", "the input", call.Argument(1))
		return r.collective(pg.ReduceScatter(out, in, opArg("reduceScatter", call.Argument(2))), call.Argument(0), out, in)
	})
	r.fn(g, "allGather", func(call goja.FunctionCall) goja.Value {
		in := tensorArg("allGather", "the input", call.Argument(1))
		if r.isArray(call.Argument(0)) {
			outs := r.tensorList("dist.allGather", call.Argument(0))
			return r.collective(pg.AllGatherInto(outs, in), call.Argument(0), append(outs, in)...)
		}
		out := tensorArg("allGather", "the output", call.Argument(0))
		return r.collective(pg.AllGather(out, in), call.Argument(0), out, in)
	})
	r.fn(g, "allToAll", func(call goja.FunctionCall) goja.Value {
		out := tensorArg("allToAll", "the output", call.Argument(0))
		in := tensorArg("allToAll", "the input", call.Argument(1))
		return r.collective(pg.AllToAll(out, in), call.Argument(0), out, in)
	})
	r.fn(g, "barrier", func(call goja.FunctionCall) goja.Value {
		return r.future(pg.Barrier(), goja.Undefined())
	})
	r.fn(g, "send", func(call goja.FunctionCall) goja.Value {
		t := tensorArg("send", "the tensor", call.Argument(0))
		return r.collective(pg.Send(t, r.intArg("dist.send", "dst", call, 1, 0)), call.Argument(0), t)
	})
	r.fn(g, "recv", func(call goja.FunctionCall) goja.Value {
		t := tensorArg("recv", "the tensor", call.Argument(0))
		return r.collective(pg.Recv(t, r.intArg("dist.recv", "src", call, 1, 0)), call.Argument(0), t)
	})
	r.fn(g, "broadcastObject", func(call goja.FunctionCall) goja.Value {
		payload := r.encodeObject("broadcastObject", call.Argument(0))
		got, err := pg.BroadcastObject(payload, r.intArg("dist.broadcastObject", "src", call, 1, 0))
		if err != nil {
			r.throw(err)
		}
		return r.decodeObject(got)
	})
	r.fn(g, "gatherObject", func(call goja.FunctionCall) goja.Value {
		payload := r.encodeObject("gatherObject", call.Argument(0))
		got, err := pg.GatherObject(payload, r.intArg("dist.gatherObject", "dst", call, 1, 0))
		if err != nil {
			r.throw(err)
		}
		if got == nil {
			return goja.Null()
		}
		vals := make([]any, len(got))
		for i, p := range got {
			vals[i] = r.decodeObject(p)
		}
		return r.vm.NewArray(vals...)
	})
	r.fn(g, "newGroup", func(call goja.FunctionCall) goja.Value {
		var ranks []int
		if err := r.vm.ExportTo(call.Argument(0), &ranks); err != nil || !r.isArray(call.Argument(0)) {
			r.throwf("dist.newGroup: expects an array of ranks, got %s", describe(call.Argument(0)))
		}
		sub, err := pg.NewGroup(ranks)
		if err != nil {
			r.throw(err)
		}
		if sub == nil {
			return goja.Null()
		}
		return r.processGroupObject(sub)
	})
	return g
}

// encodeObject turns a JSON-encodable value into the payload of an object
// collective (the ranks' JavaScript runtimes share no values). JSON.stringify
// and JSON.parse keep the order of object keys.
func (r *Runtime) encodeObject(fn string, v goja.Value) []byte {
	if r.isTensor(v) {
		r.throwf("dist.%s: send tensors with the tensor collectives; objects are for small JSON-encodable metadata", fn)
	}
	s, err := r.jsonCall("stringify", v)
	if err != nil || goja.IsUndefined(s) {
		r.throwf("dist.%s: the value cannot be encoded as JSON (%v)", fn, describe(v))
	}
	return []byte(s.String())
}

func (r *Runtime) decodeObject(b []byte) goja.Value {
	v, err := r.jsonCall("parse", r.vm.ToValue(string(b)))
	if err != nil {
		r.throw(fmt.Errorf("dist: decoding an object: %w", err))
	}
	return v
}

// jsonCall calls JSON.stringify or JSON.parse of the script's runtime.
func (r *Runtime) jsonCall(name string, v goja.Value) (goja.Value, error) {
	f, _ := goja.AssertFunction(r.vm.Get("JSON").ToObject(r.vm).Get(name))
	return f(goja.Undefined(), v)
}

// collective returns the future of w, a collective on ts, which are in
// flight until it completes (tensor.SetInFlight): the script's next use of
// their memory waits for it, so that reading a tensor after
// dist.allReduce(t) without .wait() — PyTorch's blocking default, as
// users port it — reads the reduced values, never a part-reduced
// buffer, and writing one cannot change what the other ranks receive. A
// collective refused at once (completed) leaves them alone.
func (r *Runtime) collective(w *dist.Work, value goja.Value, ts ...*tensor.Tensor) goja.Value {
	if !w.IsCompleted() {
		for _, t := range ts {
			t.SetInFlight(w.Wait)
		}
	}
	return r.future(w, value)
}

// future is the script's handle on asynchronous work: wait() blocks until
// the collective has completed and returns value (the collective's output
// tensor) or throws its error; isCompleted() polls; then(fn) returns a
// future whose wait() waits for this one, then calls fn(value) on the
// rank's own thread and returns its result (waiting for it if fn returned
// a future). JavaScript code runs only on the rank's thread, so fn runs
// when the chained future is waited for.
func (r *Runtime) future(w *dist.Work, value goja.Value) goja.Value {
	wait := func() goja.Value {
		r.inCollective.Add(1)
		err := w.Wait()
		r.inCollective.Add(-1)
		if err != nil {
			r.throw(err)
		}
		return value
	}
	return r.futureObject(wait, w.IsCompleted)
}

func (r *Runtime) futureObject(wait func() goja.Value, completed func() bool) goja.Value {
	st := &futureState{completed: completed}
	st.wait = func() goja.Value {
		if st.result == nil {
			st.result = wait()
		}
		return st.result
	}
	f := r.vm.NewObject()
	must(f.DefineDataProperty("__future", r.vm.ToValue(st), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE))
	r.method(f, "wait", func(goja.FunctionCall) goja.Value { return st.wait() })
	r.method(f, "isCompleted", func(goja.FunctionCall) goja.Value { return r.vm.ToValue(st.done()) })
	r.method(f, "then", func(call goja.FunctionCall) goja.Value {
		fn, ok := goja.AssertFunction(call.Argument(0))
		if !ok {
			r.throwf("future.then: expects a function, got %s", describe(call.Argument(0)))
		}
		chained := func() goja.Value {
			v, err := fn(goja.Undefined(), st.wait())
			if err != nil {
				panic(err)
			}
			if o, ok := v.(*goja.Object); ok {
				if w, ok := goja.AssertFunction(o.Get("wait")); ok && o.Get("then") != nil {
					if v, err = w(o); err != nil {
						panic(err)
					}
				}
			}
			return v
		}
		return r.futureObject(chained, func() bool { return false })
	})
	return f
}

// futureState is a future's Go half: the REPL's inspector reads it.
type futureState struct {
	wait      func() goja.Value // waits once, then returns the same value
	completed func() bool
	result    goja.Value
}

func (f *futureState) done() bool { return f.result != nil || f.completed() }
