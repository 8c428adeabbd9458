package libs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

var nvrtcSpec = Spec{Name: "NVRTC", Sonames: []string{"libnvrtc.so.12", "libnvrtc.so"}, Symbol: "nvrtcVersion"}

// tree is a fake file system of empty files under "/".
func tree(files ...string) fstest.MapFS {
	m := fstest.MapFS{}
	for _, f := range files {
		m[strings.TrimPrefix(f, "/")] = &fstest.MapFile{}
	}
	return m
}

func env(vars map[string]string, fsys fstest.MapFS) Env {
	return Env{Getenv: func(k string) string { return vars[k] }, FS: fsys, Home: "/home/u", Arch: "x86_64"}
}

func paths(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		s := string(c.Source) + " " + c.Path
		if c.Refused != "" {
			s += " (refused)"
		}
		out = append(out, s)
	}
	return out
}

func TestCandidatesOrder(t *testing.T) {
	fsys := tree(
		"/opt/mine/libnvrtc.so.12",
		"/opt/other/libnvrtc.so.12.4.99",
		"/cuda-home/lib64/libnvrtc.so.12",
		"/cuda-home/targets/x86_64-linux/lib/libnvrtc.so.12",
		"/usr/local/cuda/lib64/libnvrtc.so",
		"/usr/local/cuda/lib64/libnvrtc.so.11.2",
		"/venv/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"/home/u/.local/lib/python3.10/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/usr/lib/python3/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
	)
	vars := map[string]string{
		EnvVar:        "/opt/mine:/opt/other/libnvrtc.so.12.4.99:/nonexistent",
		"CUDA_HOME":   "/cuda-home",
		"VIRTUAL_ENV": "/venv",
	}
	got := paths(Candidates(nvrtcSpec, env(vars, fsys)))
	want := []string{
		"ZEROENG_CUDA_LIBS /opt/mine/libnvrtc.so.12",
		"ZEROENG_CUDA_LIBS /opt/other/libnvrtc.so.12.4.99",
		// The newest soname everywhere, then the next: a place's order
		// counts only between files of the same soname.
		"loader libnvrtc.so.12",
		"CUDA_HOME /cuda-home/lib64/libnvrtc.so.12",
		"CUDA_HOME /cuda-home/targets/x86_64-linux/lib/libnvrtc.so.12",
		"python wheel /venv/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"python wheel /home/u/.local/lib/python3.10/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"python wheel /usr/lib/python3/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"loader libnvrtc.so",
		"/usr/local/cuda /usr/local/cuda/lib64/libnvrtc.so",
		"/usr/local/cuda /usr/local/cuda/lib64/libnvrtc.so.11.2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("candidates:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestCandidatesRefuseStubs(t *testing.T) {
	spec := Spec{Name: "CUDA driver", Sonames: []string{"libcuda.so.1", "libcuda.so"}, Symbol: "cuInit"}
	fsys := tree("/usr/local/cuda/lib64/stubs/libcuda.so", "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so")
	got := Candidates(spec, env(map[string]string{EnvVar: "/usr/local/cuda/lib64/stubs"}, fsys))
	var stubs int
	for _, c := range got {
		if strings.Contains(c.Path, "stubs") {
			stubs++
			if c.Refused == "" {
				t.Errorf("%s is a stub but was not refused", c.Path)
			}
		}
	}
	if stubs != 1 {
		t.Errorf("candidates %v: want the one stub the user named", paths(got))
	}
}

func TestCandidatesNothingSet(t *testing.T) {
	got := paths(Candidates(nvrtcSpec, env(nil, tree())))
	want := []string{"loader libnvrtc.so.12", "loader libnvrtc.so"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want only the loader's search %v", got, want)
	}
}

func TestCandidatesPythonPathAndConda(t *testing.T) {
	fsys := tree(
		"/pp/nvidia/nccl/lib/libnvrtc.so.12",
		"/conda/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/conda/lib/python3.9/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
	)
	vars := map[string]string{"PYTHONPATH": "relative:/pp", "CONDA_PREFIX": "/conda"}
	got := paths(Candidates(nvrtcSpec, env(vars, fsys)))
	want := []string{
		"loader libnvrtc.so.12",
		"python wheel /conda/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"python wheel /conda/lib/python3.9/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"python wheel /pp/nvidia/nccl/lib/libnvrtc.so.12",
		"loader libnvrtc.so",
	}
	if !slices.Equal(got, want) {
		t.Errorf("candidates:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestCandidatesTorchMachine is the GPU machine PyTorch's CUDA 13 wheels
// make, in a venv that was never activated (no VIRTUAL_ENV) whose python3
// is on PATH, with the driver mounted under /usr/local/nvidia and an old
// NVRTC on the loader's path: the wheels' libraries and the mounted
// driver are found, and the newest NVRTC comes before the old one.
func TestCandidatesTorchMachine(t *testing.T) {
	sp := "/opt/torch/.venv/lib/python3.12/site-packages"
	fsys := tree(
		"/opt/torch/.venv/bin/python3",
		"/opt/torch/.venv/pyvenv.cfg",
		sp+"/nvidia/cu13/lib/libnvrtc.so.13",
		sp+"/nvidia/cu13/lib/libnvrtc-builtins.so.13.0",
		sp+"/nvidia/cu13/lib/libcublas.so.13",
		sp+"/nvidia/nccl/lib/libnccl.so.2",
		"/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/bin/python3",
	)
	e := env(map[string]string{"PATH": "/usr/local/sbin:/opt/torch/.venv/bin:/usr/bin:relative/bin"}, fsys)
	tests := []struct {
		spec Spec
		want []string
	}{
		{Spec{Name: "NVRTC", Sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}}, []string{
			"loader libnvrtc.so.13",
			"python wheel " + sp + "/nvidia/cu13/lib/libnvrtc.so.13",
			"loader libnvrtc.so.12",
			"loader libnvrtc.so.11.2", // an old one on the loader's path comes after the wheel's
			"loader libnvrtc.so",
		}},
		{Spec{Name: "NCCL", Sonames: []string{"libnccl.so.2", "libnccl.so"}}, []string{
			"loader libnccl.so.2",
			"python wheel " + sp + "/nvidia/nccl/lib/libnccl.so.2",
			"loader libnccl.so",
		}},
		{Spec{Name: "CUDA driver", Sonames: []string{"libcuda.so.1", "libcuda.so"}}, []string{
			"loader libcuda.so.1",
			"/usr/local/nvidia /usr/local/nvidia/lib64/libcuda.so.1",
			"loader libcuda.so",
		}},
	}
	for _, tt := range tests {
		if got := paths(Candidates(tt.spec, e)); !slices.Equal(got, tt.want) {
			t.Errorf("%s:\n  %s\nwant:\n  %s", tt.spec.Name, strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
		}
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"libnvrtc-builtins.so.13.0", "libnvrtc-builtins.so.12.9", 1},
		{"libnvrtc-builtins.so.12.10", "libnvrtc-builtins.so.12.9", 1},
		{"libnvrtc-builtins.so.11.8", "libnvrtc-builtins.so.11.8.89", -1},
		{"/a/libnvrtc.so.12", "/b/libnvrtc.so.12", 0},
		{"libnvrtc.so", "libnvrtc.so.11.2", -1},
		{"libnvrtc.so.12.x", "libnvrtc.so.12.0", 0},
	}
	for _, tt := range tests {
		if got := CompareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := CompareVersions(tt.b, tt.a); got != -tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

func TestOpenFromReportsEveryAttempt(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "libnvrtc.so.12")
	if err := os.WriteFile(junk, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	cands := []Candidate{
		{Source: FromEnv, Path: junk},
		{Source: FromUsrLocal, Path: "/usr/local/cuda/lib64/stubs/libcuda.so", Refused: "a link-time stub"},
		{Source: FromLoader, Path: "libzeroeng-no-such-library.so.7"},
	}
	_, err := OpenFrom(nvrtcSpec, cands)
	var nf *NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("got %v, want a *NotFoundError", err)
	}
	if len(nf.Attempts) != 3 {
		t.Errorf("%d attempts recorded, want 3", len(nf.Attempts))
	}
	msg := err.Error()
	for _, want := range []string{"NVRTC not found", junk, "link-time stub"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}

func TestOpenFromRequiresSymbol(t *testing.T) {
	// libc is on every Linux machine and does not export nvrtcVersion.
	_, err := OpenFrom(nvrtcSpec, []Candidate{{Source: FromLoader, Path: "libc.so.6"}})
	if err == nil {
		t.Fatal("libc.so.6 was taken for NVRTC")
	}
	var nf *NotFoundError
	if !errors.As(err, &nf) || len(nf.Attempts) != 1 || !strings.Contains(nf.Attempts[0].Err.Error(), "does not export nvrtcVersion") {
		t.Errorf("got %v, want the missing symbol named", err)
	}
}

func TestSymbols(t *testing.T) {
	libc, err := OpenFrom(Spec{Name: "libc", Sonames: []string{"libc.so.6"}}, []Candidate{{Source: FromLoader, Path: "libc.so.6"}})
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	s := libc.Symbols()
	var strlen, old, missing uintptr
	s.Need(&strlen, "strlen")
	s.Need(&old, "zeroeng_new_name", "strlen") // an older name serves
	if strlen == 0 || old != strlen || s.Err() != nil {
		t.Fatalf("strlen %#x, by its older name %#x, err %v", strlen, old, s.Err())
	}
	if p := s.Optional("zeroeng_absent"); p != 0 {
		t.Errorf("an absent optional symbol gave %#x", p)
	}
	s.Need(&missing, "zeroeng_a")
	s.Need(&missing, "zeroeng_b", "zeroeng_b_old")
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "libc (libc.so.6) does not export zeroeng_a, zeroeng_b") {
		t.Errorf("got %v, want both missing functions named", err)
	}
}

func TestPickDep(t *testing.T) {
	folder := []string{"libnvrtc.so.13", "libnvrtc-builtins.so.12.9", "libnvrtc-builtins.so.13.0", "libnvrtc-builtins.so.12.10", "libcublasLt.so.12"}
	tests := []struct {
		dep, want string
	}{
		{"libnvrtc-builtins.so.*", "libnvrtc-builtins.so.13.0"},
		{"libcublasLt.so.12", "libcublasLt.so.12"},
		{"libcublasLt.so.13", ""},
		{"libnccl.so.*", ""},
	}
	for _, tt := range tests {
		if got := pickDep(tt.dep, folder); got != tt.want {
			t.Errorf("pickDep(%q) = %q, want %q", tt.dep, got, tt.want)
		}
	}
	if got := pickDep("libnvrtc-builtins.so.*", []string{"libnvrtc-builtins.so.12.9", "libnvrtc-builtins.so.12.10"}); got != "libnvrtc-builtins.so.12.10" {
		t.Errorf("12.10 against 12.9: %q", got)
	}
}

// TestSitePackagesOrder checks the Python folders' order: the activated
// environments, then the prefix of each python3 (or python) on PATH in
// PATH's order, then PYTHONPATH, ~/.local and the system's, each once.
func TestSitePackagesOrder(t *testing.T) {
	fsys := tree(
		"/venv/bin/python3",
		"/venv/lib/python3.12/site-packages/x",
		"/conda/lib/python3.11/site-packages/x",
		"/a/bin/python3",
		"/a/lib/python3.9/site-packages/x",
		"/a/lib/python3.12/site-packages/x",
		"/b/bin/python",
		"/b/lib/python3.10/site-packages/x",
		"/nopython/lib/python3.12/site-packages/x", // PATH names /nopython/bin, which holds no python
		"/pp/x",
		"/home/u/.local/lib/python3.12/site-packages/x",
		"/usr/bin/python3",
		"/usr/lib/python3/dist-packages/x",
		"/usr/local/lib/python3.12/dist-packages/x",
	)
	vars := map[string]string{
		"VIRTUAL_ENV":  "/venv",
		"CONDA_PREFIX": "/conda",
		"PATH":         "/a/bin:/nopython/bin:/venv/bin:bin:/b/bin/:/usr/bin",
		"PYTHONPATH":   "/pp",
	}
	got := sitePackages(env(vars, fsys))
	want := []string{
		"/venv/lib/python3.12/site-packages",
		"/conda/lib/python3.11/site-packages",
		"/a/lib/python3.12/site-packages",
		"/a/lib/python3.9/site-packages",
		"/b/lib/python3.10/site-packages",
		"/pp",
		"/home/u/.local/lib/python3.12/site-packages",
		"/usr/local/lib/python3.12/dist-packages",
		"/usr/lib/python3/dist-packages",
	}
	if !slices.Equal(got, want) {
		t.Errorf("site-packages:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestCandidatesDriverMount checks that the container runtime's driver
// folders come after the loader and before the toolkits.
func TestCandidatesDriverMount(t *testing.T) {
	spec := Spec{Name: "CUDA driver", Sonames: []string{"libcuda.so.1", "libcuda.so"}}
	fsys := tree(
		"/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/local/nvidia/lib/libcuda.so.1",
		"/cuda-home/lib64/libcuda.so.1",
		"/usr/local/cuda/lib64/libcuda.so.1",
		"/usr/local/nvidia/lib64/libcuda.so.550.54.15",
	)
	got := paths(Candidates(spec, env(map[string]string{"CUDA_HOME": "/cuda-home"}, fsys)))
	want := []string{
		"loader libcuda.so.1",
		"/usr/local/nvidia /usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/local/nvidia /usr/local/nvidia/lib/libcuda.so.1",
		"CUDA_HOME /cuda-home/lib64/libcuda.so.1",
		"/usr/local/cuda /usr/local/cuda/lib64/libcuda.so.1",
		"loader libcuda.so",
		"/usr/local/nvidia /usr/local/nvidia/lib64/libcuda.so.550.54.15",
	}
	if !slices.Equal(got, want) {
		t.Errorf("candidates:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestNotFoundErrorPlaces checks that, when only the loader was tried, the
// message lists every place searched, the new ones included.
func TestNotFoundErrorPlaces(t *testing.T) {
	err := &NotFoundError{Spec: nvrtcSpec, Attempts: []Attempt{{Candidate{Source: FromLoader, Path: "libnvrtc.so.12"}, errors.New("not found")}}}
	msg := err.Error()
	for _, want := range []string{EnvVar, "/usr/local/nvidia", "$CUDA_HOME", "/usr/local/cuda", "python3 on $PATH"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}
