package script

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// TestProgramInterruptedBeforeItRuns: an interrupt that reaches a rank
// before its program runs (another rank failed first) stops it, with an
// interruption rather than the API's loading failing as an internal error.
// Under make test's load the conformance case "a loop stopped by another
// rank's failure" hung for a minute: the interrupt came after the program
// loaded and before its context could be cancelled, and was lost;
// RunProgram now checks for one once the context is in place (that window
// cannot be hit on purpose from here; this checks the start).
func TestProgramInterruptedBeforeItRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prog.wasm")
	wasmBytes := hookbuild.WAT(t, confProgram{noThen: true, body: `
    (loop $forever (br $forever))`}.wat())
	if err := os.WriteFile(path, wasmBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Interrupt("stopped: rank 1 failed")
	done := make(chan error, 1)
	go func() { done <- r.RunProgram(path) }()
	select {
	case err := <-done:
		var se *Error
		if !errors.As(err, &se) || !se.Interrupted {
			t.Fatalf("error %v, want an interruption", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the program ran its loop after the interrupt (a lost interrupt)")
	}
}
