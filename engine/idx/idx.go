// Package idx reads the idx files of MNIST and Fashion-MNIST
// (http://yann.lecun.com/exdb/mnist/), raw or gzip-compressed.
//
// An idx file is a big-endian magic number 0x0000TTDD, where TT is the element
// type and DD the number of dimensions, then DD big-endian uint32 dimensions,
// then the elements, big endian, in row-major order.
//
// The package owns the file format only: it produces a raw array (element
// type, shape, little-endian row-major bytes) that the tensor layer wraps.
// Element types map to engine dtypes as follows:
//
//	0x08 unsigned byte  -> Uint8
//	0x09 signed byte    -> Int32 (widened)
//	0x0B short (int16)  -> Int32 (widened)
//	0x0C int (int32)    -> Int32
//	0x0D float          -> Float32
//	0x0E double         -> Float64
//
// The engine has no 8- or 16-bit signed integer type; widening is exact.
//
// Gzip input is recognised by its magic bytes (1f 8b), so "x.gz" and "x" read
// the same way whatever their names. The data must be exactly what the
// dimensions describe: trailing bytes are an error, since they mean that the
// header and the payload disagree (a wrong dimension would otherwise silently
// drop data), and reading to the end is what makes the gzip reader verify its
// checksum. Data is read as it arrives, so a header or gzip stream that
// declares more data than it holds fails without allocating the declared size.
package idx

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/klauspost/compress/gzip"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/internal/hostmem"
	"github.com/zeroeng/zeroeng/internal/safefile"
)

// Array is an n-dimensional array: little-endian, row-major Data of exactly
// numel·DType.Size() bytes.
type Array struct {
	DType dtype.DType
	Shape []int
	Data  []byte
}

// Type codes of the magic number.
const (
	typeUbyte  = 0x08
	typeSbyte  = 0x09
	typeShort  = 0x0B
	typeInt    = 0x0C
	typeFloat  = 0x0D
	typeDouble = 0x0E
)

// elem describes an element type: its size in the file and the dtype it is
// read as.
type elem struct {
	name string
	size int
	out  dtype.DType
}

var elems = map[byte]elem{
	typeUbyte:  {"unsigned byte", 1, dtype.Uint8},
	typeSbyte:  {"signed byte", 1, dtype.Int32},
	typeShort:  {"short", 2, dtype.Int32},
	typeInt:    {"int", 4, dtype.Int32},
	typeFloat:  {"float", 4, dtype.Float32},
	typeDouble: {"double", 8, dtype.Float64},
}

// ReadFile reads the idx file at path, raw or gzip-compressed.
func ReadFile(path string) (*Array, error) {
	f, fi, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("idx: %w", err)
	}
	defer f.Close()
	size := fi.Size()
	return read(f, path, size)
}

// Read reads an idx file from r, raw or gzip-compressed, to its end.
func Read(r io.Reader) (*Array, error) {
	return read(r, "", -1)
}

// Parse parses an idx file held in memory, raw or gzip-compressed. For a raw
// unsigned-byte file, Data shares memory with data; otherwise it is new.
func Parse(data []byte) (*Array, error) {
	if !isGzip(data) {
		p := prefix("")
		if len(data) < 4 {
			return nil, p.errorf("file is %d bytes, too short for the header", len(data))
		}
		e, err := checkMagic(p, data[:4])
		if err != nil {
			return nil, err
		}
		if len(data) < 4+4*int(data[3]) {
			return nil, p.errorf("file is %d bytes, too short for the header", len(data))
		}
		h, err := parseDims(p, e, data)
		if err != nil {
			return nil, err
		}
		body := data[h.dataStart:]
		if int64(len(body)) < h.nbytes {
			return nil, p.errorf("data is %d bytes, but %s needs %d", len(body), h, h.nbytes)
		}
		if int64(len(body)) > h.nbytes {
			return nil, p.errorf("%d trailing bytes after the %d bytes of data that %s needs", int64(len(body))-h.nbytes, h.nbytes, h)
		}
		return h.array(body), nil
	}
	return read(bytes.NewReader(data), "", -1)
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

// read reads an idx file; size is the file size, < 0 when unknown.
func read(r io.Reader, path string, size int64) (*Array, error) {
	p := prefix(path)
	br := bufio.NewReader(r)
	src := io.Reader(br)
	what := "file"
	// expandsTo bounds the decompressed size: deflate expands at most
	// 1032:1, so a gzip file of known size can hold no more than that,
	// and its data can be allocated at once instead of grown.
	expandsTo := int64(-1)
	if magic, _ := br.Peek(2); isGzip(magic) {
		if size >= 0 {
			expandsTo = size * maxDeflateRatio
		}
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, p.errorf("gzip: %w", err)
		}
		defer zr.Close()
		src = zr
		what = "decompressed data"
		size = -1
	}
	wrap := func(err error, m int) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return p.errorf("%s is %d bytes, too short for the header", what, m)
		}
		return p.errorf("%w", err)
	}
	var pre [4]byte
	if m, err := io.ReadFull(src, pre[:]); err != nil {
		return nil, wrap(err, m)
	}
	e, err := checkMagic(p, pre[:])
	if err != nil {
		return nil, err
	}
	dims := make([]byte, 4+4*int(pre[3]))
	copy(dims, pre[:])
	if m, err := io.ReadFull(src, dims[4:]); err != nil {
		return nil, wrap(err, 4+m)
	}
	h, err := parseDims(p, e, dims)
	if err != nil {
		return nil, err
	}
	var body []byte
	if size >= 0 {
		// A raw file of known size: check it, then read it at once.
		have := size - int64(h.dataStart)
		if have < h.nbytes {
			return nil, p.errorf("data is %d bytes, but %s needs %d", have, h, h.nbytes)
		}
		if have > h.nbytes {
			return nil, p.errorf("%d trailing bytes after the %d bytes of data that %s needs", have-h.nbytes, h.nbytes, h)
		}
		if err := hostmem.Check(h.nbytes); err != nil {
			return nil, p.errorf("%s: %w", h, err)
		}
		body = make([]byte, h.nbytes)
		var m int
		m, err = io.ReadFull(src, body)
		body = body[:m]
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errShortData // the file shrank
		}
	} else {
		first := int64(readChunk)
		if expandsTo >= 0 {
			first = expandsTo
		}
		body, err = readGrowing(src, h.nbytes, first)
	}
	switch {
	case errors.Is(err, errShortData):
		return nil, p.errorf("data is %d bytes, but %s needs %d", len(body), h, h.nbytes)
	case err != nil:
		return nil, p.errorf("reading the data, after %d of the %d bytes that %s needs: %w", len(body), h.nbytes, h, err)
	}
	// Read to the end: trailing bytes are an error, and the gzip reader
	// checks the stream's CRC and length only when it reaches the end.
	var probe [1]byte
	switch m, err := io.ReadFull(src, probe[:]); {
	case m > 0:
		// Count them, up to a bound: a gzip stream may expand without end.
		const most = 1 << 30
		rest, _ := io.Copy(io.Discard, io.LimitReader(src, most))
		if rest == most {
			return nil, p.errorf("over %d trailing bytes after the %d bytes of data that %s needs", most, h.nbytes, h)
		}
		return nil, p.errorf("%d trailing bytes after the %d bytes of data that %s needs", rest+1, h.nbytes, h)
	case err != nil && !errors.Is(err, io.EOF):
		return nil, p.errorf("%w", err)
	}
	return h.array(body), nil
}

// readChunk is the first allocation for data of unknown size; the buffer
// doubles from there as data arrives.
const readChunk = 64 << 10

// maxDeflateRatio is deflate's largest expansion: 258 bytes from a one-bit
// code, about 1032:1.
const maxDeflateRatio = 1032

// readGrowing reads exactly n bytes, growing its buffer as they arrive, so
// that a stream declaring more than it holds costs at most twice what it
// holds (or first, when that is larger). The buffer starts at first bytes
// when the caller knows the stream holds up to that much: a large buffer
// grown by doubling costs a copy and fresh pages at every step. If r ends
// early it returns the bytes read and errShortData.
func readGrowing(r io.Reader, n, first int64) ([]byte, error) {
	buf := make([]byte, 0, min(n, max(first, readChunk)))
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = append(make([]byte, 0, min(n, 2*int64(cap(buf)))), buf...)
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if errors.Is(err, io.EOF) {
			if int64(len(buf)) < n {
				return buf, errShortData
			}
			break
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

var errShortData = errors.New("short data")

// header is a parsed magic number and dimensions.
type header struct {
	code      byte
	elem      elem
	shape     []int
	nbytes    int64 // data bytes in the file
	dataStart int
}

// String describes the data for error messages: "shape [60000 28 28] of unsigned byte".
func (h *header) String() string {
	return fmt.Sprintf("shape %v of %s (type 0x%02X)", h.shape, h.elem.name, h.code)
}

// checkMagic checks the magic number, the first 4 bytes of b.
func checkMagic(p prefix, b []byte) (elem, error) {
	if b[0] != 0 || b[1] != 0 {
		return elem{}, p.errorf("bad magic number 0x%02X%02X%02X%02X: the first two bytes must be zero", b[0], b[1], b[2], b[3])
	}
	e, ok := elems[b[2]]
	if !ok {
		return elem{}, p.errorf("magic number 0x%08X: unknown type code 0x%02X (want 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)", binary.BigEndian.Uint32(b), b[2])
	}
	if b[3] == 0 {
		return elem{}, p.errorf("magic number 0x%08X: zero dimensions", binary.BigEndian.Uint32(b))
	}
	return e, nil
}

// parseDims parses the dimensions; b holds the magic number and all of them.
func parseDims(p prefix, e elem, b []byte) (*header, error) {
	nd := int(b[3])
	h := &header{code: b[2], elem: e, shape: make([]int, nd), dataStart: 4 + 4*nd}
	// The element count must fit in an int64 once widened to the output
	// type; zero dimensions are skipped so that every stride fits too.
	n, strided := int64(1), int64(1)
	limit := math.MaxInt / int64(e.out.Size())
	for i := range nd {
		d := int64(binary.BigEndian.Uint32(b[4+4*i:]))
		h.shape[i] = int(d)
		if d == 0 {
			n = 0
			continue
		}
		if strided > limit/d {
			return nil, p.errorf("dimensions %v of %s: the size overflows int64", dimsOf(b[4:h.dataStart]), e.name)
		}
		strided *= d
		n *= d
	}
	h.nbytes = n * int64(e.size)
	return h, nil
}

func dimsOf(b []byte) []uint32 {
	d := make([]uint32, len(b)/4)
	for i := range d {
		d[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return d
}

// array converts exactly h.nbytes of big-endian data to the output form.
func (h *header) array(data []byte) *Array {
	n := len(data) / h.elem.size
	var out []byte
	switch h.code {
	case typeUbyte:
		out = data
	case typeSbyte:
		out = make([]byte, 4*n)
		for i, v := range data {
			binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(int8(v))))
		}
	case typeShort:
		out = make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(int16(binary.BigEndian.Uint16(data[2*i:])))))
		}
	case typeInt, typeFloat:
		out = make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(out[4*i:], binary.BigEndian.Uint32(data[4*i:]))
		}
	case typeDouble:
		out = make([]byte, 8*n)
		for i := range n {
			binary.LittleEndian.PutUint64(out[8*i:], binary.BigEndian.Uint64(data[8*i:]))
		}
	}
	return &Array{DType: h.elem.out, Shape: h.shape, Data: out}
}

// Write writes arr as a raw (uncompressed) idx file: Uint8 as unsigned bytes,
// Int32 as int, Float32 as float, Float64 as double. It exists for tests and
// small synthetic data sets; other dtypes have no idx type code.
func Write(w io.Writer, arr *Array) error {
	var code byte
	switch arr.DType {
	case dtype.Uint8:
		code = typeUbyte
	case dtype.Int32:
		code = typeInt
	case dtype.Float32:
		code = typeFloat
	case dtype.Float64:
		code = typeDouble
	default:
		return fmt.Errorf("idx: %v has no idx type code (want uint8, int32, float32 or float64)", arr.DType)
	}
	if len(arr.Shape) == 0 || len(arr.Shape) > 255 {
		return fmt.Errorf("idx: shape %v: idx files have 1 to 255 dimensions", arr.Shape)
	}
	n := int64(1)
	for _, d := range arr.Shape {
		if d < 0 || int64(d) > math.MaxUint32 {
			return fmt.Errorf("idx: shape %v: dimensions must be in [0, 2^32)", arr.Shape)
		}
		if d > 0 && n > math.MaxInt64/int64(d) {
			return fmt.Errorf("idx: shape %v: the element count overflows int64", arr.Shape)
		}
		n *= int64(d)
	}
	size := arr.DType.Size()
	if n > math.MaxInt64/int64(size) || n*int64(size) != int64(len(arr.Data)) {
		return fmt.Errorf("idx: shape %v of %v needs %d bytes, Data has %d", arr.Shape, arr.DType, n*int64(size), len(arr.Data))
	}
	hdr := []byte{0, 0, code, byte(len(arr.Shape))}
	for _, d := range arr.Shape {
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(d))
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("idx: %w", err)
	}
	// Convert to big endian in chunks, so that writing needs no copy of the
	// whole array.
	buf := make([]byte, min(len(arr.Data), 1<<16))
	for off := 0; off < len(arr.Data); off += len(buf) {
		chunk := arr.Data[off:min(off+len(buf), len(arr.Data))]
		out := buf[:len(chunk)]
		switch size {
		case 1:
			copy(out, chunk)
		case 4:
			for i := 0; i < len(chunk); i += 4 {
				binary.BigEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(chunk[i:]))
			}
		case 8:
			for i := 0; i < len(chunk); i += 8 {
				binary.BigEndian.PutUint64(out[i:], binary.LittleEndian.Uint64(chunk[i:]))
			}
		}
		if _, err := w.Write(out); err != nil {
			return fmt.Errorf("idx: %w", err)
		}
	}
	return nil
}

// prefix is the start of error messages: the file path when known.
type prefix string

func (p prefix) errorf(format string, args ...any) error {
	if p == "" {
		return fmt.Errorf("idx: "+format, args...)
	}
	return fmt.Errorf("idx: %s: "+format, append([]any{string(p)}, args...)...)
}
