package ddp

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// defaultFixture is testdata/default.json (testdata/gen_default.py).
type defaultFixture struct {
	World int `json:"world"`
	// Rank 0's gradients after each of two iterations, as float32 bits,
	// by parameter name.
	Copied []map[string][]uint32 `json:"gradient_as_bucket_view=false"`
	Views  []map[string][]uint32 `json:"gradient_as_bucket_view=true"`
}

// TestDefaultReductionMatchesPyTorch holds a DDP without a registered hook
// on 3 ranks to PyTorch's reducer bit for bit: each gradient multiplied by
// the reciprocal of the world size while it is copied into its bucket (a
// true division would round differently on 3 ranks), divided in place when
// it is the bucket's view already (gradientAsBucketView from the second
// iteration), then summed.
func TestDefaultReductionMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/default.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx defaultFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	for _, view := range []bool{false, true} {
		want := fx.Copied
		if view {
			want = fx.Views
		}
		t.Run(fmt.Sprintf("gradientAsBucketView=%v", view), func(t *testing.T) {
			w, err := dist.NewWorld(fx.World, dist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			got := make([][]map[string][]uint32, fx.World)
			errs := make([]error, fx.World)
			var wg sync.WaitGroup
			for rank := range fx.World {
				wg.Go(func() { got[rank], errs[rank] = defaultRun(w.Group(rank), fx, view) })
			}
			wg.Wait()
			for rank, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", rank, err)
				}
			}
			for it, grads := range want {
				for name, bits := range grads {
					g := got[0][it][name]
					if len(g) != len(bits) {
						t.Fatalf("iteration %d, %s: %d values, want %d", it, name, len(g), len(bits))
					}
					for i := range bits {
						if g[i] != bits[i] {
							t.Errorf("iteration %d, %s[%d] = %g, PyTorch's %g", it, name, i,
								math.Float32frombits(g[i]), math.Float32frombits(bits[i]))
						}
					}
				}
			}
		})
	}
}

// defaultRun trains gen_default.py's model on one rank and returns its
// gradients after each iteration. Its weights and inputs are small dyadic
// numbers, so that the local gradients are exact and only the reduction
// can differ from PyTorch's.
func defaultRun(pg dist.ProcessGroup, fx defaultFixture, view bool) ([]map[string][]uint32, error) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	l1, err := nn.NewLinear(rt, 5, 4, true)
	if err != nil {
		return nil, err
	}
	l2, err := nn.NewLinear(rt, 4, 3, true)
	if err != nil {
		return nil, err
	}
	model, err := nn.NewSequential(l1, nn.ReLU(), l2)
	if err != nil {
		return nil, err
	}
	var params []Param
	var tensors []*tensor.Tensor
	for _, p := range model.NamedParameters() {
		v := make([]float64, p.Tensor.Numel())
		for k := range v {
			v[k] = float64((3*k)%11-5) / 8
		}
		rt.NoGrad(func() { err = p.Tensor.CopyFrom(rt.FromValues(dtype.Float32, v, p.Tensor.Shape()...)) })
		if err != nil {
			return nil, err
		}
		params = append(params, Param{p.Name, p.Tensor})
		tensors = append(tensors, p.Tensor)
	}
	d, err := New(pg, params, Options{GradientAsBucketView: view})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	opt, err := optim.NewSGD(tensors, optim.SGDConfig{LR: 0})
	if err != nil {
		return nil, err
	}
	xs := make([]float64, 30)
	for i := range xs {
		xs[i] = float64((i+pg.Rank())%7-3) / 4
	}
	x := rt.FromValues(dtype.Float32, xs, 6, 5).Persist()
	defer x.Release()
	var out []map[string][]uint32
	for range 2 {
		sc := rt.OpenScope()
		if err := opt.ZeroGrad(false); err != nil {
			return nil, err
		}
		if err := model.Forward(x).Square().Sum(nil, false).Backward(); err != nil {
			return nil, err
		}
		grads := map[string][]uint32{}
		for _, p := range params {
			v, err := p.Tensor.Grad().Float32s()
			if err != nil {
				return nil, err
			}
			for _, f := range v {
				grads[p.Name] = append(grads[p.Name], math.Float32bits(f))
			}
		}
		out = append(out, grads)
		if err := opt.Step(); err != nil {
			return nil, err
		}
		sc.Close()
	}
	return out, nil
}
