package gpu

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/gpu/cubin"
	"github.com/zeroeng/zeroeng/gpu/kernels"
	"github.com/zeroeng/zeroeng/gpu/nvrtc"
	"github.com/zeroeng/zeroeng/internal/testreq"
)

// TestBuildKernelsNVRTC compiles every kernel family with NVIDIA's real
// compiler, when one is installed (Debian's libnvrtc11.2 in CI, where
// ZEROENG_REQUIRE_NVRTC=1 makes its absence a failure), for the GPUs
// zeroeng targets first, and holds each kernel's registers to its launch
// bounds: a kernel whose registers do not fit a block of the threads it is
// launched with fails on the GPU with LAUNCH_OUT_OF_RESOURCES. A second
// build finds every image in the cache.
func TestBuildKernelsNVRTC(t *testing.T) {
	if testing.Short() {
		t.Skip("compiling every kernel with NVRTC (20 s a GPU architecture) runs with make test-all")
	}
	lib, err := nvrtc.Load()
	if err != nil {
		testreq.Skip(t, testreq.NVRTC, "no NVRTC: %v", err)
	}
	sms := []int{90, 80}
	cache := kernels.Cache{Dir: t.TempDir()}
	builds := BuildKernels(lib, sms, nil, cache, 0)
	if want := len(sms) * len(kernels.Families()); len(builds) != want {
		t.Fatalf("%d builds, want %d", len(builds), want)
	}
	for _, b := range builds {
		if b.Err != nil {
			t.Errorf("%s for sm_%d: %v", b.Family, b.SM, b.Err)
			continue
		}
		if b.Cached {
			t.Errorf("%s for sm_%d: found in an empty cache", b.Family, b.SM)
		}
		for _, p := range b.Problems {
			t.Errorf("%s for %s: %s", b.Family, b.Target, p)
		}
		if !strings.HasPrefix(b.Target, "sm_") {
			continue // PTX: NVRTC does not know this GPU; nothing to check here
		}
		sigs, err := kernels.Kernels(b.Family)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Kernels) != len(sigs) {
			t.Errorf("%s for %s: %d kernels in the image, %d in the source", b.Family, b.Target, len(b.Kernels), len(sigs))
		}
		most, frames := cubin.Kernel{}, 0
		for _, k := range b.Kernels {
			if k.Registers > most.Registers {
				most = k
			}
			if k.FrameBytes > 0 {
				frames++
			}
		}
		t.Logf("%s for %s: %d kernels in %v, at most %d registers (%s), %d with a stack frame",
			b.Family, b.Target, len(b.Kernels), b.Took.Round(1e6), most.Registers, most.Name, frames)
	}
	if t.Failed() {
		return
	}
	for _, b := range BuildKernels(lib, sms, []string{"optim"}, cache, 1) {
		if b.Err != nil || !b.Cached {
			t.Errorf("second build of %s for sm_%d: cached %v, %v", b.Family, b.SM, b.Cached, b.Err)
		}
	}
}

// TestCheckImage holds checkImage to its findings on CUBINs compiled by
// NVRTC 11.8 (gpu/cubin's fixtures): a kernel of another family is
// missing from them, and PTX is not checked.
func TestCheckImage(t *testing.T) {
	ks, problems, err := checkImage("optim", []byte(".version 7.8\n.target sm_90\n"))
	if ks != nil || problems != nil || err != nil {
		t.Errorf("PTX: %v, %v, %v", ks, problems, err)
	}
	if _, _, err := checkImage("optim", []byte("\x7fELF\x02\x01\x01\x33 cut short")); err == nil {
		t.Error("a damaged CUBIN passed")
	}
}
