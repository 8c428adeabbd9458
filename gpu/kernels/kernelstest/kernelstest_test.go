package kernelstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/gpu/kernels"
)

// TestHostSourceCompiles checks that every family, with its trampolines,
// compiles as host C++ (syntax and types only; Build does the full
// compile), so that the emulation keeps working as the kernels change.
func TestHostSourceCompiles(t *testing.T) {
	cxx := Compiler()
	if cxx == "" {
		t.Skip("no C++ compiler ($CXX, c++, g++ or clang++)")
	}
	dir := t.TempDir()
	for _, f := range kernels.Families() {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			src, err := HostSource(f)
			if err != nil {
				t.Fatal(err)
			}
			sigs, _ := kernels.Kernels(f)
			for _, s := range sigs {
				if !strings.Contains(src, "void zeemu_"+s.Name+"(void** p)") {
					t.Errorf("no trampoline for %s", s.Name)
				}
			}
			cc := filepath.Join(dir, f+".cc")
			if err := os.WriteFile(cc, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"-std=c++17", "-ffp-contract=off", "-fsyntax-only", "-w", cc}
			if msg, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, msg)
			}
		})
	}
}
