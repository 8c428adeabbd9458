// Package npy reads and writes NumPy .npy files (format versions 1.0, 2.0 and
// 3.0, https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
//
// A file is the magic string "\x93NUMPY", a major and minor version, a
// little-endian header length (2 bytes in version 1.0, 4 bytes later), a header
// that is a Python dict literal such as
//
//	{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//
// padded with spaces and a newline, and then the raw array data.
//
// The package owns the file format only: it produces and consumes a raw array
// (element type, shape, little-endian row-major bytes) that the tensor layer
// wraps. Reading normalises what NumPy may write into that one form:
//
//   - Big-endian arrays ('>f4') are converted to little endian.
//   - Fortran-order arrays are transposed to C order. Rejecting them would make
//     np.asfortranarray output, and arrays saved from transposes by code that
//     does not call ascontiguousarray, unreadable for no good reason; the copy
//     costs what one pass over the data costs, and only those files pay it.
//   - The integer types the engine has no kernels for are widened exactly:
//     int8, int16 and uint16 to int32, uint32 to int64. Such arrays hold
//     labels, token ids and indices, which the engine uses as int32/int64
//     anyway (idx files are widened the same way), so rejecting them would
//     only force users back to NumPy to convert. uint64 is rejected, since
//     int64 cannot hold all its values, and so are complex, string, object,
//     datetime and structured dtypes.
//
// Writing produces the bytes NumPy's np.save produces for the same C-order
// little-endian array. bfloat16 has no NumPy descriptor, so writing it is an
// error.
package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/zeroeng/zeroeng/internal/fileio"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/internal/safefile"
)

// Array is an n-dimensional array: little-endian, C-order (row-major) Data of
// exactly numel·DType.Size() bytes. A 0-d array has an empty Shape and one
// element.
type Array struct {
	DType dtype.DType
	Shape []int
	Data  []byte
}

const magic = "\x93NUMPY"

// maxHeaderLen bounds the header. NumPy refuses headers over 10000 characters
// unless told to trust the file; a valid header needs about 130 bytes plus 22
// per dimension, so this is generous, and it stops a bogus length from being
// honoured.
const maxHeaderLen = 1 << 20

// Parse parses a whole .npy file held in memory. The data must be exactly
// what the header describes. When no conversion is needed (a little-endian,
// C-order array of an engine dtype) Data shares memory with data.
func Parse(data []byte) (*Array, error) {
	return parse(data, "")
}

func parse(data []byte, path string) (*Array, error) {
	p := prefix(path)
	h, err := parsePreamble(p, data)
	if err != nil {
		return nil, err
	}
	rest := data[h.dataStart:]
	if int64(len(rest)) < h.nbytes {
		return nil, p.errorf("data is %d bytes, but shape %s of '%s' needs %d", len(rest), h.shapeString(), h.descr.name, h.nbytes)
	}
	if int64(len(rest)) > h.nbytes {
		return nil, p.errorf("%d trailing bytes after the %d bytes of data that shape %s of '%s' needs",
			int64(len(rest))-h.nbytes, h.nbytes, h.shapeString(), h.descr.name)
	}
	return h.array(rest), nil
}

// parsePreamble parses everything before the data.
func parsePreamble(p prefix, data []byte) (*header, error) {
	if len(data) < 10 {
		return nil, p.errorf("file is %d bytes, too short for the magic string and header length", len(data))
	}
	plen, err := checkMagic(p, data[:8])
	if err != nil {
		return nil, err
	}
	if len(data) < plen {
		return nil, p.errorf("file is %d bytes, too short for the magic string and header length", len(data))
	}
	hlen := headerLen(data[8:plen])
	if hlen > maxHeaderLen {
		return nil, p.errorf("header length %d is larger than the %d-byte limit", hlen, maxHeaderLen)
	}
	if hlen > uint64(len(data)-plen) {
		return nil, p.errorf("header length %d is larger than the %d bytes that follow it", hlen, len(data)-plen)
	}
	h, err := parseHeader(p, data[plen:plen+int(hlen)])
	if err != nil {
		return nil, err
	}
	h.dataStart = plen + int(hlen)
	return h, nil
}

// Header is what a .npy file's preamble says of its array: the type
// string as written (Descr, "<u2"), the shape, the order, and where its
// data starts in the file and how many bytes it takes.
type Header struct {
	Descr      string
	Shape      []int
	Fortran    bool
	DataOffset int64
	DataBytes  int64
}

// ReadHeader reads and checks the preamble of the .npy data in r (size
// bytes; name in errors) without reading its data, for readers that take
// the elements from the file as they need them: the magic string, the
// version, the header (bounded), its type, order and shape, and that the
// data that follows is exactly what the shape needs.
func ReadHeader(r io.ReaderAt, size int64, name string) (*Header, error) {
	p := prefix(name)
	if size < 10 {
		return nil, p.errorf("file is %d bytes, too short for the magic string and header length", size)
	}
	pre := make([]byte, min(size, 12))
	if _, err := r.ReadAt(pre, 0); err != nil {
		return nil, p.errorf("reading the preamble: %v", err)
	}
	plen, err := checkMagic(p, pre[:8])
	if err != nil {
		return nil, err
	}
	if size < int64(plen) {
		return nil, p.errorf("file is %d bytes, too short for the magic string and header length", size)
	}
	hlen := headerLen(pre[8:plen])
	if hlen > maxHeaderLen {
		return nil, p.errorf("header length %d is larger than the %d-byte limit", hlen, maxHeaderLen)
	}
	if hlen > uint64(size)-uint64(plen) {
		return nil, p.errorf("header length %d is larger than the %d bytes that follow it", hlen, size-int64(plen))
	}
	b := make([]byte, hlen)
	if _, err := r.ReadAt(b, int64(plen)); err != nil {
		return nil, p.errorf("reading the header: %v", err)
	}
	h, err := parseHeader(p, b)
	if err != nil {
		return nil, err
	}
	start := int64(plen) + int64(hlen)
	switch have := size - start; {
	case have < h.nbytes:
		return nil, p.errorf("data is %d bytes, but shape %s of '%s' needs %d", have, h.shapeString(), h.descr.name, h.nbytes)
	case have > h.nbytes:
		return nil, p.errorf("%d trailing bytes after the %d bytes of data that shape %s of '%s' needs", have-h.nbytes, h.nbytes, h.shapeString(), h.descr.name)
	}
	return &Header{Descr: h.descr.name, Shape: h.shape, Fortran: h.fortran, DataOffset: start, DataBytes: h.nbytes}, nil
}

// checkMagic checks the magic string and version and returns the length of
// the preamble: magic, version and header length.
func checkMagic(p prefix, b []byte) (int, error) {
	if string(b[:6]) != magic {
		return 0, p.errorf("not a .npy file: magic string is %q, want %q", b[:6], magic)
	}
	major, minor := b[6], b[7]
	switch {
	case minor != 0 || major < 1 || major > 3:
		return 0, p.errorf("unsupported format version %d.%d (want 1.0, 2.0 or 3.0)", major, minor)
	case major == 1:
		return 10, nil
	}
	return 12, nil
}

func headerLen(b []byte) uint64 {
	if len(b) == 2 {
		return uint64(binary.LittleEndian.Uint16(b))
	}
	return uint64(binary.LittleEndian.Uint32(b))
}

// ReadFile reads the .npy file at path. Like Parse, it requires the data to be
// exactly what the header describes, and it checks the file size against the
// header before allocating the data.
func ReadFile(path string) (*Array, error) {
	f, fi, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("npy: %w", err)
	}
	defer f.Close()
	size := fi.Size()
	return read(f, path, size, true)
}

// Read reads one array from r and stops right after its data, without reading
// further: like np.load on an open file, it reads arrays that np.save wrote
// one after another into the same file. The data buffer grows as data
// arrives, so a header that declares more data than r holds fails without
// allocating the declared size.
func Read(r io.Reader) (*Array, error) {
	return read(r, "", -1, false)
}

// read reads one array; size is the file size, < 0 when unknown. whole
// requires r to end right after the data.
func read(r io.Reader, path string, size int64, whole bool) (*Array, error) {
	p := prefix(path)
	pre := make([]byte, 12)
	if m, err := io.ReadFull(r, pre[:10]); err != nil {
		return nil, p.shortRead(err, m)
	}
	plen, err := checkMagic(p, pre[:8])
	if err != nil {
		return nil, err
	}
	if plen == 12 {
		if m, err := io.ReadFull(r, pre[10:12]); err != nil {
			return nil, p.shortRead(err, 10+m)
		}
	}
	hlen := headerLen(pre[8:plen])
	if hlen > maxHeaderLen {
		return nil, p.errorf("header length %d is larger than the %d-byte limit", hlen, maxHeaderLen)
	}
	if size >= 0 && int64(hlen) > size-int64(plen) {
		return nil, p.errorf("header length %d is larger than the %d bytes that follow it", hlen, size-int64(plen))
	}
	hdr, err := fileio.ReadExact(r, int(hlen), false)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, p.errorf("header length %d is larger than the %d bytes that follow it", hlen, len(hdr))
		}
		return nil, p.errorf("reading the header: %w", err)
	}
	h, err := parseHeader(p, hdr)
	if err != nil {
		return nil, err
	}
	if size >= 0 {
		have := size - int64(plen) - int64(hlen)
		if have < h.nbytes {
			return nil, p.errorf("data is %d bytes, but shape %s of '%s' needs %d", have, h.shapeString(), h.descr.name, h.nbytes)
		}
		if have > h.nbytes && whole {
			return nil, p.errorf("%d trailing bytes after the %d bytes of data that shape %s of '%s' needs",
				have-h.nbytes, h.nbytes, h.shapeString(), h.descr.name)
		}
	}
	data, err := fileio.ReadExact(r, int(h.nbytes), size >= 0)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, p.errorf("data is %d bytes, but shape %s of '%s' needs %d", len(data), h.shapeString(), h.descr.name, h.nbytes)
		}
		return nil, p.errorf("reading the data: %w", err)
	}
	if whole && size < 0 {
		var probe [1]byte
		if m, _ := io.ReadFull(r, probe[:]); m > 0 {
			return nil, p.errorf("trailing bytes after the %d bytes of data that shape %s of '%s' needs",
				h.nbytes, h.shapeString(), h.descr.name)
		}
	}
	return h.array(data), nil
}

func (p prefix) shortRead(err error, m int) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return p.errorf("file is %d bytes, too short for the magic string and header length", m)
	}
	return p.errorf("%w", err)
}

// array converts the file's data (exactly h.nbytes) to a little-endian,
// C-order array of an engine dtype. It copies only when it converts.
func (h *header) array(data []byte) *Array {
	d := h.descr
	out := data
	if d.size != d.out.Size() || (d.bigEndian && d.size > 1) {
		out = convert(data, d)
	}
	if h.fortran {
		out = fortranToC(out, h.shape, d.out.Size())
	}
	return &Array{DType: d.out, Shape: h.shape, Data: out}
}

// convert byte-swaps and widens the elements of data to d.out.
func convert(data []byte, d descr) []byte {
	n := len(data) / d.size
	osz := d.out.Size()
	out := make([]byte, n*osz)
	var ord binary.ByteOrder = binary.LittleEndian
	if d.bigEndian {
		ord = binary.BigEndian
	}
	for i := range n {
		src := data[i*d.size : (i+1)*d.size]
		dst := out[i*osz : (i+1)*osz]
		switch {
		case d.size == osz && osz == 2:
			binary.LittleEndian.PutUint16(dst, ord.Uint16(src))
		case d.size == osz && osz == 4:
			binary.LittleEndian.PutUint32(dst, ord.Uint32(src))
		case d.size == osz && osz == 8:
			binary.LittleEndian.PutUint64(dst, ord.Uint64(src))
		case d.kind == 'i' && d.size == 1: // int8 -> int32
			binary.LittleEndian.PutUint32(dst, uint32(int32(int8(src[0]))))
		case d.kind == 'i' && d.size == 2: // int16 -> int32
			binary.LittleEndian.PutUint32(dst, uint32(int32(int16(ord.Uint16(src)))))
		case d.kind == 'u' && d.size == 2: // uint16 -> int32
			binary.LittleEndian.PutUint32(dst, uint32(ord.Uint16(src)))
		case d.kind == 'u' && d.size == 4: // uint32 -> int64
			binary.LittleEndian.PutUint64(dst, uint64(ord.Uint32(src)))
		}
	}
	return out
}

// fortranToC transposes column-major data of the given shape to row-major.
func fortranToC(data []byte, shape []int, size int) []byte {
	big := 0
	for _, d := range shape {
		if d > 1 {
			big++
		}
	}
	if big <= 1 || len(data) == 0 {
		return data // with at most one dimension > 1 the layouts coincide
	}
	nd := len(shape)
	fstride := make([]int, nd) // column-major strides, in bytes
	s := size
	for i := range nd {
		fstride[i] = s
		s *= shape[i]
	}
	out := make([]byte, len(data))
	idx := make([]int, nd)
	src := 0
	last := nd - 1
	for dst := 0; dst < len(out); {
		// The last C dimension is the innermost loop.
		for range shape[last] {
			copy(out[dst:dst+size], data[src:src+size])
			dst += size
			src += fstride[last]
		}
		src -= shape[last] * fstride[last]
		for j := last - 1; j >= 0; j-- {
			idx[j]++
			src += fstride[j]
			if idx[j] < shape[j] {
				break
			}
			src -= idx[j] * fstride[j]
			idx[j] = 0
		}
	}
	return out
}

// prefix is the start of error messages: the file path when known.
type prefix string

func (p prefix) errorf(format string, args ...any) error {
	if p == "" {
		return fmt.Errorf("npy: "+format, args...)
	}
	return fmt.Errorf("npy: %s: "+format, append([]any{string(p)}, args...)...)
}
