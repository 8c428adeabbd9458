package hookbuild

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/internal/testreq"
)

// magic is the start of every wasm binary module: "\0asm", version 1.
var magic = []byte("\x00asm\x01\x00\x00\x00")

func TestSamplesBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every sample hook (go, wat2wasm, clang); not with -short")
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := Sample(t, name)
			if !bytes.HasPrefix(b, magic) {
				t.Fatalf("%s: %d bytes that do not start with %q", name, len(b), magic)
			}
			b[0] = 'x' // a copy: the next caller still gets the module
			if again := Sample(t, name); !bytes.HasPrefix(again, magic) {
				t.Fatalf("%s: the second call's bytes do not start with %q", name, magic)
			}
		})
	}
}

func TestWAT(t *testing.T) {
	b := WAT(t, `(module (memory (export "memory") 1) (func (export "zeroeng_hook_abi_v1")))`)
	if !bytes.HasPrefix(b, magic) {
		t.Fatalf("got %q..., want a wasm module", b[:min(len(b), 8)])
	}
}

func TestGoSource(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build; not with -short")
	}
	b := GoSource(t, `package main

import "github.com/zeroeng/zeroeng/samples/hooks/go/hookabi"

func main() {}

//go:wasmexport on_bucket
func onBucket(b hookabi.Handle) int32 { return hookabi.Result(hookabi.AllReduce(b, hookabi.Avg)) }
`)
	if !bytes.HasPrefix(b, magic) {
		t.Fatalf("got %q..., want a wasm module", b[:min(len(b), 8)])
	}
	for _, want := range []string{"zeroeng_hook_abi_v1", "on_bucket", "all_reduce"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the module does not name %s", want)
		}
	}
}

// TestProgramSamplesBuild: every sample training program builds into a
// module that declares the program ABI; the Rust ones (sdk/rust) also
// export the callback dispatcher and import the handle-only calls of ABI
// 1.1, which their steps make, and gpt_rust makes functions of closures.
func TestProgramSamplesBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every sample training program (clang, go, rustc); not with -short")
	}
	for _, name := range ProgramSamples() {
		t.Run(name, func(t *testing.T) {
			b := SampleProgram(t, name)
			if !bytes.HasPrefix(b, magic) {
				t.Fatalf("%s: %d bytes that do not start with %q", name, len(b), magic)
			}
			want := []string{"zeroeng_program_abi_v1", "_start"}
			if strings.HasSuffix(name, "_rust") {
				want = append(want, "zeroeng_callback", "frame_args", "invoke_method", "lookup")
			}
			if name == "gpt_rust" { // its modules' forwards are Rust closures
				want = append(want, "function_new")
			}
			for _, w := range want {
				if !bytes.Contains(b, []byte(w)) {
					t.Errorf("%s does not name %s", name, w)
				}
			}
		})
	}
}

func TestRustProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rustc; not with -short")
	}
	src := `fn main() {
    let t = zeroeng::Tensor::from_f32s(&[1.0, 2.0], &[2]).and_then(|t| t.op("sum", &[]));
    println!("{:?}", t.and_then(|s| s.item()));
}
`
	b := RustProgram(t, src)
	if !bytes.HasPrefix(b, magic) {
		t.Fatalf("got %q..., want a wasm module", b[:min(len(b), 8)])
	}
	for _, want := range []string{"zeroeng_program_abi_v1", "zeroeng_callback", "tensor_from_bytes", "invoke_method"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the module does not name %s", want)
		}
	}
	b[0] = 'x' // a copy: the next caller still gets the module
	if again := RustProgram(t, src); !bytes.HasPrefix(again, magic) {
		t.Fatalf("the second call's bytes do not start with %q", magic)
	}
}

// TestRustSDKUnits runs the Rust SDK's own unit tests (its JSON parser and
// writer, JavaScript's ways of writing numbers), built for this machine by
// the rustc that builds the programs (the SDK's host functions fail there,
// saying so).
func TestRustSDKUnits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rustc; not with -short")
	}
	rustc, _, skip := Rustc()
	if skip != "" {
		testreq.Skip(t, testreq.Programs, "%s", skip)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "zeroeng-sdk-test")
	build := exec.Command(rustc, "--edition", "2021", "--test", "--crate-name", "zeroeng", "-o", bin, filepath.Join(root, "sdk", "rust", "src", "lib.rs"))
	if out, err := build.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "can't find crate for `std`") || strings.Contains(string(out), "can't find crate for `test`") {
			t.Skipf("%s has no standard library for this machine:\n%s", rustc, out)
		}
		t.Fatalf("%s: %v\n%s", strings.Join(build.Args, " "), err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "test result: ok") {
		t.Fatalf("the Rust SDK's unit tests: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}
