package blas

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zeroeng/zeroeng/engine/cpu/cblas"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

// TestIdleLibraryThreadsSleep checks that OpenBLAS's workers do not keep
// spinning after a call (cblas sets OPENBLAS_THREAD_TIMEOUT): with the
// library's default they burned about 100 ms of CPU after every call,
// taking a core from the Go kernels that run between products.
func TestIdleLibraryThreadsSleep(t *testing.T) {
	l := needCBLAS(t)
	if l.Flavour != cblas.OpenBLAS || os.Getenv("OPENBLAS_THREAD_TIMEOUT") != "" {
		t.Skip("not OpenBLAS with the timeout set by engine/cpu/cblas")
	}
	parallel.SetThreads(2)
	defer parallel.SetThreads(0)
	const n = 512
	a, c := make([]float32, n*n), make([]float32, n*n)
	Sgemm(false, false, n, n, n, 1, a, n, a, n, 0, c, n)
	before := processCPU()
	time.Sleep(200 * time.Millisecond)
	if used := processCPU() - before; used > 40*time.Millisecond {
		t.Errorf("%v of CPU used while idle for 200 ms after a call: library threads are spinning", used)
	}
}

func processCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}
