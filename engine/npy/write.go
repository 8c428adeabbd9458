package npy

import (
	"bufio"
	"encoding/binary"
	"github.com/zeroeng/zeroeng/internal/fileio"
	"io"
	"os"
	"strconv"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// writeDescrs are the type strings np.save writes for each dtype.
var writeDescrs = map[dtype.DType]string{
	dtype.Float32: "<f4", dtype.Float64: "<f8", dtype.Float16: "<f2",
	dtype.Int64: "<i8", dtype.Int32: "<i4", dtype.Uint8: "|u1", dtype.Bool: "|b1",
}

// Write writes arr in the .npy format, byte for byte as NumPy's np.save
// writes the same C-order array: version 1.0 (2.0 only if the header does not
// fit), the header padded so that the data starts at a multiple of 64 bytes,
// with the spare room NumPy leaves for growing the first dimension in place.
func Write(w io.Writer, arr *Array) error {
	return write(w, arr, "")
}

func write(w io.Writer, arr *Array, path string) error {
	p := prefix(path)
	hdr, err := encodeHeader(p, arr)
	if err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return p.errorf("%w", err)
	}
	if _, err := w.Write(arr.Data); err != nil {
		return p.errorf("%w", err)
	}
	return nil
}

// encodeHeader validates arr and returns everything before its data.
func encodeHeader(p prefix, arr *Array) ([]byte, error) {
	if arr.DType == dtype.BFloat16 {
		return nil, p.errorf("bfloat16 has no NumPy descriptor; convert the array to float32 to save it as .npy")
	}
	descr, ok := writeDescrs[arr.DType]
	if !ok {
		return nil, p.errorf("invalid dtype %v", arr.DType)
	}
	n, strided := int64(1), int64(1)
	for _, d := range arr.Shape {
		if d < 0 {
			return nil, p.errorf("shape %v has a negative dimension", arr.Shape)
		}
		if d == 0 {
			n = 0
			continue
		}
		if strided > maxInt/int64(d) {
			return nil, p.errorf("shape %v: the element count overflows int64", arr.Shape)
		}
		strided *= int64(d)
		n *= int64(d)
	}
	if n > maxInt/8 || n*int64(arr.DType.Size()) != int64(len(arr.Data)) {
		return nil, p.errorf("shape %v of %v needs %d bytes, Data has %d", arr.Shape, arr.DType, n*int64(arr.DType.Size()), len(arr.Data))
	}

	// As numpy.lib.format._write_array_header: the dict with sorted keys and
	// repr values, room for the first dimension to grow to 21 digits, then
	// spaces and a newline up to a multiple of 64 bytes.
	dict := []byte("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (")
	for i, d := range arr.Shape {
		if i > 0 {
			dict = append(dict, ", "...)
		}
		dict = strconv.AppendInt(dict, int64(d), 10)
	}
	if len(arr.Shape) == 1 {
		dict = append(dict, ',')
	}
	dict = append(dict, "), }"...)
	if len(arr.Shape) > 0 {
		for range 21 - len(strconv.Itoa(arr.Shape[0])) {
			dict = append(dict, ' ')
		}
	}
	for _, v := range []struct {
		major byte
		plen  int
		limit int
	}{{1, 10, 1<<16 - 1}, {2, 12, 1<<32 - 1}} {
		hlen := len(dict) + 1 // the newline
		pad := 64 - (v.plen+hlen)%64
		if hlen+pad > v.limit {
			continue
		}
		out := make([]byte, 0, v.plen+hlen+pad)
		out = append(out, magic...)
		out = append(out, v.major, 0)
		if v.major == 1 {
			out = binary.LittleEndian.AppendUint16(out, uint16(hlen+pad))
		} else {
			out = binary.LittleEndian.AppendUint32(out, uint32(hlen+pad))
		}
		out = append(out, dict...)
		for range pad {
			out = append(out, ' ')
		}
		return append(out, '\n'), nil
	}
	return nil, p.errorf("header of %d bytes is too large", len(dict))
}

// WriteFile writes arr to path atomically: to a temporary file in the same
// directory, synced, then renamed over path, and the directory synced. On any
// error path is left as it was and the temporary file is removed.
func WriteFile(path string, arr *Array) error {
	p := prefix(path)
	if _, err := encodeHeader(p, arr); err != nil {
		return err // before creating anything
	}
	return fileio.WriteAtomic("npy", path, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		if err := write(bw, arr, path); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return p.errorf("%w", err)
		}
		return nil
	})
}
