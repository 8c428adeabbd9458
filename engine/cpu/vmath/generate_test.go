package vmath

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestGeneratedUpToDate regenerates the assembly into a temporary directory
// and compares it with the checked-in files, so that an edit to the .s
// files by hand, or to gen_asm.go without running go generate, fails.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator")
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		t.Skip("no go tool:", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(goTool, "run", "gen_asm.go", "-out", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run gen_asm.go: %v\n%s", err, out)
	}
	for _, f := range []string{"kernels_avx512_amd64.s", "kernels_avx2_amd64.s", "kernels_amd64.go"} {
		want, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date: run go generate in engine/cpu/vmath", f)
		}
	}
}
