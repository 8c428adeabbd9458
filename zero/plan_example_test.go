package zero_test

import (
	"fmt"
	"sync"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// A Go program fully shards a model without script/: it marks each layer
// as a unit of a Plan (what zero.fullyShard does for a script), makes a
// stage-3 optimizer over the plan, and runs each layer's forward through
// Plan.Forward, which gathers the layer's parameters around it. Here two
// ranks of one process train a three-layer MLP for a few steps.
func ExamplePlan() {
	const world = 2
	w, err := dist.NewWorld(world, dist.Options{})
	if err != nil {
		panic(err)
	}
	defer w.Close()
	out := make([]string, world)
	var wg sync.WaitGroup
	for rank := range world {
		wg.Go(func() {
			s, err := trainSharded(w.Group(rank))
			if err != nil {
				w.Abort(err)
				s = err.Error()
			}
			out[rank] = s
		})
	}
	wg.Wait()
	for _, s := range out {
		fmt.Println(s)
	}
	// Output:
	// rank 0: 3 units; parameters sharded: true; loss went down: true
	// rank 1: 3 units; parameters sharded: true; loss went down: true
}

func trainSharded(pg dist.ProcessGroup) (string, error) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{Index: pg.Rank()}), 1)
	var layers []*nn.Linear
	var params []*tensor.Tensor
	for _, dims := range [][2]int{{8, 16}, {16, 16}, {16, 1}} {
		l, err := nn.NewLinear(rt, dims[0], dims[1], true)
		if err != nil {
			return "", err
		}
		layers = append(layers, l)
		params = append(params, l.Parameters()...)
	}

	// The plan: one unit per layer, marked before the optimizer is made.
	plan := zero.NewPlan()
	for _, l := range layers {
		if _, err := plan.FullyShard(l.Parameters(), true); err != nil {
			return "", err
		}
	}
	z, err := zero.New(pg, optim.AdamW, params, optim.DefaultAdamW().Group(), zero.Options{Stage: 3, Plan: plan})
	if err != nil {
		return "", err
	}
	defer z.Close()

	x := rt.Randn(tensor.Float32, 32, 8).Persist()
	target := x.Sum([]int{1}, true).Persist()
	var first, last float64
	for step := range 20 {
		sc := rt.OpenScope()
		y := x
		for i, l := range layers {
			outs, err := plan.Forward(i, func() ([]*tensor.Tensor, error) {
				return []*tensor.Tensor{l.Forward(y)}, nil
			})
			if err != nil {
				sc.Close()
				return "", err
			}
			if y = outs[0]; i < len(layers)-1 {
				y = y.Relu()
			}
		}
		loss := tensor.MSELoss(y, target, tensor.ReduceMean)
		if err := loss.Backward(); err != nil {
			sc.Close()
			return "", err
		}
		v, err := loss.Item()
		if err == nil {
			err = z.Step()
		}
		if err == nil {
			err = z.ZeroGrad(true)
		}
		sc.Close()
		if err != nil {
			return "", err
		}
		if step == 0 {
			first = v
		}
		last = v
	}
	return fmt.Sprintf("rank %d: %d units; parameters sharded: %v; loss went down: %v",
		pg.Rank(), len(plan.Units()), z.ShardsParameters(), last < first), nil
}
