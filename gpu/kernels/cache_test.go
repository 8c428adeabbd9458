package kernels

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestKey(t *testing.T) {
	base := Key("src", "sm_90", "12.4", []string{"-O3", "--fmad=false"})
	if len(base) != 64 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Fatalf("key %q is not 64 hex digits", base)
	}
	if Key("src", "sm_90", "12.4", []string{"-O3", "--fmad=false"}) != base {
		t.Fatal("Key is not deterministic")
	}
	variants := map[string]string{
		"source":       Key("src2", "sm_90", "12.4", []string{"-O3", "--fmad=false"}),
		"arch":         Key("src", "sm_80", "12.4", []string{"-O3", "--fmad=false"}),
		"version":      Key("src", "sm_90", "12.5", []string{"-O3", "--fmad=false"}),
		"options":      Key("src", "sm_90", "12.4", []string{"-O3"}),
		"option order": Key("src", "sm_90", "12.4", []string{"--fmad=false", "-O3"}),
		"no options":   Key("src", "sm_90", "12.4", nil),
		// Field boundaries matter: the same bytes split differently.
		"split source": Key("sr", "csm_90", "12.4", []string{"-O3", "--fmad=false"}),
		"split option": Key("src", "sm_90", "12.4", []string{"-O3--fmad=false"}),
		"option space": Key("src", "sm_90", "12.4", []string{"-O3 --fmad=false"}),
	}
	seen := map[string]string{base: "base"}
	for name, k := range variants {
		if prev, dup := seen[k]; dup {
			t.Errorf("%s gives the same key as %s", name, prev)
		}
		seen[k] = name
	}
}

func testKey(s string) string { return Key(s, "sm_90", "test", nil) }

func TestCachePutGet(t *testing.T) {
	c := Cache{Dir: filepath.Join(t.TempDir(), "a", "b")} // created on demand
	k := testKey("one")
	if _, ok := c.Get(k); ok {
		t.Fatal("hit in an empty cache")
	}
	img := []byte("\x7fELF fake cubin")
	if err := c.Put(k, img); err != nil {
		t.Fatal(err)
	}
	got, ok := c.Get(k)
	if !ok || !bytes.Equal(got, img) {
		t.Fatalf("Get = %q, %v", got, ok)
	}
	// Overwrite.
	img2 := bytes.Repeat([]byte{1, 2, 3}, 1000)
	if err := c.Put(k, img2); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Get(k); !ok || !bytes.Equal(got, img2) {
		t.Fatal("overwritten image not returned")
	}
	// An empty image is a valid image.
	if err := c.Put(testKey("empty"), nil); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Get(testKey("empty")); !ok || len(got) != 0 {
		t.Fatal("empty image not returned")
	}
	assertNoTemp(t, c.Dir)

	// Keys that are not keys never reach the file system.
	for _, bad := range []string{"", "../x", strings.Repeat("g", 64), k[:63]} {
		if _, ok := c.Get(bad); ok {
			t.Errorf("Get(%q) hit", bad)
		}
		if err := c.Put(bad, img); err == nil {
			t.Errorf("Put(%q) accepted", bad)
		}
	}
}

func TestCacheRejectsDamagedFiles(t *testing.T) {
	c := Cache{Dir: t.TempDir()}
	k := testKey("damaged")
	if err := c.Put(k, []byte("a complete image")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(c.Dir, k+imageSuffix)
	b, _ := os.ReadFile(p)
	for name, damaged := range map[string][]byte{
		"truncated": b[:len(b)-5],
		"flipped":   append([]byte{b[0] ^ 1}, b[1:]...),
		"empty":     {},
	} {
		if err := os.WriteFile(p, damaged, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok := c.Get(k); ok {
			t.Errorf("%s file accepted", name)
		}
	}
}

func TestCacheDisabled(t *testing.T) {
	var c Cache
	if c.Enabled() {
		t.Fatal("zero Cache is enabled")
	}
	if err := c.Put(testKey("x"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(testKey("x")); ok {
		t.Fatal("disabled cache hit")
	}

	t.Setenv(CacheEnv, "off")
	if c := DefaultCache(); c.Enabled() || c.Describe() != "off: ZEROENG_KERNEL_CACHE=off" {
		t.Errorf("%s=off gives %+v (%s)", CacheEnv, c, c.Describe())
	}
	t.Setenv(CacheEnv, "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	if c := DefaultCache(); c.Enabled() || !strings.Contains(c.Describe(), "no user cache folder") {
		t.Errorf("without $HOME: %+v (%s)", c, c.Describe())
	}
	dir := t.TempDir()
	t.Setenv(CacheEnv, dir)
	if got := DefaultCache().Dir; got != dir {
		t.Errorf("%s=%s gives %q", CacheEnv, dir, got)
	}
	t.Setenv(CacheEnv, "")
	t.Setenv("XDG_CACHE_HOME", dir)
	t.Setenv("HOME", dir)
	if got, want := DefaultCache().Dir, filepath.Join(dir, "zeroeng", "kernels"); got != want {
		if base, err := os.UserCacheDir(); err == nil && got != filepath.Join(base, "zeroeng", "kernels") {
			t.Errorf("default cache %q, want %q", got, want)
		}
	}
}

func TestCachePutFailureLeavesNothing(t *testing.T) {
	parent := t.TempDir()
	file := filepath.Join(parent, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := Cache{Dir: filepath.Join(file, "sub")} // a directory under a file
	if err := c.Put(testKey("x"), []byte("x")); err == nil {
		t.Fatal("Put under a file succeeded")
	}
	assertNoTemp(t, parent)
}

// TestCacheConcurrent races writers replacing one key's image with readers:
// every read must be absent or one complete image, never a mix or a prefix.
func TestCacheConcurrent(t *testing.T) {
	c := Cache{Dir: t.TempDir()}
	k := testKey("race")
	images := [][]byte{bytes.Repeat([]byte("A"), 1<<20), bytes.Repeat([]byte("bc"), 1<<19+7)}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if err := c.Put(k, images[(w+i)%2]); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	var readers sync.WaitGroup
	for r := 0; r < 4; r++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if got, ok := c.Get(k); ok && !bytes.Equal(got, images[0]) && !bytes.Equal(got, images[1]) {
					t.Errorf("read a partial image of %d bytes", len(got))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if got, ok := c.Get(k); !ok || !(bytes.Equal(got, images[0]) || bytes.Equal(got, images[1])) {
		t.Fatal("final image missing or wrong")
	}
	assertNoTemp(t, c.Dir)
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}
