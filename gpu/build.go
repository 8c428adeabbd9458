package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/zeroeng/zeroeng/gpu/cubin"
	"github.com/zeroeng/zeroeng/gpu/kernels"
	"github.com/zeroeng/zeroeng/gpu/nvrtc"
)

// Build is one kernel family compiled for one GPU architecture by
// BuildKernels.
type Build struct {
	Family string
	SM     int    // the GPU architecture asked for: 90 for sm_90
	Target string // what NVRTC compiled for: "sm_90", or "compute_89" (PTX) when it does not know the GPU's
	Cached bool   // the image was in the cache already
	Took   time.Duration
	// Kernels is what the compiler recorded of each kernel (registers,
	// launch bounds, stack frame); nil for a PTX image, which the driver
	// compiles on the GPU.
	Kernels []cubin.Kernel
	// Problems are kernels that would fail to launch: registers that do
	// not fit the blocks of their launch bounds, or an image that does not
	// match the source's kernel table.
	Problems []string
	Err      error
}

// BuildKernels compiles the kernel families (every family when families
// is empty) for each GPU architecture in sms (90 for sm_90) into cache, as
// a job's first launches on such a GPU would, parallel compilations at a
// time (NVRTC compiles distinct programs concurrently). A filled cache
// spares every rank of a job its compilation at its first step. Each
// CUBIN is checked against the kernels' launch bounds (see checkImage).
func BuildKernels(lib *nvrtc.Lib, sms []int, families []string, cache kernels.Cache, parallel int) []Build {
	if len(families) == 0 {
		families = kernels.Families()
	}
	if parallel < 1 {
		parallel = runtime.NumCPU()
	}
	builds := make([]Build, 0, len(sms)*len(families))
	for _, sm := range sms {
		for _, f := range families {
			builds = append(builds, Build{Family: f, SM: sm})
		}
	}
	jobs := make(chan *Build)
	var wg sync.WaitGroup
	for range min(parallel, len(builds)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range jobs {
				b.build(lib, cache)
			}
		}()
	}
	for i := range builds {
		jobs <- &builds[i]
	}
	close(jobs)
	wg.Wait()
	return builds
}

func (b *Build) build(lib *nvrtc.Lib, cache kernels.Cache) {
	start := time.Now()
	defer func() { b.Took = time.Since(start) }()
	if b.Target, b.Err = Target(lib, b.SM); b.Err != nil {
		return
	}
	var image []byte
	if image, b.Cached, b.Err = compileFamily(lib, b.Family, b.Target, cache); b.Err != nil {
		return
	}
	b.Kernels, b.Problems, b.Err = checkImage(b.Family, image)
}

// checkImage reads the registers and launch bounds the compiler recorded
// in a family's CUBIN and holds them to the source's kernel table: every
// kernel is in the image, compiled for the bound the host launches it
// with (Signature.MaxThreads), and its registers fit a block of that many
// threads in the register file; otherwise its launches would fail with
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES. A PTX image (no CUBIN) has nothing
// to check.
func checkImage(family string, image []byte) ([]cubin.Kernel, []string, error) {
	im, err := cubin.Parse(image)
	if errors.Is(err, cubin.ErrNotCUBIN) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("gpu: the %s kernels: %w", family, err)
	}
	sigs, err := kernels.Kernels(family)
	if err != nil {
		return nil, nil, err
	}
	var problems []string
	for _, s := range sigs {
		k, ok := im.Kernel(s.Name)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: not in the compiled image", s.Name))
			continue
		}
		if k.MaxThreads != s.MaxThreads {
			problems = append(problems, fmt.Sprintf("%s: compiled for blocks of %d threads, the source declares %d", s.Name, k.MaxThreads, s.MaxThreads))
		}
		threads := s.MaxThreads
		if threads == 0 {
			threads = 1024
		}
		if need := k.RegistersPerBlock(threads); need > cubin.RegisterFile {
			problems = append(problems, fmt.Sprintf("%s: %d registers a thread, %d for a block of %d threads: over the register file's %d",
				s.Name, k.Registers, need, threads, cubin.RegisterFile))
		}
	}
	return im.Kernels, problems, nil
}
