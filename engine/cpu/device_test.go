package cpu

import (
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

// TestNewResolvesBLAS: a device resolves the choice of GEMM when it
// starts, and with it whether the pool's workers poll, rather than at its
// first product: a model whose first loops are convolutions would
// otherwise run them with parked workers (a 16→32 convolution's forward
// and backward 1.5 ms a call against 1.0).
func TestNewResolvesBLAS(t *testing.T) {
	defer parallel.SetPoll(parallel.Poll())
	if err := blas.Use("go"); err != nil { // unresolved again; the Go kernels poll
		t.Fatal(err)
	}
	defer blas.Use("auto")
	parallel.SetPoll(0)
	New(Options{})
	if parallel.Poll() == 0 {
		t.Fatalf("after New the workers park at once; the Go kernels' choice (%s) has them poll", blas.Info())
	}
}
