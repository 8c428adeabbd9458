package tensorio

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// OpenSafetensorsLazy reads the header of the safetensors file at path and
// returns its tensors as lazy tensors (tensor.LazyFrom) of rt: no data is
// read until it is needed, and then only the elements needed — a rank of a
// model built sharded (zero.init) reads its slices of each tensor. The file
// must stay as it is until then: a read checks its size and modification
// time and fails, naming the file, if it changed.
func OpenSafetensorsLazy(rt *tensor.Runtime, path string) (tensors []Named, metadata map[string]string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	h, err := safetensors.ReadHeader(f, fi.Size(), path)
	if err != nil {
		return nil, nil, err
	}
	file := &lazyFile{path: path, size: fi.Size(), mod: fi.ModTime()}
	out := make([]Named, 0, len(h.Tensors))
	for _, ti := range h.Tensors {
		src := &fileTensor{file: file, name: ti.Name, begin: ti.Begin, end: ti.End, size: ti.DType.Size()}
		t := rt.LazyFrom(ti.DType, src, ti.Shape...)
		if err := t.Err(); err != nil {
			for _, n := range out {
				n.Tensor.Release()
			}
			return nil, nil, fmt.Errorf("tensorio: %s: tensor %q: %w", path, ti.Name, err)
		}
		out = append(out, Named{ti.Name, t.Persist()})
	}
	return out, h.Metadata, nil
}

// lazyFile is a file whose tensors are read later, as it was when opened.
type lazyFile struct {
	path string
	size int64
	mod  time.Time
}

// fileTensor is one tensor's data in a lazyFile: bytes [begin, end).
type fileTensor struct {
	file       *lazyFile
	name       string
	begin, end int64
	size       int // of an element
}

// ReadElements implements tensor.LazySource.
func (t *fileTensor) ReadElements(dst []byte, lo int) error {
	at := t.begin + int64(lo)*int64(t.size)
	if lo < 0 || at+int64(len(dst)) > t.end {
		return fmt.Errorf("tensorio: %s: tensor %q: bytes %d to %d are outside its data", t.file.path, t.name, at, at+int64(len(dst)))
	}
	f, err := os.Open(t.file.path)
	if err != nil {
		return fmt.Errorf("tensorio: reading tensor %q: %w", t.name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("tensorio: reading tensor %q: %w", t.name, err)
	}
	if fi.Size() != t.file.size || !fi.ModTime().Equal(t.file.mod) {
		return fmt.Errorf("tensorio: %s changed after it was opened (%d bytes, modified %v; now %d bytes, modified %v): its tensor %q is read only when needed, so the file must stay as it is until the model is built", t.file.path, t.file.size, t.file.mod.Format(time.RFC3339Nano), fi.Size(), fi.ModTime().Format(time.RFC3339Nano), t.name)
	}
	if n, err := f.ReadAt(dst, at); n != len(dst) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("tensorio: %s: tensor %q: reading bytes %d to %d: %w", t.file.path, t.name, at, at+int64(len(dst)), err)
	}
	return nil
}
