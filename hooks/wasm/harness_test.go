package wasm

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// training describes a few DDP iterations of a small two-layer model on
// n in-process ranks, each rank with its own inputs, every parameter in
// a bucket of its own (four buckets) unless bucketCapMB says otherwise.
type training struct {
	n     int
	steps int
	// hook makes the rank's comm hook (nil: DDP's default all-reduce);
	// it may return a closer, called when the rank is done.
	hook        func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) (ddp.CommHook, func(), error)
	bucketCapMB float64
	asView      bool
	lr          float64
}

// trained is what every rank ended with: its parameters after each step
// (flattened, in registration order) and its error.
type trained struct {
	params [][][]float32 // [rank][step] → all parameters
	errs   []error
}

func (c training) run(t testing.TB) trained {
	t.Helper()
	if c.steps == 0 {
		c.steps = 3
	}
	if c.bucketCapMB == 0 {
		c.bucketCapMB = 1e-6
	}
	if c.lr == 0 {
		c.lr = 0.1
	}
	w, err := dist.NewWorld(c.n, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	out := trained{params: make([][][]float32, c.n), errs: make([]error, c.n)}
	var wg sync.WaitGroup
	for rank := range c.n {
		wg.Go(func() {
			out.params[rank], out.errs[rank] = c.rank(w, rank)
			if out.errs[rank] != nil {
				w.Abort(fmt.Errorf("rank %d failed", rank))
			}
		})
	}
	wg.Wait()
	return out
}

func (c training) rank(w *dist.World, rank int) ([][]float32, error) {
	pg := w.Group(rank)
	rt := tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), 1)
	// Every rank starts from the same parameters (DDP broadcasts rank
	// 0's anyway) and draws its own inputs.
	g := tensor.NewGenerator(7)
	shapes := [][]int{{16, 12}, {16}, {5, 16}, {5}}
	names := []string{"0.weight", "0.bias", "2.weight", "2.bias"}
	var params []ddp.Param
	for i, s := range shapes {
		p := rt.RandnWith(g, dtype.Float32, s...).MulScalar(0.3).Persist()
		if err := p.SetRequiresGrad(true); err != nil {
			return nil, err
		}
		params = append(params, ddp.Param{Name: names[i], Tensor: p})
	}
	d, err := ddp.New(pg, params, ddp.Options{BucketCapMB: c.bucketCapMB, FirstBucketCapMB: c.bucketCapMB, GradientAsBucketView: c.asView})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if c.hook != nil {
		h, closer, err := c.hook(rank, pg, rt)
		if err != nil {
			return nil, err
		}
		if closer != nil {
			defer closer()
		}
		if err := d.RegisterCommHook(h); err != nil {
			return nil, err
		}
	}
	data := tensor.NewGenerator(100 + uint64(rank))
	var history [][]float32
	for range c.steps {
		err := func() error {
			sc := rt.OpenScope()
			defer sc.Close()
			x := rt.RandnWith(data, dtype.Float32, 8, 12)
			h := x.Matmul(params[0].Tensor.T()).Add(params[1].Tensor).Tanh()
			y := h.Matmul(params[2].Tensor.T()).Add(params[3].Tensor)
			loss := y.Square().MeanAll()
			if err := loss.Backward(); err != nil {
				return err
			}
			if err := d.Finalize(); err != nil {
				return err
			}
			var flat []float32
			for _, p := range params {
				gr := p.Tensor.Grad()
				if err := gr.Err(); err != nil {
					return err
				}
				var err error
				rt.NoGrad(func() { err = p.Tensor.CopyFrom(p.Tensor.Sub(gr.MulScalar(c.lr))) })
				if err != nil {
					return err
				}
				if err := gr.Zero(); err != nil {
					return err
				}
				v, err := p.Tensor.Float32s()
				if err != nil {
					return err
				}
				flat = append(flat, v...)
			}
			history = append(history, flat)
			return nil
		}()
		if err != nil {
			return history, err
		}
	}
	return history, nil
}

// equalRuns fails unless a and b hold the same parameters to within tol
// (0: bit for bit) after every step on every rank.
func equalRuns(t *testing.T, a, b trained, tol float64) {
	t.Helper()
	for r := range a.params {
		if len(a.params[r]) != len(b.params[r]) {
			t.Fatalf("rank %d: %d steps against %d", r, len(a.params[r]), len(b.params[r]))
		}
		for s := range a.params[r] {
			for i, v := range a.params[r][s] {
				u := b.params[r][s][i]
				if d := math.Abs(float64(v) - float64(u)); d > tol || math.IsNaN(d) {
					t.Fatalf("rank %d, step %d, element %d: %v against %v", r, s, i, v, u)
				}
			}
		}
	}
}

func noErrors(t *testing.T, res trained) {
	t.Helper()
	for r, err := range res.errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// wasmHook makes a training's hook factory from a compiled module.
func wasmHook(m *Module, o Options, hooks []*Hook) func(int, dist.ProcessGroup, *tensor.Runtime) (ddp.CommHook, func(), error) {
	return func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) (ddp.CommHook, func(), error) {
		h, err := m.NewHook(pg, rt, o)
		if err != nil {
			return nil, nil, err
		}
		if hooks != nil {
			hooks[rank] = h
		}
		return h.CommHook(), func() { h.Close() }, nil
	}
}

// syncBuffer is a goroutine-safe log for the ranks' output.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
