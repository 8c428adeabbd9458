package bench

import (
	"errors"
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
	// PeakBytesPerParam is each rank's peak of live device memory during
	// the step (forward, backward and the optimizer step), per parameter.
	PeakBytesPerParam []float64 `json:"peak_bytes_per_param"`
}

// RunZeroMemory measures the zero-memory-STAGE workload: six
// Linear(4096, 4096) layers (100.7M parameters), batch 4 per rank.
// DDP keeps gradients as views of its buckets (no second copy), so every
// byte counted is one the formula names.
func RunZeroMemory(stage int) (ZeroMemoryResult, error) {
	const world, layers, width = 4, 6, 4096
	res := ZeroMemoryResult{Workload: fmt.Sprintf("zero-memory-%d", stage), World: world,
		Params: layers * (width*width + width), Ranks: make([]zero.Memory, world), BytesPerParam: make([]float64, world), LiveBytesPerParam: make([]float64, world),
		PeakBytesPerParam: make([]float64, world)}
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
			m, live, peak, err := zeroMemoryRank(w.Group(rank), stage, layers, width)
			if err != nil {
				errs[rank] = err
				w.Abort(err)
				return
			}
			res.Ranks[rank] = m
			res.BytesPerParam[rank] = math.Round(float64(m.Total())/float64(res.Params)*100) / 100
			res.LiveBytesPerParam[rank] = math.Round(float64(live)/float64(res.Params)*100) / 100
			res.PeakBytesPerParam[rank] = math.Round(float64(peak)/float64(res.Params)*100) / 100
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

func zeroMemoryRank(pg dist.ProcessGroup, stage, layers, width int) (_ zero.Memory, live, peak int64, _ error) {
	dev := cpu.New(cpu.Options{Index: pg.Rank()})
	rt := tensor.NewRuntime(dev, uint64(pg.Rank()))
	defer func() { live, peak = dev.MemStats().LiveBytes, dev.MemStats().PeakBytes }()
	var mods []nn.Layer
	for range layers {
		l, err := nn.NewLinear(rt, width, width, true)
		if err != nil {
			return zero.Memory{}, 0, 0, err
		}
		mods = append(mods, l)
	}
	model, err := nn.NewSequential(mods...)
	if err != nil {
		return zero.Memory{}, 0, 0, err
	}
	params := model.Parameters()
	var d *ddp.DDP
	if !(zero.Options{Stage: stage}).ShardsGradients() { // DDP averages the gradients
		var named []ddp.Param
		for _, p := range model.NamedParameters() {
			named = append(named, ddp.Param{Name: p.Name, Tensor: p.Tensor})
		}
		if d, err = ddp.New(pg, named, ddp.Options{GradientAsBucketView: true}); err != nil {
			return zero.Memory{}, 0, 0, err
		}
		defer d.Close()
	}
	cfg := optim.DefaultAdamW()
	var plain *optim.Optimizer
	var z *zero.Optimizer
	var plan *zero.Plan // stage 3's units
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
		plan = zero.NewPlan()
		for _, l := range mods {
			if _, err := plan.FullyShard(l.(*nn.Linear).Parameters(), true); err != nil {
				return zero.Memory{}, 0, 0, err
			}
		}
		z, err = zero.New(pg, optim.AdamW, params, cfg.Group(), zero.Options{Stage: 3, Plan: plan})
		opt = z
	}
	if err != nil {
		return zero.Memory{}, 0, 0, err
	}
	sc := rt.OpenScope()
	x := rt.Randn(tensor.Float32, 4, width)
	dev.ResetPeakMemStats()
	y := x
	for i, l := range mods {
		if plan == nil {
			y = l.Forward(y)
			continue
		}
		// Stage 3: the layer's parameters gathered around its forward.
		out, err := plan.Forward(i, func() ([]*tensor.Tensor, error) { return []*tensor.Tensor{l.Forward(y)}, nil })
		if err != nil {
			return zero.Memory{}, 0, 0, err
		}
		y = out[0]
	}
	if err := tensor.MSELoss(y, x, tensor.ReduceMean).Backward(); err != nil {
		return zero.Memory{}, 0, 0, err
	}
	if err := opt.Step(); err != nil {
		return zero.Memory{}, 0, 0, err
	}
	sc.Close()
	var buckets int64 // DDP's buckets where they are not the gradients
	if d != nil {
		buckets = d.BucketBytes()
	}
	if z != nil {
		m := z.Memory()
		m.Gradients += buckets
		return m, 0, 0, nil
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
	m.Gradients += buckets
	m.State = plain.StateBytes()
	return m, 0, 0, nil
}

// ZeroPeakConfig is a run measuring the peak of a training step: Layers ×
// Linear(Width, Width) with ReLUs, Batch rows per rank, AdamW, Steps
// steps on World in-process ranks, each step starting with
// zeroGrad(setToNone) and a reset of the device's peak, as gpt.js does.
type ZeroPeakConfig struct {
	World, Layers, Width, Batch, Steps int
	// Stage is 0 (DDP and a replicated AdamW), 1 (ZeRO's flat partition
	// under DDP) or 2 (ZeRO reducing the gradients itself).
	Stage int
	// GradientAsBucketView is DDP's option (stages 0 and 1).
	GradientAsBucketView bool
	// Offload (stage 2) keeps the optimizer state on a second CPU device,
	// which steps it.
	Offload bool
	// BucketCapMB is DDP's and ZeRO's bucket cap (0: 25, both defaults).
	BucketCapMB float64
}

// ZeroPeakResult is what each rank held, in MiB: the formula (fp32
// parameters, gradients and AdamW's two moments as the stage shards them;
// DDP's buckets are no second copy of the gradients on in-process ranks:
// with gradientAsBucketView they are the gradients, without it they are
// never allocated, the gradients being reduced where they are),
// what the memory report counts after the last step (parameters,
// gradients and optimizer state, with DDP's bucket copies), and the
// highest peak of a step after the first two.
type ZeroPeakResult struct {
	ZeroPeakConfig
	Params       int64     `json:"params"`
	FormulaMiB   float64   `json:"formula_mib"`
	AccountedMiB []float64 `json:"accounted_mib"`
	PeakMiB      []float64 `json:"peak_mib"`
}

// ZeroPeakFormula is the formula's bytes per rank for params parameters
// (see ZeroPeakResult).
func ZeroPeakFormula(c ZeroPeakConfig, params int64) int64 {
	n := int64(c.World)
	var b int64
	switch {
	case c.Stage == 0:
		b = 16 * params
	case c.Stage == 1:
		b = 8*params + 8*params/n
	case c.Offload:
		b = 4*params + 4*params/n
	default:
		b = 4*params + 12*params/n
	}
	return b
}

// RunZeroPeak measures c.
func RunZeroPeak(c ZeroPeakConfig) (ZeroPeakResult, error) {
	res := ZeroPeakResult{ZeroPeakConfig: c, Params: int64(c.Layers) * int64(c.Width*c.Width+c.Width),
		AccountedMiB: make([]float64, c.World), PeakMiB: make([]float64, c.World)}
	res.FormulaMiB = mib2(ZeroPeakFormula(c, res.Params))
	w, err := dist.NewWorld(c.World, dist.Options{})
	if err != nil {
		return res, err
	}
	defer w.Close()
	errs := make([]error, c.World)
	var wg sync.WaitGroup
	for rank := range c.World {
		wg.Go(func() {
			acc, peak, err := zeroPeakRank(w.Group(rank), c)
			if err != nil {
				errs[rank] = fmt.Errorf("rank %d: %w", rank, err)
				w.Abort(errs[rank])
				return
			}
			res.AccountedMiB[rank], res.PeakMiB[rank] = mib2(acc), mib2(peak)
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

func mib2(b int64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }

func zeroPeakRank(pg dist.ProcessGroup, c ZeroPeakConfig) (accounted, peak int64, _ error) {
	dev := cpu.New(cpu.Options{Index: pg.Rank()})
	rt := tensor.NewRuntime(dev, 1)
	var layers []nn.Layer
	for range c.Layers {
		l, err := nn.NewLinear(rt, c.Width, c.Width, true)
		if err != nil {
			return 0, 0, err
		}
		layers = append(layers, l, nn.ReLU())
	}
	model, err := nn.NewSequential(layers...)
	if err != nil {
		return 0, 0, err
	}
	params := model.Parameters()
	var d *ddp.DDP
	if !(zero.Options{Stage: c.Stage}).ShardsGradients() { // DDP averages the gradients
		var named []ddp.Param
		for _, p := range model.NamedParameters() {
			named = append(named, ddp.Param{Name: p.Name, Tensor: p.Tensor})
		}
		d, err = ddp.New(pg, named, ddp.Options{BucketCapMB: c.BucketCapMB, GradientAsBucketView: c.GradientAsBucketView})
		if err != nil {
			return 0, 0, err
		}
		defer d.Close()
	}
	cfg := optim.DefaultAdamW()
	var plain *optim.Optimizer
	var z *zero.Optimizer
	var opt Optimizer
	if c.Stage == 0 {
		plain, err = optim.NewAdamW(params, cfg)
		opt = plain
	} else {
		o := zero.Options{Stage: c.Stage, Partition: "flat", BucketCapMB: c.BucketCapMB}
		if c.Offload {
			o.Offload = tensor.NewRuntime(cpu.New(cpu.Options{Index: 100 + pg.Rank()}), 0)
		}
		z, err = zero.New(pg, optim.AdamW, params, cfg.Group(), o)
		opt = z
	}
	if err != nil {
		return 0, 0, err
	}
	if z != nil {
		defer z.Close()
	}
	for step := range c.Steps {
		sc := rt.OpenScope()
		x := rt.Randn(tensor.Float32, c.Batch, c.Width)
		for _, p := range params {
			if err := nn.ZeroGradOf(p, true); err != nil {
				return 0, 0, err
			}
		}
		dev.ResetPeakMemStats()
		if err := tensor.MSELoss(model.Forward(x), x, tensor.ReduceMean).Backward(); err != nil {
			return 0, 0, err
		}
		if err := opt.Step(); err != nil {
			return 0, 0, err
		}
		sc.Close()
		if step >= 2 || step == c.Steps-1 {
			peak = max(peak, dev.MemStats().PeakBytes)
		}
	}
	if z != nil {
		accounted = z.Memory().Total()
	} else {
		for _, p := range params {
			accounted += int64(p.Numel() * p.DType().Size())
			if g := p.GradNoSync(); g != nil {
				accounted += int64(g.Numel() * g.DType().Size())
			}
		}
		accounted += plain.StateBytes()
	}
	if d != nil {
		accounted += d.BucketBytes()
	}
	return accounted, peak, nil
}
