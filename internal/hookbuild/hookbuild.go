// Package hookbuild builds WebAssembly guests for tests: comm hooks (docs/wasm-hook-abi.md)
// — the samples of samples/hooks, WAT text, and single-file Go guests that use the samples'
// SDK (samples/hooks/go/hookabi) — and training programs (docs/wasm-program-abi.md) in Go
// over the Go SDK (sdk/go), in C over the C SDK (sdk/c) and in Rust over the Rust SDK
// (sdk/rust), with the samples of samples/programs.
//
// Each module is built once per process, the first time a test asks for it, and every
// caller gets its own copy of the bytes. Go guests are built with the go command the tests
// run with, offline (GOPROXY=off, GOWORK=off, GOTOOLCHAIN=local); WAT needs wat2wasm (Debian
// package wabt), C needs clang and wasm-ld (Debian packages clang and lld; C programs also
// wasi-libc and libclang-rt-dev-wasm32) and Rust needs rustc with the wasm32-wasi standard
// library (Debian packages rustc and libstd-rust-dev-wasm32; ZEROENG_RUSTC names the rustc,
// default /usr/bin/rustc). Without them the test is skipped, saying which is missing; a
// training program's build fails instead under ZEROENG_REQUIRE_PROGRAMS=1 (internal/testreq),
// as CI, which installs them, sets it.
package hookbuild

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/internal/testreq"
)

const (
	rootModule    = "github.com/zeroeng/zeroeng"
	sdkModule     = "github.com/zeroeng/zeroeng/samples/hooks/go"
	programModule = "github.com/zeroeng/zeroeng/sdk/go"
)

// goSamples are the samples in samples/hooks/go, one main package each.
var goSamples = []string{"allreduce", "bf16", "topk", "logstats", "codec"}

// SkipGoUnderShort skips tb under -short when the sample name is built
// with Go: the first Go build for wasip1 compiles Go's runtime and
// standard library for it, about a minute of a cold build cache, which
// make test leaves to make test-all (the WAT and C samples stay).
func SkipGoUnderShort(tb testing.TB, name string) {
	tb.Helper()
	if testing.Short() && slices.Contains(goSamples, name) {
		tb.Skipf("the %s sample is built with Go for wasip1: make test-all", name)
	}
}

// Names lists the samples Sample builds: the Go ones, then "allreduce_wat"
// (samples/hooks/wat/allreduce.wat) and "codec_c" (samples/hooks/c/codec.c).
func Names() []string { return append(slices.Clone(goSamples), "allreduce_wat", "codec_c") }

// Sample returns the wasm bytes of the sample hook name (one of Names), building it on
// first use.
func Sample(tb testing.TB, name string) []byte {
	tb.Helper()
	return cached(tb, "sample:"+name, func() ([]byte, string, error) {
		root, err := repoRoot()
		if err != nil {
			return nil, "", err
		}
		hooks := filepath.Join(root, "samples", "hooks")
		switch {
		case slices.Contains(goSamples, name):
			return goBuild(filepath.Join(hooks, "go"), "./"+name, "", true)
		case name == "allreduce_wat":
			return watBuild(filepath.Join(hooks, "wat", "allreduce.wat"))
		case name == "codec_c":
			return clangBuild(filepath.Join(hooks, "c", "codec.c"))
		}
		return nil, "", fmt.Errorf("hookbuild: no sample %q (the samples are %s)", name, strings.Join(Names(), ", "))
	})
}

// ScheduleSample returns the wasm bytes of the sample step schedule
// samples/schedules/NAME.c, built as `make schedules` builds it (warnings
// are errors) on first use; a missing clang or wasm-ld skips, or fails
// under ZEROENG_REQUIRE_PROGRAMS=1, as CI, which installs them, sets it.
func ScheduleSample(tb testing.TB, name string) []byte {
	tb.Helper()
	return cachedProgram(tb, "schedule:"+name, func() ([]byte, string, error) {
		root, err := repoRoot()
		if err != nil {
			return nil, "", err
		}
		return clangBuild(filepath.Join(root, "samples", "schedules", name+".c"), "-Wall", "-Wextra", "-Werror")
	})
}

// WAT compiles WebAssembly text with wat2wasm (its default features).
func WAT(tb testing.TB, src string) []byte {
	tb.Helper()
	return cached(tb, "wat:"+hash(src), func() ([]byte, string, error) {
		dir, err := os.MkdirTemp("", "hookbuild-wat-")
		if err != nil {
			return nil, "", err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "module.wat")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			return nil, "", err
		}
		return watBuild(path)
	})
}

// GoSource builds a Go guest from the source of its one file, a main package (with
// func main() {} and //go:wasmexport functions) that may import
// github.com/zeroeng/zeroeng/samples/hooks/go/hookabi, which brings the ABI marker export.
func GoSource(tb testing.TB, src string) []byte {
	tb.Helper()
	return cached(tb, "go:"+hash(src), func() ([]byte, string, error) {
		root, err := repoRoot()
		if err != nil {
			return nil, "", err
		}
		dir, err := os.MkdirTemp("", "hookbuild-go-")
		if err != nil {
			return nil, "", err
		}
		defer os.RemoveAll(dir)
		sdk := filepath.ToSlash(filepath.Join(root, "samples", "hooks", "go"))
		mod := "module hookbuild.test/guest\n\ngo 1.26\n\nrequire " + sdkModule + " v0.0.0\n\nreplace " +
			sdkModule + " => " + strconv.Quote(sdk) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			return nil, "", err
		}
		return goBuild(dir, ".", "-mod=mod", true)
	})
}

// Program builds the Go training program at path pkg of the Go SDK's module (sdk/go:
// "./internal/testprograms/mlp") as a WASI command.
func Program(tb testing.TB, pkg string) []byte {
	tb.Helper()
	return cached(tb, "program:"+pkg, func() ([]byte, string, error) {
		root, err := repoRoot()
		if err != nil {
			return nil, "", err
		}
		return goBuild(filepath.Join(root, "sdk", "go"), pkg, "", false)
	})
}

// ProgramSource builds a Go training program from the source of its one file, a main
// package that may import github.com/zeroeng/zeroeng/sdk/go/zeroeng (which brings the
// ABI marker export) and declare //go:wasmimport functions of its own.
func ProgramSource(tb testing.TB, src string) []byte {
	tb.Helper()
	return cached(tb, "program-go:"+hash(src), func() ([]byte, string, error) {
		root, err := repoRoot()
		if err != nil {
			return nil, "", err
		}
		dir, err := os.MkdirTemp("", "hookbuild-program-")
		if err != nil {
			return nil, "", err
		}
		defer os.RemoveAll(dir)
		sdk := filepath.ToSlash(filepath.Join(root, "sdk", "go"))
		mod := "module hookbuild.test/program\n\ngo 1.26\n\nrequire " + programModule + " v0.0.0\n\nreplace " +
			programModule + " => " + strconv.Quote(sdk) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			return nil, "", err
		}
		return goBuild(dir, ".", "-mod=mod", false)
	})
}

// ProgramSamples lists the sample training programs SampleProgram builds:
// samples/programs/c/fashion_mnist.c, samples/programs/go/fashion_mnist and
// samples/programs/rust/fashion_mnist.rs (samples/fashion_mnist.js's twins, "fashion_mnist_"
// and the language), then samples/programs/rust/gpt.rs (samples/gpt.js's).
func ProgramSamples() []string {
	return []string{"fashion_mnist_c", "fashion_mnist_go", "fashion_mnist_rust", "gpt_rust"}
}

// SampleProgram returns the wasm bytes of the sample training program name (one of
// ProgramSamples), building it on first use.
func SampleProgram(tb testing.TB, name string) []byte {
	tb.Helper()
	return cachedProgram(tb, "program-sample:"+name, func() ([]byte, string, error) {
		root, err := repoRoot()
		if err != nil {
			return nil, "", err
		}
		programs := filepath.Join(root, "samples", "programs")
		switch name {
		case "fashion_mnist_c":
			return cProgramBuild(root, filepath.Join(programs, "c", "fashion_mnist.c"))
		case "fashion_mnist_go":
			return goBuild(filepath.Join(programs, "go"), "./fashion_mnist", "-mod=mod", false)
		case "fashion_mnist_rust":
			return rustProgramBuild(root, filepath.Join(programs, "rust", "fashion_mnist.rs"))
		case "gpt_rust":
			return rustProgramBuild(root, filepath.Join(programs, "rust", "gpt.rs"))
		}
		return nil, "", fmt.Errorf("hookbuild: no sample program %q (the samples are %s)", name, strings.Join(ProgramSamples(), ", "))
	})
}

// CProgram builds a C training program from the source of its one file, which includes
// "zeroeng.h" and is linked with the C SDK (sdk/c/zeroeng.c, which brings the ABI marker
// export) and WASI's libc.
func CProgram(tb testing.TB, src string) []byte {
	tb.Helper()
	return cachedProgram(tb, "program-c:"+hash(src), func() ([]byte, string, error) {
		root, err := repoRoot()
		if err != nil {
			return nil, "", err
		}
		dir, err := os.MkdirTemp("", "hookbuild-program-c-")
		if err != nil {
			return nil, "", err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "program.c")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			return nil, "", err
		}
		return cProgramBuild(root, path)
	})
}

// cProgramBuild compiles a C training program with the C SDK as a WASI reactor, warnings
// being errors: clang for wasm32-wasi with the sysroot $WASI_SYSROOT (default /usr, where
// Debian's wasi-libc puts its headers and libraries under wasm32-wasi/) and compiler-rt's
// wasm32 builtins. A missing tool or library skips, naming the Debian package.
func cProgramBuild(root, src string) ([]byte, string, error) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		return nil, "clang not found (Debian packages clang and lld)", nil
	}
	if _, err := exec.LookPath("wasm-ld"); err != nil {
		return nil, "clang cannot link wasm: wasm-ld not found (Debian package lld)", nil
	}
	sysroot := os.Getenv("WASI_SYSROOT")
	if sysroot == "" {
		sysroot = "/usr"
	}
	flags := []string{"--target=wasm32-wasi", "--sysroot=" + sysroot}
	// clang prints a library's bare name when it finds no such file.
	for _, lib := range []struct{ flag, what, pkg string }{
		{"-print-file-name=libc.a", "WASI's libc", "wasi-libc"},
		{"-print-libgcc-file-name", "compiler-rt's wasm32 builtins", "libclang-rt-dev-wasm32"},
	} {
		out, err := exec.Command(clang, append(slices.Clone(flags), lib.flag)...).Output()
		path := strings.TrimSpace(string(out))
		if err == nil && filepath.IsAbs(path) {
			_, err = os.Stat(path)
		}
		if err != nil || !filepath.IsAbs(path) {
			return nil, fmt.Sprintf("clang finds no %s for wasm32-wasi with the sysroot %s (Debian package %s)", lib.what, sysroot, lib.pkg), nil
		}
	}
	out, err := os.MkdirTemp("", "hookbuild-out-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(out)
	wasm := filepath.Join(out, "program.wasm")
	sdk := filepath.Join(root, "sdk", "c")
	// As sdk/c recommends: a reactor, whose exports (the program's
	// functions) wasm-ld does not wrap with constructors and destructors.
	args := append(flags, "-mexec-model=reactor", "-O2", "-Wall", "-Wextra", "-Werror", "-I", sdk, "-o", wasm, src,
		filepath.Join(sdk, "zeroeng.c"), filepath.Join(sdk, "zeroeng_reactor.c"))
	return run(exec.Command(clang, args...), wasm)
}

// RustProgram builds a Rust training program from the source of its one file, a binary
// crate that uses the Rust SDK as the crate zeroeng (sdk/rust, which brings the ABI marker
// export and the callback export), for wasm32-wasi.
func RustProgram(tb testing.TB, src string) []byte {
	tb.Helper()
	return cachedProgram(tb, "program-rust:"+hash(src), func() ([]byte, string, error) {
		root, err := repoRoot()
		if err != nil {
			return nil, "", err
		}
		dir, err := os.MkdirTemp("", "hookbuild-program-rust-")
		if err != nil {
			return nil, "", err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "program.rs")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			return nil, "", err
		}
		return rustProgramBuild(root, path)
	})
}

// Rustc returns the rustc that builds Rust programs ($ZEROENG_RUSTC, default
// /usr/bin/rustc: Debian's, whose sysroot has the wasm32-wasi standard library that a
// rustup toolchain earlier in PATH may lack) and the WebAssembly target its standard
// library is for (wasm32-wasip1 where installed, as rustc 1.78 on names it and 1.84 on
// only so, else wasm32-wasi); skip says why they cannot build one.
func Rustc() (rustc, target, skip string) {
	rustc = os.Getenv("ZEROENG_RUSTC")
	if rustc == "" {
		rustc = "/usr/bin/rustc"
	}
	if _, err := exec.LookPath(rustc); err != nil {
		return "", "", fmt.Sprintf("no rustc at %s (Debian package rustc; ZEROENG_RUSTC names another)", rustc)
	}
	out, err := exec.Command(rustc, "--print", "sysroot").Output()
	if err != nil {
		return "", "", fmt.Sprintf("%s --print sysroot: %v", rustc, err)
	}
	sysroot := strings.TrimSpace(string(out))
	for _, t := range []string{"wasm32-wasip1", "wasm32-wasi"} {
		if libs, _ := filepath.Glob(filepath.Join(sysroot, "lib", "rustlib", t, "lib", "libstd-*.rlib")); len(libs) > 0 {
			return rustc, t, ""
		}
	}
	return "", "", fmt.Sprintf("%s has no standard library for wasm32-wasi in %s (Debian package libstd-rust-dev-wasm32)", rustc, sysroot)
}

// The Rust SDK, built once per process as an rlib, kept as bytes (each program's build
// writes it into its own temporary directory).
var (
	rustSDKOnce sync.Once
	rustSDK     struct {
		rlib                []byte
		rustc, target, skip string
		err                 error
	}
)

// rustFlags are rustc's flags for the SDK and the programs: optimized, the functions'
// names kept for traps' stack traces, no DWARF.
func rustFlags(target string) []string {
	return []string{"--edition", "2021", "--target", target, "-O", "-C", "strip=debuginfo"}
}

func rustSDKBuild(root string) ([]byte, string, string, string, error) {
	rustSDKOnce.Do(func() {
		sdk := &rustSDK
		if sdk.rustc, sdk.target, sdk.skip = Rustc(); sdk.skip != "" {
			return
		}
		out, err := os.MkdirTemp("", "hookbuild-rust-sdk-")
		if err != nil {
			sdk.err = err
			return
		}
		defer os.RemoveAll(out)
		rlib := filepath.Join(out, "libzeroeng.rlib")
		args := append(rustFlags(sdk.target), "--crate-type", "rlib", "--crate-name", "zeroeng", "-o", rlib,
			filepath.Join(root, "sdk", "rust", "src", "lib.rs"))
		sdk.rlib, _, sdk.err = run(exec.Command(sdk.rustc, args...), rlib)
	})
	return rustSDK.rlib, rustSDK.rustc, rustSDK.target, rustSDK.skip, rustSDK.err
}

// rustProgramBuild compiles a Rust training program with the Rust SDK for WebAssembly with
// WASI. A missing rustc or wasm32 standard library skips, naming the Debian package.
func rustProgramBuild(root, src string) ([]byte, string, error) {
	rlib, rustc, target, skip, err := rustSDKBuild(root)
	if skip != "" || err != nil {
		return nil, skip, err
	}
	out, err := os.MkdirTemp("", "hookbuild-out-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(out)
	lib := filepath.Join(out, "libzeroeng.rlib")
	if err := os.WriteFile(lib, rlib, 0o644); err != nil {
		return nil, "", err
	}
	wasm := filepath.Join(out, "program.wasm")
	args := append(rustFlags(target), "--extern", "zeroeng="+lib, "-o", wasm, src)
	return run(exec.Command(rustc, args...), wasm)
}

// build is the outcome of one build, shared by every caller.
type build struct {
	once sync.Once
	wasm []byte
	skip string // why the tools are missing
	err  error
}

var (
	mu     sync.Mutex
	builds = map[string]*build{}
)

// cached runs f once per key and process, and turns its outcome into the caller's bytes,
// skip or failure.
func cached(tb testing.TB, key string, f func() (wasm []byte, skip string, err error)) []byte {
	tb.Helper()
	return cachedNeed(tb, "", key, f)
}

// cachedProgram is cached for a training program: a missing toolchain fails the test
// under ZEROENG_REQUIRE_PROGRAMS=1.
func cachedProgram(tb testing.TB, key string, f func() (wasm []byte, skip string, err error)) []byte {
	tb.Helper()
	return cachedNeed(tb, testreq.Programs, key, f)
}

func cachedNeed(tb testing.TB, need testreq.Need, key string, f func() (wasm []byte, skip string, err error)) []byte {
	tb.Helper()
	mu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.wasm, b.skip, b.err = f() })
	if b.skip != "" {
		if need != "" {
			testreq.Skip(tb, need, "%s", b.skip)
		}
		tb.Skip(b.skip)
	}
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return slices.Clone(b.wasm)
}

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// goBuild builds package pkg of the module in dir for wasip1/wasm, as a reactor (a hook)
// or a command (a program).
func goBuild(dir, pkg, goflags string, reactor bool) ([]byte, string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goCmd); err != nil {
			return nil, "go command not found (neither in PATH nor in GOROOT/bin)", nil
		}
	}
	out, err := os.MkdirTemp("", "hookbuild-out-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(out)
	wasm := filepath.Join(out, "hook.wasm")
	args := []string{"build", "-o", wasm, pkg}
	if reactor {
		args = []string{"build", "-buildmode=c-shared", "-o", wasm, pkg}
	}
	cmd := exec.Command(goCmd, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWORK=off",
		"GOPROXY=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false "+goflags)
	return run(cmd, wasm)
}

func watBuild(src string) ([]byte, string, error) {
	tool, err := exec.LookPath("wat2wasm")
	if err != nil {
		return nil, "wat2wasm not found (Debian package wabt)", nil
	}
	out, err := os.MkdirTemp("", "hookbuild-out-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(out)
	wasm := filepath.Join(out, "hook.wasm")
	// --debug-names keeps the functions' names, which traps report.
	return run(exec.Command(tool, "--debug-names", src, "-o", wasm), wasm)
}

func clangBuild(src string, flags ...string) ([]byte, string, error) {
	tool, err := exec.LookPath("clang")
	if err != nil {
		return nil, "clang not found (Debian packages clang and lld)", nil
	}
	out, err := os.MkdirTemp("", "hookbuild-out-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(out)
	wasm := filepath.Join(out, "hook.wasm")
	args := append([]string{"--target=wasm32", "-nostdlib", "-O2", "-Wl,--no-entry"}, flags...)
	b, skip, err := run(exec.Command(tool, append(args, "-o", wasm, src)...), wasm)
	if err != nil {
		if _, lerr := exec.LookPath("wasm-ld"); lerr != nil {
			return nil, "clang cannot link wasm: wasm-ld not found (Debian package lld)", nil
		}
	}
	return b, skip, err
}

// run runs cmd and returns the file it wrote at wasm.
func run(cmd *exec.Cmd, wasm string) ([]byte, string, error) {
	var output bytes.Buffer
	cmd.Stdout = &output
	cmd.Stderr = &output
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("hookbuild: %s (in %s): %v\n%s", strings.Join(cmd.Args, " "), cmd.Dir, err, output.Bytes())
	}
	b, err := os.ReadFile(wasm)
	return b, "", err
}

var (
	rootOnce sync.Once
	root     string
	rootErr  error
)

// repoRoot is the directory of the root module's go.mod, found from this source file's
// directory or, when that is not known (-trimpath), from the working directory.
func repoRoot() (string, error) {
	rootOnce.Do(func() {
		var starts []string
		if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
			starts = append(starts, filepath.Dir(file))
		}
		if wd, err := os.Getwd(); err == nil {
			starts = append(starts, wd)
		}
		for _, dir := range starts {
			for {
				if modulePath(filepath.Join(dir, "go.mod")) == rootModule {
					root = dir
					return
				}
				parent := filepath.Dir(dir)
				if parent == dir {
					break
				}
				dir = parent
			}
		}
		rootErr = errors.New("hookbuild: no go.mod of module " + rootModule + " above " + strings.Join(starts, " or "))
	})
	return root, rootErr
}

// modulePath is the module path a go.mod declares ("" if it cannot be read).
func modulePath(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "//")
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			if u, err := strconv.Unquote(f[1]); err == nil {
				return u
			}
			return f[1]
		}
	}
	return ""
}
