package torchfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The pickle opcodes (Python's Lib/pickle.py and pickletools.py). Those the
// unpickler runs build plain data; the others are named in errors.
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opFloat          = 'F'
	opInt            = 'I'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opLong           = 'L'
	opBinInt2        = 'M'
	opNone           = 'N'
	opPersID         = 'P'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opString         = 'S'
	opBinString      = 'T'
	opShortBinString = 'U'
	opUnicode        = 'V'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opDict           = 'd'
	opEmptyDict      = '}'
	opAppends        = 'e'
	opGet            = 'g'
	opBinGet         = 'h'
	opInst           = 'i'
	opLongBinGet     = 'j'
	opList           = 'l'
	opEmptyList      = ']'
	opObj            = 'o'
	opPut            = 'p'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opEmptyTuple     = ')'
	opSetItems       = 'u'
	opBinFloat       = 'G'

	// Protocol 2.
	opProto    = 0x80
	opNewObj   = 0x81
	opExt1     = 0x82
	opExt2     = 0x83
	opExt4     = 0x84
	opTuple1   = 0x85
	opTuple2   = 0x86
	opTuple3   = 0x87
	opNewTrue  = 0x88
	opNewFalse = 0x89
	opLong1    = 0x8a
	opLong4    = 0x8b

	// Protocol 3.
	opBinBytes      = 'B'
	opShortBinBytes = 'C'

	// Protocol 4.
	opShortBinUnicode = 0x8c
	opBinUnicode8     = 0x8d
	opBinBytes8       = 0x8e
	opEmptySet        = 0x8f
	opAddItems        = 0x90
	opFrozenSet       = 0x91
	opNewObjEx        = 0x92
	opStackGlobal     = 0x93
	opMemoize         = 0x94
	opFrame           = 0x95

	// Protocol 5.
	opByteArray8      = 0x96
	opNextBuffer      = 0x97
	opReadOnlyBuffer  = 0x98
	maxPickleProtocol = 5
)

// opNames are pickletools' names of the opcodes, for errors.
var opNames = map[byte]string{
	opMark: "MARK", opStop: "STOP", opPop: "POP", opPopMark: "POP_MARK", opDup: "DUP", opFloat: "FLOAT",
	opInt: "INT", opBinInt: "BININT", opBinInt1: "BININT1", opLong: "LONG", opBinInt2: "BININT2", opNone: "NONE",
	opPersID: "PERSID", opBinPersID: "BINPERSID", opReduce: "REDUCE", opString: "STRING", opBinString: "BINSTRING",
	opShortBinString: "SHORT_BINSTRING", opUnicode: "UNICODE", opBinUnicode: "BINUNICODE", opAppend: "APPEND",
	opBuild: "BUILD", opGlobal: "GLOBAL", opDict: "DICT", opEmptyDict: "EMPTY_DICT", opAppends: "APPENDS",
	opGet: "GET", opBinGet: "BINGET", opInst: "INST", opLongBinGet: "LONG_BINGET", opList: "LIST",
	opEmptyList: "EMPTY_LIST", opObj: "OBJ", opPut: "PUT", opBinPut: "BINPUT", opLongBinPut: "LONG_BINPUT",
	opSetItem: "SETITEM", opTuple: "TUPLE", opEmptyTuple: "EMPTY_TUPLE", opSetItems: "SETITEMS", opBinFloat: "BINFLOAT",
	opProto: "PROTO", opNewObj: "NEWOBJ", opExt1: "EXT1", opExt2: "EXT2", opExt4: "EXT4", opTuple1: "TUPLE1",
	opTuple2: "TUPLE2", opTuple3: "TUPLE3", opNewTrue: "NEWTRUE", opNewFalse: "NEWFALSE", opLong1: "LONG1",
	opLong4: "LONG4", opBinBytes: "BINBYTES", opShortBinBytes: "SHORT_BINBYTES", opShortBinUnicode: "SHORT_BINUNICODE",
	opBinUnicode8: "BINUNICODE8", opBinBytes8: "BINBYTES8", opEmptySet: "EMPTY_SET", opAddItems: "ADDITEMS",
	opFrozenSet: "FROZENSET", opNewObjEx: "NEWOBJ_EX", opStackGlobal: "STACK_GLOBAL", opMemoize: "MEMOIZE",
	opFrame: "FRAME", opByteArray8: "BYTEARRAY8", opNextBuffer: "NEXT_BUFFER", opReadOnlyBuffer: "READONLY_BUFFER",
}

// refused says why the opcodes the unpickler never runs are refused.
var refused = map[byte]string{
	opInst: "it makes an object of any class", opObj: "it makes an object of any class",
	opNewObj: "it makes an object of any class", opNewObjEx: "it makes an object of any class",
	opExt1: "it names a global through the extension registry", opExt2: "it names a global through the extension registry",
	opExt4:     "it names a global through the extension registry",
	opBinBytes: "bytes values are not supported", opShortBinBytes: "bytes values are not supported",
	opBinBytes8: "bytes values are not supported", opByteArray8: "bytes values are not supported",
	opNextBuffer: "out-of-band buffers are not supported", opReadOnlyBuffer: "out-of-band buffers are not supported",
	opEmptySet: "sets are not supported", opAddItems: "sets are not supported", opFrozenSet: "sets are not supported",
	opFloat: "pickle protocol 0 is not supported (torch.save writes protocol 2)", opInt: "pickle protocol 0 is not supported (torch.save writes protocol 2)",
	opLong: "pickle protocol 0 is not supported (torch.save writes protocol 2)", opString: "pickle protocol 0 is not supported (torch.save writes protocol 2)",
	opUnicode: "pickle protocol 0 is not supported (torch.save writes protocol 2)", opGet: "pickle protocol 0 is not supported (torch.save writes protocol 2)",
	opPut: "pickle protocol 0 is not supported (torch.save writes protocol 2)", opPersID: "pickle protocol 0 is not supported (torch.save writes protocol 2)",
}

func opName(op byte) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("0x%02x", op)
}

// bigInt is an integer wider than 64 bits, as LONG1 holds it (little-endian
// two's complement). Only the legacy format's magic number is one.
type bigInt string

// The callables of the allowlist.
const (
	callOrderedDict = iota + 1
	callRebuildTensor
	callRebuildTensorV2
	callRebuildParameter
	callRebuildParameterWithState
)

// global is a global of the allowlist: one of the callables.
type global struct {
	module, name string
	call         int
}

func (g *global) String() string { return g.module + "." + g.name }

// callables are the globals a file may call, by their Python name.
var callables = map[string]int{
	"collections.OrderedDict":                    callOrderedDict,
	"torch._utils._rebuild_tensor":               callRebuildTensor,
	"torch._utils._rebuild_tensor_v2":            callRebuildTensorV2,
	"torch._utils._rebuild_parameter":            callRebuildParameter,
	"torch._utils._rebuild_parameter_with_state": callRebuildParameterWithState,
}

// storageType is a storage type of the allowlist (torch.FloatStorage): the
// element type a tensor of it has here, and its element size in the file
// (int8 and int16 elements are widened to int32).
type storageType struct {
	name string
	dt   dtype.DType
	size int
}

var storageTypes = map[string]*storageType{}

func init() {
	for _, s := range []storageType{
		{"FloatStorage", dtype.Float32, 4}, {"DoubleStorage", dtype.Float64, 8},
		{"HalfStorage", dtype.Float16, 2}, {"BFloat16Storage", dtype.BFloat16, 2},
		{"LongStorage", dtype.Int64, 8}, {"IntStorage", dtype.Int32, 4},
		{"ShortStorage", dtype.Int32, 2}, {"CharStorage", dtype.Int32, 1},
		{"ByteStorage", dtype.Uint8, 1}, {"BoolStorage", dtype.Bool, 1},
	} {
		storageTypes[s.name] = &s
	}
}

// unsupported explains the globals of PyTorch files this package knows
// but does not read.
var unsupported = map[string]string{
	"torch.ComplexFloatStorage":                      "complex64 tensors are not supported",
	"torch.ComplexDoubleStorage":                     "complex128 tensors are not supported",
	"torch.QInt8Storage":                             "quantized tensors are not supported",
	"torch.QUInt8Storage":                            "quantized tensors are not supported",
	"torch.QInt32Storage":                            "quantized tensors are not supported",
	"torch.QUInt4x2Storage":                          "quantized tensors are not supported",
	"torch.QUInt2x4Storage":                          "quantized tensors are not supported",
	"torch._utils._rebuild_qtensor":                  "quantized tensors are not supported",
	"torch.UntypedStorage":                           "tensors of the dtypes PyTorch 2.3 added (uint16, uint32, uint64, float8, ...) are not supported",
	"torch._utils._rebuild_tensor_v3":                "tensors of the dtypes PyTorch 2.3 added (uint16, uint32, uint64, float8, ...) are not supported",
	"torch._utils._rebuild_sparse_tensor":            "sparse tensors are not supported",
	"torch._utils._rebuild_meta_tensor_no_storage":   "meta tensors (without data) are not supported",
	"torch._utils._rebuild_wrapper_subclass":         "tensor subclasses are not supported",
	"torch._tensor._rebuild_from_type_v2":            "tensor subclasses and tensors with Python attributes are not supported",
	"torch._utils._rebuild_device_tensor_from_numpy": "tensors saved through NumPy are not supported",
}

// py2Modules are Python 2's names of modules, which Python 3's pickle
// writes in protocol 2 (builtins.eval is "__builtin__ eval"): errors say
// the Python 3 name.
var py2Modules = map[string]string{"__builtin__": "builtins", "copy_reg": "copyreg"}

// maxGlobalLine bounds the module and name lines of GLOBAL.
const maxGlobalLine = 1024

// input is the bytes of a pickle: a reader, with the position and the end.
type input struct {
	br        *bufio.Reader
	pos, size int64
}

// newInput reads the n bytes of r from offset off.
func newInput(r io.ReaderAt, off, n int64) *input {
	return &input{br: bufio.NewReaderSize(io.NewSectionReader(r, off, n), int(min(n, 64<<10))), size: n}
}

// errShort is the error of a read past the pickle's end.
var errShort = errors.New("the pickle ends early")

// readError is a failure of the reader under the pickle (a disk error).
type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }

// readFailed classifies an error of the reader under the pickle.
func readFailed(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errShort // the file shrank while it was read
	}
	return readError{err}
}

func (in *input) byte() (byte, error) {
	if in.pos >= in.size {
		return 0, errShort
	}
	b, err := in.br.ReadByte()
	if err != nil {
		return 0, readFailed(err)
	}
	in.pos++
	return b, nil
}

// bytes reads n bytes; a length past the end fails before allocating.
func (in *input) bytes(n uint64) ([]byte, error) {
	if n > uint64(in.size-in.pos) {
		return nil, errShort
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(in.br, b); err != nil {
		return nil, readFailed(err)
	}
	in.pos += int64(n)
	return b, nil
}

func (in *input) uint(n int) (uint64, error) {
	b, err := in.bytes(uint64(n))
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

// line reads a line of GLOBAL, up to a newline, which it drops.
func (u *unpickler) line() (string, error) {
	var b []byte
	for len(b) <= maxGlobalLine {
		c, err := u.in.byte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return string(b), nil
		}
		b = append(b, c)
	}
	return "", u.errorf("a line longer than %d bytes", maxGlobalLine)
}

// unpickler runs one pickle.
type unpickler struct {
	p     prefix
	in    *input
	f     *file
	stack []any
	marks []int // the stack's length at each MARK
	memo  map[uint64]any
	// persistentLoad resolves a persistent id (BINPERSID); nil where the
	// pickle may have none.
	persistentLoad func(u *unpickler, pid any) (any, error)

	at int64 // the offset of the opcode being run
	op byte
}

func (f *file) newUnpickler(in *input) *unpickler {
	return &unpickler{p: f.p, in: in, f: f, memo: map[uint64]any{}}
}

// errorf is an error at the opcode being run.
func (u *unpickler) errorf(format string, args ...any) error {
	return u.p.errorf("pickle opcode %s at byte %d: "+format, append([]any{opName(u.op), u.at}, args...)...)
}

// load runs the pickle up to STOP and returns its object.
func (u *unpickler) load() (any, error) {
	for {
		u.at = u.in.pos
		op, err := u.in.byte()
		if err != nil {
			return nil, u.readErr(err)
		}
		u.op = op
		if op == opStop {
			if len(u.stack) != 1 || len(u.marks) != 0 {
				return nil, u.errorf("the stack holds %d objects and %d marks, want one object", len(u.stack), len(u.marks))
			}
			return u.stack[0], nil
		}
		if err := u.run(op); err != nil {
			return nil, u.readErr(err)
		}
	}
}

// readErr names the input's errors (errShort, readError); the others are
// the unpickler's own, named already.
func (u *unpickler) readErr(err error) error {
	var re readError
	switch {
	case errors.Is(err, errShort):
		return u.p.errorf("the pickle ends at byte %d, before its STOP", u.in.size)
	case errors.As(err, &re):
		return u.p.errorf("reading the pickle at byte %d: %w", u.in.pos, re.err)
	}
	return err
}

// run runs one opcode.
func (u *unpickler) run(op byte) error {
	in := u.in
	switch op {
	case opProto:
		v, err := in.byte()
		if err != nil {
			return err
		}
		if v > maxPickleProtocol {
			return u.errorf("pickle protocol %d; this reader knows protocols 2 to %d", v, maxPickleProtocol)
		}
	case opFrame: // a hint for buffering: the opcodes follow inline
		_, err := in.uint(8)
		return err
	case opMark:
		u.marks = append(u.marks, len(u.stack))
	case opPop:
		if u.frameLen() == 0 && len(u.marks) > 0 { // as Python: POP of an empty frame pops its mark
			u.marks = u.marks[:len(u.marks)-1]
			return nil
		}
		_, err := u.pop()
		return err
	case opPopMark:
		_, err := u.popMark()
		return err
	case opDup:
		v, err := u.top()
		if err != nil {
			return err
		}
		u.push(v)

	case opNone:
		u.push(nil)
	case opNewTrue:
		u.push(true)
	case opNewFalse:
		u.push(false)
	case opBinInt:
		v, err := in.uint(4)
		if err != nil {
			return err
		}
		u.push(int64(int32(uint32(v))))
	case opBinInt1:
		v, err := in.uint(1)
		if err != nil {
			return err
		}
		u.push(int64(v))
	case opBinInt2:
		v, err := in.uint(2)
		if err != nil {
			return err
		}
		u.push(int64(v))
	case opLong1, opLong4:
		var n uint64
		var err error
		if op == opLong1 {
			n, err = in.uint(1)
		} else {
			n, err = in.uint(4)
		}
		if err != nil {
			return err
		}
		if n > 16 {
			return u.errorf("an integer of %d bytes, wider than 64 bits", n)
		}
		b, err := in.bytes(n)
		if err != nil {
			return err
		}
		u.push(decodeLong(b))
	case opBinFloat:
		b, err := in.bytes(8)
		if err != nil {
			return err
		}
		u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case opBinUnicode, opShortBinUnicode, opBinUnicode8, opBinString, opShortBinString:
		s, err := u.string(op)
		if err != nil {
			return err
		}
		u.push(s)

	case opEmptyDict:
		u.push(&Dict{})
	case opEmptyList:
		u.push(&List{})
	case opEmptyTuple:
		u.push(&List{Tuple: true})
	case opTuple1, opTuple2, opTuple3:
		n := int(op-opTuple1) + 1
		if u.frameLen() < n {
			return u.errorf("the stack holds %d objects, fewer than %d", u.frameLen(), n)
		}
		items := append([]any(nil), u.stack[len(u.stack)-n:]...)
		u.stack = u.stack[:len(u.stack)-n]
		u.push(&List{Items: items, Tuple: true})
	case opTuple, opList:
		items, err := u.popMark()
		if err != nil {
			return err
		}
		u.push(&List{Items: items, Tuple: op == opTuple})
	case opDict:
		items, err := u.popMark()
		if err != nil {
			return err
		}
		d := &Dict{}
		if err := u.setItems(d, items); err != nil {
			return err
		}
		u.push(d)
	case opAppend, opAppends:
		var items []any
		if op == opAppend {
			v, err := u.pop()
			if err != nil {
				return err
			}
			items = []any{v}
		} else {
			var err error
			if items, err = u.popMark(); err != nil {
				return err
			}
		}
		top, err := u.top()
		if err != nil {
			return err
		}
		l, ok := top.(*List)
		if !ok || l.Tuple {
			return u.errorf("appending to %s, not a list", typeName(top))
		}
		l.Items = append(l.Items, items...)
	case opSetItem, opSetItems:
		var items []any
		if op == opSetItem {
			if u.frameLen() < 2 {
				return u.errorf("the stack holds %d objects, fewer than a key and a value", u.frameLen())
			}
			items = append([]any(nil), u.stack[len(u.stack)-2:]...)
			u.stack = u.stack[:len(u.stack)-2]
		} else {
			var err error
			if items, err = u.popMark(); err != nil {
				return err
			}
		}
		top, err := u.top()
		if err != nil {
			return err
		}
		d, ok := top.(*Dict)
		if !ok {
			return u.errorf("setting items of %s, not a dict", typeName(top))
		}
		return u.setItems(d, items)

	case opBinPut, opLongBinPut, opMemoize:
		var i uint64
		var err error
		switch op {
		case opBinPut:
			i, err = in.uint(1)
		case opLongBinPut:
			i, err = in.uint(4)
		default:
			i = uint64(len(u.memo))
		}
		if err != nil {
			return err
		}
		v, err := u.top()
		if err != nil {
			return err
		}
		u.memo[i] = v
	case opBinGet, opLongBinGet:
		n := 1
		if op == opLongBinGet {
			n = 4
		}
		i, err := in.uint(n)
		if err != nil {
			return err
		}
		v, ok := u.memo[i]
		if !ok {
			return u.errorf("memo entry %d was never set", i)
		}
		u.push(v)

	case opGlobal:
		module, err := u.line()
		if err != nil {
			return err
		}
		name, err := u.line()
		if err != nil {
			return err
		}
		g, err := u.global(module, name)
		if err != nil {
			return err
		}
		u.push(g)
	case opStackGlobal:
		module, name, err := u.pop2()
		if err != nil {
			return err
		}
		m, ok1 := module.(string)
		n, ok2 := name.(string)
		if !ok1 || !ok2 {
			return u.errorf("the module and name are %s and %s, not strings", typeName(module), typeName(name))
		}
		g, err := u.global(m, n)
		if err != nil {
			return err
		}
		u.push(g)
	case opReduce:
		fn, args, err := u.pop2()
		if err != nil {
			return err
		}
		v, err := u.call(fn, args)
		if err != nil {
			return err
		}
		u.push(v)
	case opBuild:
		state, err := u.pop()
		if err != nil {
			return err
		}
		obj, err := u.top()
		if err != nil {
			return err
		}
		return u.build(obj, state)
	case opBinPersID:
		pid, err := u.pop()
		if err != nil {
			return err
		}
		if u.persistentLoad == nil {
			return u.errorf("a persistent id (a storage) where none may be")
		}
		v, err := u.persistentLoad(u, pid)
		if err != nil {
			return err
		}
		u.push(v)

	default:
		if why, ok := refused[op]; ok {
			return u.errorf("not supported: %s", why)
		}
		return u.errorf("not a pickle opcode")
	}
	return nil
}

// string reads the string of a string opcode: UTF-8, as torch.load decodes
// Python 2's byte strings too.
func (u *unpickler) string(op byte) (string, error) {
	var n uint64
	var err error
	switch op {
	case opShortBinUnicode, opShortBinString:
		n, err = u.in.uint(1)
	case opBinUnicode:
		n, err = u.in.uint(4)
	case opBinString:
		n, err = u.in.uint(4)
		if n >= 1<<31 {
			return "", u.errorf("a negative length")
		}
	default:
		n, err = u.in.uint(8)
	}
	if err != nil {
		return "", err
	}
	b, err := u.in.bytes(n)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", u.errorf("a string that is not valid UTF-8: %q", b[:min(len(b), 40)])
	}
	return string(b), nil
}

// decodeLong decodes a little-endian two's complement integer: an int64
// when it fits, a bigInt otherwise.
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	neg := b[len(b)-1]&0x80 != 0
	fill := byte(0)
	if neg {
		fill = 0xff
	}
	trimmed := len(b)
	for trimmed > 8 && b[trimmed-1] == fill && (b[trimmed-2]&0x80 != 0) == neg {
		trimmed--
	}
	if trimmed > 8 {
		return bigInt(b)
	}
	var v uint64
	if neg {
		v = math.MaxUint64
	}
	for i := trimmed - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return int64(v)
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

// frameLen is the number of objects above the last mark.
func (u *unpickler) frameLen() int {
	if len(u.marks) == 0 {
		return len(u.stack)
	}
	return len(u.stack) - u.marks[len(u.marks)-1]
}

func (u *unpickler) pop() (any, error) {
	if u.frameLen() == 0 {
		return nil, u.errorf("the stack is empty")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

// pop2 pops the top two values: below is the one that was under top.
func (u *unpickler) pop2() (below, top any, err error) {
	if top, err = u.pop(); err != nil {
		return nil, nil, err
	}
	if below, err = u.pop(); err != nil {
		return nil, nil, err
	}
	return below, top, nil
}

func (u *unpickler) top() (any, error) {
	if u.frameLen() == 0 {
		return nil, u.errorf("the stack is empty")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark pops the objects above the last mark, and the mark.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.errorf("no MARK before it")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

// setItems sets the key, value pairs of items in d.
func (u *unpickler) setItems(d *Dict, items []any) error {
	if len(items)%2 != 0 {
		return u.errorf("%d objects, not key and value pairs", len(items))
	}
	for i := 0; i < len(items); i += 2 {
		switch items[i].(type) {
		case string, int64:
		default:
			return u.errorf("a dict key that is %s; keys must be strings or integers", typeName(items[i]))
		}
		d.set(items[i], items[i+1])
	}
	return nil
}

// global resolves a GLOBAL: a callable of the allowlist or a storage
// type. Anything else is refused, named.
func (u *unpickler) global(module, name string) (any, error) {
	if m, ok := py2Modules[module]; ok {
		module = m
	}
	full := module + "." + name
	if c, ok := callables[full]; ok {
		return &global{module, name, c}, nil
	}
	if module == "torch" {
		if s, ok := storageTypes[name]; ok {
			return s, nil
		}
	}
	if why, ok := unsupported[full]; ok {
		return nil, u.errorf("global %s: %s", full, why)
	}
	return nil, u.errorf("global %s is not allowed: a PyTorch file may name only collections.OrderedDict, "+
		"torch's tensor rebuilders and its storage types, and zeroeng runs no code a file names", full)
}

// call runs REDUCE: fn(*args) for a callable of the allowlist.
func (u *unpickler) call(fn, args any) (any, error) {
	g, ok := fn.(*global)
	if !ok {
		return nil, u.errorf("calling %s, which cannot be called", typeName(fn))
	}
	t, ok := args.(*List)
	if !ok || !t.Tuple {
		return nil, u.errorf("the arguments of %s are %s, not a tuple", g, typeName(args))
	}
	a := t.Items
	nargs := func(lo, hi int) error {
		if len(a) < lo || len(a) > hi {
			return u.errorf("%s called with %d arguments", g, len(a))
		}
		return nil
	}
	switch g.call {
	case callOrderedDict:
		if err := nargs(0, 0); err != nil {
			return nil, err
		}
		return &Dict{}, nil
	case callRebuildTensor: // (storage, offset, size, stride)
		if err := nargs(4, 4); err != nil {
			return nil, err
		}
		return u.rebuild(g, a)
	case callRebuildTensorV2: // (storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
		if err := nargs(6, 7); err != nil {
			return nil, err
		}
		if err := u.noHooks(g, a[5]); err != nil {
			return nil, err
		}
		if len(a) == 7 && !empty(a[6]) {
			return nil, u.errorf("%s: tensor metadata %s is not supported", g, typeName(a[6]))
		}
		return u.rebuild(g, a)
	case callRebuildParameter, callRebuildParameterWithState: // (data, requires_grad, backward_hooks[, state])
		if g.call == callRebuildParameter {
			if err := nargs(3, 3); err != nil {
				return nil, err
			}
		} else {
			if err := nargs(4, 4); err != nil {
				return nil, err
			}
			if !empty(a[3]) {
				return nil, u.errorf("%s: a parameter with Python attributes is not supported", g)
			}
		}
		t, ok := a[0].(*Tensor)
		if !ok {
			return nil, u.errorf("%s of %s, not a tensor", g, typeName(a[0]))
		}
		if _, ok := a[1].(bool); !ok {
			return nil, u.errorf("%s: requires_grad is %s, not a bool", g, typeName(a[1]))
		}
		if err := u.noHooks(g, a[2]); err != nil {
			return nil, err
		}
		return t, nil // a Parameter is its tensor here
	}
	return nil, u.errorf("calling %s", g)
}

// empty reports whether v is None, an empty dict, or a tuple of those:
// the state of an object without attributes.
func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case *Dict:
		return len(x.Items) == 0
	case *List:
		if !x.Tuple {
			return false
		}
		for _, e := range x.Items {
			if !empty(e) {
				return false
			}
		}
		return true
	}
	return false
}

// noHooks checks a tensor's backward hooks: an empty OrderedDict (hooks
// are functions, which a file cannot hold here).
func (u *unpickler) noHooks(g *global, v any) error {
	if d, ok := v.(*Dict); !ok || len(d.Items) != 0 {
		return u.errorf("%s: backward hooks %s, want an empty OrderedDict", g, typeName(v))
	}
	return nil
}

// maxDims bounds a tensor's dimensions, as PyTorch does.
const maxDims = 64

// rebuild makes a tensor from (storage, offset, size, stride, ...): a
// view of the storage, read when the object is complete.
func (u *unpickler) rebuild(g *global, a []any) (any, error) {
	ref, ok := a[0].(storageRef)
	if !ok {
		return nil, u.errorf("%s: the storage is %s", g, typeName(a[0]))
	}
	off, ok := a[1].(int64)
	if !ok || off < 0 {
		return nil, u.errorf("%s: storage offset %v (%s)", g, a[1], typeName(a[1]))
	}
	shape, err := u.ints(g, "size", a[2])
	if err != nil {
		return nil, err
	}
	stride, err := u.ints(g, "stride", a[3])
	if err != nil {
		return nil, err
	}
	if len(shape) != len(stride) {
		return nil, u.errorf("%s: size %v and stride %v differ in length", g, shape, stride)
	}
	if len(a) > 4 {
		if _, ok := a[4].(bool); !ok {
			return nil, u.errorf("%s: requires_grad is %s, not a bool", g, typeName(a[4]))
		}
	}
	// The elements must lie in the storage: offset + Σ (size-1)·stride <
	// numel, computed without overflow (each term is bounded by numel). A
	// tensor without elements needs only its offset in the storage.
	numel, last := int64(1), off
	for k := range shape {
		if shape[k] == 0 {
			numel = 0
		}
	}
	for k := range shape {
		if numel == 0 {
			break
		}
		if shape[k] > math.MaxInt64/numel {
			return nil, u.errorf("%s: size %v has more elements than an int64 counts", g, shape)
		}
		numel *= shape[k]
		if stride[k] != 0 && shape[k]-1 > (ref.numel-last)/stride[k] {
			return nil, u.errorf("%s: size %v, stride %v and offset %d reach past the %d elements of storage %q", g, shape, stride, off, ref.numel, ref.s.key)
		}
		last += (shape[k] - 1) * stride[k]
	}
	if numel > 0 && last >= ref.numel || numel == 0 && off > ref.numel {
		return nil, u.errorf("%s: size %v, stride %v and offset %d reach past the %d elements of storage %q", g, shape, stride, off, ref.numel, ref.s.key)
	}
	t := &Tensor{DType: ref.s.typ.dt, Shape: make([]int, len(shape))}
	for k, d := range shape {
		t.Shape[k] = int(d)
	}
	u.f.tensors[t] = &view{ref: ref, offset: off, shape: shape, stride: stride, numel: numel}
	return t, nil
}

// ints reads a tuple of non-negative integers (a size or stride).
func (u *unpickler) ints(g *global, what string, v any) ([]int64, error) {
	t, ok := v.(*List)
	if !ok || !t.Tuple {
		return nil, u.errorf("%s: the %s is %s, not a tuple", g, what, typeName(v))
	}
	if len(t.Items) > maxDims {
		return nil, u.errorf("%s: the %s has %d dimensions, more than %d", g, what, len(t.Items), maxDims)
	}
	out := make([]int64, len(t.Items))
	for i, e := range t.Items {
		n, ok := e.(int64)
		if !ok || n < 0 {
			return nil, u.errorf("%s: the %s has %v (%s), not a non-negative integer", g, what, e, typeName(e))
		}
		out[i] = n
	}
	return out, nil
}

// build runs BUILD: only the attributes PyTorch sets on a state dict (its
// _metadata, each module's version), which are dropped.
func (u *unpickler) build(obj, state any) error {
	if _, ok := obj.(*Dict); !ok {
		return u.errorf("setting the state of %s: only a dict's attributes may be set", typeName(obj))
	}
	ok := state == nil
	switch s := state.(type) {
	case *Dict:
		ok = true
	case *List: // (state, slotstate)
		ok = s.Tuple && len(s.Items) == 2
		for _, e := range s.Items {
			if _, isDict := e.(*Dict); e != nil && !isDict {
				ok = false
			}
		}
	}
	if !ok {
		return u.errorf("a dict's state is %s, want a dict of attributes", typeName(state))
	}
	return nil
}

// pidTuple checks a persistent id: a tuple of n items from lo to hi whose
// first is "storage".
func (u *unpickler) pidTuple(pid any, lo, hi int) ([]any, error) {
	t, ok := pid.(*List)
	if !ok || !t.Tuple || len(t.Items) < lo || len(t.Items) > hi {
		return nil, u.errorf("persistent id %s, want a tuple ('storage', type, key, location, size%s)", typeName(pid), map[bool]string{true: ", view", false: ""}[hi == 6])
	}
	if s, ok := t.Items[0].(string); !ok || s != "storage" {
		return nil, u.errorf("persistent id of kind %v, want 'storage'", t.Items[0])
	}
	return t.Items, nil
}

// pidStorage returns the storage of a persistent id's (_, type, key,
// location, numel): one per key.
func (u *unpickler) pidStorage(args []any) (*storage, error) {
	typ, ok := args[1].(*storageType)
	if !ok {
		return nil, u.errorf("a storage of type %s", typeName(args[1]))
	}
	key, ok := args[2].(string)
	if !ok {
		return nil, u.errorf("a storage key that is %s", typeName(args[2]))
	}
	if _, ok := args[3].(string); !ok {
		return nil, u.errorf("storage %q: its location is %s, not a string", key, typeName(args[3]))
	}
	numel, ok := args[4].(int64)
	if !ok || numel < 0 || numel > u.f.size/int64(typ.size) {
		return nil, u.errorf("storage %q: %v elements of torch.%s, more than the %d-byte file holds", key, args[4], typ.name, u.f.size)
	}
	if s, ok := u.f.storages[key]; ok {
		if s.typ != typ || s.numel != numel {
			return nil, u.errorf("storage %q is torch.%s of %d elements and torch.%s of %d", key, s.typ.name, s.numel, typ.name, numel)
		}
		return s, nil
	}
	s := &storage{key: key, typ: typ, numel: numel, at: -1}
	u.f.storages[key] = s
	return s, nil
}
