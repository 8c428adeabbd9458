// Package bench is the zeroeng side of the side-by-side benchmarks whose
// PyTorch side lives in bench/torch_*.py (torch_cpu.py, torch_gpu.py,
// torch_allreduce.py, ...): the same workloads, built on the engine, timed
// the same way (warm-up steps, then the median of timed steps), reported
// as the same JSON line; and the engine's own measurements that
// `zeroeng bench` runs (ZeRO's memory per rank by stage, zeromem.go).
package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Steps and Warmup match torch_cpu.py.
const (
	Steps  = 20
	Warmup = 3
)

// Result is one workload's measurement, printed as a JSON line.
type Result struct {
	Workload     string  `json:"workload"`
	Threads      int     `json:"threads"`
	StepMsMedian float64 `json:"step_ms_median"`
	StepMsMin    float64 `json:"step_ms_min"`
	SamplesPerS  float64 `json:"samples_per_s,omitempty"`
	TokensPerS   float64 `json:"tokens_per_s,omitempty"`
	// Go heap bytes allocated per step in steady state (buffers come from
	// the device pool and are not counted here unless the pool missed).
	HeapBytesPerStep  int64   `json:"heap_bytes_per_step"`
	PoolMissesPerStep float64 `json:"pool_misses_per_step"`
}

// Timed runs step Warmup times, then Steps times, and returns the median and
// minimum step time in milliseconds.
func Timed(step func() error) (median, minimum float64, err error) {
	for i := 0; i < Warmup; i++ {
		if err := step(); err != nil {
			return 0, 0, err
		}
	}
	ts := make([]float64, Steps)
	for i := range ts {
		t0 := time.Now()
		if err := step(); err != nil {
			return 0, 0, err
		}
		ts[i] = float64(time.Since(t0).Microseconds()) / 1e3
	}
	slices.Sort(ts)
	return ts[Steps/2], ts[0], nil
}

// Optimizer is what a workload's step needs of its optimizer: the plain
// one or ZeRO's.
type Optimizer interface {
	ZeroGrad(setToNone bool) error
	Step() error
}

// MLP is the `mlp` workload: a 1024-4096-4096-1024 GELU MLP, batch 256,
// AdamW(lr 1e-4), MSE loss; one step is zero_grad, forward, backward, step.
type MLP struct {
	RT    *tensor.Runtime
	Model *nn.Sequential
	Opt   Optimizer
	X, Y  *tensor.Tensor
}

// NewMLP builds the workload on a fresh CPU runtime.
func NewMLP(batch int) (*MLP, error) {
	return newMLPOn(tensor.NewRuntime(cpu.New(cpu.Options{}), 0), batch)
}

func newMLPOn(rt *tensor.Runtime, batch int) (*MLP, error) {
	l1, err := nn.NewLinear(rt, 1024, 4096, true)
	if err != nil {
		return nil, err
	}
	l2, _ := nn.NewLinear(rt, 4096, 4096, true)
	l3, _ := nn.NewLinear(rt, 4096, 1024, true)
	m, err := nn.NewSequential(l1, nn.GELU(""), l2, nn.GELU(""), l3)
	if err != nil {
		return nil, err
	}
	cfg := optim.DefaultAdamW()
	cfg.LR = 1e-4
	opt, err := optim.NewAdamW(m.Parameters(), cfg)
	if err != nil {
		return nil, err
	}
	x := rt.Randn(tensor.Float32, batch, 1024).Persist()
	y := rt.Randn(tensor.Float32, batch, 1024).Persist()
	return &MLP{rt, m, opt, x, y}, nil
}

// Step runs one training step inside a scope, so that every temporary goes
// back to the pool before the next step.
func (w *MLP) Step() error {
	sc := w.RT.OpenScope()
	defer sc.Close()
	if err := w.Opt.ZeroGrad(false); err != nil {
		return err
	}
	loss := tensor.MSELoss(w.Model.Forward(w.X), w.Y, tensor.ReduceMean)
	if err := loss.Backward(); err != nil {
		return err
	}
	return w.Opt.Step()
}

// RunMLP measures the mlp workload.
func RunMLP() (Result, error) {
	w, err := NewMLP(256)
	if err != nil {
		return Result{}, err
	}
	r, err := measure("mlp", w.RT, w.Step)
	r.SamplesPerS = round1(256 / r.StepMsMedian * 1e3)
	return r, err
}

// measure times step and checks the steady state it reaches.
func measure(workload string, rt *tensor.Runtime, step func() error) (Result, error) {
	r := Result{Workload: workload, Threads: parallel.Threads()}
	var err error
	if r.StepMsMedian, r.StepMsMin, err = Timed(step); err != nil {
		return r, err
	}
	r.HeapBytesPerStep, r.PoolMissesPerStep, err = steadyState(rt, step)
	return r, err
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }

// Workloads lists the names Run accepts.
var Workloads = append([]string{"gemm", "mlp", "gpt", "fmnist", "ddp2", "ddp2-replicated", "ddp2-flat", "ddp2-stage2",
	"ddp2-overlap-a", "ddp2-overlap-b", "overlap4-none", "overlap4-a", "overlap4-b", "overlap4-flat", "overlap4-stage2", "zero-memory-0", "zero-memory-1", "zero-memory-2", "zero-memory-3"},
	GPUWorkloads...)

// Run measures a workload by name and returns its JSON-ready result.
func Run(name string) (any, error) {
	switch name {
	case "gemm":
		return RunGEMM(), nil
	case "mlp":
		return RunMLP()
	case "gpt":
		return RunGPT()
	case "ddp2", "ddp2-replicated", "ddp2-flat", "ddp2-stage2", "ddp2-overlap-a", "ddp2-overlap-b":
		return RunDDP(ddp2Config(name, 2))
	case "overlap4-none", "overlap4-a", "overlap4-b", "overlap4-flat", "overlap4-stage2":
		// The mlp workload's batch of 256 over 4 ranks, on an emulated
		// 10 Gbit/s link, with rank 0's timeline of one step.
		v := map[string]string{"overlap4-none": "zero", "overlap4-a": "overlap-a", "overlap4-b": "overlap-b",
			"overlap4-flat": "flat", "overlap4-stage2": "stage2"}[name]
		return RunDDP(DDPConfig{Workload: name, World: 4, Batch: 64, Variant: v, Net: "10Gbit,20us", Timeline: true})
	case "zero-memory-0", "zero-memory-1", "zero-memory-2", "zero-memory-3":
		return RunZeroMemory(int(name[len(name)-1] - '0'))
	case "fmnist":
		return FashionMNIST(io.Discard, FashionMNISTOptions{Epochs: 5, DataDir: FashionMNISTDir})
	}
	if slices.Contains(GPUWorkloads, name) {
		return RunGPU(name)
	}
	return nil, fmt.Errorf("bench: unknown workload %q (%s)", name, strings.Join(Workloads, ", "))
}

// FashionMNISTDir is where Debian's dataset-fashion-mnist installs the data
// the fmnist workload trains on.
const FashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// GEMMResult is the gemm workload: a 1024³ float32 product through the
// engine's BLAS dispatcher, median of 40 calls after 5 warm-up calls.
type GEMMResult struct {
	Workload string  `json:"workload"`
	GFLOPS   float64 `json:"gflops"`
	BLAS     string  `json:"blas"`
}

// RunGEMM measures the gemm workload.
func RunGEMM() GEMMResult {
	const n = 1024
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = float32(i%7)/7, float32(i%5)/5
	}
	ts := make([]float64, 45)
	for i := range ts {
		t0 := time.Now()
		blas.Sgemm(false, false, n, n, n, 1, a, n, b, n, 0, c, n)
		ts[i] = time.Since(t0).Seconds()
	}
	ts = ts[5:]
	slices.Sort(ts)
	return GEMMResult{Workload: "gemm", GFLOPS: round1(2 * n * n * n / ts[len(ts)/2] / 1e9), BLAS: blas.Info()}
}

// ddp2Config is the ddp2 workload, or a variant of it, on world ranks:
// the mlp model under DistributedDataParallel (default buckets and hook),
// batch 128 per rank, timed on rank 0. ddp2 shards AdamW(lr 1e-4) with
// ZeroRedundancyOptimizer as PyTorch's side does, ddp2-replicated runs a
// plain AdamW on every rank, ddp2-VARIANT is DDPConfig's variant.
func ddp2Config(name string, world int) DDPConfig {
	c := DDPConfig{Workload: name, World: world, Batch: 128, Variant: strings.TrimPrefix(name, "ddp2-")}
	if name == "ddp2" {
		c.Variant = "zero"
	}
	return c
}

// RunProcess runs the data-parallel workload name (ddp2 and its variants)
// as rank pg.Rank() of a job of several processes, one rank each (`mpirun
// -np 2 zeroeng bench ddp2`), and returns rank 0's line.
func RunProcess(name string, pg dist.ProcessGroup) (any, error) {
	switch name {
	case "ddp2", "ddp2-replicated", "ddp2-flat", "ddp2-stage2", "ddp2-overlap-a", "ddp2-overlap-b":
		return RunDDPRank(ddp2Config(name, pg.Size()), pg)
	}
	return nil, fmt.Errorf("bench: %s runs in one process; across processes: ddp2, ddp2-replicated, ddp2-flat, ddp2-stage2, ddp2-overlap-a, ddp2-overlap-b", name)
}
