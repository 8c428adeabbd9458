package ddp

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// bucketLayout is one bucket as a comm hook sees it.
type bucketLayout struct {
	Index   int      `json:"index"`
	Params  []string `json:"params"`
	Offsets []int    `json:"offsets"`
	Numel   int      `json:"numel"`
}

type bucketFixture struct {
	FirstBucketBytes     int64            `json:"first_bucket_bytes"`
	BucketCapBytes       int64            `json:"bucket_cap_bytes"`
	FindUnusedParameters bool             `json:"find_unused_parameters"`
	Iterations           [][]bucketLayout `json:"iterations"`
}

// bucketModel is one of testdata/gen_buckets.py's models on a rank: its
// parameters in registration order, with PyTorch's names, and its loss.
type bucketModel struct {
	params []Param
	loss   func(rank int) *tensor.Tensor
}

func newBucketModel(t *testing.T, rt *tensor.Runtime, name string) bucketModel {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	named := func(prefix string, m interface{ NamedParameters() []nn.NamedTensor }) []Param {
		var out []Param
		for _, p := range m.NamedParameters() {
			out = append(out, Param{Name: prefix + p.Name, Tensor: p.Tensor})
		}
		return out
	}
	switch name {
	case "mlp", "mlp-small-buckets", "mlp-find-unused":
		l1, err := nn.NewLinear(rt, 8, 16, true)
		must(err)
		l2, err := nn.NewLinear(rt, 16, 4, true)
		must(err)
		m, err := nn.NewSequential(l1, nn.ReLU(), l2)
		must(err)
		return bucketModel{params: named("", m), loss: func(rank int) *tensor.Tensor {
			xs := make([]float64, 24)
			for i := range xs {
				xs[i] = math.Sin(float64(i)) + float64(rank)
			}
			x := rt.FromValues(dtype.Float32, xs, 3, 8)
			return m.Forward(x).Square().Mean(nil, false)
		}}
	case "tiny", "tiny-unused":
		emb, err := nn.NewEmbedding(rt, 10, 8, -1)
		must(err)
		ln, err := nn.NewLayerNorm(rt, []int{8}, 1e-5, true)
		must(err)
		fc1, err := nn.NewLinear(rt, 8, 16, true)
		must(err)
		fc2, err := nn.NewLinear(rt, 16, 4, false)
		must(err)
		params := slices.Concat(named("emb.", emb), named("ln.", ln), named("fc1.", fc1), named("fc2.", fc2))
		if name == "tiny-unused" {
			head, err := nn.NewLinear(rt, 4, 4, true)
			must(err)
			params = append(params, named("head.", head)...)
		}
		return bucketModel{params: params, loss: func(rank int) *tensor.Tensor {
			idx := rt.FromInt64s([]int64{1, 2, 3, 4, 5, int64(6 + rank)}, 2, 3)
			return fc2.Forward(fc1.Forward(ln.Forward(emb.Forward(idx))).Relu()).Square().Mean(nil, false)
		}}
	}
	t.Fatalf("no model %q", name)
	return bucketModel{}
}

// TestBucketLayoutMatchesPyTorch holds the buckets, as a comm hook sees
// them in the first three iterations, to those of PyTorch 1.13's DDP
// (testdata/buckets.json, from gen_buckets.py): the same parameters in the
// same order at the same offsets, in the same buckets, before and after
// the rebuild. Hooks that read offsets (PowerSGD) depend on it.
func TestBucketLayoutMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "buckets.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fixtures map[string]bucketFixture
	if err := json.Unmarshal(raw, &fixtures); err != nil {
		t.Fatal(err)
	}
	if len(fixtures) == 0 {
		t.Fatal("no fixtures")
	}
	for name, fx := range fixtures {
		t.Run(name, func(t *testing.T) {
			const n = 2
			w, err := dist.NewWorld(n, dist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			got := make([][][]bucketLayout, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for rank := range n {
				wg.Go(func() { got[rank], errs[rank] = bucketRun(t, w.Group(rank), name, fx, len(fx.Iterations)) })
			}
			wg.Wait()
			for rank, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", rank, err)
				}
			}
			for it, want := range fx.Iterations {
				if g := fmt.Sprint(got[0][it]); g != fmt.Sprint(want) {
					t.Errorf("iteration %d:\n got %v\nwant %v", it, got[0][it], want)
				}
			}
		})
	}
}

func bucketRun(t *testing.T, pg dist.ProcessGroup, name string, fx bucketFixture, iterations int) ([][]bucketLayout, error) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	m := newBucketModel(t, rt, name)
	d, err := New(pg, m.params, Options{
		FirstBucketCapMB: float64(fx.FirstBucketBytes) / (1 << 20), BucketCapMB: float64(fx.BucketCapBytes) / (1 << 20),
		FindUnusedParameters: fx.FindUnusedParameters,
	})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var seen [][]bucketLayout
	reduce := AllReduceHook(pg)
	if err := d.RegisterCommHook(func(b *Bucket) func() (*tensor.Tensor, error) {
		seen[len(seen)-1] = append(seen[len(seen)-1], bucketLayout{b.Index, slices.Clone(b.Names), slices.Clone(b.Offsets), b.Buffer.Numel()})
		return reduce(b)
	}); err != nil {
		return nil, err
	}
	var params []*tensor.Tensor
	for _, p := range m.params {
		params = append(params, p.Tensor)
	}
	opt, err := optim.NewSGD(params, optim.SGDConfig{LR: 0.1})
	if err != nil {
		return nil, err
	}
	for range iterations {
		seen = append(seen, nil)
		sc := rt.OpenScope()
		if err := opt.ZeroGrad(false); err != nil {
			return nil, err
		}
		if err := m.loss(pg.Rank()).Backward(); err != nil {
			return nil, err
		}
		if err := opt.Step(); err != nil {
			return nil, err
		}
		sc.Close()
		slices.SortFunc(seen[len(seen)-1], func(a, b bucketLayout) int { return a.Index - b.Index })
	}
	return seen, nil
}
