//go:build darwin || freebsd || linux || netbsd

package fake

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/zeroeng/zeroeng/internal/clib"
)

func dlopenFake(tb testing.TB, path string) uintptr {
	tb.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		tb.Fatalf("opening %s: %v", path, err)
	}
	return h
}

// fakeLib builds one fake library once per test binary. The file is kept
// in the user's cache folder under a hash of the C source, not in a test's
// TempDir, which goes away when that test ends while the library stays
// loaded and later tests open the same path; a later test binary with the
// same source finds it built. It is shared by NVRTC, CUBLAS and NCCL.
type fakeLib struct {
	soname string // the file name: "libnvrtc.so.12"
	file   string // the C file's name, for the compiler's messages

	mu    sync.Mutex
	built string
}

func (f *fakeLib) path(tb testing.TB, src string) string {
	tb.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.built != "" {
		return f.built
	}
	sum := sha256.Sum256([]byte(src))
	dir := fakeCacheDir(tb, f.soname+"-"+hex.EncodeToString(sum[:8]))
	dst := filepath.Join(dir, f.soname)
	if st, err := os.Stat(dst); err == nil && st.Mode().IsRegular() {
		f.built = dst
		return dst
	}
	cfile := filepath.Join(tb.TempDir(), f.file)
	if err := os.WriteFile(cfile, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	out := clib.Build(tb, f.soname, cfile) // skips the test without a C compiler
	// Copied under a temporary name and renamed, so that a test binary
	// running beside this one never opens a half-written file.
	b, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	tmp, err := os.CreateTemp(dir, f.soname+".*")
	if err != nil {
		tb.Fatal(err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		tb.Fatalf("writing %s: %v %v", tmp.Name(), werr, cerr)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		tb.Fatal(err)
	}
	f.built = dst
	return dst
}

// fakeCacheDir makes the folder for one build: $XDG_CACHE_HOME/zeroeng/fake
// (or the system's equivalent), else a new temporary folder, which is then
// left behind.
func fakeCacheDir(tb testing.TB, name string) string {
	tb.Helper()
	if base, err := os.UserCacheDir(); err == nil {
		dir := filepath.Join(base, "zeroeng", "fake", name)
		if err := os.MkdirAll(dir, 0o755); err == nil {
			return dir
		}
	}
	dir, err := os.MkdirTemp("", "zeroeng-fake-")
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}
