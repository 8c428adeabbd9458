package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestClangCompiles compiles every family to PTX with clang's CUDA front end,
// the closest thing to NVRTC on a machine without the CUDA toolkit, with
// -Wall -Wextra -Werror, and checks the entry points clang emits against
// Kernels: the same names, and parameters of the same sizes and alignments
// (which also checks the sizes of the by-value structs).
//
// clang needs testdata/clang_shim.h in front of the source for what NVRTC
// declares by itself (see the shim's comment); the math functions stay
// unresolved libdevice calls in the PTX (-nocudalib), which is enough here.
// The PTX ISA version is forced (+ptx70) because without a CUDA
// installation clang assumes one too old for the *_sync warp intrinsics.
//
// Nothing is run: the numerics are checked on a GPU against the CPU engine.
//
// Under -short (make test) clang compiles without optimizing (-O0), a
// tenth of the time: the warnings, the entry points, their parameters and
// .maxntid are the front end's and the same; whether the PTX uses local
// memory depends on the optimizer, so that check is make test-all's (-O2).
func TestClangCompiles(t *testing.T) {
	opt := "-O2"
	if testing.Short() {
		opt = "-O0"
	}
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("clang is not on PATH: the CUDA sources are not compiled by this test")
	}
	shim, err := filepath.Abs(filepath.Join("testdata", "clang_shim.h"))
	if err != nil {
		t.Fatal(err)
	}
	// Probe: a clang without the NVPTX back end or the CUDA headers cannot
	// take part; that is an environment limit, not a failure of the sources.
	dir := t.TempDir()
	probe := filepath.Join(dir, "probe.cu")
	if err := os.WriteFile(probe, []byte("extern \"C\" __global__ void probe(float* x) { x[threadIdx.x] = 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(clang, clangArgs(opt, shim, probe, filepath.Join(dir, "probe.ptx"))...).CombinedOutput(); err != nil {
		t.Skipf("clang cannot compile CUDA to PTX here (%v):\n%s", err, out)
	}

	for _, f := range Families() {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			src, err := Source(f)
			if err != nil {
				t.Fatal(err)
			}
			in := filepath.Join(dir, f+".cu")
			out := filepath.Join(dir, f+".ptx")
			if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			if msg, err := exec.Command(clang, clangArgs(opt, shim, in, out)...).CombinedOutput(); err != nil {
				t.Fatalf("clang failed: %v\n%s", err, msg)
			}
			ptx, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			entries := ptxEntries(t, string(ptx))
			maxntid := ptxMaxThreads(string(ptx))
			sigs, err := Kernels(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(sigs) {
				t.Errorf("clang emits %d entry points, Kernels lists %d", len(entries), len(sigs))
			}
			for _, s := range sigs {
				params, ok := entries[s.Name]
				if !ok {
					t.Errorf("%s: not among clang's entry points", s.Name)
					continue
				}
				if len(params) != len(s.Params) {
					t.Errorf("%s: %d parameters in the PTX, %d in Kernels", s.Name, len(params), len(s.Params))
					continue
				}
				if got := maxntid[s.Name]; got != s.MaxThreads {
					t.Errorf("%s: .maxntid %d in the PTX, MaxThreads %d in Kernels", s.Name, got, s.MaxThreads)
				}
				for i, p := range s.Params {
					if params[i] != [2]int{p.Size, p.Align} {
						t.Errorf("%s: parameter %s: PTX size/align %v, Kernels %d/%d", s.Name, p.Name, params[i], p.Size, p.Align)
					}
				}
			}
			if opt != "-O0" && strings.Contains(string(ptx), ".local") {
				// A by-value layout indexed with a variable ends up in local
				// memory: slow, and what the unrolled loops avoid.
				t.Errorf("the PTX uses local memory")
			}
		})
	}
}

func clangArgs(opt, shim, in, out string) []string {
	return []string{
		"-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80",
		"-nocudalib", "-nocudainc", "-Xclang", "-target-feature", "-Xclang", "+ptx70",
		"-std=c++17", opt, "-Wall", "-Wextra", "-Werror",
		"-include", shim, "-S", "-o", out, in,
	}
}

var (
	entryRe = regexp.MustCompile(`(?s)\.entry\s+([A-Za-z_]\w*)\s*\((.*?)\)`)
	paramRe = regexp.MustCompile(`\.param\s+(?:\.align\s+(\d+)\s+)?\.([a-z]+)(\d+)\s+[\w$]+(?:\[(\d+)\])?`)
)

var maxntidRe = regexp.MustCompile(`\.entry\s+([A-Za-z_]\w*)\s*\([^)]*\)\s*\.maxntid\s+(\d+)\s*,\s*(\d+)\s*,\s*(\d+)`)

// ptxMaxThreads maps each .entry with a .maxntid directive (what
// __launch_bounds__ becomes) to its product of dimensions.
func ptxMaxThreads(ptx string) map[string]int {
	out := make(map[string]int)
	for _, m := range maxntidRe.FindAllStringSubmatch(ptx, -1) {
		n := 1
		for _, d := range m[2:] {
			v, _ := strconv.Atoi(d)
			n *= v
		}
		out[m[1]] = n
	}
	return out
}

// ptxEntries maps each .entry of a PTX file to its parameters' sizes and
// alignments.
func ptxEntries(t *testing.T, ptx string) map[string][][2]int {
	out := make(map[string][][2]int)
	for _, m := range entryRe.FindAllStringSubmatch(ptx, -1) {
		var params [][2]int
		for _, p := range paramRe.FindAllStringSubmatch(m[2], -1) {
			bits, _ := strconv.Atoi(p[3])
			size := bits / 8
			align := size
			if p[4] != "" {
				n, _ := strconv.Atoi(p[4])
				size *= n
			}
			if p[1] != "" {
				align, _ = strconv.Atoi(p[1])
			}
			params = append(params, [2]int{size, align})
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("entry %s appears twice in the PTX", m[1])
		}
		out[m[1]] = params
	}
	return out
}
