package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// TestRunAndCheckProgram: zeroeng run takes a WebAssembly training program
// where it takes a script, with the same flags and the program's
// arguments after --; zeroeng check validates one against the program
// ABI, and says what is wrong with a module that is not one (a comm hook).
func TestRunAndCheckProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program for wasip1: make test-all")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "mlp.wasm")
	if err := os.WriteFile(prog, hookbuild.Program(t, "./internal/testprograms/mlp"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := zeroeng(t, dir, nil, "run", "--quiet", "--nproc", "2", "--wasm-memory-mb", "256", "mlp.wasm")
	if r.code != 0 || strings.Count(r.stdout, "loss") != 10 || !strings.Contains(r.stdout, "[1] loss 4 ") {
		t.Fatalf("run: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = zeroeng(t, dir, nil, "check", "mlp.wasm")
	if r.code != 0 || !strings.Contains(r.stdout, "zeroeng program ABI v1") || !strings.Contains(r.stdout, "zeroeng.call ") || !strings.HasSuffix(strings.TrimSpace(r.stdout), "ok") {
		t.Fatalf("check: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	hook := filepath.Join(dir, "hook.wasm")
	if err := os.WriteFile(hook, hookbuild.Sample(t, "allreduce"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = zeroeng(t, dir, nil, "check", "hook.wasm")
	if r.code != 1 || !strings.Contains(r.stderr, "no ABI marker: a zeroeng training program exports a function named zeroeng_program_abi_v1") || !strings.Contains(r.stderr, "no _start export") {
		t.Fatalf("check of a hook: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = zeroeng(t, dir, nil, "run", "--wasm-memory-mb", "0", "mlp.wasm")
	if r.code != 2 || !strings.Contains(r.stderr, "--wasm-memory-mb") {
		t.Fatalf("a bad limit: status %d\n%s", r.code, r.stderr)
	}
}
