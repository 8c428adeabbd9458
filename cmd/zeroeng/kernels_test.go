package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/gpu"
	"github.com/zeroeng/zeroeng/gpu/nvrtc"
	"github.com/zeroeng/zeroeng/internal/testreq"
)

func TestParseArchs(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		bad  bool
	}{
		{"sm_90", []int{90}, false},
		{"sm_90,sm_80", []int{90, 80}, false},
		{" sm_90 , 8.0,sm_90", []int{90, 80}, false},
		{"9.0", []int{90}, false},
		{"sm_100", []int{100}, false},
		{"sm90", nil, true},
		{"compute_90", nil, true},
		{"sm_", nil, true},
		{"sm_09", nil, true},
		{"9.10", nil, true},
		{"", nil, true},
		{"sm_90,", nil, true},
	}
	for _, tt := range tests {
		got, err := parseArchs(tt.in)
		if (err != nil) != tt.bad || !tt.bad && !equalInts(got, tt.want) {
			t.Errorf("parseArchs(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestKernelsBuildUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"kernels", "build", "--arch", "sm90"}, `--arch: "sm90" is not a GPU architecture`},
		{[]string{"kernels", "build", "--arch", "sm_90", "--family", "nn,convolution"}, `--family: no kernel family "convolution" (families: attention, elementwise`},
		{[]string{"kernels", "build", "--arch", "sm_90", "--jobs", "-1"}, "--jobs must be 0"},
		{[]string{"kernels", "build", "extra"}, `unexpected argument "extra"`},
		{[]string{"kernels", "compile"}, `unknown subcommand "compile" (build)`},
	}
	for _, tt := range tests {
		r := zeroeng(t, t.TempDir(), nil, tt.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%v: status %d, stderr:\n%s", tt.args, r.code, r.stderr)
		}
	}
	if gpu.Probe().DevicesErr != nil {
		r := zeroeng(t, t.TempDir(), nil, "kernels", "build")
		if r.code != 2 || !strings.Contains(r.stderr, "no GPU here") || !strings.Contains(r.stderr, "--arch sm_90") {
			t.Errorf("build without --arch on a machine without a GPU: status %d, stderr:\n%s", r.code, r.stderr)
		}
	}
	r := zeroeng(t, t.TempDir(), []string{"ZEROENG_KERNEL_CACHE=off"}, "kernels", "build", "--arch", "sm_90")
	if r.code != 1 || !strings.Contains(r.stderr, "off: ZEROENG_KERNEL_CACHE=off: there is nowhere to keep the kernels") {
		t.Errorf("build with the cache off: status %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestKernelsBuild fills a kernel cache with one family for two GPUs with
// NVIDIA's compiler (when installed: CI installs Debian's NVRTC), then
// finds it there.
func TestKernelsBuild(t *testing.T) {
	if _, err := nvrtc.Load(); err != nil {
		testreq.Skip(t, testreq.NVRTC, "no NVRTC: %v", err)
	}
	cache := filepath.Join(t.TempDir(), "kernels")
	env := []string{"ZEROENG_KERNEL_CACHE=" + cache}
	r := zeroeng(t, t.TempDir(), env, "kernels", "build", "--arch", "sm_90,sm_80", "--family", "optim", "-v")
	if r.code != 0 {
		t.Fatalf("status %d, stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"kernel cache " + cache, "sm_90  optim        sm_90      compiled in", "sm_80  optim        sm_80      compiled in",
		"4 kernels, at most", "adam_f32", "blocks ≤ 256", "1 families for sm_90, sm_80"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	files, err := os.ReadDir(cache)
	if err != nil || len(files) != 2 {
		t.Errorf("the cache holds %d files (%v), want 2", len(files), err)
	}
	r = zeroeng(t, t.TempDir(), env, "kernels", "build", "--arch", "sm_90", "--family", "optim")
	if r.code != 0 || !strings.Contains(r.stdout, "sm_90  optim        sm_90      cached") {
		t.Errorf("second build: status %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestInfoRequireGPU: without a GPU, info still prints everything and
// exits 0, unless a GPU is required.
func TestInfoRequireGPU(t *testing.T) {
	if len(gpu.Probe().Missing()) == 0 {
		t.Skip("this machine has a CUDA driver and a GPU; tools/gpucheck/run.sh runs info --smoke there")
	}
	for _, tt := range []struct {
		args []string
		env  []string
	}{
		{[]string{"info", "--require-gpu"}, nil},
		{[]string{"info", "--smoke"}, nil},
		{[]string{"info"}, []string{"ZEROENG_REQUIRE_GPU=1"}},
	} {
		r := zeroeng(t, t.TempDir(), tt.env, tt.args...)
		if r.code != 1 || !strings.Contains(r.stdout, "cuda driver:") || !strings.Contains(r.stderr, "a GPU is required") || !strings.Contains(r.stderr, "missing: ") {
			t.Errorf("%v %v: status %d, stderr:\n%s", tt.env, tt.args, r.code, r.stderr)
		}
	}
}
