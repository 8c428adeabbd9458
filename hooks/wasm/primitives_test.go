package wasm

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// primitivesGuest averages each bucket the long way, with the host
// functions the samples do not use (reduce_scatter into a padded copy,
// all_gather, broadcast), and checks topk, scatter_add, sign and norm
// against each other on the result; a failed check is a non-zero status.
const primitivesGuest = `package main

import (
	"fmt"
	"math"

	abi "github.com/zeroeng/zeroeng/samples/hooks/go/hookabi"
)

var world int
var whole, part = map[int]abi.Handle{}, map[int]abi.Handle{}

//go:wasmexport init
func initHook(rank, w int32) int32 { world = int(w); return 0 }

//go:wasmexport on_bucket
func onBucket(b int32) int32 { return abi.Result(start(abi.Handle(b))) }

//go:wasmexport on_bucket_done
func onBucketDone(b int32) int32 { return abi.Result(done(abi.Handle(b))) }

func start(b abi.Handle) error {
	info, err := abi.BucketInfo(b)
	if err != nil {
		return err
	}
	n := info.Numel
	m := (n + world - 1) / world
	if whole[info.Index] == 0 {
		if whole[info.Index], err = abi.TensorNew(abi.Float32, world*m); err != nil {
			return err
		}
		if part[info.Index], err = abi.TensorNew(abi.Float32, m); err != nil {
			return err
		}
	}
	if err := abi.Scale(b, 1/float64(world)); err != nil {
		return err
	}
	g := make([]float32, n)
	if err := abi.Read(b, 0, g); err != nil {
		return err
	}
	if err := abi.Write(whole[info.Index], 0, g); err != nil {
		return err
	}
	if err := abi.ReduceScatter(part[info.Index], whole[info.Index], abi.Sum); err != nil {
		return err
	}
	return abi.AllGather(whole[info.Index], part[info.Index])
}

func done(b abi.Handle) error {
	info, err := abi.BucketInfo(b)
	if err != nil {
		return err
	}
	n := info.Numel
	g := make([]float32, n)
	if err := abi.Read(whole[info.Index], 0, g); err != nil {
		return err
	}
	if err := abi.Write(b, 0, g); err != nil {
		return err
	}
	if err := abi.Broadcast(b, world-1); err != nil {
		return err
	}
	k := (n + 1) / 2
	vals, _ := abi.TensorNew(abi.Float32, k)
	idx, _ := abi.TensorNew(abi.Int64, k)
	dense, _ := abi.TensorNew(abi.Float32, n)
	sgn, _ := abi.TensorNew(abi.Float32, n)
	defer func() { abi.TensorFree(vals); abi.TensorFree(idx); abi.TensorFree(dense); abi.TensorFree(sgn) }()
	if err := abi.TopK(b, k, vals, idx); err != nil {
		return err
	}
	if err := abi.ScatterAdd(dense, idx, vals); err != nil {
		return err
	}
	if err := abi.Sign(sgn, b); err != nil {
		return err
	}
	var norms [6]float64
	for i, c := range []struct {
		h abi.Handle
		p float64
	}{{b, 1}, {b, 2}, {b, 1e309}, {dense, 2}, {dense, 1e309}, {sgn, 1}} {
		if norms[i], err = abi.Norm(c.h, c.p); err != nil {
			return err
		}
	}
	top := make([]float32, k)
	if err := abi.Read(vals, 0, top); err != nil {
		return err
	}
	mag := func(x float32) float64 { if x < 0 { return float64(-x) }; return float64(x) }
	for i := 1; i < k; i++ {
		if mag(top[i]) > mag(top[i-1]) {
			return fmt.Errorf("topk out of order at %d", i)
		}
	}
	switch {
	case norms[4] != norms[2] || norms[4] != mag(top[0]):
		return fmt.Errorf("inf norms %v %v %v", norms[4], norms[2], top[0])
	case norms[3] > norms[1] || norms[3] < norms[1]/2:
		return fmt.Errorf("the top half's l2 %v against the bucket's %v", norms[3], norms[1])
	case norms[5] != float64(n):
		return fmt.Errorf("sign's l1 %v of %d elements", norms[5], n)
	case norms[0] < norms[1]:
		return fmt.Errorf("l1 %v below l2 %v", norms[0], norms[1])
	}
	return abi.Log(fmt.Sprintf("bucket %d checked", info.Index))
}

func main() {}
`

// TestPrimitives: the averaging done with reduce_scatter, all_gather and
// broadcast gives the built-in all-reduce's parameters, and the
// primitives agree with each other (the guest checks them).
func TestPrimitives(t *testing.T) {
	m, err := Compile("primitives.wasm", hookbuild.GoSource(t, strings.ReplaceAll(primitivesGuest, "1e309", "math.Inf(1)")), Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 3} {
		var log syncBuffer
		got := training{n: n, hook: wasmHook(m, Options{Stdout: &log, Stderr: &log}, nil)}.run(t)
		if got.errs[0] != nil {
			t.Fatalf("%d ranks: %v\n%s", n, got.errs[0], log.String())
		}
		noErrors(t, got)
		want := training{n: n, hook: builtin(ddp.AllReduceHook)}.run(t)
		// With three ranks the built-in hook divides by 3 and adds in
		// gloo's order, the guest multiplies by 1/3 and reduce-scatters in
		// rank order: the last bit may differ.
		tol := 0.0
		if n == 3 {
			tol = 1e-6
		}
		equalRuns(t, got, want, tol)
		// Three steps: the first reduces one bucket of everything (as
		// PyTorch's DDP does), the next two the four rebuilt buckets.
		if c, want := strings.Count(log.String(), "checked"), (1+4+4)*n; c != want {
			t.Errorf("%d ranks: %d checks logged, want %d:\n%s", n, c, want, log.String())
		}
	}
}
