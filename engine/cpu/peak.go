package cpu

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"

	xcpu "golang.org/x/sys/cpu"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Peak is an estimate of the CPU's peak arithmetic rate for the kernels:
// Cores × GHz × FlopsPerCycle. It is a datasheet-style upper bound, not a
// measurement: it assumes every core retires FMAUnits vector FMAs of the
// widest width the GEMM kernels use (gemm.asmKernels' choice: AVX-512,
// AVX2+FMA) every cycle at the highest frequency the CPU reports, which
// real cores do not sustain (AVX-512 lowers the clock on many parts; Zen 4
// executes 512-bit FMAs on 256-bit units at half that rate).
type Peak struct {
	Cores         int     // physical cores the kernel threads can use
	GHz           float64 // highest frequency reported (0: unknown)
	FlopsPerCycle int     // float32 FLOPs per core per cycle (an FMA is two)
	ISA           string  // "AVX-512", "AVX2+FMA", ...
	FreqSource    string  // where GHz was read
}

// Flops is the peak float32 rate (FLOP/s), 0 when the frequency is unknown.
func (p Peak) Flops() float64 { return float64(p.Cores) * p.GHz * 1e9 * float64(p.FlopsPerCycle) }

// For returns the peak rate for dt: float64 kernels run half as many lanes
// per vector; bfloat16 and float16 compute in float32 on the CPU (see
// RATIONALE.md); integer types have no estimate (0).
func (p Peak) For(dt dtype.DType) float64 {
	switch {
	case dt == dtype.Float64:
		return p.Flops() / 2
	case dt.IsFloat():
		return p.Flops()
	}
	return 0
}

// String describes the estimate: "2 cores × 2.60 GHz × 64 FLOP/cycle
// (AVX-512 FMA, /proc/cpuinfo), an estimate".
func (p Peak) String() string {
	if p.GHz == 0 {
		return fmt.Sprintf("unknown: %d cores, %s, no CPU frequency found", p.Cores, p.ISA)
	}
	return fmt.Sprintf("%d cores × %.2f GHz × %d float32 FLOP/cycle (%s, frequency from %s), an estimate",
		p.Cores, p.GHz, p.FlopsPerCycle, p.ISA, p.FreqSource)
}

// PeakFlops implements device.PeakFlopser with EstimatePeak.
func (d *Device) PeakFlops(dt dtype.DType) (float64, string) {
	p := EstimatePeak()
	return p.For(dt), p.String()
}

var (
	hostOnce  sync.Once
	hostPeak  Peak // without Cores' dependence on the thread count
	hostCores int  // physical cores of the machine
)

// EstimatePeak estimates the peak rate of this machine for the kernels'
// current thread count (parallel.Threads): the frequency from
// /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq or else the
// highest "cpu MHz" of /proc/cpuinfo, the physical cores from
// /sys/devices/system/cpu/cpu*/topology (logical CPUs when absent).
func EstimatePeak() Peak {
	hostOnce.Do(func() {
		root := os.DirFS("/")
		hostPeak.GHz, hostPeak.FreqSource = cpuGHz(root)
		cpuinfo, _ := fs.ReadFile(root, "proc/cpuinfo")
		hostPeak.ISA, hostPeak.FlopsPerCycle = isaFlops(zen4(string(cpuinfo)))
		hostCores = physicalCores(root)
	})
	p := hostPeak
	p.Cores = min(parallel.Threads(), runtime.NumCPU())
	if hostCores > 0 {
		p.Cores = min(p.Cores, hostCores)
	}
	return p
}

// isaFlops is the vector ISA the GEMM kernels use on this CPU (the same
// tests as engine/cpu/gemm's asmKernels) and the float32 FLOPs per cycle
// of a core with two FMA units of that width; zen4 says the two units are
// 256 bits wide under AVX-512 (AMD family 19h).
func isaFlops(zen4 bool) (string, int) {
	switch runtime.GOARCH {
	case "amd64":
		switch {
		case xcpu.X86.HasAVX512F && zen4:
			return "AVX-512 FMA on Zen 4, 2 units × 8 lanes", 32
		case xcpu.X86.HasAVX512F:
			return "AVX-512 FMA, 2 units × 16 lanes", 64
		case xcpu.X86.HasAVX2 && xcpu.X86.HasFMA:
			return "AVX2 FMA, 2 units × 8 lanes", 32
		}
		return "SSE, 4-lane add and multiply", 8
	case "arm64":
		return "NEON FMA, 2 units × 4 lanes", 16
	}
	return "scalar FMA", 2
}

// zen4 reports whether /proc/cpuinfo describes an AMD family 19h CPU
// (Zen 3 and Zen 4; of those only Zen 4 has AVX-512), whose 512-bit FMAs
// run on 256-bit units.
func zen4(cpuinfo string) bool {
	amd, family := false, ""
	for line := range strings.Lines(cpuinfo) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "vendor_id":
			amd = strings.TrimSpace(v) == "AuthenticAMD"
		case "cpu family":
			family = strings.TrimSpace(v)
		}
	}
	return amd && family == "25"
}

// cpuGHz reads the highest frequency the CPU reports.
func cpuGHz(root fs.FS) (float64, string) {
	if b, err := fs.ReadFile(root, "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); err == nil {
		if khz, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil && khz > 0 {
			return khz / 1e6, "cpuinfo_max_freq"
		}
	}
	if b, err := fs.ReadFile(root, "proc/cpuinfo"); err == nil {
		if mhz := maxCPUInfoMHz(string(b)); mhz > 0 {
			return mhz / 1e3, "/proc/cpuinfo"
		}
	}
	return 0, ""
}

// maxCPUInfoMHz is the highest "cpu MHz" line of /proc/cpuinfo (the
// current frequencies; virtual machines often report only these).
func maxCPUInfoMHz(s string) float64 {
	best := 0.0
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			best = max(best, x)
		}
	}
	return best
}

// physicalCores counts the distinct cores (package and core_cpus_list) in
// sysfs; 0 when it cannot tell.
func physicalCores(root fs.FS) int {
	dirs, err := fs.Glob(root, "sys/devices/system/cpu/cpu[0-9]*")
	if err != nil {
		return 0
	}
	cores := map[string]bool{}
	for _, d := range dirs {
		topo := path.Join(d, "topology")
		sib, err := fs.ReadFile(root, path.Join(topo, "core_cpus_list"))
		if err != nil {
			if sib, err = fs.ReadFile(root, path.Join(topo, "thread_siblings_list")); err != nil {
				continue
			}
		}
		pkg, _ := fs.ReadFile(root, path.Join(topo, "physical_package_id"))
		cores[strings.TrimSpace(string(pkg))+"/"+strings.TrimSpace(string(sib))] = true
	}
	return len(cores)
}
