package safetensors

import (
	"bufio"
	"encoding/binary"
	"github.com/zeroeng/zeroeng/internal/fileio"
	"io"
	"os"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// alignRank orders dtypes as the reference implementation's Dtype enum does
// (BOOL < U8 < F16 < BF16 < I32 < F32 < F64 < I64, "increasing alignment").
var alignRank = map[dtype.DType]int{
	dtype.Bool:     0,
	dtype.Uint8:    1,
	dtype.Float16:  2,
	dtype.BFloat16: 3,
	dtype.Int32:    4,
	dtype.Float32:  5,
	dtype.Float64:  6,
	dtype.Int64:    7,
}

// Write writes tensors and metadata (which may be nil) in the safetensors
// format.
//
// The layout is the one current versions of the Python library produce (its
// Rust core serialises: prepare in safetensors/src/tensor.rs), byte for byte:
// tensors sorted by descending dtype alignment, then by name, with the data
// laid out in that order so that each tensor is aligned to its element size
// (readers of any order are fine: the format only requires that the offsets
// tile the data section); the header lists
// "__metadata__" first (keys sorted here, where Rust's hash map order is
// random), then the tensors in data order, as compact JSON with the same
// string escapes as serde_json, padded with spaces to a multiple of 8 bytes.
//
// Data is written straight from the tensors, without an intermediate copy.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	return write(w, tensors, metadata, "")
}

func write(w io.Writer, tensors []Tensor, metadata map[string]string, path string) error {
	p := prefix(path)
	hdr, order, err := encodeHeader(p, tensors, metadata)
	if err != nil {
		return err
	}
	var pre [8]byte
	binary.LittleEndian.PutUint64(pre[:], uint64(len(hdr)))
	if _, err := w.Write(pre[:]); err != nil {
		return p.errorf("%w", err)
	}
	if _, err := w.Write(hdr); err != nil {
		return p.errorf("%w", err)
	}
	for _, i := range order {
		if _, err := w.Write(tensors[i].Data); err != nil {
			return p.errorf("tensor %q: %w", tensors[i].Name, err)
		}
	}
	return nil
}

// encodeHeader validates the tensors and returns the padded header and the
// data order: encodeSpecHeader's, with each tensor's data checked against
// its shape.
func encodeHeader(p prefix, tensors []Tensor, metadata map[string]string) ([]byte, []int, error) {
	specs := make([]Spec, len(tensors))
	for i, t := range tensors {
		specs[i] = Spec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	hdr, order, sizes, err := encodeSpecHeader(p, specs, metadata)
	if err != nil {
		return nil, nil, err
	}
	for i, t := range tensors {
		if int64(len(t.Data)) != sizes[i] {
			return nil, nil, p.errorf("tensor %q: shape %v of %v needs %d bytes, Data has %d",
				t.Name, t.Shape, t.DType, sizes[i], len(t.Data))
		}
	}
	return hdr, order, nil
}

// appendString appends s as a JSON string escaped as serde_json does: only
// the quote, the backslash and control characters, with lowercase hex; other
// characters are written as UTF-8. (encoding/json would also escape <, >, &
// and U+2028/U+2029, so its headers would differ from the Python library's.)
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// WriteFile writes the tensors to path atomically: to a temporary file in the
// same directory, synced, then renamed over path, and the directory synced. On
// any error path is left as it was and the temporary file is removed.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	p := prefix(path)
	// Validate before creating anything.
	if _, _, err := encodeHeader(p, tensors, metadata); err != nil {
		return err
	}
	return fileio.WriteAtomic("safetensors", path, func(f *os.File) error {
		// Large tensors bypass the buffer; small ones are batched.
		bw := bufio.NewWriterSize(f, 1<<20)
		if err := write(bw, tensors, metadata, path); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return p.errorf("%w", err)
		}
		return nil
	})
}
