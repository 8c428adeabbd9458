// Package safefile opens the files that users and scripts name, for
// reading, without the two ways such a file can hang or exhaust a
// process: a FIFO or a device (a FIFO blocks open and read until some
// writer comes, /dev/zero never ends), and a file larger than what the
// reader is prepared to hold. Open refuses anything but a regular file,
// without blocking; ReadFile also bounds the bytes it reads.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/zeroeng/zeroeng/internal/hostmem"
)

// ErrNotRegular matches the error of Open and ReadFile for a path that
// is not a regular file (after symbolic links).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge matches the error of ReadFile for a file over its limit.
var ErrTooLarge = errors.New("file too large")

// Open opens path for reading if it is a regular file. The open itself
// does not block on a FIFO (O_NONBLOCK, which means nothing for a regular
// file's reads).
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))}
	}
	return f, fi, nil
}

// ReadFile reads the regular file at path, of at most limit bytes: a
// larger one is refused before it is read, and one that grows while it is
// read is cut off at limit+1 bytes and refused too.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, fi, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, tooLarge(path, fi.Size(), limit)
	}
	if err := hostmem.Check(fi.Size()); err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(path, int64(len(b)), limit)
	}
	return b, nil
}

func tooLarge(path string, size, limit int64) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes or more, over the limit of %d", ErrTooLarge, size, limit)}
}

// kind names what a non-regular file is.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a plain file"
}
