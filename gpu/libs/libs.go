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
//  2. then, for each of the library's sonames, newest first (libnvrtc.so.13
//     before libnvrtc.so.12), these places in order:
//     - the dynamic loader's default search (LD_LIBRARY_PATH, the ld.so
//     cache, the system directories);
//     - /usr/local/nvidia/lib64 and lib, where NVIDIA's container runtime
//     mounts the driver;
//     - $CUDA_HOME, $CUDA_PATH and /usr/local/cuda (their lib64, lib and
//     targets/<arch>-linux/lib folders);
//     - the lib folders of NVIDIA's Python wheels (site-packages/nvidia/*/lib),
//     where pip installs the libraries that PyTorch uses: in $VIRTUAL_ENV,
//     $CONDA_PREFIX, the environment of each python3 on $PATH (a venv that
//     was never activated), $PYTHONPATH, ~/.local and the system's Python
//     folders;
//  3. other versions of the library found in those folders, newest first.
//
// Ranking sonames before places keeps an old library that happens to be on
// the loader's path from winning over the new one PyTorch brought.
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
	"strconv"
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
	// Deps are libraries loaded first, from the same folder, when the
	// library is found in a folder: sonames (cuBLAS needs cuBLASLt), or
	// patterns of which the newest version is taken (NVRTC opens
	// libnvrtc-builtins.so.<version> by name when it compiles). Outside
	// the loader's path, nothing else would say where they are.
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
	// FromDriverMount is the folder where NVIDIA's container runtime
	// mounts the driver's libraries.
	FromDriverMount Source = "/usr/local/nvidia"
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
//
// The user's ZEROENG_CUDA_LIBS entries come first, whatever they hold.
// After them, a library's sonames (Spec.Sonames, newest first) rank before
// the places: libnvrtc.so.13 in any folder is tried before libnvrtc.so.12
// in any folder, so that an old NVRTC on the loader's path does not win
// over the new one that came with PyTorch's wheels. Within one soname, the
// places keep their order. Other versions found in the folders
// (libnvrtc.so.11.8.89) come last.
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
	// 1. The user's folders and files.
	for _, entry := range filepath.SplitList(env.Getenv(EnvVar)) {
		if entry == "" {
			continue
		}
		entry = filepath.Clean(entry)
		if env.isDir(entry) {
			for _, so := range spec.Sonames {
				if p := filepath.Join(entry, so); env.isFile(p) {
					add(FromEnv, p)
				}
			}
			otherVersions(spec, env, entry, func(p string) { add(FromEnv, p) })
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
	// 2. Every other place, soname by soname.
	places := searchPlaces(env)
	for _, so := range spec.Sonames {
		for _, pl := range places {
			if pl.src == FromLoader {
				add(FromLoader, so)
			} else if p := filepath.Join(pl.dir, so); env.isFile(p) {
				add(pl.src, p)
			}
		}
	}
	for _, pl := range places {
		if pl.src != FromLoader {
			otherVersions(spec, env, pl.dir, func(p string) { add(pl.src, p) })
		}
	}
	return out
}

// place is a folder searched for libraries, or the loader's own search
// (dir "").
type place struct {
	src Source
	dir string
}

// searchPlaces lists, in order: the dynamic loader (LD_LIBRARY_PATH, the
// ld.so cache, the system folders), the driver's container mount
// (/usr/local/nvidia, where NVIDIA's container runtime puts libcuda), the
// toolkits of $CUDA_HOME, $CUDA_PATH and /usr/local/cuda, then the lib
// folders of NVIDIA's Python wheels.
func searchPlaces(env Env) []place {
	out := []place{{FromLoader, ""}}
	for _, d := range []string{"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"} {
		if env.isDir(d) {
			out = append(out, place{FromDriverMount, d})
		}
	}
	toolkit := func(src Source, root string) {
		for _, sub := range []string{"lib64", "lib", filepath.Join("targets", env.Arch+"-linux", "lib")} {
			if d := filepath.Join(root, sub); env.isDir(d) {
				out = append(out, place{src, d})
			}
		}
	}
	if h := env.Getenv("CUDA_HOME"); h != "" {
		toolkit(FromCUDAHome, h)
	}
	if h := env.Getenv("CUDA_PATH"); h != "" {
		toolkit(FromCUDAPath, h)
	}
	toolkit(FromUsrLocal, "/usr/local/cuda")
	for _, sp := range sitePackages(env) {
		for _, dir := range env.glob(filepath.Join(sp, "nvidia", "*", "lib")) {
			out = append(out, place{FromWheel, dir})
		}
	}
	return out
}

// otherVersions calls add with the library's files in dir that are not
// one of its sonames (libnvrtc.so.11.2 when Sonames name .13 and .12),
// newest version first.
func otherVersions(spec Spec, env Env, dir string, add func(string)) {
	var stems []string
	for _, so := range spec.Sonames {
		if !slices.Contains(stems, stem(so)) {
			stems = append(stems, stem(so))
		}
	}
	for _, s := range stems {
		m := env.glob(filepath.Join(dir, s) + ".*")
		slices.SortStableFunc(m, func(a, b string) int { return CompareVersions(b, a) })
		for _, p := range m {
			if env.isFile(p) && !slices.Contains(spec.Sonames, filepath.Base(p)) {
				add(p)
			}
		}
	}
}

// CompareVersions orders two library file names by the version after
// ".so." numerically, part by part: libnvrtc-builtins.so.12.10 is newer
// than .so.12.9, and .so.13.0 than both. It returns -1, 0 or +1; a name
// without a version is the oldest.
func CompareVersions(a, b string) int {
	va, vb := soVersion(a), soVersion(b)
	for i := 0; i < max(len(va), len(vb)); i++ {
		x, y := -1, -1
		if i < len(va) {
			x = va[i]
		}
		if i < len(vb) {
			y = vb[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// soVersion is the numeric parts of the version after ".so.", a part
// that is not a number counting as 0.
func soVersion(name string) []int {
	_, v, ok := strings.Cut(filepath.Base(name), ".so.")
	if !ok {
		return nil
	}
	var out []int
	for _, part := range strings.Split(v, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			n = 0
		}
		out = append(out, n)
	}
	return out
}

// sitePackages lists the Python package folders that exist: the active
// environment's ($VIRTUAL_ENV, $CONDA_PREFIX), then those of each python3
// on $PATH, then $PYTHONPATH's, the user's and the system's.
func sitePackages(env Env) []string {
	var patterns []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := env.Getenv(v); p != "" {
			patterns = append(patterns, filepath.Join(p, "lib", "python3*", "site-packages"))
		}
	}
	// A python3 in PATH dir's prefix is the dir's parent, which is what
	// sys.prefix is for a venv (whose python3 links to the system's: the
	// link is not followed), a conda install or /usr/local. A venv that
	// was never activated, as on machines set up for PyTorch, is found so.
	for _, dir := range filepath.SplitList(env.Getenv("PATH")) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		if env.isFile(filepath.Join(dir, "python3")) || env.isFile(filepath.Join(dir, "python")) {
			patterns = append(patterns, filepath.Join(filepath.Dir(filepath.Clean(dir)), "lib", "python3*", "site-packages"))
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
		fmt.Fprintf(&b, "; not on the loader's path, and not in %s, /usr/local/nvidia, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda or the site-packages/nvidia/*/lib of Python (also of the python3 on $PATH)", EnvVar)
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
		if c.Source != FromLoader && len(spec.Deps) > 0 {
			dir := filepath.Dir(c.Path)
			names := fileNames(dir)
			for _, dep := range spec.Deps {
				if name := pickDep(dep, names); name != "" {
					dlopen(filepath.Join(dir, name), true) // best effort: the library's own load reports what is missing
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

// fileNames lists the names of the files in dir (nil when it cannot be
// read).
func fileNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// pickDep chooses, among the names of a folder's files, the one that a
// Spec.Deps entry names: the name itself, or for a pattern
// ("libnvrtc-builtins.so.*") the newest version that matches it; "" for
// none.
func pickDep(dep string, names []string) string {
	best := ""
	for _, n := range names {
		if ok, err := filepath.Match(dep, n); err != nil || !ok {
			continue
		}
		if best == "" || CompareVersions(n, best) > 0 {
			best = n
		}
	}
	return best
}
