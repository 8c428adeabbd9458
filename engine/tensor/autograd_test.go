package tensor_test

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

func param(t *testing.T, rt *tensor.Runtime, vals []float32, shape ...int) *tensor.Tensor {
	t.Helper()
	p := rt.FromFloat32s(vals, shape...)
	if err := p.SetRequiresGrad(true); err != nil {
		t.Fatal(err)
	}
	return p
}

func values(t *testing.T, x *tensor.Tensor) []float32 {
	t.Helper()
	v, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestGradAccumulatesAcrossBackwardCalls(t *testing.T) {
	rt := newRT()
	w := param(t, rt, []float32{1, 2, 3})
	for i := 0; i < 2; i++ {
		if err := w.Mul(w).SumAll().Backward(); err != nil {
			t.Fatal(err)
		}
	}
	if got := values(t, w.Grad()); !slices.Equal(got, []float32{4, 8, 12}) {
		t.Fatalf("grad after two backward passes = %v, want 2·2w", got)
	}
}

func TestGradReadyHooksFireOncePerPassInReverseOrder(t *testing.T) {
	rt := newRT()
	w1 := param(t, rt, make([]float32, 12), 4, 3).SetName("0.weight")
	b1 := param(t, rt, make([]float32, 4), 4).SetName("0.bias")
	w2 := param(t, rt, make([]float32, 8), 2, 4).SetName("2.weight")
	b2 := param(t, rt, make([]float32, 2), 2).SetName("2.bias")
	var order []string
	for _, p := range []*tensor.Tensor{w1, b1, w2, b2} {
		p.OnGradReady(func(p *tensor.Tensor) {
			if p.Grad() == nil {
				t.Errorf("%s: hook fired before the gradient was stored", p.Name())
			}
			order = append(order, p.Name())
		})
	}
	x := rt.Ones(tensor.Float32, 5, 3)
	h := tensor.Linear(x, w1, b1).Relu()
	loss := tensor.Linear(h, w2, b2).SumAll()
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	if len(order) != 4 {
		t.Fatalf("hooks fired %d times: %v", len(order), order)
	}
	// The second layer's gradients are final before the first layer's.
	if slices.Index(order, "2.weight") > slices.Index(order, "0.weight") || slices.Index(order, "2.bias") > slices.Index(order, "0.bias") {
		t.Errorf("gradient-ready order %v: later layers must be ready first", order)
	}
}

func TestHookSeesTiedWeightOnceWithFullGradient(t *testing.T) {
	rt := newRT()
	w := param(t, rt, []float32{1, 2}, 2)
	calls := 0
	w.OnGradReady(func(p *tensor.Tensor) {
		calls++
		if got := values(t, p.Grad()); !slices.Equal(got, []float32{3, 3}) {
			t.Errorf("hook saw partial gradient %v", got)
		}
	})
	// w is used three times.
	loss := w.SumAll().Add(w.MulScalar(2).SumAll())
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("hook fired %d times", calls)
	}
}

func TestSecondBackwardNeedsRetainGraph(t *testing.T) {
	rt := newRT()
	w := param(t, rt, []float32{1, 2})
	loss := w.Exp().SumAll()
	if err := loss.BackwardWith(tensor.BackwardOptions{RetainGraph: true}); err != nil {
		t.Fatal(err)
	}
	if err := loss.Backward(); err != nil {
		t.Fatalf("backward through a retained graph: %v", err)
	}
	err := loss.Backward()
	if err == nil || !strings.Contains(err.Error(), "second time") {
		t.Fatalf("third backward: got %v, want a 'second time' error", err)
	}
}

func TestNoGradAndDetach(t *testing.T) {
	rt := newRT()
	w := param(t, rt, []float32{1, 2})
	var y *tensor.Tensor
	rt.NoGrad(func() { y = w.MulScalar(2) })
	if y.RequiresGrad() {
		t.Error("op under NoGrad requires grad")
	}
	if w.Detach().MulScalar(3).RequiresGrad() {
		t.Error("op on a detached tensor requires grad")
	}
	if err := y.SumAll().Backward(); err == nil {
		t.Error("backward of a tensor without grad_fn succeeded")
	}
}

func TestBackwardWithGradient(t *testing.T) {
	rt := newRT()
	w := param(t, rt, []float32{1, 2, 3})
	y := w.MulScalar(2)
	if err := y.Backward(); err == nil || !strings.Contains(err.Error(), "one-element") {
		t.Fatalf("implicit gradient of a vector: %v", err)
	}
	if err := y.BackwardWith(tensor.BackwardOptions{Grad: rt.FromFloat32s([]float32{1, 10, 100})}); err != nil {
		t.Fatal(err)
	}
	if got := values(t, w.Grad()); !slices.Equal(got, []float32{2, 20, 200}) {
		t.Fatalf("grad %v", got)
	}
}

func TestErrorsPropagateAndNameTheOp(t *testing.T) {
	rt := newRT()
	a := rt.Ones(tensor.Float32, 2, 3)
	b := rt.Ones(tensor.Float32, 4)
	c := a.Add(b)
	if c.Err() == nil || !strings.Contains(c.Err().Error(), "add") || !strings.Contains(c.Err().Error(), "[2 3]") || !strings.Contains(c.Err().Error(), "[4]") {
		t.Fatalf("broadcast error %v must name the op and both shapes", c.Err())
	}
	d := c.Exp().Matmul(a).SumAll()
	if d.Err() != c.Err() {
		t.Fatalf("the first error must propagate unchanged, got %v", d.Err())
	}
	if _, err := d.Item(); err != c.Err() {
		t.Fatalf("Item: %v", err)
	}
	if err := d.Backward(); err != c.Err() {
		t.Fatalf("Backward: %v", err)
	}
	cases := []struct {
		name string
		got  *tensor.Tensor
		want string
	}{
		{"matmul", a.Matmul(a), "cannot be multiplied"},
		{"view", a.Transpose(0, 1).View(6), "Reshape"},
		{"select", a.Select(0, 5), "out of bounds"},
		{"narrow", a.Narrow(1, 2, 2), "out of range"},
		{"reshape", a.Reshape(4, 2), "invalid for input of size 6"},
		{"permute", a.Permute(0, 0), "invalid permutation"},
		{"index", a.IndexSelect(0, rt.FromInt64s([]int64{0, 7})), "7"},
		{"cross_entropy", tensor.CrossEntropy(a, rt.FromInt64s([]int64{0, 9}), tensor.DefaultCrossEntropy), "9"},
		{"cat", tensor.Cat([]*tensor.Tensor{a, b}, 0), "dimensions"},
		{"dtype", a.Matmul(rt.Ones(tensor.Float64, 3, 2)), "dtype"},
		{"mean_int", rt.Ones(tensor.Int64, 3).MeanAll(), "floating point"},
	}
	for _, c := range cases {
		if c.got.Err() == nil || !strings.Contains(c.got.Err().Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.name, c.got.Err(), c.want)
		}
	}
}

func TestInPlaceChecks(t *testing.T) {
	rt := newRT()
	w := param(t, rt, []float32{1, 2})
	if err := w.AddInPlace(rt.Ones(tensor.Float32, 2)); err == nil {
		t.Error("in-place add on a leaf requiring grad succeeded with grad mode on")
	}
	rt.NoGrad(func() {
		if err := w.AddInPlace(rt.Ones(tensor.Float32, 2)); err != nil {
			t.Errorf("in-place under NoGrad: %v", err)
		}
	})
	// A saved tensor modified before backward makes backward fail.
	x := rt.FromFloat32s([]float32{1, 2})
	y := w.Mul(x).SumAll()
	if err := x.Fill(5); err != nil {
		t.Fatal(err)
	}
	if err := y.Backward(); err == nil || !strings.Contains(err.Error(), "in-place") {
		t.Fatalf("backward after modifying a saved tensor: %v", err)
	}
}

func TestScopesReleaseEverythingButWhatIsKept(t *testing.T) {
	rt := newRT()
	w := param(t, rt, make([]float32, 64*32), 64, 32)
	before := rt.Stats()
	var kept *tensor.Tensor
	for step := 0; step < 3; step++ {
		sc := rt.OpenScope()
		x := rt.Ones(tensor.Float32, 16, 32)
		loss := tensor.Linear(x, w, nil).Gelu("tanh").Square().MeanAll()
		if err := loss.Backward(); err != nil {
			t.Fatal(err)
		}
		if step == 2 {
			kept = loss
			sc.Keep(loss)
		}
		sc.Close()
	}
	after := rt.Stats()
	// One gradient (w.grad) and the kept loss remain.
	if got, want := after.LiveTensors-before.LiveTensors, int64(2); got != want {
		t.Errorf("live tensors grew by %d, want %d (the gradient and the kept loss)", got, want)
	}
	if got, want := after.LiveBytes-before.LiveBytes, int64(64*32*4+4); got != want {
		t.Errorf("live bytes grew by %d, want %d", got, want)
	}
	if _, err := kept.Item(); err != nil {
		t.Errorf("kept tensor unusable: %v", err)
	}
	if after.Reuses == 0 {
		t.Error("steady-state steps allocated from the system instead of the pool")
	}
}

func TestReleasedTensorIsAnError(t *testing.T) {
	rt := newRT()
	x := rt.Ones(tensor.Float32, 3)
	x.Release()
	x.Release() // idempotent
	if err := x.Exp().Err(); err == nil || !strings.Contains(err.Error(), "released") {
		t.Fatalf("op on a released tensor: %v", err)
	}
}

func TestViewsShareStorage(t *testing.T) {
	rt := newRT()
	x := rt.Arange(tensor.Float32, 0, 6, 1).Reshape(2, 3)
	tr := x.T()
	if tr.IsContiguous() {
		t.Fatal("transpose is contiguous")
	}
	rt.NoGrad(func() {
		if err := x.Select(0, 1).Fill(-1); err != nil {
			t.Fatal(err)
		}
	})
	if got := values(t, tr); !slices.Equal(got, []float32{0, -1, 1, -1, 2, -1}) {
		t.Fatalf("transpose after writing through a select view: %v", got)
	}
	e := rt.FromFloat32s([]float32{1, 2}, 2, 1).Expand(2, 3)
	if got := values(t, e.Contiguous()); !slices.Equal(got, []float32{1, 1, 1, 2, 2, 2}) {
		t.Fatalf("expand: %v", got)
	}
}

func TestDeterministic(t *testing.T) {
	run := func() []float32 {
		rt := newRT()
		w := param(t, rt, make([]float32, 256*128), 256, 128)
		rt.NoGrad(func() {
			_ = w.CopyFrom(rt.Arange(tensor.Float32, 0, 256*128, 1).Reshape(256, 128).MulScalar(1e-4).Tanh())
		})
		x := rt.Arange(tensor.Float32, 0, 64*128, 1).Reshape(64, 128).MulScalar(1e-3)
		loss := tensor.Linear(x, w, nil).Gelu("none").Sum([]int{1}, false).Square().MeanAll()
		if err := loss.Backward(); err != nil {
			t.Fatal(err)
		}
		return values(t, w.Grad())
	}
	a, b := run(), run()
	if !slices.Equal(a, b) {
		t.Fatal("two identical runs differ")
	}
}

// TestLazyZero: Zero defers the fill, and every later use sees zeros: a
// read, a partial write through a view, and a backward pass (which moves its
// gradient in instead of adding it to zeros).
func TestLazyZero(t *testing.T) {
	rt := newRT()
	w := param(t, rt, []float32{1, 2, 3, 4}, 2, 2)
	for i := 0; i < 2; i++ {
		if err := w.Mul(w).SumAll().Backward(); err != nil {
			t.Fatal(err)
		}
	}
	g := w.Grad()
	rt.NoGrad(func() {
		if err := g.Zero(); err != nil {
			t.Fatal(err)
		}
	})
	if err := w.MulScalar(3).SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	if w.Grad() != g {
		t.Fatal("the gradient tensor was replaced; views of it would go stale")
	}
	if got := values(t, g); !slices.Equal(got, []float32{3, 3, 3, 3}) {
		t.Fatalf("grad after zero and backward = %v", got)
	}
	rt.NoGrad(func() {
		_ = g.Zero()
		if got := values(t, g); !slices.Equal(got, []float32{0, 0, 0, 0}) {
			t.Fatalf("read after zero = %v", got)
		}
		_ = g.Zero()
		if err := g.Select(0, 1).Fill(7); err != nil {
			t.Fatal(err)
		}
	})
	if got := values(t, g); !slices.Equal(got, []float32{0, 0, 7, 7}) {
		t.Fatalf("partial write after zero = %v", got)
	}
	// A view taken before the zero sees zeros too.
	row := g.Select(0, 0)
	rt.NoGrad(func() { _ = g.Zero() })
	if err := w.SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	if got := values(t, row); !slices.Equal(got, []float32{1, 1}) {
		t.Fatalf("view of the gradient after zero and backward = %v", got)
	}
}

func TestHugeAndNegativeShapesAreErrors(t *testing.T) {
	rt := newRT()
	for name, x := range map[string]*tensor.Tensor{
		"zeros negative":   rt.Zeros(tensor.Float32, 3, -1),
		"zeros huge":       rt.Zeros(tensor.Float32, 1<<30, 1<<30),
		"zeros overflow":   rt.Zeros(tensor.Float32, 1<<62, 1<<62, 1<<62),
		"randn huge":       rt.Randn(tensor.Float32, 1<<45),
		"arange huge":      rt.Arange(tensor.Float32, 0, 1e15, 1),
		"expand huge":      rt.Ones(tensor.Float32, 1).Expand(1<<40, 1<<40).Contiguous(),
		"reshape overflow": rt.Ones(tensor.Float32, 4).Reshape(1<<62, 1<<62, 4),
	} {
		if x.Err() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestRanksRunConcurrently runs independent training steps on several
// runtimes at once, as in-process ranks do (run with -race).
func TestRanksRunConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	results := make([][]float32, 3)
	for r := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := newRT()
			w := rt.Randn(tensor.Float32, 32, 16).Persist()
			if err := w.SetRequiresGrad(true); err != nil {
				t.Error(err)
				return
			}
			w.OnGradReady(func(*tensor.Tensor) {})
			for step := 0; step < 5; step++ {
				sc := rt.OpenScope()
				x := rt.Randn(tensor.Float32, 8, 16)
				if err := tensor.Linear(x, w, nil).Gelu("tanh").Square().MeanAll().Backward(); err != nil {
					t.Error(err)
				}
				sc.Close()
			}
			results[r], _ = w.Grad().Float32s()
		}()
	}
	wg.Wait()
	for r := 1; r < len(results); r++ {
		if !slices.Equal(results[r], results[0]) {
			t.Fatalf("rank %d computed a different gradient from the same seed", r)
		}
	}
}

// TestAfterGradHooks: a function deferred from a gradient-ready hook runs
// after the leaf's later hooks, once per registration, and at once outside
// a backward pass.
func TestAfterGradHooks(t *testing.T) {
	rt := newRT()
	w := rt.Ones(dtype.Float32, 3).Persist()
	if err := w.SetRequiresGrad(true); err != nil {
		t.Fatal(err)
	}
	var order []string
	w.OnGradReady(func(*tensor.Tensor) {
		order = append(order, "first")
		rt.AfterGradHooks(func() { order = append(order, "after") })
	})
	w.OnGradReady(func(*tensor.Tensor) { order = append(order, "second") })
	if err := w.MulScalar(2).Sum(nil, false).Backward(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"first", "second", "after"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	ran := false
	rt.AfterGradHooks(func() { ran = true })
	if !ran {
		t.Error("outside a backward pass the function did not run at once")
	}
}
