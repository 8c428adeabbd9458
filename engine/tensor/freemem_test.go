package tensor_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestFreeMemoryUnderAutograd: a parameter that is a view of a flat buffer
// keeps working across the buffer's memory being freed and restored, as
// ZeRO stage 3 does: ops on it fail with the reason while it is freed, and
// backward accepts what it saved once the same values are back (seal).
func TestFreeMemoryUnderAutograd(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	flat := rt.FromFloat64s([]float64{1, 2, 3, 4, 5, 6}, 6).Persist()
	w := rt.Zeros(tensor.Float64, 2, 3).Persist()
	if err := w.SetData(flat.Narrow(0, 0, 6)); err != nil {
		t.Fatal(err)
	}
	w.SetRequiresGrad(true)
	y := w.Mul(w).SumAll() // saves w for backward

	live := rt.Stats().LiveBytes
	if err := flat.FreeMemory("the parameters of unit 0 are sharded"); err != nil {
		t.Fatal(err)
	}
	if !flat.MemoryFreed() || !w.MemoryFreed() || rt.Stats().LiveBytes != live-48 {
		t.Fatalf("freed %v/%v, live bytes %d -> %d", flat.MemoryFreed(), w.MemoryFreed(), live, rt.Stats().LiveBytes)
	}
	if _, err := w.SumAll().Float64s(); err == nil || !strings.Contains(err.Error(), "has no memory now: the parameters of unit 0 are sharded") {
		t.Fatalf("an op on freed memory: %v", err)
	}

	seal, err := flat.RestoreMemory()
	if err != nil {
		t.Fatal(err)
	}
	if err := flat.CopyFrom(rt.FromFloat64s([]float64{1, 2, 3, 4, 5, 6}, 6)); err != nil {
		t.Fatal(err)
	}
	seal()
	if err := y.Backward(); err != nil {
		t.Fatalf("backward after the memory came back: %v", err)
	}
	g, _ := w.Grad().Float64s()
	if len(g) != 6 || g[0] != 2 || g[5] != 12 {
		t.Fatalf("w.grad = %v", g)
	}

	// Without seal the refill counts as a write: backward refuses.
	w.SetGrad(nil)
	y = w.Mul(w).SumAll()
	flat.FreeMemory("sharded")
	flat.RestoreMemory()
	flat.CopyFrom(rt.FromFloat64s([]float64{1, 2, 3, 4, 5, 6}, 6))
	if err := y.Backward(); err == nil || !strings.Contains(err.Error(), "modified by an in-place operation") {
		t.Fatalf("backward after an unsealed refill: %v", err)
	}
	if err := flat.Narrow(0, 0, 3).FreeMemory("x"); err == nil {
		t.Error("FreeMemory of a view succeeded")
	}
}

// TestOnBackward: the hook runs once per backward pass, before the op that
// made the tensor and every op before it run their backward.
func TestOnBackward(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	w := rt.FromFloat64s([]float64{2}, 1).Persist()
	w.SetRequiresGrad(true)
	var order []string
	w.OnGradReady(func(*tensor.Tensor) { order = append(order, "w ready") })
	h := w.MulScalar(3) // the unit's output
	if _, err := h.OnBackward(func() error { order = append(order, "before the unit"); return nil }); err != nil {
		t.Fatal(err)
	}
	loss := h.Mul(h).SumAll()
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ", ") != "before the unit, w ready" {
		t.Errorf("order: %v", order)
	}
	if _, err := w.OnBackward(func() error { return nil }); err == nil {
		t.Error("OnBackward of a leaf succeeded")
	}
	// A hook that fails (a stage-3 gather out of memory) ends the pass
	// with its error, before any op below it runs.
	order = nil
	h = w.MulScalar(3)
	if _, err := h.OnBackward(func() error { return errors.New("out of memory gathering unit 0") }); err != nil {
		t.Fatal(err)
	}
	if err := h.Mul(h).SumAll().Backward(); err == nil || err.Error() != "out of memory gathering unit 0" || len(order) != 0 {
		t.Errorf("backward: %v; hooks run: %v", err, order)
	}
}

// TestSetBytes: SetBytes writes a contiguous tensor (or view) in place and
// refuses a size that does not match.
func TestSetBytes(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	x := rt.Zeros(tensor.Float64, 4)
	src, _ := rt.FromFloat64s([]float64{7, 8}, 2).Bytes()
	if err := x.Narrow(0, 1, 2).SetBytes(src); err != nil {
		t.Fatal(err)
	}
	if v, _ := x.Float64s(); v[0] != 0 || v[1] != 7 || v[2] != 8 || v[3] != 0 {
		t.Errorf("after SetBytes: %v", v)
	}
	if err := x.SetBytes(src); err == nil || !strings.Contains(err.Error(), "16 bytes into a float64 tensor of shape [4]") {
		t.Errorf("a short write: %v", err)
	}
}
