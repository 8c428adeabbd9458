package script

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// plainGroup hides a group's in-place reduction (dist.CoalescedAllReducer).
type plainGroup struct{ dist.ProcessGroup }

// TestREPLGroupReducesInPlace: the REPL's group forwards the in-place
// all-reduce of a list of tensors to its world (DDP then reduces in place
// in the REPL too), and says so in an error when the world cannot.
func TestREPLGroupReducesInPlace(t *testing.T) {
	w, err := dist.NewWorld(2, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got := make([][]float64, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
			var g dist.ProcessGroup = newREPLGroup(w.Group(rank))
			a := rt.FromValues(dtype.Float32, []float64{1, 2, 3}, 3)
			b := rt.FromValues(dtype.Float32, []float64{4, 5}, 2)
			if errs[rank] = g.(dist.CoalescedAllReducer).AllReduceCoalesced([]*tensor.Tensor{a, b}, dist.Sum, 0.5).Wait(); errs[rank] != nil {
				return
			}
			va, _ := a.Float64s()
			vb, _ := b.Float64s()
			got[rank] = append(va, vb...)
		})
	}
	wg.Wait()
	for rank := range 2 {
		if errs[rank] != nil {
			t.Fatalf("rank %d: %v", rank, errs[rank])
		}
		if want := []float64{1, 2, 3, 4, 5}; !slices.Equal(got[rank], want) {
			t.Errorf("rank %d: %v, want %v (each rank's half summed)", rank, got[rank], want)
		}
	}
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	g := newREPLGroup(plainGroup{w.Group(0)})
	err = g.AllReduceCoalesced([]*tensor.Tensor{rt.Zeros(dtype.Float32, 2)}, dist.Sum, 1).Wait()
	if err == nil || !strings.Contains(err.Error(), "cannot reduce a list of tensors in place") {
		t.Errorf("error %v, want one saying the group cannot", err)
	}
}
