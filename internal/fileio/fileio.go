// Package fileio holds the careful file handling the format packages share:
// atomic replacement of a file, and reads whose size comes from untrusted
// input and so must not allocate before the data is there.
package fileio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/zeroeng/zeroeng/internal/hostmem"
)

// WriteAtomic runs fill on a temporary file next to path and renames it over
// path once it is complete and synced, then syncs the directory: a crash at
// any moment leaves either the old file or the new one, never a mix. On
// error, path is untouched and the temporary file removed. fill's error is
// returned unchanged; other errors are prefixed with pkg ("npy: ...").
func WriteAtomic(pkg, path string, fill func(*os.File) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := fill(f); err != nil {
		return err
	}
	// CreateTemp makes the file 0600; a data file is as readable as any file
	// the user creates.
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	SyncDir(dir)
	return nil
}

// SyncDir makes renames in dir durable. It is best effort: the file itself is
// complete and in place either way, and some systems (Windows) cannot sync a
// directory.
func SyncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	d.Sync()
	d.Close()
}

// readChunk is the first allocation when reading data of unverified length;
// the buffer doubles from there as data arrives.
const readChunk = 64 << 10

// ReadExact reads exactly n bytes from r. When trusted is false the buffer
// grows as data arrives, so a short stream costs at most twice what it holds;
// when n has been checked against the file size it is allocated at once.
// A short read returns the bytes read and io.ErrUnexpectedEOF.
func ReadExact(r io.Reader, n int, trusted bool) ([]byte, error) {
	if trusted {
		if err := hostmem.Check(int64(n)); err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		m, err := io.ReadFull(r, buf)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf[:m], err
	}
	buf := make([]byte, 0, min(n, readChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(make([]byte, 0, min(n, 2*cap(buf))), buf...)
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if errors.Is(err, io.EOF) {
			if len(buf) < n {
				return buf, io.ErrUnexpectedEOF
			}
			break
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
