package bench

import (
	"sync"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/zero"
)

// DDPResult is the ddp2 workload's line, in torch_cpu.py's form.
type DDPResult struct {
	Workload     string  `json:"workload"`
	World        int     `json:"world"`
	Threads      int     `json:"threads"` // the process's kernel threads, shared by the ranks
	StepMsMedian float64 `json:"step_ms_median"`
	StepMsMin    float64 `json:"step_ms_min"`
	SamplesPerS  float64 `json:"samples_per_s"`
	Optimizer    string  `json:"optimizer"`
}

// RunDDP2 is the ddp2 workload: the mlp model on 2 in-process ranks under
// DistributedDataParallel (default buckets and hook), batch 128 per rank,
// AdamW(lr 1e-4) sharded by ZeroRedundancyOptimizer as on PyTorch's side,
// timed on rank 0. replicated runs a plain AdamW on every rank instead.
func RunDDP2(replicated bool) (DDPResult, error) {
	const world, batch = 2, 128
	res := DDPResult{Workload: "ddp2", World: world, Threads: parallel.Threads(), Optimizer: "ZeroRedundancyOptimizer(AdamW)"}
	if replicated {
		res.Optimizer = "AdamW (replicated)"
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
			job, err := newMLPOn(tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), uint64(rank)), batch)
			if err != nil {
				errs[rank] = err
				w.Abort(err)
				return
			}
			var params []ddp.Param
			for _, p := range job.Model.NamedParameters() {
				params = append(params, ddp.Param{Name: p.Name, Tensor: p.Tensor})
			}
			d, err := ddp.New(w.Group(rank), params, ddp.Options{})
			if err != nil {
				errs[rank] = err
				w.Abort(err)
				return
			}
			defer d.Close()
			if !replicated {
				cfg := optim.DefaultAdamW()
				cfg.LR = 1e-4
				if job.Opt, err = zeroOptimizer(w.Group(rank), job.Model.Parameters(), cfg); err != nil {
					errs[rank] = err
					w.Abort(err)
					return
				}
			}
			median, minimum, err := Timed(job.Step)
			if err != nil {
				errs[rank] = err
				w.Abort(err)
				return
			}
			if rank == 0 {
				res.StepMsMedian, res.StepMsMin = median, minimum
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return res, err
		}
	}
	res.SamplesPerS = round1(world * batch / res.StepMsMedian * 1e3)
	return res, nil
}

func zeroOptimizer(pg dist.ProcessGroup, params []*tensor.Tensor, cfg optim.AdamConfig) (*zero.Optimizer, error) {
	return zero.New(pg, optim.AdamW, params, cfg.Group(), zero.Options{})
}
