package kernels

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zeroeng/zeroeng/internal/fileio"
)

// CacheEnv is the environment variable that chooses the cache directory;
// the value "off" disables the cache.
const CacheEnv = "ZEROENG_KERNEL_CACHE"

// keyVersion changes whenever the meaning of a cached image changes without
// its inputs changing (the file format below, say).
const keyVersion = "zeroeng-kernels-v1"

// Key identifies a compiled image: the SHA-256, in hex, of the complete
// source, the target architecture ("sm_90"), the compiler's version and the
// compiler options, each length-prefixed so that no two different inputs
// hash the same bytes.
func Key(src, arch, compilerVersion string, opts []string) string {
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	field := func(s string) {
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	field(keyVersion)
	field(src)
	field(arch)
	field(compilerVersion)
	h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(opts)))])
	for _, o := range opts {
		field(o)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Cache stores compiled images in Dir, one file per key. An empty Dir is a
// disabled cache: Get always misses and Put does nothing.
//
// A file is the image followed by its SHA-256, written to a temporary file
// in Dir, flushed to disk and renamed into place: a reader sees either no
// file or a complete one, whatever crashes or races with it, and Get
// rejects a file that was damaged afterwards (truncated, or copied badly).
type Cache struct {
	Dir string
	// Off says why a cache without Dir is disabled, for `zeroeng info` and
	// `zeroeng kernels build`: a disabled cache costs every process a
	// compilation of each family it uses, which should never go unsaid.
	Off string
}

// DefaultCache returns the cache in $ZEROENG_KERNEL_CACHE, or else in
// os.UserCacheDir()/zeroeng/kernels; ZEROENG_KERNEL_CACHE=off, or a system
// without a user cache directory (no $HOME, as in some containers), gives
// a disabled cache that says why in Off.
func DefaultCache() Cache {
	switch dir := os.Getenv(CacheEnv); dir {
	case "off":
		return Cache{Off: CacheEnv + "=off"}
	case "":
	default:
		return Cache{Dir: dir}
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return Cache{Off: fmt.Sprintf("no user cache folder (%v); set %s to a folder", err, CacheEnv)}
	}
	return Cache{Dir: filepath.Join(base, "zeroeng", "kernels")}
}

// Describe is the cache's folder, or "off" and why.
func (c Cache) Describe() string {
	switch {
	case c.Enabled():
		return c.Dir
	case c.Off != "":
		return "off: " + c.Off
	}
	return "off"
}

// Enabled reports whether the cache stores anything.
func (c Cache) Enabled() bool { return c.Dir != "" }

const imageSuffix = ".img"

func validKey(key string) bool {
	if len(key) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(key)
	return err == nil
}

func (c Cache) path(key string) string { return filepath.Join(c.Dir, key+imageSuffix) }

// Get returns the image stored under key. It misses (false) when the cache
// is disabled, the key is not a Key, there is no such file, or the file
// fails its checksum.
func (c Cache) Get(key string) ([]byte, bool) {
	if !c.Enabled() || !validKey(key) {
		return nil, false
	}
	b, err := os.ReadFile(c.path(key))
	if err != nil || len(b) < sha256.Size {
		return nil, false
	}
	img, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	want := sha256.Sum256(img)
	if !bytes.Equal(sum, want[:]) {
		return nil, false
	}
	return img, true
}

// Put stores image under key, atomically: it writes a temporary file in the
// cache directory (created if needed), syncs it and renames it over the
// final name, then syncs the directory. On error nothing is left behind.
func (c Cache) Put(key string, image []byte) (err error) {
	if !c.Enabled() {
		return nil
	}
	if !validKey(key) {
		return fmt.Errorf("kernels: cache key %q is not a Key", key)
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("kernels: cache: %w", err)
	}
	f, err := os.CreateTemp(c.Dir, ".tmp-"+key[:16]+"-*")
	if err != nil {
		return fmt.Errorf("kernels: cache: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("kernels: cache: %w", err)
		}
	}()
	sum := sha256.Sum256(image)
	if _, err = f.Write(image); err != nil {
		return err
	}
	if _, err = f.Write(sum[:]); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	// CreateTemp makes the file private; images are not secret, and a
	// shared cache directory should be readable like any other.
	if err = os.Chmod(tmp, 0o644); err != nil {
		return err
	}
	if err = os.Rename(tmp, c.path(key)); err != nil {
		return err
	}
	fileio.SyncDir(c.Dir)
	return nil
}
