package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/gpu/kernels"
	"github.com/zeroeng/zeroeng/gpu/nvrtc"
)

// modules are the kernel families a Device has loaded into its context,
// each compiled at its first launch.
type modules struct {
	mu    sync.Mutex
	mods  map[string]*cuda.Module
	funcs map[kernelKey]cuda.Function
}

// kernelKey names a kernel. Launches look kernels up by it on every call,
// so it is a struct rather than a joined string, which would allocate.
type kernelKey struct{ family, kernel string }

func (m *modules) unload() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var first error
	for name, mod := range m.mods {
		if err := mod.Unload(); err != nil && first == nil {
			first = err
		}
		delete(m.mods, name)
	}
	clear(m.funcs)
	return first
}

// launch runs kernel of family on the compute stream, loading the family's
// module first if needed.
func (d *Device) launch(family, kernel string, grid, block cuda.Dim3, shared uint32, a *cuda.Args) error {
	fn, err := d.function(family, kernel)
	if err != nil {
		return err
	}
	if err := fn.Launch(grid, block, shared, d.compute, a); err != nil {
		return fmt.Errorf("%v: %w", d, err)
	}
	return nil
}

func (d *Device) function(family, kernel string) (cuda.Function, error) {
	key := kernelKey{family, kernel}
	m := &d.mods
	m.mu.Lock()
	defer m.mu.Unlock()
	if fn, ok := m.funcs[key]; ok {
		return fn, nil
	}
	mod := m.mods[family]
	if mod == nil {
		image, err := compiled(family, d.dev, d.rtc)
		if err != nil {
			return cuda.Function{}, err
		}
		mod, err = d.ctx.LoadModule(image)
		if err != nil {
			return cuda.Function{}, fmt.Errorf("gpu: loading the %s kernels: %w", family, err)
		}
		if m.mods == nil {
			m.mods = map[string]*cuda.Module{}
			m.funcs = map[kernelKey]cuda.Function{}
		}
		m.mods[family] = mod
	}
	fn, err := mod.Function(kernel)
	if err != nil {
		return cuda.Function{}, err
	}
	m.funcs[key] = fn
	return fn, nil
}

// compileKey identifies one compiled image in this process.
type compileKey struct{ family, arch string }

// compiledImage is compiled once per process for every rank on GPUs of one
// architecture: ranks start together, and eight of them compiling the same
// source at once would cost eight times the NVRTC time.
type compiledImage struct {
	once  sync.Once
	image []byte
	err   error
}

var images sync.Map // compileKey → *compiledImage

// compiled returns family's kernels compiled for dev, from the disk cache
// when an earlier run compiled the same source for the same architecture
// with the same compiler.
func compiled(family string, dev *cuda.Device, rtc func() (*nvrtc.Lib, error)) ([]byte, error) {
	v, _ := images.LoadOrStore(compileKey{family, dev.Arch()}, &compiledImage{})
	ci := v.(*compiledImage)
	ci.once.Do(func() { ci.image, ci.err = compile(family, dev, rtc, kernels.DefaultCache()) })
	return ci.image, ci.err
}

func compile(family string, dev *cuda.Device, rtc func() (*nvrtc.Lib, error), cache kernels.Cache) ([]byte, error) {
	lib, err := rtc()
	if err != nil {
		return nil, fmt.Errorf("gpu: compiling the %s kernels: %w", family, err)
	}
	target, err := Target(lib, dev.Major*10+dev.Minor)
	if err != nil {
		return nil, err
	}
	image, _, err := compileFamily(lib, family, target, cache)
	return image, err
}

// compileFamily compiles a family for target (sm_90 or compute_90), or
// takes the image from the cache. It is the one place that makes the
// cache's key, so that `zeroeng kernels build` fills the cache with what a
// job on the GPU looks up.
func compileFamily(lib *nvrtc.Lib, family, target string, cache kernels.Cache) (image []byte, cached bool, err error) {
	src, err := kernels.Source(family)
	if err != nil {
		return nil, false, err
	}
	opts := append([]string{"--gpu-architecture=" + target}, compileOptions...)
	version := fmt.Sprintf("nvrtc %d.%d", lib.Major, lib.Minor)
	key := kernels.Key(src, target, version, opts)
	if image, ok := cache.Get(key); ok {
		return image, true, nil
	}
	out, err := lib.Compile(src, family+".cu", nil, opts)
	if err != nil {
		return nil, false, fmt.Errorf("gpu: compiling the %s kernels for %s: %w", family, target, err)
	}
	image = out.CUBIN
	if len(image) == 0 {
		image = out.PTX
	}
	// A cache that cannot be written costs the next run a compile, no more.
	_ = cache.Put(key, image)
	return image, false, nil
}

// compileOptions are NVRTC's flags besides the architecture. No fast-math:
// the kernels must match the CPU engine's float32 results within 1e-5.
var compileOptions = []string{"--std=c++17", "--device-as-default-execution-space"}

// Target picks what NVRTC compiles for a GPU of compute capability sm
// (90 for sm_90): the GPU's own architecture ("sm_90", a CUBIN the driver
// loads as is) when this NVRTC knows it, else the newest virtual
// architecture it knows below the GPU's ("compute_89", PTX the driver
// compiles for the device on load).
func Target(lib *nvrtc.Lib, sm int) (string, error) {
	archs, err := lib.SupportedArchs()
	if err != nil || len(archs) == 0 {
		// Old NVRTC without the query: ask for the device's own.
		return "sm_" + strconv.Itoa(sm), nil
	}
	if slices.Contains(archs, sm) {
		return "sm_" + strconv.Itoa(sm), nil
	}
	best := -1
	for _, a := range archs {
		if a <= sm && a > best {
			best = a
		}
	}
	if best < 0 {
		return "", fmt.Errorf("gpu: NVRTC %d.%d compiles for %s, none of them at or below the GPU's sm_%d",
			lib.Major, lib.Minor, strings.Trim(fmt.Sprint(archs), "[]"), sm)
	}
	return "compute_" + strconv.Itoa(best), nil
}
