package script

import (
	"time"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// traceModule is require("zeroeng").trace, the script's side of --trace:
//
//	trace.span("data", () => loader.next())   // fn's result; a "data" interval on the rank's user lane
//	trace.enabled                             // whether the job records a trace
//
// Without --trace, span just calls fn. The engine records the rest itself
// (engine/trace says what goes on which lane).
func (r *Runtime) traceModule() *goja.Object {
	m := r.vm.NewObject()
	must(m.Set("enabled", r.opts.Trace != nil))
	// Not r.fn: fn's tensors must keep their ordinary lifetime, not end
	// with a host call's scope.
	r.method(m, "span", func(call goja.FunctionCall) goja.Value {
		const fn = "trace.span(name, fn)"
		if _, ok := goja.AssertFunction(call.Argument(1)); !ok {
			r.throwf("%s: fn must be a function, got %s", fn, describe(call.Argument(1)))
		}
		if r.opts.Trace == nil {
			return r.callBack(fn, call.Argument(1))
		}
		name := call.Argument(0).String()
		defer r.traceAdd(trace.User, name, time.Now())
		return r.callBack(fn, call.Argument(1))
	})
	return m
}

// traceAdd records an interval of this rank from start until now.
func (r *Runtime) traceAdd(lane trace.Lane, name string, start time.Time) {
	if r.opts.Trace == nil {
		return
	}
	r.opts.Trace.Add(trace.Event{Rank: r.opts.Rank, Lane: lane, Name: name, Start: start, End: time.Now()})
}

// deviceModule is require("zeroeng").device: the rank's device and its
// memory counters, with torch.cuda's names:
//
//	device.type, device.name                  // "cpu" / "cuda", "cpu:1" / "cuda:0"
//	device.memoryAllocated()                  // bytes of the rank's live tensors (torch.cuda.memory_allocated)
//	device.maxMemoryAllocated()               // their high-water mark since the start or the last reset
//	device.resetPeakMemoryStats()             // restart that mark from the live bytes
//	device.peakFlops(dtype = "float32")       // peak FLOP/s available to this rank; 0 when unknown
//	device.properties()                       // { type, name, peakFlops, peakFlopsNote, sharedBy }
//
// On the CPU, the in-process ranks of a job share one CPU (one worker
// pool), so peakFlops is the CPU's estimated peak divided by the number of
// ranks: a rank's model FLOPs over its step time, divided by it, is the
// job's model FLOP utilisation. GPUs have no table yet: 0.
func (r *Runtime) deviceModule() *goja.Object {
	m := r.vm.NewObject()
	dev := r.rt.Device()
	must(m.Set("type", dev.Kind().String()))
	must(m.Set("name", dev.String()))
	r.fn(m, "memoryAllocated", func(goja.FunctionCall) goja.Value {
		return r.vm.ToValue(r.rt.Stats().LiveBytes)
	})
	r.fn(m, "maxMemoryAllocated", func(goja.FunctionCall) goja.Value {
		return r.vm.ToValue(r.rt.Stats().PeakBytes)
	})
	r.fn(m, "resetPeakMemoryStats", func(goja.FunctionCall) goja.Value {
		r.rt.ResetPeakMemStats()
		return goja.Undefined()
	})
	r.fn(m, "peakFlops", func(call goja.FunctionCall) goja.Value {
		flops, _, _ := r.peakFlops(r.dtypeValue("device.peakFlops", call.Argument(0), dtype.Float32))
		return r.vm.ToValue(flops)
	})
	r.fn(m, "properties", func(goja.FunctionCall) goja.Value {
		flops, note, shared := r.peakFlops(dtype.Float32)
		return r.vm.ToValue(map[string]any{"type": dev.Kind().String(), "name": dev.String(),
			"peakFlops": flops, "peakFlopsNote": note, "sharedBy": shared})
	})
	return m
}

// peakFlops is this rank's share of its device's peak rate for dt, the
// device's note on it, and how many ranks share the device.
func (r *Runtime) peakFlops(dt dtype.DType) (float64, string, int) {
	dev := r.rt.Device()
	p, ok := dev.(device.PeakFlopser)
	if !ok {
		return 0, "unknown for " + dev.Kind().String() + " devices", 1
	}
	flops, note := p.PeakFlops(dt)
	shared := 1
	if dev.Kind() == device.CPU {
		shared = max(1, r.opts.WorldSize)
	}
	return flops / float64(shared), note, shared
}

// commTime is dist.commTime(): the seconds this rank's communication
// queues have spent running collectives, cumulative (dist.CommTimer), or
// null on backends that do not count them.
func (r *Runtime) commTime(pg dist.ProcessGroup) goja.Value {
	if c, ok := pg.(dist.CommTimer); ok {
		return r.vm.ToValue(c.CommTime().Seconds())
	}
	return goja.Null()
}

// optimizerMemory is a plain optimizer's memory(), in the form of
// ZeroRedundancyOptimizer's: the bytes of its parameters, of their
// gradients (those that exist now) and of its state (master weights
// included).
func optimizerMemory(opt scriptOptimizer) map[string]any {
	var params, grads, state int64
	seen := map[*tensor.Tensor]bool{}
	for _, g := range opt.ParamGroups() {
		for _, p := range g.Params {
			if seen[p] {
				continue
			}
			seen[p] = true
			params += int64(p.Numel() * p.DType().Size())
			// GradNoSync: reading Grad would wait for DDP's reduction.
			if gr := p.GradNoSync(); gr != nil {
				grads += int64(gr.Numel() * gr.DType().Size())
			}
		}
	}
	if s, ok := opt.(interface{ StateBytes() int64 }); ok {
		state = s.StateBytes()
	}
	return map[string]any{"parameters": params, "gradients": grads, "optimizerState": state, "total": params + grads + state}
}
