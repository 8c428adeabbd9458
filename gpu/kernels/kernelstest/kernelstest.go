// Package kernelstest runs the kernels of gpu/kernels on the host, for tests
// on machines without a GPU. It compiles each family as host C++ with
// prelude.h (CUDA's builtins emulated: a block at a time, CUDA threads as
// fibers) and runtime.cc (the scheduler) into a shared library exporting,
// for each kernel K, a trampoline zeemu_K(void** params) taking the
// driver's parameter array, and zeemu_launch(trampoline, dims, params),
// dims being {grid x, y, z, block x, y, z, shared bytes}.
//
// A fake CUDA driver whose "device" memory is host memory can then run the
// kernels for real: on cuModuleLoadData it opens <dir>/<family>.so (the
// family is named by the source's second #line directive) and on
// cuLaunchKernel it calls zeemu_launch with the function's trampoline.
// Through such a driver the gpu package runs the engine's conformance suite
// (engine/device/devicetest) against the CPU engine. The emulation checks
// what kernels compute, not how fast, and running blocks one at a time in a
// fixed order cannot reveal races.
//
// It is a test helper: nothing outside tests imports it.
package kernelstest

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/gpu/kernels"
)

//go:embed prelude.h
var prelude string

//go:embed runtime.cc
var runtime string

// HostSource returns a family's translation unit for the host: prelude.h,
// the family's Source, and one trampoline per kernel.
func HostSource(family string) (string, error) {
	src, err := kernels.Source(family)
	if err != nil {
		return "", err
	}
	sigs, err := kernels.Kernels(family)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(prelude)
	b.WriteString("\n")
	b.WriteString(src)
	b.WriteString("\n#line 1 \"trampolines\"\n")
	for _, s := range sigs {
		fmt.Fprintf(&b, "extern \"C\" void zeemu_%s(void** p) { %s(", s.Name, s.Name)
		for i, p := range s.Params {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*(" + p.Type + "*)p[" + strconv.Itoa(i) + "]")
		}
		b.WriteString("); }\n")
	}
	return b.String(), nil
}

// Compiler returns the host C++ compiler ($CXX, else c++, g++ or clang++),
// or "" when there is none.
func Compiler() string {
	if cxx := os.Getenv("CXX"); cxx != "" {
		if p, err := exec.LookPath(cxx); err == nil {
			return p
		}
	}
	for _, c := range []string{"c++", "g++", "clang++"} {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	return ""
}

// Flags are the compiler flags of the host build: no contraction of a·b+c
// into fused multiply-adds (NVRTC contracts, but the kernels round
// explicitly wherever it matters), and no strict aliasing (the emulated
// bit casts use memcpy, the kernels' loads and stores do not).
var Flags = []string{"-std=c++17", "-O1", "-ffp-contract=off", "-fno-strict-aliasing", "-w", "-shared", "-fPIC"}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Build compiles every family for the host, once per test binary, and
// returns the directory holding <family>.so. The libraries are kept in the
// user's cache folder under a hash of their sources and compiler, so that
// later runs reuse them. It skips the test when there is no C++ compiler.
func Build(tb testing.TB) string {
	tb.Helper()
	cxx := Compiler()
	if cxx == "" {
		tb.Skip("no C++ compiler ($CXX, c++, g++ or clang++) to build the kernels for the host")
	}
	buildOnce.Do(func() { buildDir, buildErr = build(cxx) })
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return buildDir
}

func build(cxx string) (string, error) {
	families := kernels.Families()
	srcs := make([]string, len(families))
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", cxx, strings.Join(Flags, " "), runtime)
	for i, f := range families {
		s, err := HostSource(f)
		if err != nil {
			return "", err
		}
		srcs[i] = s
		fmt.Fprintf(h, "%s\x00%s\x00", f, s)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "zeroeng", "kernelstest", sum)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	rt := filepath.Join(work, "runtime.cc")
	if err := os.WriteFile(rt, []byte(runtime), 0o644); err != nil {
		return "", err
	}
	errs := make([]error, len(families))
	var wg sync.WaitGroup
	for i, f := range families {
		lib := filepath.Join(dir, f+".so")
		if st, err := os.Stat(lib); err == nil && st.Mode().IsRegular() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc := filepath.Join(work, f+".cc")
			if errs[i] = os.WriteFile(cc, []byte(srcs[i]), 0o644); errs[i] != nil {
				return
			}
			out := filepath.Join(work, f+".so")
			args := append(append([]string(nil), Flags...), "-o", out, cc, rt)
			if msg, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("kernelstest: building %s for the host: %v\n%s", f, err, msg)
				return
			}
			// Renamed into place, so that a test binary running beside
			// this one never opens a half-written library.
			errs[i] = os.Rename(out, lib)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return "", err
		}
	}
	return dir, nil
}
