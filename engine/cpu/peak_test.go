package cpu

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

func TestCPUFrequency(t *testing.T) {
	cpuinfo := "processor\t: 0\ncpu MHz\t\t: 2596.122\nflags\t: fpu\n\nprocessor\t: 1\ncpu MHz\t\t: 3100.5\n"
	for _, c := range []struct {
		name   string
		files  fstest.MapFS
		ghz    float64
		source string
	}{
		{"cpufreq wins", fstest.MapFS{
			"sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": {Data: []byte("3500000\n")},
			"proc/cpuinfo": {Data: []byte(cpuinfo)}}, 3.5, "cpuinfo_max_freq"},
		{"the highest cpu MHz", fstest.MapFS{"proc/cpuinfo": {Data: []byte(cpuinfo)}}, 3.1005, "/proc/cpuinfo"},
		{"unreadable cpufreq", fstest.MapFS{
			"sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": {Data: []byte("n/a")},
			"proc/cpuinfo": {Data: []byte(cpuinfo)}}, 3.1005, "/proc/cpuinfo"},
		{"nothing", fstest.MapFS{"proc/cpuinfo": {Data: []byte("processor : 0\n")}}, 0, ""},
	} {
		ghz, source := cpuGHz(c.files)
		if ghz != c.ghz || source != c.source {
			t.Errorf("%s: %v GHz from %q, want %v from %q", c.name, ghz, source, c.ghz, c.source)
		}
	}
}

func TestPhysicalCores(t *testing.T) {
	topo := func(fs fstest.MapFS, cpu, pkg, siblings string) {
		fs["sys/devices/system/cpu/cpu"+cpu+"/topology/physical_package_id"] = &fstest.MapFile{Data: []byte(pkg + "\n")}
		fs["sys/devices/system/cpu/cpu"+cpu+"/topology/core_cpus_list"] = &fstest.MapFile{Data: []byte(siblings + "\n")}
	}
	smt := fstest.MapFS{}
	topo(smt, "0", "0", "0,2")
	topo(smt, "1", "0", "1,3")
	topo(smt, "2", "0", "0,2")
	topo(smt, "3", "0", "1,3")
	smt["sys/devices/system/cpu/cpufreq/policy0"] = &fstest.MapFile{Data: []byte("x")} // not a cpuN folder
	twoSockets := fstest.MapFS{}
	topo(twoSockets, "0", "0", "0")
	topo(twoSockets, "1", "1", "0")
	old := fstest.MapFS{ // kernels before 5.x: thread_siblings_list only
		"sys/devices/system/cpu/cpu0/topology/thread_siblings_list": {Data: []byte("0-1")},
		"sys/devices/system/cpu/cpu1/topology/thread_siblings_list": {Data: []byte("0-1")},
	}
	for _, c := range []struct {
		name string
		fs   fstest.MapFS
		want int
	}{{"two-way SMT", smt, 2}, {"core ids repeat across sockets", twoSockets, 2}, {"thread_siblings_list", old, 1}, {"no sysfs", fstest.MapFS{}, 0}} {
		if got := physicalCores(c.fs); got != c.want {
			t.Errorf("%s: %d cores, want %d", c.name, got, c.want)
		}
	}
}

func TestPeakEstimate(t *testing.T) {
	p := Peak{Cores: 4, GHz: 2.5, FlopsPerCycle: 64, ISA: "AVX-512 FMA, 2 units × 16 lanes", FreqSource: "/proc/cpuinfo"}
	for dt, want := range map[dtype.DType]float64{dtype.Float32: 640e9, dtype.BFloat16: 640e9, dtype.Float16: 640e9, dtype.Float64: 320e9, dtype.Int64: 0} {
		if got := p.For(dt); got != want {
			t.Errorf("%v: %v FLOP/s, want %v", dt, got, want)
		}
	}
	if s := p.String(); !strings.Contains(s, "4 cores × 2.50 GHz × 64 float32 FLOP/cycle") || !strings.Contains(s, "estimate") {
		t.Errorf("String() = %q", s)
	}
	if p := (Peak{Cores: 4, FlopsPerCycle: 32}); p.Flops() != 0 || !strings.HasPrefix(p.String(), "unknown") {
		t.Errorf("no frequency: %v FLOP/s, %q", p.Flops(), p.String())
	}
	// This machine: whatever it reports, the estimate is consistent.
	host := EstimatePeak()
	if host.Cores < 1 || host.FlopsPerCycle < 2 {
		t.Errorf("EstimatePeak() = %+v", host)
	}
	if flops, note := New(Options{}).PeakFlops(dtype.Float32); flops != host.Flops() || note != host.String() {
		t.Errorf("Device.PeakFlops = %v, %q; EstimatePeak %v", flops, note, host)
	}
	t.Logf("this machine: %s = %.1f GFLOP/s float32", host, host.Flops()/1e9)
}

func TestZen4(t *testing.T) {
	for _, c := range []struct {
		cpuinfo string
		want    bool
	}{
		{"vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n", true},
		{"vendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n", false}, // Zen 5: 512-bit units
		{"vendor_id\t: GenuineIntel\ncpu family\t: 6\n", false},
		{"", false},
	} {
		if got := zen4(c.cpuinfo); got != c.want {
			t.Errorf("zen4(%q) = %v", c.cpuinfo, got)
		}
	}
}
