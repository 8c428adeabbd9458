// Package libs owns the discovery and loading of NVIDIA's shared libraries
// (the CUDA driver, NVRTC, cuBLAS/cuBLASLt, NCCL) at run time, with purego:
// the zeroeng binary is built without cgo and without the CUDA toolkit, and
// finds the libraries on the machine it runs on.
//
// # Search order
//
// For each library (a Spec), Open tries, in order, and takes the first
// candidate that loads and exports Spec.Symbol:
//
//  1. the directories and files listed in ZEROENG_CUDA_LIBS (separated by
//     ':'), the explicit choice;
//  2. the dynamic loader's default search (LD_LIBRARY_PATH, the ld.so
//     cache, the system directories), by soname;
//  3. $CUDA_HOME and $CUDA_PATH (their lib64, lib and
//     targets/<arch>-linux/lib folders);
//  4. /usr/local/cuda, the same folders;
//  5. the lib folders of NVIDIA's Python wheels (site-packages/nvidia/*/lib),
//     where pip installs the libraries that PyTorch uses: in $VIRTUAL_ENV,
//     $CONDA_PREFIX, $PYTHONPATH, ~/.local and the system's Python folders.
//
// Every candidate tried is recorded with the reason it was refused, so that
// `zeroeng info` can say why a library is missing. A library in a "stubs"
// folder (the toolkit's link-time stand-in for libcuda) is refused: it
// loads, but every call fails.
//
// Candidates is pure (it reads the environment and the file system through
// an Env), so the search order is tested on fake directory trees.
package libs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
)

// EnvVar is the variable that names the user's choice of folders or files.
const EnvVar = "ZEROENG_CUDA_LIBS"

// Spec describes one library.
type Spec struct {
	Name    string   // for messages: "CUDA driver", "NVRTC"
	Sonames []string // tried in order, newest first: "libnvrtc.so.12", "libnvrtc.so"
	Symbol  string   // a function the library must export: "cuInit"
	// Deps are sonames that are loaded first, from the same folder, when
	// the library is found in a folder (cuBLAS needs cuBLASLt); outside
	// wheels their RUNPATH may not say where they are.
	Deps []string
}

// stem is the soname without its version: "libnvrtc.so".
func stem(soname string) string {
	if i := strings.Index(soname, ".so"); i >= 0 {
		return soname[:i+3]
	}
	return soname
}

// Source says where a candidate came from.
type Source string

const (
	FromEnv      Source = EnvVar
	FromLoader   Source = "loader"
	FromCUDAHome Source = "CUDA_HOME"
	FromCUDAPath Source = "CUDA_PATH"
	FromUsrLocal Source = "/usr/local/cuda"
	FromWheel    Source = "python wheel"
)

// Candidate is one place Open tries. Path is a file path, or a bare soname
// for the dynamic loader's own search.
type Candidate struct {
	Source Source
	Path   string
	// Refused is set when the candidate is known to be unusable before it
	// is opened (a stub library).
	Refused string
}

// Env is what Candidates reads: the environment, the file system and the
// machine's architecture. System returns the real one.
type Env struct {
	Getenv func(string) string
	FS     fs.FS  // rooted at "/": paths are given without the leading slash
	Home   string // the user's home folder
	Arch   string // "x86_64", "aarch64"
}

// System is the Env of this process.
func System() Env {
	home, _ := os.UserHomeDir()
	arch := "x86_64"
	if runtime.GOARCH == "arm64" {
		arch = "aarch64"
	}
	return Env{Getenv: os.Getenv, FS: os.DirFS("/"), Home: home, Arch: arch}
}

func (e Env) isFile(path string) bool {
	st, err := fs.Stat(e.FS, rel(path))
	return err == nil && !st.IsDir()
}

func (e Env) isDir(path string) bool {
	st, err := fs.Stat(e.FS, rel(path))
	return err == nil && st.IsDir()
}

// glob matches an absolute pattern; results are absolute and sorted.
func (e Env) glob(pattern string) []string {
	m, err := fs.Glob(e.FS, rel(pattern))
	if err != nil {
		return nil
	}
	for i := range m {
		m[i] = "/" + m[i]
	}
	sort.Strings(m)
	return m
}

func rel(path string) string { return strings.TrimPrefix(filepath.Clean(path), "/") }

// Candidates lists the places Open tries for spec, in order, without
// duplicates.
func Candidates(spec Spec, env Env) []Candidate {
	var out []Candidate
	seen := map[string]bool{}
	add := func(src Source, path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		c := Candidate{Source: src, Path: path}
		if slices.Contains(strings.Split(filepath.Dir(path), "/"), "stubs") {
			c.Refused = "a link-time stub in a stubs folder, not a usable library"
		}
		out = append(out, c)
	}
	// inDir adds the library's files in dir: its sonames in order, then
	// any other versions (libnvrtc.so.11.2), in reverse lexical order.
	inDir := func(src Source, dir string) {
		for _, so := range spec.Sonames {
			if p := filepath.Join(dir, so); env.isFile(p) {
				add(src, p)
			}
		}
		var stems []string
		for _, so := range spec.Sonames {
			if !slices.Contains(stems, stem(so)) {
				stems = append(stems, stem(so))
			}
		}
		for _, s := range stems {
			m := env.glob(filepath.Join(dir, s) + ".*")
			slices.Reverse(m)
			for _, p := range m {
				if env.isFile(p) {
					add(src, p)
				}
			}
		}
	}
	// 1. The user's folders and files.
	for _, entry := range filepath.SplitList(env.Getenv(EnvVar)) {
		if entry == "" {
			continue
		}
		entry = filepath.Clean(entry)
		if env.isDir(entry) {
			inDir(FromEnv, entry)
			continue
		}
		base := filepath.Base(entry)
		for _, so := range spec.Sonames {
			if base == so || strings.HasPrefix(base, stem(so)) {
				add(FromEnv, entry)
				break
			}
		}
	}
	// 2. The dynamic loader, by soname.
	for _, so := range spec.Sonames {
		add(FromLoader, so)
	}
	// 3, 4. The toolkit's folders.
	toolkit := func(src Source, root string) {
		for _, sub := range []string{"lib64", "lib", filepath.Join("targets", env.Arch+"-linux", "lib")} {
			inDir(src, filepath.Join(root, sub))
		}
	}
	if h := env.Getenv("CUDA_HOME"); h != "" {
		toolkit(FromCUDAHome, h)
	}
	if h := env.Getenv("CUDA_PATH"); h != "" {
		toolkit(FromCUDAPath, h)
	}
	toolkit(FromUsrLocal, "/usr/local/cuda")
	// 5. NVIDIA's wheels.
	for _, sp := range sitePackages(env) {
		for _, dir := range env.glob(filepath.Join(sp, "nvidia", "*", "lib")) {
			inDir(FromWheel, dir)
		}
	}
	return out
}

// sitePackages lists the Python package folders that exist, the active
// environment's first.
func sitePackages(env Env) []string {
	var patterns []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := env.Getenv(v); p != "" {
			patterns = append(patterns, filepath.Join(p, "lib", "python3*", "site-packages"))
		}
	}
	for _, p := range filepath.SplitList(env.Getenv("PYTHONPATH")) {
		if p != "" && filepath.IsAbs(p) {
			patterns = append(patterns, filepath.Clean(p))
		}
	}
	if env.Home != "" {
		patterns = append(patterns, filepath.Join(env.Home, ".local", "lib", "python3*", "site-packages"))
	}
	patterns = append(patterns,
		"/usr/local/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
		"/usr/lib/python3*/site-packages", "/usr/lib/python3/dist-packages",
		"/opt/conda/lib/python3*/site-packages")
	var out []string
	for _, pat := range patterns {
		dirs := []string{pat}
		if strings.Contains(pat, "*") {
			dirs = env.glob(pat)
			// Newest Python first: python3.12 before python3.9.
			slices.SortStableFunc(dirs, func(a, b string) int { return pythonMinor(b) - pythonMinor(a) })
		}
		for _, d := range dirs {
			if env.isDir(d) && !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// pythonMinor is N of the first "python3.N" in path, or -1.
func pythonMinor(path string) int {
	_, after, ok := strings.Cut(path, "python3.")
	if !ok {
		return -1
	}
	n := 0
	for _, c := range after {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// Attempt is one candidate Open tried and why it was not taken.
type Attempt struct {
	Candidate
	Err error
}

// Library is a loaded library.
type Library struct {
	Spec   Spec
	Path   string // the path or soname it was opened by
	Source Source
	handle uintptr
	// Skipped are the candidates tried before this one.
	Skipped []Attempt
}

// Sym returns the address of an exported function.
func (l *Library) Sym(name string) (uintptr, error) {
	p, err := dlsym(l.handle, name)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("%s (%s) does not export %s", l.Spec.Name, l.Path, name)
	}
	return p, nil
}

// Has reports whether the library exports name.
func (l *Library) Has(name string) bool {
	p, err := dlsym(l.handle, name)
	return err == nil && p != 0
}

// NotFoundError says that no candidate was usable, and why for each.
type NotFoundError struct {
	Spec     Spec
	Attempts []Attempt
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s not found (%s)", e.Spec.Name, strings.Join(e.Spec.Sonames, ", "))
	var tried []string
	for _, a := range e.Attempts {
		if a.Source == FromLoader {
			continue // the loader's misses are expected and say little
		}
		tried = append(tried, fmt.Sprintf("%s: %v", a.Path, a.Err))
	}
	if len(tried) > 0 {
		fmt.Fprintf(&b, "; tried %s", strings.Join(tried, "; "))
	} else {
		fmt.Fprintf(&b, "; not on the loader's path, and not in %s, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda or site-packages/nvidia/*/lib", EnvVar)
	}
	return b.String()
}

var (
	mu     sync.Mutex
	loaded = map[string]*Library{} // by Spec.Name
	failed = map[string]error{}
)

// Open finds and loads spec's library once per process; later calls return
// the same library or the same error.
func Open(spec Spec) (*Library, error) {
	mu.Lock()
	defer mu.Unlock()
	if l := loaded[spec.Name]; l != nil {
		return l, nil
	}
	if err := failed[spec.Name]; err != nil {
		return nil, err
	}
	l, err := OpenFrom(spec, Candidates(spec, System()))
	if err != nil {
		failed[spec.Name] = err
		return nil, err
	}
	loaded[spec.Name] = l
	return l, nil
}

// OpenFrom loads the first usable candidate, without caching.
func OpenFrom(spec Spec, cands []Candidate) (*Library, error) {
	var attempts []Attempt
	for _, c := range cands {
		if c.Refused != "" {
			attempts = append(attempts, Attempt{c, errors.New(c.Refused)})
			continue
		}
		if c.Source != FromLoader {
			for _, dep := range spec.Deps {
				if p := filepath.Join(filepath.Dir(c.Path), dep); fileExists(p) {
					dlopen(p, true) // best effort: the library's own load reports what is missing
				}
			}
		}
		h, err := dlopen(c.Path, false)
		if err != nil {
			attempts = append(attempts, Attempt{c, err})
			continue
		}
		l := &Library{Spec: spec, Path: c.Path, Source: c.Source, handle: h, Skipped: attempts}
		if spec.Symbol != "" && !l.Has(spec.Symbol) {
			dlclose(h)
			attempts = append(attempts, Attempt{c, fmt.Errorf("does not export %s", spec.Symbol)})
			continue
		}
		return l, nil
	}
	return nil, &NotFoundError{Spec: spec, Attempts: attempts}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
