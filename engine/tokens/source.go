package tokens

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"weak"

	"github.com/zeroeng/zeroeng/internal/safefile"
)

// source is where segments' bytes are read from: an open file, shared by
// every dataset of the process that names it, or memory.
type source struct {
	r    io.ReaderAt
	f    *os.File    // nil for memory
	fi   os.FileInfo // the file at open
	size int64       // at open
	head []byte      // the file's header at open, compared at every check
	lay  layout      // what the header says
}

// memory is a source over data.
func memory(data []byte) *source {
	return &source{r: bytes.NewReader(data), size: int64(len(data))}
}

// check compares the file with what its open found: the same size and
// the same header. A shard truncated, grown or rewritten under a run
// fails here, before its tokens are used. scratch has room for the head.
// A file unlinked (or replaced by a rename) after its open is still the
// file that was opened, and reads on as it was: that is not an error.
func (s *source) check(scratch []byte) error {
	if s.f == nil {
		return nil
	}
	fi, err := s.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != s.size {
		return fmt.Errorf("the file is %d bytes now, %d when it was opened: truncated or rewritten while in use", fi.Size(), s.size)
	}
	b := scratch[:len(s.head)]
	if err := readFull(s.f, b, 0); err != nil {
		return fmt.Errorf("reading its header again: %w", err)
	}
	if !bytes.Equal(b, s.head) {
		return errors.New("its header is not what it was when the file was opened: rewritten while in use")
	}
	return nil
}

// shortRead explains a read that returned fewer bytes than asked for,
// with its error err.
func (s *source) shortRead(err error) error {
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if s.f != nil {
		if fi, serr := s.f.Stat(); serr == nil && fi.Size() != s.size {
			return fmt.Errorf("the file ends early: %d bytes now, %d when it was opened: truncated while in use", fi.Size(), s.size)
		}
	}
	return io.ErrUnexpectedEOF
}

// shared holds the files that datasets have open, by absolute path, as
// weak pointers: a file is shared by every dataset of the process that
// names it (ranks in one process, a train and a validation set), and is
// closed (by os.File's cleanup) once no dataset reads it.
var shared struct {
	sync.Mutex
	files map[string]weak.Pointer[source]
}

// openShared opens path, or finds it open: the open file of an earlier
// Load when it is still the file at path (the same file, size and
// modification time, and the same header). The lock is held while a file
// is opened, so that ranks loading the same files at once share them.
func openShared(path string, stop func() error) (*source, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("tokens: %s: %w", path, err)
	}
	shared.Lock()
	defer shared.Unlock()
	if s := shared.files[abs].Value(); s != nil {
		fi, err := os.Stat(path)
		if err == nil && os.SameFile(fi, s.fi) && fi.Size() == s.size && fi.ModTime().Equal(s.fi.ModTime()) && s.check(make([]byte, len(s.head))) == nil {
			return s, nil
		}
	}
	f, fi, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	lay, head, err := probe(f, fi.Size(), path, stop)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &source{r: f, f: f, fi: fi, size: fi.Size(), head: head, lay: lay}
	if shared.files == nil {
		shared.files = map[string]weak.Pointer[source]{}
	}
	for k, w := range shared.files {
		if w.Value() == nil {
			delete(shared.files, k)
		}
	}
	shared.files[abs] = weak.Make(s)
	return s, nil
}
