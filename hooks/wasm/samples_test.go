package wasm

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

func compileSample(t *testing.T, name string, cfg Config) *Module {
	t.Helper()
	m, err := Compile(name+".wasm", hookbuild.Sample(t, name), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// builtin makes a training's hook factory from a Go hook.
func builtin(make func(pg dist.ProcessGroup) ddp.CommHook) func(int, dist.ProcessGroup, *tensor.Runtime) (ddp.CommHook, func(), error) {
	return func(_ int, pg dist.ProcessGroup, _ *tensor.Runtime) (ddp.CommHook, func(), error) {
		return make(pg), nil, nil
	}
}

// TestSamplesMatchTheirReference: each sample hook, on 1–4 ranks, with
// and without gradients as bucket views, gives bit for bit the parameters
// of the Go hook it reimplements: the averaging samples (Go, WAT, and the
// logging one) those of the built-in all-reduce, the bf16 samples (host
// primitives, and the codecs in Go and C that convert in the guest) those
// of PyTorch's bf16_compress_hook, and top-k those of a Go top-k with
// error feedback.
func TestSamplesMatchTheirReference(t *testing.T) {
	allreduce := builtin(ddp.AllReduceHook)
	bf16 := builtin(ddp.BF16CompressHook)
	cases := []struct {
		sample string
		ref    func(int, dist.ProcessGroup, *tensor.Runtime) (ddp.CommHook, func(), error)
		config string
	}{
		{"allreduce", allreduce, ""},
		{"allreduce_wat", allreduce, ""},
		{"logstats", allreduce, ""},
		{"bf16", bf16, ""},
		{"codec", bf16, ""},
		{"codec_c", bf16, ""},
		{"topk", builtin(func(pg dist.ProcessGroup) ddp.CommHook { return topkReference(pg, 0.3) }), `{"ratio":0.3}`},
	}
	for _, c := range cases {
		t.Run(c.sample, func(t *testing.T) {
			hookbuild.SkipGoUnderShort(t, c.sample)
			m := compileSample(t, c.sample, Config{})
			for _, n := range []int{1, 2, 4} {
				for _, view := range []bool{false, true} {
					if testing.Short() && (n == 4 || view) {
						continue
					}
					var log syncBuffer
					o := Options{Stdout: &log, Stderr: &log}
					if c.config != "" {
						o.Configuration = []byte(c.config)
					}
					want := training{n: n, asView: view, hook: c.ref}.run(t)
					noErrors(t, want)
					got := training{n: n, asView: view, hook: wasmHook(m, o, nil)}.run(t)
					if got.errs[0] != nil {
						t.Fatalf("%d ranks: %v\n%s", n, got.errs[0], log.String())
					}
					noErrors(t, got)
					equalRuns(t, got, want, 0)
					if c.sample == "logstats" {
						for _, w := range []string{"logstats.wasm: logstats hook ready on rank 0 of", "logstats.wasm: step 2 bucket 3"} {
							if !strings.Contains(log.String(), w) {
								t.Errorf("the log does not say %q:\n%s", w, log.String())
							}
						}
					}
				}
			}
		})
	}
}

// topkReference is top-k sparsification with error feedback in Go: each
// rank adds its residual to its gradient, sends the k entries of largest
// magnitude (values and indices, all-gathered), keeps the rest as its
// residual, and every rank sums what all sent and divides by the ranks.
func topkReference(pg dist.ProcessGroup, ratio float64) ddp.CommHook {
	residual := map[int][]float32{}
	return func(b *ddp.Bucket) func() (*tensor.Tensor, error) {
		fail := func(err error) func() (*tensor.Tensor, error) {
			return func() (*tensor.Tensor, error) { return nil, err }
		}
		g, err := b.Buffer.Float32s()
		if err != nil {
			return fail(err)
		}
		// As the sample: a bucket index whose size changed (DDP rebuilds
		// its buckets after the first iteration) starts a new residual.
		acc := residual[b.Index]
		if len(acc) != len(g) {
			acc = make([]float32, len(g))
			residual[b.Index] = acc
		}
		for i := range g {
			acc[i] += g[i]
		}
		k := min(len(g), max(1, int(math.Ceil(ratio*float64(len(g))))))
		vals, idxs := make([]float32, k), make([]int64, k)
		for i, j := range topKByMagnitude(acc, k) {
			vals[i], idxs[i] = acc[j], int64(j)
			acc[j] = 0
		}
		rt := b.Buffer.Runtime()
		n := pg.Size()
		gv, gi := rt.Zeros(dtype.Float32, n*k).Persist(), rt.Zeros(dtype.Int64, n*k).Persist()
		w1 := pg.AllGather(gv, rt.FromFloat32s(vals, k).Persist())
		w2 := pg.AllGather(gi, rt.FromInt64s(idxs, k).Persist())
		return func() (*tensor.Tensor, error) {
			defer gv.Release()
			defer gi.Release()
			if err := w1.Wait(); err != nil {
				return nil, err
			}
			if err := w2.Wait(); err != nil {
				return nil, err
			}
			v, _ := gv.Float32s()
			ix, _ := gi.Int64s()
			sum := make([]float32, len(g))
			for j, i := range ix {
				sum[i] += v[j]
			}
			inv := float32(1) / float32(n)
			for i := range sum {
				sum[i] *= inv
			}
			return rt.FromFloat32s(sum, len(sum)).Persist(), nil
		}
	}
}

// TestTopKReferenceSelects checks the selection the reference (and the
// host's topk primitive) rely on against a sort.
func TestTopKReferenceSelects(t *testing.T) {
	x := []float32{0.5, -3, 2, -2, 0, 7, -7, 1, float32(math.NaN()), 2}
	for k := 0; k <= len(x); k++ {
		got := fmt.Sprint(topKByMagnitude(x, k))
		want := fmt.Sprint([]int{5, 6, 1, 2, 3, 9, 7, 0, 4, 8}[:k])
		if got != want {
			t.Errorf("k=%d: %s, want %s", k, got, want)
		}
	}
}
