package script

import (
	"io"
	"testing"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The host-call benchmarks measure what a script pays to reach the engine:
// each runs a JavaScript loop of b.N calls and reports ns per call
// (docs/benchmarks.md compares them with PyTorch's per-op overhead).

func benchLoop(b *testing.B, setup, body string) {
	r, err := New(Options{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, err := r.RunString("setup.js", "const { tensor, nn } = require('zeroeng');\n"+setup+
		"\nfunction loop(n) { for (let i = 0; i < n; i++) { "+body+" } }"); err != nil {
		b.Fatal(err)
	}
	loop, _ := goja.AssertFunction(r.vm.Get("loop"))
	b.ResetTimer()
	if _, err := loop(goja.Undefined(), r.vm.ToValue(b.N)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkHostCallTrivial: a host function that does no tensor work.
func BenchmarkHostCallTrivial(b *testing.B) {
	benchLoop(b, "", "tensor.isGradEnabled();")
}

// BenchmarkHostCallProperty: reading a tensor property (t.ndim).
func BenchmarkHostCallProperty(b *testing.B) {
	benchLoop(b, "const a = tensor.ones([4]);", "a.ndim;")
}

// BenchmarkHostCallMethod: a method returning a number (t.numel()).
func BenchmarkHostCallMethod(b *testing.B) {
	benchLoop(b, "const a = tensor.ones([4]);", "a.numel();")
}

// BenchmarkHostCallAdd: a small op end to end (a.add(b) on 4 elements:
// argument checks, a pooled buffer, the kernel, the script object and its
// release). Every 1000 calls run in a tensor.scope, as a step would.
func BenchmarkHostCallAdd(b *testing.B) {
	r, err := New(Options{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, err := r.RunString("setup.js", `const { tensor } = require('zeroeng');
const a = tensor.ones([4]), c = tensor.ones([4]);
function loop(n) { tensor.scope(() => { for (let i = 0; i < n; i++) a.add(c); }); }`); err != nil {
		b.Fatal(err)
	}
	loop, _ := goja.AssertFunction(r.vm.Get("loop"))
	b.ResetTimer()
	for done := 0; done < b.N; done += 1000 {
		if _, err := loop(goja.Undefined(), r.vm.ToValue(min(1000, b.N-done))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGoAdd is the same op called from Go, the engine's own cost.
func BenchmarkGoAdd(b *testing.B) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	a, c := rt.Ones(tensor.Float32, 4), rt.Ones(tensor.Float32, 4)
	b.ReportAllocs()
	for done := 0; done < b.N; done += 1000 {
		sc := rt.OpenScope()
		for i := 0; i < min(1000, b.N-done); i++ {
			a.Add(c)
		}
		sc.Close()
	}
}
