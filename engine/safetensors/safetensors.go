// Package safetensors reads and writes the Hugging Face safetensors format
// (https://github.com/huggingface/safetensors), the format of PyTorch and
// Hugging Face checkpoints.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON header,
// and the data section. The header maps each tensor name to its dtype, shape
// and [begin, end) byte offsets in the data section, plus an optional
// "__metadata__" map of strings. Tensor data is little endian and row-major.
//
// The package owns the file format only. It produces and consumes raw tensors
// (element type, shape, bytes); the tensor layer wraps them. Readers validate
// everything the format requires, in particular that the tensors cover the data
// section exactly, without overlaps or holes, and a declared size never makes
// them allocate more than the input holds. Every error names the file (when
// known), the tensor and the offending values.
package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/zeroeng/zeroeng/internal/fileio"
	"io"
	"slices"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/internal/safefile"
)

// MaxHeaderSize is the largest header, in bytes, that readers accept and
// writers produce. It is the limit of the reference implementation, so that
// files written here load everywhere.
const MaxHeaderSize = 100_000_000

// Tensor is one named tensor: element type, shape and little-endian, row-major
// data of exactly numel·DType.Size() bytes. A 0-d tensor (a scalar) has an
// empty Shape and one element.
type Tensor struct {
	Name  string
	DType dtype.DType
	Shape []int
	Data  []byte
}

// File is the parsed content of a safetensors file.
type File struct {
	// Metadata is the header's "__metadata__" map, nil when there is none.
	Metadata map[string]string
	// Tensors are in data order: sorted by their offset in the data section.
	Tensors []Tensor

	index map[string]int
}

// Get returns the tensor with the given name.
func (f *File) Get(name string) (*Tensor, bool) {
	if f.index == nil {
		// A File built by hand rather than parsed: search.
		for i := range f.Tensors {
			if f.Tensors[i].Name == name {
				return &f.Tensors[i], true
			}
		}
		return nil, false
	}
	i, ok := f.index[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Names returns the tensor names in data order.
func (f *File) Names() []string {
	names := make([]string, len(f.Tensors))
	for i := range f.Tensors {
		names[i] = f.Tensors[i].Name
	}
	return names
}

// Parse parses a whole safetensors file held in memory. The tensors' Data
// slices share memory with data: nothing is copied. Tensors are aligned to
// their element size when data is 8-byte aligned and the file was written in
// alignment order, as Write and the Python library do.
func Parse(data []byte) (*File, error) {
	return parse(data, "")
}

func parse(data []byte, path string) (*File, error) {
	p := prefix(path)
	if len(data) < 8 {
		return nil, p.errorf("file is %d bytes, shorter than the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if err := checkHeaderLen(p, n, int64(len(data))); err != nil {
		return nil, err
	}
	h, err := parseHeader(p, data[8:8+n])
	if err != nil {
		return nil, err
	}
	body := data[8+n:]
	if err := h.layout(p, int64(len(body))); err != nil {
		return nil, err
	}
	return h.file(body), nil
}

// checkHeaderLen validates the declared header length n against the limit and
// against the file size (when known, size >= 0) before anything is allocated.
func checkHeaderLen(p prefix, n uint64, size int64) error {
	if n > MaxHeaderSize {
		return p.errorf("header length %d is larger than the %d-byte limit", n, MaxHeaderSize)
	}
	if size >= 0 && n > uint64(size-8) {
		return p.errorf("header length %d is larger than the %d bytes that follow it in the file", n, size-8)
	}
	return nil
}

// ReadFile reads and parses the safetensors file at path.
//
// It reads the header first and validates it against the file size, so that a
// file that is not safetensors is rejected without reading it all; then it
// reads the data section into one buffer of exactly its size and slices the
// tensors out of it, so the data is copied once, from the kernel.
//
// It reads rather than maps the file (syscall.Mmap) on purpose: a checkpoint
// is read once and then owned by the tensor layer, which may write to it and
// keeps it beyond the file's lifetime. A mapping would need an explicit Close
// whose misuse faults (a slice that outlives Munmap, a write to a read-only
// page) instead of returning an error, and a file truncated by another process
// while mapped raises SIGBUS. Reading costs one memory copy, which runs at
// several GB/s (see docs/benchmarks-io.md); mapping would save it only until
// the pages are touched.
//
// The data section gets its own allocation, so tensors written in alignment
// order (as Write and the Python library do) are aligned to their element size.
func ReadFile(path string) (*File, error) {
	f, fi, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	size := fi.Size()
	return read(f, path, size)
}

// Read reads a safetensors file from r, to its end. Since the stream's length
// is not known in advance, the data buffer grows as data arrives: a header
// that declares more data than the stream has fails without allocating the
// declared size.
func Read(r io.Reader) (*File, error) {
	return read(r, "", -1)
}

// read reads a file of size bytes, or of unknown size when size < 0.
func read(r io.Reader, path string, size int64) (*File, error) {
	p := prefix(path)
	var pre [8]byte
	if m, err := io.ReadFull(r, pre[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, p.errorf("file is %d bytes, shorter than the 8-byte header length", m)
		}
		return nil, p.errorf("%w", err)
	}
	if size >= 0 && size < 8 {
		size = -1 // the file grew since Stat: read it as a stream
	}
	n := binary.LittleEndian.Uint64(pre[:])
	if err := checkHeaderLen(p, n, size); err != nil {
		return nil, err
	}
	hdr, err := fileio.ReadExact(r, int(n), size >= 0)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, p.errorf("header length %d is larger than the %d bytes that follow it in the file", n, len(hdr))
		}
		return nil, p.errorf("reading the header: %w", err)
	}
	h, err := parseHeader(p, hdr)
	if err != nil {
		return nil, err
	}
	dataLen := int64(-1)
	if size >= 0 {
		dataLen = size - 8 - int64(n)
	}
	// With the size known this checks everything before the data is read;
	// otherwise it checks the layout and returns the size it describes.
	if err := h.layout(p, dataLen); err != nil {
		return nil, err
	}
	body, err := fileio.ReadExact(r, int(h.size), size >= 0)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			last := h.entries[len(h.entries)-1]
			return nil, p.errorf("tensor %q: data_offsets [%d, %d]: end is beyond the data section of %d bytes",
				last.name, last.begin, last.end, len(body))
		}
		return nil, p.errorf("reading the data: %w", err)
	}
	// Reading to EOF tells a stream with trailing bytes from a complete one.
	var probe [1]byte
	if m, _ := io.ReadFull(r, probe[:]); m > 0 {
		return nil, p.errorf("data section has trailing bytes after the last tensor (the tensors cover %d bytes)", h.size)
	}
	return h.file(body), nil
}

// file builds the File from a validated header and its data section.
func (h *header) file(body []byte) *File {
	f := &File{
		Metadata: h.metadata,
		Tensors:  make([]Tensor, len(h.entries)),
		index:    make(map[string]int, len(h.entries)),
	}
	for i, e := range h.entries {
		// The capacity is cut so that appending to one tensor's Data cannot
		// overwrite the next tensor.
		f.Tensors[i] = Tensor{Name: e.name, DType: e.dtype, Shape: e.shape, Data: body[e.begin:e.end:e.end]}
		f.index[e.name] = i
	}
	return f
}

// prefix is the start of error messages: the file path when known.
type prefix string

func (p prefix) errorf(format string, args ...any) error {
	if p == "" {
		return fmt.Errorf("safetensors: "+format, args...)
	}
	return fmt.Errorf("safetensors: %s: "+format, append([]any{string(p)}, args...)...)
}

// numel returns the element count of shape, or false if it overflows. Zero
// dimensions are skipped in the overflow check, so a shape accepted here has
// strides that all fit in an int, whatever its element count.
func numel(shape []int) (int64, bool) {
	n, strided := int64(1), int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d == 0 {
			n = 0
			continue
		}
		if strided > maxInt/int64(d) {
			return 0, false
		}
		strided *= int64(d)
		n *= int64(d)
	}
	return n, true
}

// maxInt is the largest element or byte count: an int64 that also fits in int.
const maxInt = int64(^uint(0) >> 1)

// byteSize returns numel(shape)·size or false on overflow.
func byteSize(shape []int, size int) (int64, bool) {
	n, ok := numel(shape)
	if !ok || (n > 0 && n > maxInt/int64(size)) {
		return 0, false
	}
	return n * int64(size), true
}

// shapeString formats a shape as JSON does: [2,3].
func shapeString(shape []int) string {
	b := []byte{'['}
	for i, d := range shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", d)
	}
	return string(append(b, ']'))
}

// sortEntries orders entries by data offset; zero-size tensors that share an
// offset keep a deterministic order by name.
func sortEntries(es []entry) {
	slices.SortFunc(es, func(a, b entry) int {
		if a.begin != b.begin {
			return cmpInt(a.begin, b.begin)
		}
		if a.end != b.end {
			return cmpInt(a.end, b.end)
		}
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
}

func cmpInt(a, b int64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}
