package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPollingWorkers: with SetPoll, loops still cover every index once,
// the workers stop polling and park after the window (an idle process
// uses no CPU), and replacing the pool ends the polling workers.
func TestPollingWorkers(t *testing.T) {
	defer SetPoll(0)
	defer SetThreads(0)
	SetThreads(2)
	SetPoll(200 * time.Microsecond)
	for _, n := range []int{2, 1000, 100003} {
		hits := make([]int32, n)
		for rep := 0; rep < 50; rep++ {
			For(n, 1, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					atomic.AddInt32(&hits[i], 1)
				}
			})
		}
		for i, h := range hits {
			if h != 50 {
				t.Fatalf("n %d: index %d ran %d times, want 50", n, i, h)
			}
		}
	}
	before := processCPU(t)
	time.Sleep(200 * time.Millisecond)
	if used := processCPU(t) - before; used > 40*time.Millisecond {
		t.Errorf("%v of CPU used while idle for 200 ms: the workers did not park after polling 200 µs", used)
	}

	// A window longer than the test: the worker is still polling when
	// the pool is replaced, and must return.
	base := runtime.NumGoroutine()
	SetPoll(time.Hour)
	SetThreads(3)
	// Chunks long enough that the workers take some and then poll.
	For(12, 1, func(lo, hi int) { time.Sleep(2 * time.Millisecond) })
	SetThreads(1)
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > base {
		t.Errorf("%d goroutines after the polling pool was replaced, %d before", g, base)
	}
}

func processCPU(t *testing.T) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}
