// callbacks exercises the program's functions as values of the API (ABI
// 1.1): as nn.utils.checkpoint's function, as a module's forward under
// checkpointWrapper, as DDP's comm hook, failing, and exiting.
package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	ze "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

func main() {
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "callbacks:", err)
		os.Exit(1)
	}
}

func gradHex(p ze.Object) (string, error) {
	g, err := p.Get("grad")
	if err != nil {
		return "", err
	}
	b, err := g.(ze.Tensor).Bytes()
	return hex.EncodeToString(b), err
}

func run(mode string) error {
	if _, err := ze.Call("tensor.manualSeed", 0); err != nil {
		return err
	}
	l1 := ze.Must(ze.O("nn.Linear", 4, 8))
	l2 := ze.Must(ze.O("nn.Linear", 8, 1))
	w1 := ze.Must(l1.Get("weight"))
	calls := 0
	block := func(args []any) (any, error) {
		calls++
		h, err := l1.M("forward", args[0])
		if err != nil {
			return nil, err
		}
		r, err := h.Op("relu")
		if err != nil {
			return nil, err
		}
		return l2.M("forward", r)
	}
	x := ze.Must(ze.T("tensor.randn", []int{3, 4}))
	switch mode {
	case "checkpoint":
		// The same gradients with and without checkpointing; the
		// function runs once more, in backward.
		y := ze.Must(block([]any{x})).(ze.Tensor)
		ze.Must(ze.Must(y.Op("sum")).Method("backward"))
		plain := ze.Must(gradHex(ze.Object{Handle: w1.(ze.Tensor).Handle}))
		ze.Must(l1.Method("zeroGrad"))
		ze.Must(l2.Method("zeroGrad"))
		f := ze.Must(ze.Func(block))
		y2 := ze.Must(ze.T("nn.utils.checkpoint", f, x))
		ze.Must(ze.Must(y2.Op("sum")).Method("backward"))
		ck := ze.Must(gradHex(ze.Object{Handle: w1.(ze.Tensor).Handle}))
		fmt.Println("same gradients:", plain == ck, "calls:", calls)
	case "forward":
		// A module whose forward is the program's, wrapped as a script's
		// module is.
		m := ze.Must(ze.O("nn.ModuleDict", map[string]any{"l1": l1, "l2": l2}))
		if err := m.Set("forward", ze.Must(ze.Func(block))); err != nil {
			return err
		}
		ze.Must(ze.Call("nn.utils.checkpointWrapper", m))
		y := ze.Must(m.M("forward", x))
		ze.Must(ze.Must(y.Op("sum")).Method("backward"))
		names := ze.Must(m.Method("namedParameters"))
		fmt.Println("calls:", calls, "parameters:", len(names.([]any)))
	case "hook":
		// DDP's comm hook: average the bucket, as a script's hook does.
		ddp := ze.Must(ze.O("nn.parallel.DistributedDataParallel", ze.Must(ze.O("nn.Sequential", l1, l2))))
		world := ze.Must(ze.Call("dist.worldSize")).(float64)
		hook := ze.Must(ze.Func(func(args []any) (any, error) {
			calls++
			// The bucket is plain data: its index, its flat gradients
			// (buffer), its parameters.
			bucket := args[1].(map[string]any)
			avg, err := bucket["buffer"].(ze.Tensor).Op("div", world)
			if err != nil {
				return nil, err
			}
			return ze.Call("dist.allReduce", avg)
		}))
		ze.Must(ddp.Method("registerCommHook", nil, hook))
		rank := ze.Must(ze.Call("dist.rank")).(float64)
		xr := ze.Must(x.Op("add", rank))
		y := ze.Must(ddp.M("forward", xr))
		ze.Must(ze.Must(y.Op("sum")).Method("backward"))
		fmt.Println("grad", ze.Must(gradHex(ze.Object{Handle: w1.(ze.Tensor).Handle})), "calls", calls)
	case "schedule":
		// A ZeRO step schedule written in the program: schedule B
		// (interleaved), its steps inside DDP's backward.
		ddp := ze.Must(ze.O("nn.parallel.DistributedDataParallel", ze.Must(ze.O("nn.Sequential", l1, l2)),
			map[string]any{"bucketCapMB": 0.0001, "firstBucketCapMB": 0.00005}))
		zopt := ze.Must(ze.O("zero.ZeroRedundancyOptimizer", ze.Must(ddp.Method("parameters")),
			ze.Fields{"optimizer", "adamw", "lr", 0.01, "overlapWithDDP", true, "logMemory", false}))
		ready := ze.Must(ze.Func(func(args []any) (any, error) {
			calls++
			if i := args[1].(float64); i > 0 {
				return args[0].(ze.Object).Method("stepAndBroadcast", i-1)
			}
			return nil, nil
		}))
		end := ze.Must(ze.Func(func(args []any) (any, error) {
			ctx := args[0].(ze.Object)
			n, err := ctx.Get("numBuckets")
			if err != nil {
				return nil, err
			}
			return ctx.Method("stepAndBroadcast", n.(float64)-1)
		}))
		sched := ze.Must(ze.O("zero.schedule", ze.Fields{"name", "go interleaved", "bucketReady", ready, "backwardEnd", end}))
		allreduce := ze.Must(ze.Must(ze.O("dist.commHooks")).Get("allreduceHook"))
		ze.Must(ddp.Method("registerCommHook", nil, ze.Must(ze.O("zero.hookWithZeroSchedule", allreduce, ddp, zopt, sched))))
		rank := ze.Must(ze.Call("dist.rank")).(float64)
		for range 3 {
			ze.Must(zopt.Method("zeroGrad"))
			y := ze.Must(ddp.M("forward", ze.Must(x.Op("add", rank))))
			ze.Must(ze.Must(y.Op("sum")).Method("backward"))
			ze.Must(zopt.Method("step"))
		}
		w1 := ze.Must(ze.Must(l1.Get("weight")).(ze.Tensor).Bytes())
		w2 := ze.Must(ze.Must(l2.Get("weight")).(ze.Tensor).Bytes())
		fmt.Println("weights", hex.EncodeToString(w1)+hex.EncodeToString(w2), "scheduled", calls > 0)
	case "error":
		f := ze.Must(ze.Func(func([]any) (any, error) { return nil, errors.New("the block refuses") }))
		_, err := ze.Call("nn.utils.checkpoint", f, x)
		fmt.Println("error:", err)
		_, err = ze.Call("tensor.ones", 2)
		fmt.Println("then:", err)
	case "host-error":
		// A host call inside the function fails and the function returns
		// that failure.
		f := ze.Must(ze.Func(func([]any) (any, error) { return ze.Call("tensor.nonesuch") }))
		_, err := ze.Call("nn.utils.checkpoint", f, x)
		fmt.Println("error:", err)
	case "exit":
		f := ze.Must(ze.Func(func([]any) (any, error) { os.Exit(3); return nil, nil }))
		ze.Call("nn.utils.checkpoint", f, x)
		fmt.Println("still running")
	case "nested":
		// A function that calls the API, which calls another function.
		inner := ze.Must(ze.Func(block))
		outer := ze.Must(ze.Func(func(args []any) (any, error) {
			return ze.Call("nn.utils.checkpoint", inner, args[0])
		}))
		y := ze.Must(ze.T("nn.utils.checkpoint", outer, x))
		ze.Must(ze.Must(y.Op("sum")).Method("backward"))
		fmt.Println("nested calls:", calls)
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	return nil
}
