package bench

import (
	"fmt"
	"slices"
	"time"

	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/gpu"
)

// GPUWorkloads are the workloads measured on GPU 0, against the PyTorch
// side in bench/torch_gpu.py (run on the same machine by
// tools/gpucheck/run.sh).
var GPUWorkloads = []string{"cuda-gemm-fp32", "cuda-gemm-tf32", "cuda-gemm-bf16", "cuda-mlp"}

// GPUGEMMResult is an 8192³ matrix product on the GPU.
type GPUGEMMResult struct {
	Workload string  `json:"workload"`
	Device   string  `json:"device"`
	TFLOPS   float64 `json:"tflops"`
}

// gpuGEMMSize is large enough for an H100 to reach its peak (PyTorch's and
// cuBLAS's own GEMM benchmarks use 8192 too).
const gpuGEMMSize = 8192

// RunGPU measures a workload of GPUWorkloads.
func RunGPU(name string) (any, error) {
	tf32 := name == "cuda-gemm-tf32"
	d, err := gpu.Open(gpu.Options{TF32: tf32})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	rt := tensor.NewRuntime(d, 0)
	switch name {
	case "cuda-gemm-fp32", "cuda-gemm-tf32", "cuda-gemm-bf16":
		dt := tensor.Float32
		if name == "cuda-gemm-bf16" {
			dt = tensor.BFloat16
		}
		const n = gpuGEMMSize
		a := rt.Randn(dt, n, n).Persist()
		b := rt.Randn(dt, n, n).Persist()
		ts := make([]float64, 25)
		for i := range ts {
			sc := rt.OpenScope()
			t0 := time.Now()
			c := a.Matmul(b)
			if err := d.Sync(); err != nil {
				return nil, err
			}
			ts[i] = time.Since(t0).Seconds()
			if err := c.Err(); err != nil {
				return nil, err
			}
			sc.Close()
		}
		ts = ts[5:]
		slices.Sort(ts)
		return GPUGEMMResult{Workload: name, Device: gpu.DeviceLine(d.Props()), TFLOPS: round1(2 * n * n * n / ts[len(ts)/2] / 1e12)}, nil
	case "cuda-mlp":
		w, err := newMLPOn(rt, 256)
		if err != nil {
			return nil, err
		}
		r, err := measure(name, rt, func() error {
			if err := w.Step(); err != nil {
				return err
			}
			return d.Sync()
		})
		r.SamplesPerS = round1(256 / r.StepMsMedian * 1e3)
		return r, err
	}
	return nil, fmt.Errorf("bench: unknown GPU workload %q", name)
}
