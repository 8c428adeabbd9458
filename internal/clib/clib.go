// Package clib builds small C shared libraries for tests: the fake CUDA
// driver, NVRTC, cuBLAS and NCCL libraries that check, without a GPU, that
// the purego bindings pass their arguments the way the C functions expect.
//
// It needs a C compiler ($CC, else cc, gcc or clang); without one the test
// is skipped, saying so. The Go test binaries themselves stay CGO_ENABLED=0:
// the library is loaded at run time, as the real ones are.
package clib

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles the C file src into a shared library named name (for
// example "libcuda.so.1") in a temporary folder of tb, and returns its path.
func Build(tb testing.TB, name, src string, extraFlags ...string) string {
	tb.Helper()
	cc := compiler()
	if cc == "" {
		tb.Skip("no C compiler ($CC, cc, gcc or clang) to build the fake library " + name)
	}
	out := filepath.Join(tb.TempDir(), name)
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", out, src}, extraFlags...)
	cmd := exec.Command(cc, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building %s from %s: %v\n%s", name, src, err, b)
	}
	return out
}

func compiler() string {
	if cc := os.Getenv("CC"); cc != "" {
		if p, err := exec.LookPath(cc); err == nil {
			return p
		}
	}
	for _, cc := range []string{"cc", "gcc", "clang"} {
		if p, err := exec.LookPath(cc); err == nil {
			return p
		}
	}
	return ""
}
