package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/gpu"
	"github.com/zeroeng/zeroeng/nccl"
)

// gpuSmoke is `zeroeng info --smoke`: a short end-to-end check of one GPU
// that says which layer fails first — opening the device, moving memory,
// compiling and running a kernel, a cuBLAS product, an NCCL all-reduce —
// each step printed with its time, each result compared with the CPU
// engine's. It returns the first failure.
func gpuSmoke(w io.Writer, ordinal int) error {
	var failed error
	step := func(name string, f func() (string, error)) {
		if failed != nil {
			fmt.Fprintf(w, "smoke %-10s skipped\n", name)
			return
		}
		start := time.Now()
		note, err := f()
		took := time.Since(start)
		if err != nil {
			failed = fmt.Errorf("smoke test, %s: %w", name, err)
			fmt.Fprintf(w, "smoke %-10s FAILED after %v: %v\n", name, took.Round(time.Millisecond), err)
			return
		}
		fmt.Fprintf(w, "smoke %-10s ok in %v%s\n", name, took.Round(time.Millisecond), note)
	}

	var dev *gpu.Device
	step("open", func() (string, error) {
		var err error
		dev, err = gpu.Open(gpu.Options{Ordinal: ordinal})
		if err != nil {
			return "", err
		}
		return ": " + gpu.DeviceLine(dev.Props()), nil
	})
	if dev != nil {
		defer dev.Close()
	}
	cuda := tensor.NewRuntime(dev, 1)
	host := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	const n = 1<<20 + 3
	x := host.Randn(tensor.Float32, n)

	step("memory", func() (string, error) {
		want, err := x.Float32s()
		if err != nil {
			return "", err
		}
		got, err := cuda.FromFloat32s(want, n).Float32s()
		if err != nil {
			return "", err
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				return "", fmt.Errorf("element %d came back as %v, was %v", i, got[i], want[i])
			}
		}
		return fmt.Sprintf(": %d float32 there and back, bit for bit", n), nil
	})
	step("kernel", func() (string, error) {
		// The first launch compiles the elementwise family with NVRTC
		// (or finds it in the kernel cache).
		xs, _ := x.Float32s()
		return ": exp of 1M values", compare(cuda.FromFloat32s(xs, n).Exp(), x.Exp(), 1e-6)
	})
	step("gemm", func() (string, error) {
		a, b := host.Randn(tensor.Float32, 256, 384), host.Randn(tensor.Float32, 384, 128)
		av, _ := a.Float32s()
		bv, _ := b.Float32s()
		return ": cuBLAS 256×384 · 384×128, float32", compare(cuda.FromFloat32s(av, 256, 384).Matmul(cuda.FromFloat32s(bv, 384, 128)), a.Matmul(b), 1e-5)
	})
	step("nccl", func() (string, error) {
		lib, err := nccl.Load()
		if err != nil {
			return "", err
		}
		world, err := nccl.NewWorld(lib, []nccl.Device{dev}, dist.Options{})
		if err != nil {
			return "", err
		}
		defer world.Close()
		t := cuda.Full(tensor.Float32, 3, 1000)
		if err := world.Group(0).AllReduce(t, dist.Sum).Wait(); err != nil {
			return "", err
		}
		return fmt.Sprintf(": all-reduce on one rank, NCCL %s", ncclVersion(lib.Version)), compare(t, host.Full(tensor.Float32, 3, 1000), 0)
	})
	return failed
}

// compare checks got against the CPU engine's want, within tol relative
// to want's largest magnitude.
func compare(got, want *tensor.Tensor, tol float64) error {
	g, err := got.Float64s()
	if err != nil {
		return err
	}
	wv, err := want.Float64s()
	if err != nil {
		return err
	}
	if len(g) != len(wv) {
		return fmt.Errorf("%d values, the CPU has %d", len(g), len(wv))
	}
	scale := 0.0
	for _, v := range wv {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range g {
		if d := math.Abs(g[i] - wv[i]); !(d <= tol*math.Max(scale, 1)) {
			return fmt.Errorf("element %d is %v, the CPU's %v", i, g[i], wv[i])
		}
	}
	if len(g) == 0 {
		return errors.New("no values")
	}
	return nil
}
