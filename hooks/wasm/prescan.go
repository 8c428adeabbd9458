package wasm

import (
	"errors"
	"fmt"
)

// MaxModuleBytes bounds the size of a module (the Go hook samples are 2
// to 4 MB).
const MaxModuleBytes = 128 << 20

// maxLocals bounds the locals of one function; compilers stay far below.
const maxLocals = 1 << 16

// prescan walks the structure of a module before wazero decodes it, and
// refuses one whose counts and lengths claim more than the bytes that
// follow them. wazero allocates vectors from those counts as it reads
// them, so a module of a few bytes could otherwise make it allocate
// gigabytes and take the process down (the fuzzer found this). Only the
// fields wazero sizes allocations by are checked; the rest is left to
// wazero's own validation.
func prescan(b []byte) error {
	if len(b) > MaxModuleBytes {
		return fmt.Errorf("the module is %d bytes, more than the %d MiB a module may have", len(b), MaxModuleBytes>>20)
	}
	if err := looksLikeWasm(b); err != nil {
		return err
	}
	if len(b) < 8 {
		return errors.New("invalid WebAssembly: truncated header")
	}
	r := &reader{b: b, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		size := r.length()
		if r.err != nil {
			return r.fail()
		}
		sec := &reader{b: r.b[:r.off+size], off: r.off}
		r.off += size
		switch id {
		case 0:
			sec.customSection()
		case 1:
			sec.vector(sec.funcType)
		case 2:
			sec.vector(sec.importEntry)
		case 3, 4, 5, 6, 13: // functions, tables, memories, globals, tags: fixed-size entries
			sec.count()
		case 7:
			sec.vector(func() { sec.name(); sec.byte(); sec.u32() })
		case 9:
			sec.vector(sec.elementSegment)
		case 10:
			sec.vector(sec.codeBody)
		case 11:
			sec.vector(sec.dataSegment)
		}
		if sec.err != nil {
			return sec.fail()
		}
	}
	return nil
}

// hasStartSection reports whether a module that prescan accepted has a
// start section (id 8), whose function runs at instantiation.
func hasStartSection(b []byte) bool {
	r := &reader{b: b, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		size := r.length()
		if r.err != nil {
			return false
		}
		if id == 8 {
			return true
		}
		r.off += size
	}
	return false
}

// reader reads the binary format, remembering the first error.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail() error {
	return fmt.Errorf("invalid WebAssembly at byte %d: %w", r.off, r.err)
}

func (r *reader) failf(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.failf("unexpected end")
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

// leb reads an unsigned LEB128 of at most 64 bits (signed values are
// skipped the same way).
func (r *reader) leb() uint64 {
	var v uint64
	for shift := 0; shift < 70; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v
		}
	}
	r.failf("LEB128 number too long")
	return 0
}

func (r *reader) u32() uint32 {
	v := r.leb()
	if v > 1<<32-1 {
		r.failf("number %d does not fit in 32 bits", v)
	}
	return uint32(v)
}

// length reads a byte count that must not pass the end.
func (r *reader) length() int {
	n := r.u32()
	if r.err == nil && int(n) > len(r.b)-r.off {
		r.failf("a length of %d bytes where %d remain", n, len(r.b)-r.off)
	}
	return int(n)
}

// count reads a vector's element count: each element takes a byte at
// least.
func (r *reader) count() int { return r.length() }

func (r *reader) skip(n int) {
	if r.err != nil {
		return
	}
	if n > len(r.b)-r.off {
		r.failf("%d bytes where %d remain", n, len(r.b)-r.off)
		return
	}
	r.off += n
}

func (r *reader) vector(elem func()) {
	n := r.count()
	for i := 0; i < n && r.err == nil; i++ {
		elem()
	}
}

func (r *reader) name() { r.skip(r.length()) }

func (r *reader) funcType() {
	r.byte() // 0x60
	r.skip(r.count())
	r.skip(r.count())
}

func (r *reader) importEntry() {
	r.name()
	r.name()
	switch r.byte() {
	case 0x00, 0x04: // function, tag
		r.u32()
	case 0x01: // table: reftype, limits
		r.byte()
		r.limits()
	case 0x02: // memory
		r.limits()
	case 0x03: // global: valtype, mutability
		r.byte()
		r.byte()
	}
}

func (r *reader) limits() {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}

// constExpr skips a constant expression up to its end (0x0b).
func (r *reader) constExpr() {
	for r.err == nil {
		switch op := r.byte(); op {
		case 0x0b:
			return
		case 0x41, 0x42, 0x23, 0xd2: // i32.const, i64.const, global.get, ref.func
			r.leb()
		case 0x43:
			r.skip(4)
		case 0x44:
			r.skip(8)
		case 0xd0: // ref.null
			r.byte()
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant arithmetic
		case 0xfd: // v128.const
			if r.u32() == 12 {
				r.skip(16)
			}
		default:
			r.failf("opcode 0x%02x in a constant expression", op)
		}
	}
}

func (r *reader) elementSegment() {
	flags := r.u32()
	if flags > 7 {
		r.failf("element segment flags %d", flags)
		return
	}
	if flags&2 != 0 && flags&1 == 0 {
		r.u32() // table index
	}
	if flags&1 == 0 {
		r.constExpr() // offset
	}
	if flags&3 != 0 {
		r.byte() // element kind or reference type
	}
	if flags&4 != 0 {
		r.vector(r.constExpr)
	} else {
		r.vector(func() { r.u32() })
	}
}

func (r *reader) codeBody() {
	size := r.length()
	if r.err != nil {
		return
	}
	end := r.off + size
	body := &reader{b: r.b[:end], off: r.off}
	var locals uint64
	body.vector(func() {
		locals += uint64(body.u32())
		body.byte()
	})
	if body.err == nil && locals > maxLocals {
		body.failf("a function declares %d locals, more than %d", locals, maxLocals)
	}
	if body.err != nil {
		r.err, r.off = body.err, body.off
		return
	}
	r.off = end
}

func (r *reader) dataSegment() {
	switch flags := r.u32(); flags {
	case 0:
		r.constExpr()
	case 1:
	case 2:
		r.u32()
		r.constExpr()
	default:
		r.failf("data segment flags %d", flags)
	}
	r.skip(r.length())
}

// customSection checks the name section, which wazero decodes; other
// custom sections are kept as bytes.
func (r *reader) customSection() {
	n := r.length()
	name := string(r.b[r.off:min(r.off+n, len(r.b))])
	r.skip(n)
	if r.err != nil || name != "name" {
		return
	}
	for r.off < len(r.b) && r.err == nil {
		id := r.byte()
		size := r.length()
		if r.err != nil {
			return
		}
		sub := &reader{b: r.b[:r.off+size], off: r.off}
		r.skip(size)
		switch id {
		case 0:
			sub.name()
		case 1:
			sub.vector(func() { sub.u32(); sub.name() })
		case 2:
			sub.vector(func() {
				sub.u32()
				sub.vector(func() { sub.u32(); sub.name() })
			})
		}
		if sub.err != nil {
			r.err, r.off = sub.err, sub.off
		}
	}
}
