package script

import (
	"errors"
	"io"
	"testing"
	"time"
)

// FuzzRunString feeds arbitrary source to a runtime: whatever the script,
// the result is a value or an *Error (syntax error, exception, engine
// error), never a Go panic escaping the runtime. Scripts that run too long
// are interrupted.
func FuzzRunString(f *testing.F) {
	for _, seed := range []string{
		`1 + 1`,
		`const { tensor } = require("zeroeng"); tensor.ones([2, 3]).matmul(tensor.ones([3, 2])).sum().item()`,
		`const { tensor } = require("zeroeng"); tensor.fromArray([1, 2, 3], [3], "float32").reshape(-1, 1).expand(3, 4)`,
		`const { tensor } = require("zeroeng"); tensor.zeros([2]).narrow(0, 5, 1)`,
		`const { nn, tensor } = require("zeroeng"); nn.Linear(4, 2).forward(tensor.randn([3, 4])).backward()`,
		`const { io } = require("zeroeng"); io.loadNpy("/nonexistent.npy")`,
		`throw new Error("x")`,
		`function f( {`,
		`require("./missing")`,
		`process.exit(3)`,
		`let x = ; x`,
		`const { tensor } = require("zeroeng"); tensor.randint(0, 10, [4]).float().softmax(0).toArray()`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		r, err := New(Options{Stdout: io.Discard, Stderr: io.Discard, AutoRelease: true})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		stop := time.AfterFunc(time.Second, func() { r.Interrupt("fuzz time limit") })
		defer stop.Stop()
		_, err = r.RunString("fuzz.js", src)
		var se *Error
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("error of type %T, want *script.Error: %v", err, err)
		}
		if se != nil && se.Message == "" {
			t.Fatalf("empty error message for %q", src)
		}
	})
}
