package script

import (
	"io"
	"runtime"
	"testing"
	"time"
)

// TestCloseEndsTheOneRankWorld: a runtime outside a job makes a one-rank
// process group with a communication goroutine; Close must end it, or
// every runtime (a test, a fuzz input) would leave one behind.
func TestCloseEndsTheOneRankWorld(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 50 {
		r, err := New(Options{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunString("x.js", `require("zeroeng").dist.barrier().wait()`); err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+5 {
		t.Errorf("%d goroutines after 50 runtimes were closed, %d before", n, before)
	}
}
