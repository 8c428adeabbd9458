package optim_test

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Minimise (w − 3)² with AdamW and a warm-up + cosine schedule.
func ExampleNewAdamW() {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	w := rt.Zeros(tensor.Float32, 1)
	_ = w.SetRequiresGrad(true)
	cfg := optim.DefaultAdamW()
	cfg.LR, cfg.WeightDecay = 0.1, 0
	opt, _ := optim.NewAdamW([]*tensor.Tensor{w}, cfg)
	sched, _ := optim.NewWarmupCosine(opt, 10, 200, 0.1)
	for step := 0; step < 200; step++ {
		sc := rt.OpenScope()
		_ = opt.ZeroGrad(true)
		_ = w.SubScalar(3).Square().SumAll().Backward()
		_ = opt.Step()
		sched.Step()
		sc.Close()
	}
	v, _ := w.Item()
	fmt.Printf("w = %.2f\n", v)
	// Output:
	// w = 3.00
}

// The functional form updates explicit lists; a nil gradient leaves its
// parameter alone (ZeRO hands each rank's shard over this way).
func ExampleUpdate() {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	a, b := rt.Ones(tensor.Float32, 2), rt.Ones(tensor.Float32, 2)
	states := make([]*optim.State, 2)
	h := optim.ParamGroup{LR: 0.5}
	_ = optim.Update(optim.SGD, &h, []*tensor.Tensor{a, b}, []*tensor.Tensor{rt.Ones(tensor.Float32, 2), nil}, states)
	fmt.Println(a, b)
	// Output:
	// tensor([0.5000, 0.5000]) tensor([1.0000, 1.0000])
}
