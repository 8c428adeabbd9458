package nccl

import (
	"fmt"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/gpu"
	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/internal/testreq"
)

var _ Device = (*gpu.Device)(nil)

// TestProcessGroupGPU runs the collectives on the real NCCL with one rank
// per GPU of this machine (one rank where there is one GPU), or skips
// saying what is missing (fails under ZEROENG_REQUIRE_GPU=1). make
// gpu-check runs it on a GPU machine.
func TestProcessGroupGPU(t *testing.T) {
	drv, err := cuda.Load()
	if err != nil {
		testreq.Skip(t, testreq.GPU, "no CUDA driver: %v", err)
	}
	n, err := drv.DeviceCount()
	if err != nil || n == 0 {
		testreq.Skip(t, testreq.GPU, "no GPU: %v", err)
	}
	lib, err := Load()
	if err != nil {
		testreq.Skip(t, testreq.GPU, "no NCCL: %v", err)
	}
	devs := make([]Device, n)
	for i := range devs {
		d, err := gpu.Open(gpu.Options{Ordinal: i, Index: i})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
	}
	w, err := NewWorld(lib, devs, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const size = 1<<20 + 3
	var wg sync.WaitGroup
	errs := make([]error, n)
	for rank := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[rank] = rankCollectives(w.Group(rank), devs[rank], rank, n, size)
		}()
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
	}
}

// rankCollectives checks all-reduce, broadcast, reduce-scatter and
// all-gather results on one rank.
func rankCollectives(pg dist.ProcessGroup, dev Device, rank, n, size int) error {
	rt := tensor.NewRuntime(dev, 0)
	check := func(what string, got *tensor.Tensor, want func(i int) float64) error {
		vals, err := got.Float64s()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for i, v := range vals {
			if v != want(i) {
				return fmt.Errorf("%s: element %d is %v, want %v", what, i, v, want(i))
			}
		}
		return nil
	}
	t := rt.Full(tensor.Float32, float64(rank+1), size)
	if err := pg.AllReduce(t, dist.Sum).Wait(); err != nil {
		return err
	}
	if err := check("AllReduce", t, func(int) float64 { return float64(n * (n + 1) / 2) }); err != nil {
		return err
	}
	b := rt.Full(tensor.BFloat16, float64(rank), 1000)
	if err := pg.Broadcast(b, n-1).Wait(); err != nil {
		return err
	}
	if err := check("Broadcast", b, func(int) float64 { return float64(n - 1) }); err != nil {
		return err
	}
	in := rt.Full(tensor.Float32, 1, n*777)
	out := rt.Zeros(tensor.Float32, 777)
	if err := pg.ReduceScatter(out, in, dist.Sum).Wait(); err != nil {
		return err
	}
	if err := check("ReduceScatter", out, func(int) float64 { return float64(n) }); err != nil {
		return err
	}
	g := rt.Zeros(tensor.Float32, n*5)
	if err := pg.AllGather(g, rt.Full(tensor.Float32, float64(rank), 5)).Wait(); err != nil {
		return err
	}
	return check("AllGather", g, func(i int) float64 { return float64(i / 5) })
}
