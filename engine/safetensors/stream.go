package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Files too large to hold at once: a writer that takes the tensors' data one
// piece at a time, and a reader of the header alone, whose tensors are then
// read with positioned reads of the data they need.

// Spec is a tensor to be written without its data at hand: its name, dtype
// and shape.
type Spec struct {
	Name  string
	DType dtype.DType
	Shape []int
}

// DataOrder returns the order in which the data of specs is laid out (and
// must be written to a StreamWriter): Write's, descending dtype alignment,
// then name.
func DataOrder(specs []Spec) []int {
	order := make([]int, len(specs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ra, rb := alignRank[specs[a].DType], alignRank[specs[b].DType]
		if ra != rb {
			return rb - ra
		}
		switch {
		case specs[a].Name < specs[b].Name:
			return -1
		case specs[a].Name > specs[b].Name:
			return 1
		}
		return 0
	})
	return order
}

// StreamWriter writes a safetensors file whose tensors' data arrives in
// pieces, so that no more than a piece is ever held: NewStreamWriter writes
// the header, then Write takes the data of the tensors in DataOrder, one
// after another, in pieces of any size, and Close checks that all of it
// came. The file is byte for byte the one Write makes of the same tensors.
type StreamWriter struct {
	w     io.Writer
	specs []Spec
	order []int
	sizes []int64 // bytes, by spec
	next  int     // position in order
	left  int64   // bytes of order[next] not yet written
}

// NewStreamWriter validates specs and metadata (as Write does) and writes
// the header to w.
func NewStreamWriter(w io.Writer, specs []Spec, metadata map[string]string) (*StreamWriter, error) {
	p := prefix("")
	hdr, order, sizes, err := encodeSpecHeader(p, specs, metadata)
	if err != nil {
		return nil, err
	}
	var pre [8]byte
	binary.LittleEndian.PutUint64(pre[:], uint64(len(hdr)))
	if _, err := w.Write(pre[:]); err != nil {
		return nil, p.errorf("%w", err)
	}
	if _, err := w.Write(hdr); err != nil {
		return nil, p.errorf("%w", err)
	}
	s := &StreamWriter{w: w, specs: specs, order: order, sizes: sizes}
	s.skipEmpty()
	return s, nil
}

// Current is the index in specs of the tensor whose data Write expects
// next, and how many of its bytes are still to come; -1 once all came.
func (s *StreamWriter) Current() (int, int64) {
	if s.next >= len(s.order) {
		return -1, 0
	}
	return s.order[s.next], s.left
}

func (s *StreamWriter) skipEmpty() {
	for s.next < len(s.order) {
		s.left = s.sizes[s.order[s.next]]
		if s.left > 0 {
			return
		}
		s.next++
	}
}

// Write writes the next bytes of data, which may span several tensors; more
// than the tensors hold is an error.
func (s *StreamWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		if s.next >= len(s.order) {
			return n, fmt.Errorf("safetensors: %d bytes beyond the data of the last tensor", len(b))
		}
		k := int(min(int64(len(b)), s.left))
		m, err := s.w.Write(b[:k])
		n += m
		if err != nil {
			return n, prefix("").errorf("tensor %q: %w", s.specs[s.order[s.next]].Name, err)
		}
		b = b[k:]
		s.left -= int64(k)
		if s.left == 0 {
			s.next++
			s.skipEmpty()
		}
	}
	return n, nil
}

// Close reports whether every tensor's data was written; it does not close
// the underlying writer.
func (s *StreamWriter) Close() error {
	if i, left := s.Current(); i >= 0 {
		return fmt.Errorf("safetensors: tensor %q is missing %d bytes of data", s.specs[i].Name, left)
	}
	return nil
}

// encodeSpecHeader validates tensors known by their specs and returns the
// padded header, the data order and each tensor's size in bytes.
func encodeSpecHeader(p prefix, specs []Spec, metadata map[string]string) ([]byte, []int, []int64, error) {
	seen := make(map[string]bool, len(specs))
	sizes := make([]int64, len(specs))
	for i, t := range specs {
		switch {
		case t.Name == "__metadata__":
			return nil, nil, nil, p.errorf("tensor %q: the name is reserved for the metadata", t.Name)
		case !utf8.ValidString(t.Name):
			return nil, nil, nil, p.errorf("tensor %q: name is not valid UTF-8", t.Name)
		case seen[t.Name]:
			return nil, nil, nil, p.errorf("duplicate tensor name %q", t.Name)
		case !t.DType.Valid():
			return nil, nil, nil, p.errorf("tensor %q: invalid dtype %v", t.Name, t.DType)
		}
		seen[t.Name] = true
		nbytes, ok := byteSize(t.Shape, t.DType.Size())
		if !ok {
			return nil, nil, nil, p.errorf("tensor %q: shape %v has a negative dimension, or its element count or byte size overflows int64", t.Name, t.Shape)
		}
		sizes[i] = nbytes
	}
	keys := make([]string, 0, len(metadata))
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, nil, nil, p.errorf("metadata %q: %q: not valid UTF-8", k, v)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	order := DataOrder(specs)
	b := []byte{'{'}
	if len(keys) > 0 {
		b = append(b, `"__metadata__":{`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, metadata[k])
		}
		b = append(b, '}')
	}
	var off int64
	for n, i := range order {
		t := &specs[i]
		if n > 0 || len(keys) > 0 {
			b = append(b, ',')
		}
		b = appendString(b, t.Name)
		b = append(b, `:{"dtype":"`...)
		b = append(b, t.DType.Safetensors()...)
		b = append(b, `","shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, off, 10)
		b = append(b, ',')
		off += sizes[i]
		b = strconv.AppendInt(b, off, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	if len(b) > MaxHeaderSize {
		return nil, nil, nil, p.errorf("header is %d bytes, larger than the %d-byte limit of readers", len(b), MaxHeaderSize)
	}
	return b, order, sizes, nil
}

// Header is a file's header without its data: the metadata, and where each
// tensor's data lies in the file.
type Header struct {
	Metadata map[string]string
	// Tensors are in data order.
	Tensors []TensorInfo
	// Size is the file's size in bytes.
	Size int64

	index map[string]int
}

// TensorInfo is one tensor of a Header.
type TensorInfo struct {
	Name  string
	DType dtype.DType
	Shape []int
	// Begin and End are the bounds of its data, as offsets in the file
	// (not in the data section).
	Begin, End int64
}

// Get returns the tensor with the given name.
func (h *Header) Get(name string) (*TensorInfo, bool) {
	i, ok := h.index[name]
	if !ok {
		return nil, false
	}
	return &h.Tensors[i], true
}

// ReadHeader reads and validates the header of a file of size bytes through
// r, without reading its data: everything Parse checks but the data itself
// (the tensors tile a data section that fills the rest of the file). path
// names the file in errors ("" for none).
func ReadHeader(r io.ReaderAt, size int64, path string) (*Header, error) {
	p := prefix(path)
	if size < 8 {
		return nil, p.errorf("file is %d bytes, shorter than the 8-byte header length", max(size, 0))
	}
	var pre [8]byte
	if _, err := r.ReadAt(pre[:], 0); err != nil {
		return nil, p.errorf("reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(pre[:])
	if err := checkHeaderLen(p, n, size); err != nil {
		return nil, err
	}
	hdr := make([]byte, n)
	if m, err := r.ReadAt(hdr, 8); m != len(hdr) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, p.errorf("reading the header: %w", err)
	}
	h, err := parseHeader(p, hdr)
	if err != nil {
		return nil, err
	}
	start := 8 + int64(n)
	if err := h.layout(p, size-start); err != nil {
		return nil, err
	}
	out := &Header{Metadata: h.metadata, Tensors: make([]TensorInfo, len(h.entries)), Size: size, index: make(map[string]int, len(h.entries))}
	for i, e := range h.entries {
		out.Tensors[i] = TensorInfo{Name: e.name, DType: e.dtype, Shape: e.shape, Begin: start + e.begin, End: start + e.end}
		out.index[e.name] = i
	}
	return out, nil
}
