package bench

import (
	"fmt"
	"math"
	"sync"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// ZeroMemoryResult is what each rank holds after one AdamW step of a
// 100.7M-parameter model on 4 in-process ranks, under ZeRO stage 0 (DDP
// and a replicated AdamW), 1, 2 or 3, against the fp32 formula.
type ZeroMemoryResult struct {
	Workload string `json:"workload"`
	World    int    `json:"world"`
	Params   int64  `json:"params"`
	// FormulaBytesPerParam is 4 + 4 + 8 (stage 0), 4 + 4 + 8/N (stage 1),
	// 4 + 12/N (stage 2), 16/N (stage 3): fp32 parameters and gradients,
	// AdamW's two fp32 moments.
	FormulaBytesPerParam float64       `json:"formula_bytes_per_param"`
	Ranks                []zero.Memory `json:"ranks"`
	BytesPerParam        []float64     `json:"bytes_per_param"`
	// LiveBytesPerParam is each rank's device memory in use after the
	// step (every live buffer, pooled ones excluded) per parameter.
	LiveBytesPerParam []float64 `json:"live_bytes_per_param"`
}

// RunZeroMemory measures the zero-memory-STAGE workload: six
// Linear(4096, 4096) layers (100.7M parameters), batch 4 per rank.
// DDP keeps gradients as views of its buckets (no second copy), so every
// byte counted is one the formula names.
func RunZeroMemory(stage int) (ZeroMemoryResult, error) {
	const world, layers, width = 4, 6, 4096
	res := ZeroMemoryResult{Workload: fmt.Sprintf("zero-memory-%d", stage), World: world,
		Params: layers * (width*width + width), Ranks: make([]zero.Memory, world), BytesPerParam: make([]float64, world), LiveBytesPerParam: make([]float64, world)}
	switch stage {
	case 0:
		res.FormulaBytesPerParam = 16
	case 1:
		res.FormulaBytesPerParam = 8 + 8.0/world
	case 2:
		res.FormulaBytesPerParam = 4 + 12.0/world
	case 3:
		res.FormulaBytesPerParam = 16.0 / world
	default:
		return res, fmt.Errorf("bench: zero-memory: stage %d (0, 1, 2 or 3)", stage)
	}
	w, err := dist.NewWorld(world, dist.Options{})
	if err != nil {
		return res, err
	}
	defer w.Close()
	errs := make([]error, world)
	var wg sync.WaitGroup
	for rank := range world {
		wg.Go(func() {
			m, live, err := zeroMemoryRank(w.Group(rank), stage, layers, width)
			if err != nil {
				errs[rank] = err
				w.Abort(err)
				return
			}
			res.Ranks[rank] = m
			res.BytesPerParam[rank] = math.Round(float64(m.Total())/float64(res.Params)*100) / 100
			res.LiveBytesPerParam[rank] = math.Round(float64(live)/float64(res.Params)*100) / 100
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func zeroMemoryRank(pg dist.ProcessGroup, stage, layers, width int) (_ zero.Memory, live int64, _ error) {
	dev := cpu.New(cpu.Options{Index: pg.Rank()})
	rt := tensor.NewRuntime(dev, uint64(pg.Rank()))
	defer func() { live = dev.MemStats().LiveBytes }()
	var mods []nn.Layer
	for range layers {
		l, err := nn.NewLinear(rt, width, width, true)
		if err != nil {
			return zero.Memory{}, 0, err
		}
		mods = append(mods, l)
	}
	model, err := nn.NewSequential(mods...)
	if err != nil {
		return zero.Memory{}, 0, err
	}
	params := model.Parameters()
	if stage < 2 {
		var named []ddp.Param
		for _, p := range model.NamedParameters() {
			named = append(named, ddp.Param{Name: p.Name, Tensor: p.Tensor})
		}
		d, err := ddp.New(pg, named, ddp.Options{GradientAsBucketView: true})
		if err != nil {
			return zero.Memory{}, 0, err
		}
		defer d.Close()
	}
	cfg := optim.DefaultAdamW()
	var plain *optim.Optimizer
	var z *zero.Optimizer
	var opt Optimizer
	switch stage {
	case 0:
		plain, err = optim.NewAdamW(params, cfg)
		opt = plain
	case 1:
		z, err = zero.New(pg, optim.AdamW, params, cfg.Group(), zero.Options{Partition: "flat", ParametersAsBucketView: true})
		opt = z
	case 2:
		z, err = zero.New(pg, optim.AdamW, params, cfg.Group(), zero.Options{Stage: 2, ParametersAsBucketView: true})
		opt = z
	case 3:
		// One unit per layer, gathered around its forward and backward.
		var units []zero.UnitSpec
		for _, l := range mods {
			units = append(units, zero.UnitSpec{Params: l.(*nn.Linear).Parameters(), ReshardAfterForward: true})
		}
		z, err = zero.New(pg, optim.AdamW, params, cfg.Group(), zero.Options{Stage: 3, Units: units})
		opt = z
	}
	if err != nil {
		return zero.Memory{}, 0, err
	}
	sc := rt.OpenScope()
	x := rt.Randn(tensor.Float32, 4, width)
	y := x
	for i, l := range mods {
		var u *zero.Unit // stage 3's
		if z != nil {
			u = z.Unit(i)
		}
		if u != nil {
			if err := u.BeforeForward(); err != nil {
				return zero.Memory{}, 0, err
			}
		}
		y = l.Forward(y)
		if u != nil {
			if err := u.AfterForward([]*tensor.Tensor{y}); err != nil {
				return zero.Memory{}, 0, err
			}
		}
	}
	if err := tensor.MSELoss(y, x, tensor.ReduceMean).Backward(); err != nil {
		return zero.Memory{}, 0, err
	}
	if err := opt.Step(); err != nil {
		return zero.Memory{}, 0, err
	}
	sc.Close()
	if z != nil {
		return z.Memory(), 0, nil
	}
	var m zero.Memory
	for _, p := range params {
		b := int64(p.Numel() * p.DType().Size())
		m.Parameters += b
		m.OwnedParameters += b
		if g := p.GradNoSync(); g != nil {
			m.Gradients += int64(g.Numel() * g.DType().Size())
		}
	}
	m.State = plain.StateBytes()
	return m, 0, nil
}
