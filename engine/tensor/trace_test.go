package tensor_test

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// With a recorder, each backward pass is recorded on the compute lane,
// preceded by the forward pass that built its graph: from the first op
// recorded for autograd to the last. Ops that autograd does not record
// (no input requires a gradient, or under NoGrad) start no forward pass.
func TestTraceForwardBackward(t *testing.T) {
	rt := newRT()
	rec := trace.New(trace.Options{})
	rt.SetTrace(rec, 3)
	if got, rank := rt.Trace(); got != rec || rank != 3 {
		t.Fatalf("Trace() = %p, %d", got, rank)
	}
	w := rt.Ones(tensor.Float32, 4, 4)
	if err := w.SetRequiresGrad(true); err != nil {
		t.Fatal(err)
	}
	x := rt.Ones(tensor.Float32, 2, 4).Mul(rt.Scalar(tensor.Float32, 2)) // not recorded: nothing requires a gradient
	for range 2 {
		loss := x.Matmul(w).SumAll()
		rt.NoGrad(func() { loss.Add(loss).Release() })
		if err := loss.Backward(); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for _, e := range rec.Events() {
		if e.Rank != 3 || e.Lane != trace.Compute || e.End.Before(e.Start) {
			t.Errorf("event %+v", e)
		}
		names = append(names, e.Name)
	}
	if want := "forward backward forward backward"; strings.Join(names, " ") != want {
		t.Errorf("events %q, want %q", strings.Join(names, " "), want)
	}
	evs := rec.Events()
	for i := 0; i+1 < len(evs); i++ {
		if evs[i].End.After(evs[i+1].Start) {
			t.Errorf("%s ends after %s starts", evs[i].Name, evs[i+1].Name)
		}
	}
	rt.SetTrace(nil, 0)
	loss := x.Matmul(w).SumAll()
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	if n, _ := rec.Len(); n != 4 {
		t.Errorf("%d events after tracing was turned off, want 4", n)
	}
}
