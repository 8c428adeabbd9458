//go:build darwin || freebsd || linux || netbsd

package cblas

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/cpu"
)

// openBLASThreadTimeout is the OPENBLAS_THREAD_TIMEOUT set while a library
// is loaded, unless the user set one: OpenBLAS's idle workers then spin for
// 2^16 TSC cycles (about 30 µs) after a call before sleeping, instead of
// the default 2^28 (about 0.1 s). With the default, each call into OpenBLAS
// left its worker burning a core for 90–120 ms of CPU time (measured with
// 2 threads), a core taken from the Go kernels that run between the
// products; 30 µs still covers back-to-back calls.
const openBLASThreadTimeout = "16"

func open(path string) (*Lib, error) {
	// OpenBLAS reads the variable once, when the library is loaded. Other
	// libraries ignore it. It is removed again so that child processes do
	// not inherit it.
	timeoutSet := false
	if _, set := os.LookupEnv("OPENBLAS_THREAD_TIMEOUT"); !set {
		os.Setenv("OPENBLAS_THREAD_TIMEOUT", openBLASThreadTimeout)
		defer os.Unsetenv("OPENBLAS_THREAD_TIMEOUT")
		timeoutSet = true
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, err
	}
	l := &Lib{Path: path, handle: h}
	// dlsym on a handle also searches the library's dependencies, so
	// Debian's libblas.so.3, a thin layer over libopenblas.so.0, still
	// reports OpenBLAS's own symbols.
	sg, err1 := purego.Dlsym(h, "cblas_sgemm")
	dg, err2 := purego.Dlsym(h, "cblas_dgemm")
	if err1 != nil || err2 != nil {
		purego.Dlclose(h)
		return nil, errors.New("does not export cblas_sgemm and cblas_dgemm")
	}
	purego.RegisterFunc(&l.sgemm, sg)
	purego.RegisterFunc(&l.dgemm, dg)
	l.identify()
	if timeoutSet && l.Flavour == OpenBLAS {
		l.Note = "idle workers sleep after 2^" + openBLASThreadTimeout + " cycles (OPENBLAS_THREAD_TIMEOUT=" + openBLASThreadTimeout + ")"
	}
	return l, nil
}

// optimised reports whether the library is a known optimised BLAS
// (OpenBLAS, MKL, BLIS, ATLAS) rather than, likely, the reference one.
func (l *Lib) optimised() bool { return l.Flavour != Generic || l.sym("ATL_buildinfo") != 0 }

// release unloads a library that will not be used.
func (l *Lib) release() { purego.Dlclose(l.handle) }

// sym returns the address of name in the library or its dependencies, or
// 0 when neither exports it.
func (l *Lib) sym(name string) uintptr {
	p, err := purego.Dlsym(l.handle, name)
	if err != nil {
		return 0
	}
	return p
}

// identify works out the flavour from the exported symbols, binds the
// thread control and reads the version.
func (l *Lib) identify() {
	l.Flavour = Generic
	switch {
	case l.sym("openblas_get_config") != 0:
		l.Flavour = OpenBLAS
		var config, core func() string
		purego.RegisterFunc(&config, l.sym("openblas_get_config"))
		l.Config = strings.TrimSpace(config())
		if p := l.sym("openblas_get_corename"); p != 0 {
			purego.RegisterFunc(&core, p)
			l.Config += " core=" + core()
		}
		if p := l.sym("openblas_set_num_threads"); p != 0 {
			var set func(int32)
			purego.RegisterFunc(&set, p)
			l.setThreads = func(n int) { set(int32(n)) }
		}
		if p := l.sym("openblas_get_num_threads"); p != 0 {
			var get func() int32
			purego.RegisterFunc(&get, p)
			l.getThreads = func() int { return int(get()) }
		}
	case l.sym("MKL_Set_Num_Threads") != 0:
		l.Flavour = MKL
		if p := l.sym("MKL_Get_Version_String"); p != 0 {
			var version func(buf *byte, n int32)
			purego.RegisterFunc(&version, p)
			buf := make([]byte, 256)
			version(&buf[0], int32(len(buf)))
			l.Config = cString(buf)
		}
		var set func(int32)
		purego.RegisterFunc(&set, l.sym("MKL_Set_Num_Threads"))
		l.setThreads = func(n int) { set(int32(n)) }
		if p := l.sym("MKL_Get_Max_Threads"); p != 0 {
			var get func() int32
			purego.RegisterFunc(&get, p)
			l.getThreads = func() int { return int(get()) }
		}
	case l.sym("bli_thread_set_num_threads") != 0:
		l.Flavour = BLIS
		if p := l.sym("bli_info_get_version_str"); p != 0 {
			var version func() string
			purego.RegisterFunc(&version, p)
			l.Config = "BLIS " + version()
		}
		// dim_t is a 64-bit integer in BLIS's default (LP64) builds.
		var set func(int64)
		purego.RegisterFunc(&set, l.sym("bli_thread_set_num_threads"))
		l.setThreads = func(n int) { set(int64(n)) }
		if p := l.sym("bli_thread_get_num_threads"); p != 0 {
			var get func() int64
			purego.RegisterFunc(&get, p)
			l.getThreads = func() int { return int(get()) }
		}
	}
}

// fixOpenBLASCore works around DYNAMIC_ARCH builds of OpenBLAS that do not
// recognise the CPU. OpenBLAS 0.3.21 (Debian 12) falls back to its Prescott
// (SSE3) kernels on CPUs newer than it knows, such as this project's
// Sapphire/Emerald Rapids development machine, running sgemm at a fifth of
// the speed of its SkylakeX (AVX-512) kernels. The kernel is chosen when
// the library is loaded, from OPENBLAS_CORETYPE if set; so when the user has
// not set it and the library chose an SSE-only kernel on a CPU with AVX2 or
// AVX-512, the library is closed and opened again with OPENBLAS_CORETYPE
// naming the best kernel family the CPU supports. It returns the reloaded
// library, or nil to keep l as it is.
func (l *Lib) fixOpenBLASCore() *Lib {
	if l.Flavour != OpenBLAS || runtime.GOARCH != "amd64" || !strings.Contains(l.Config, "DYNAMIC_ARCH") {
		return nil
	}
	if _, set := os.LookupEnv("OPENBLAS_CORETYPE"); set {
		return nil
	}
	core := l.Config[strings.LastIndex(l.Config, "core=")+len("core="):]
	switch strings.ToLower(core) {
	case "prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "katmai", "coppermine", "northwood", "banias":
	default:
		return nil // a kernel with AVX or better: OpenBLAS knew the CPU
	}
	want := ""
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512CD && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL:
		want = "SkylakeX"
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		want = "Haswell"
	default:
		return nil
	}
	// The variable must be in the C environment when the library's
	// constructor runs: with purego's runtime support os.Setenv also sets
	// it there. It is removed again so that child processes do not inherit
	// it.
	os.Setenv("OPENBLAS_CORETYPE", want)
	defer os.Unsetenv("OPENBLAS_CORETYPE")
	if err := purego.Dlclose(l.handle); err != nil {
		return nil
	}
	re, err := open(l.Path)
	if err != nil {
		// Could not reopen what opened a moment ago: keep nothing rather
		// than a closed handle.
		panic(fmt.Sprintf("cblas: reopening %s with OPENBLAS_CORETYPE=%s: %v", l.Path, want, err))
	}
	note := fmt.Sprintf("OpenBLAS did not recognise this CPU (chose %s); reloaded with OPENBLAS_CORETYPE=%s", core, want)
	if strings.HasSuffix(re.Config, "core="+core) {
		note = fmt.Sprintf("OpenBLAS chose its %s kernels for this CPU; reloading with OPENBLAS_CORETYPE=%s had no effect (library not unloaded)", core, want)
	}
	if re.Note != "" {
		note += "; " + re.Note
	}
	re.Note = note
	return re
}
