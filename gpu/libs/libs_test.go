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
		"loader libnvrtc.so.12",
		"loader libnvrtc.so",
		"CUDA_HOME /cuda-home/lib64/libnvrtc.so.12",
		"CUDA_HOME /cuda-home/targets/x86_64-linux/lib/libnvrtc.so.12",
		"/usr/local/cuda /usr/local/cuda/lib64/libnvrtc.so",
		"/usr/local/cuda /usr/local/cuda/lib64/libnvrtc.so.11.2",
		"python wheel /venv/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"python wheel /home/u/.local/lib/python3.10/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"python wheel /usr/lib/python3/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
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
		"loader libnvrtc.so.12", "loader libnvrtc.so",
		"python wheel /conda/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"python wheel /conda/lib/python3.9/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"python wheel /pp/nvidia/nccl/lib/libnvrtc.so.12",
	}
	if !slices.Equal(got, want) {
		t.Errorf("candidates:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
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
