package torchfile

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/internal/fileio"
)

// archiveName is the folder of a written file's records, as torch.save
// names it when it writes to a buffer.
const archiveName = "archive"

// alignment is where storages start in a written file, as torch.save
// aligns them (so that torch.load(mmap=True) can map them).
const alignment = 64

// storageNames are the storage types of the engine's dtypes.
var storageNames = map[dtype.DType]string{
	dtype.Float32: "FloatStorage", dtype.Float64: "DoubleStorage", dtype.Float16: "HalfStorage",
	dtype.BFloat16: "BFloat16Storage", dtype.Int64: "LongStorage", dtype.Int32: "IntStorage",
	dtype.Uint8: "ByteStorage", dtype.Bool: "BoolStorage",
}

// Write writes obj in PyTorch's zip format, which torch.load reads back as
// the same object. obj is a tree of what Parse returns: nil, bool, int64,
// float64, string, *Tensor, *Dict and *List. Every dict is written as an
// OrderedDict (what a state dict is), every list or tuple as itself, and
// every tensor in a storage of its own; a *Tensor that appears twice
// (tied weights) is written once, and torch.load gives one tensor for
// both. A tree that nests deeper than MaxDepth or contains itself is an
// error.
func Write(w io.Writer, obj any) error {
	e, err := encode(obj, "")
	if err != nil {
		return err
	}
	return e.writeZip(w)
}

// WriteFile writes obj to path atomically: to a temporary file in the same
// directory, synced, then renamed over path, and the directory synced. On
// any error path is left as it was.
func WriteFile(path string, obj any) error {
	e, err := encode(obj, path) // every check before the file is made
	if err != nil {
		return err
	}
	return fileio.WriteAtomic("torchfile", path, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		if err := e.writeZip(bw); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return e.p.errorf("%w", err)
		}
		return nil
	})
}

// encoder pickles an object: the pickle, and the tensors whose storages
// follow it.
type encoder struct {
	p        prefix
	pkl      []byte
	memo     map[any]uint32 // objects already pickled → memo index
	onPath   map[any]bool   // containers being pickled
	tensors  []*Tensor      // in storage key order
	nextMemo uint32
}

func encode(obj any, path string) (*encoder, error) {
	e := &encoder{p: prefix(path), memo: map[any]uint32{}, onPath: map[any]bool{}}
	e.pkl = append(e.pkl, opProto, 2)
	if err := e.value(obj, 0, "the object"); err != nil {
		return nil, err
	}
	e.pkl = append(e.pkl, opStop)
	return e, nil
}

// put memoizes the object on top of the stack.
func (e *encoder) put(v any) {
	i := e.nextMemo
	e.nextMemo++
	e.memo[v] = i
	if i < 256 {
		e.pkl = append(e.pkl, opBinPut, byte(i))
	} else {
		e.pkl = binary.LittleEndian.AppendUint32(append(e.pkl, opLongBinPut), i)
	}
}

// get pushes a memoized object, if v is one.
func (e *encoder) get(v any) bool {
	i, ok := e.memo[v]
	if !ok {
		return false
	}
	if i < 256 {
		e.pkl = append(e.pkl, opBinGet, byte(i))
	} else {
		e.pkl = binary.LittleEndian.AppendUint32(append(e.pkl, opLongBinGet), i)
	}
	return true
}

// global pushes module.name, memoized as Python's pickle does.
func (e *encoder) global(module, name string) {
	key := module + "\n" + name + "\n"
	if e.get(key) {
		return
	}
	e.pkl = append(append(e.pkl, opGlobal), key...)
	e.put(key)
}

func (e *encoder) value(v any, depth int, where string) error {
	if depth > MaxDepth {
		return e.p.errorf("%s: objects nest more than %d deep", where, MaxDepth)
	}
	switch x := v.(type) {
	case nil:
		e.pkl = append(e.pkl, opNone)
	case bool:
		if x {
			e.pkl = append(e.pkl, opNewTrue)
		} else {
			e.pkl = append(e.pkl, opNewFalse)
		}
	case int64:
		e.int(x)
	case float64:
		e.pkl = binary.BigEndian.AppendUint64(append(e.pkl, opBinFloat), math.Float64bits(x))
	case string:
		if !utf8.ValidString(x) {
			return e.p.errorf("%s: string %q is not valid UTF-8, which Python cannot read", where, x)
		}
		e.string(x)
	case *Tensor:
		return e.tensor(x, where)
	case *Dict:
		return e.dict(x, depth, where)
	case *List:
		return e.list(x, depth, where)
	default:
		return e.p.errorf("%s is a %T; a PyTorch file holds nil, bool, int64, float64, string, *Tensor, *Dict and *List", where, v)
	}
	return nil
}

func (e *encoder) int(x int64) {
	switch {
	case x >= 0 && x < 1<<8:
		e.pkl = append(e.pkl, opBinInt1, byte(x))
	case x >= 0 && x < 1<<16:
		e.pkl = binary.LittleEndian.AppendUint16(append(e.pkl, opBinInt2), uint16(x))
	case x >= math.MinInt32 && x <= math.MaxInt32:
		e.pkl = binary.LittleEndian.AppendUint32(append(e.pkl, opBinInt), uint32(int32(x)))
	default: // the shortest two's complement, as Python's encode_long
		b := binary.LittleEndian.AppendUint64(nil, uint64(x))
		for len(b) > 1 && (b[len(b)-1] == 0 && b[len(b)-2]&0x80 == 0 || b[len(b)-1] == 0xff && b[len(b)-2]&0x80 != 0) {
			b = b[:len(b)-1]
		}
		e.pkl = append(append(e.pkl, opLong1, byte(len(b))), b...)
	}
}

func (e *encoder) string(s string) {
	e.pkl = binary.LittleEndian.AppendUint32(append(e.pkl, opBinUnicode), uint32(len(s)))
	e.pkl = append(e.pkl, s...)
}

// enter marks container v as being pickled; false when it already is (v
// contains itself).
func (e *encoder) enter(v any, where string) error {
	if e.onPath[v] {
		return e.p.errorf("%s contains itself", where)
	}
	e.onPath[v] = true
	return nil
}

// batch is how many items one APPENDS or SETITEMS adds, as Python's pickle.
const batch = 1000

func (e *encoder) dict(d *Dict, depth int, where string) error {
	if e.get(d) {
		return nil
	}
	if err := e.enter(d, where); err != nil {
		return err
	}
	e.global("collections", "OrderedDict")
	e.pkl = append(e.pkl, opEmptyTuple, opReduce)
	seen := make(map[any]bool, len(d.Items))
	for i, it := range d.Items {
		if i%batch == 0 {
			if i > 0 {
				e.pkl = append(e.pkl, opSetItems)
			}
			e.pkl = append(e.pkl, opMark)
		}
		switch k := it.Key.(type) {
		case string:
			if !utf8.ValidString(k) {
				return e.p.errorf("%s: key %q is not valid UTF-8, which Python cannot read", where, k)
			}
			e.string(k)
		case int64:
			e.int(k)
		default:
			return e.p.errorf("%s: a key that is a %T; keys are strings or int64", where, it.Key)
		}
		if seen[it.Key] {
			return e.p.errorf("%s: key %v appears twice", where, it.Key)
		}
		seen[it.Key] = true
		if err := e.value(it.Value, depth+1, childName(d, i, where)); err != nil {
			return err
		}
	}
	if len(d.Items) > 0 {
		e.pkl = append(e.pkl, opSetItems)
	}
	delete(e.onPath, d)
	e.put(d)
	return nil
}

func (e *encoder) list(l *List, depth int, where string) error {
	if e.get(l) {
		return nil
	}
	if err := e.enter(l, where); err != nil {
		return err
	}
	if l.Tuple {
		e.pkl = append(e.pkl, opMark)
	} else {
		e.pkl = append(e.pkl, opEmptyList)
	}
	for i, v := range l.Items {
		if !l.Tuple && i%batch == 0 {
			if i > 0 {
				e.pkl = append(e.pkl, opAppends)
			}
			e.pkl = append(e.pkl, opMark)
		}
		if err := e.value(v, depth+1, childName(l, i, where)); err != nil {
			return err
		}
	}
	switch {
	case l.Tuple:
		e.pkl = append(e.pkl, opTuple)
	case len(l.Items) > 0:
		e.pkl = append(e.pkl, opAppends)
	}
	delete(e.onPath, l)
	e.put(l)
	return nil
}

// tuple pickles a tuple of integers (a size or a stride).
func (e *encoder) tuple(xs []int64) {
	if len(xs) > 3 {
		e.pkl = append(e.pkl, opMark)
	}
	for _, x := range xs {
		e.int(x)
	}
	switch len(xs) {
	case 0:
		e.pkl = append(e.pkl, opEmptyTuple)
	case 1, 2, 3:
		e.pkl = append(e.pkl, opTuple1+byte(len(xs)-1))
	default:
		e.pkl = append(e.pkl, opTuple)
	}
}

// tensor pickles t as torch.save does a contiguous tensor:
// _rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict()),
// the storage a persistent id ('storage', type, key, 'cpu', numel).
func (e *encoder) tensor(t *Tensor, where string) error {
	if e.get(t) {
		return nil
	}
	st, ok := storageNames[t.DType]
	if !ok {
		return e.p.errorf("%s: a tensor of invalid dtype %v", where, t.DType)
	}
	numel := int64(1)
	for _, d := range t.Shape {
		if d < 0 {
			return e.p.errorf("%s: shape %v has a negative dimension", where, t.Shape)
		}
		if d != 0 && numel > math.MaxInt64/int64(d) {
			return e.p.errorf("%s: shape %v has more elements than an int64 counts", where, t.Shape)
		}
		numel *= int64(d)
	}
	if len(t.Shape) > maxDims {
		return e.p.errorf("%s: shape %v has more than %d dimensions", where, t.Shape, maxDims)
	}
	if numel > math.MaxInt64/8 || numel*int64(t.DType.Size()) != int64(len(t.Data)) {
		return e.p.errorf("%s: shape %v of %v needs %d bytes, Data has %d", where, t.Shape, t.DType, numel*int64(t.DType.Size()), len(t.Data))
	}
	shape := make([]int64, len(t.Shape))
	stride := make([]int64, len(t.Shape))
	s := int64(1)
	for k := len(t.Shape) - 1; k >= 0; k-- {
		shape[k], stride[k] = int64(t.Shape[k]), s
		s *= max(int64(t.Shape[k]), 1)
	}
	e.global("torch._utils", "_rebuild_tensor_v2")
	e.pkl = append(e.pkl, opMark, opMark)
	e.string("storage")
	e.global("torch", st)
	e.string(strconv.Itoa(len(e.tensors)))
	e.string("cpu")
	e.int(numel)
	e.pkl = append(e.pkl, opTuple, opBinPersID)
	e.int(0)
	e.tuple(shape)
	e.tuple(stride)
	e.pkl = append(e.pkl, opNewFalse)
	e.global("collections", "OrderedDict")
	e.pkl = append(e.pkl, opEmptyTuple, opReduce, opTuple, opReduce)
	e.tensors = append(e.tensors, t)
	e.put(t)
	return nil
}

// writeZip writes the archive: data.pkl, byteorder, the storages and the
// version, each uncompressed and starting at a multiple of alignment
// bytes, as torch.save writes them.
func (e *encoder) writeZip(w io.Writer) error {
	zw := zip.NewWriter(w)
	var at int64 // bytes written so far
	add := func(name string, data []byte) error {
		name = archiveName + "/" + name
		// The local header is 30 bytes, the name and an extra field of
		// padding ("FB", its length, and as many 'Z's) that ends the
		// header on the alignment.
		pad := (alignment - (at+30+int64(len(name))+4)%alignment) % alignment
		extra := make([]byte, 4+pad)
		copy(extra, "FB")
		binary.LittleEndian.PutUint16(extra[2:], uint16(pad))
		for i := range pad {
			extra[4+i] = 'Z'
		}
		fh := &zip.FileHeader{
			Name: name, Method: zip.Store, Extra: extra, CreatorVersion: 20, ReaderVersion: 20,
			CRC32: crc32.ChecksumIEEE(data), CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data)),
		}
		fw, err := zw.CreateRaw(fh)
		if err != nil {
			return e.p.errorf("%w", err)
		}
		if _, err := fw.Write(data); err != nil {
			return e.p.errorf("%w", err)
		}
		at += 30 + int64(len(name)) + int64(len(extra)) + int64(len(data))
		return nil
	}
	if err := add("data.pkl", e.pkl); err != nil {
		return err
	}
	if err := add("byteorder", []byte("little")); err != nil {
		return err
	}
	for i, t := range e.tensors {
		if err := add(fmt.Sprintf("data/%d", i), t.Data); err != nil {
			return err
		}
	}
	if err := add("version", []byte("3\n")); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return e.p.errorf("%w", err)
	}
	return nil
}
