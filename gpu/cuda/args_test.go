package cuda

import (
	"bytes"
	"runtime"
	"slices"
	"testing"
	"unsafe"
)

// TestArgsLayout checks that values sit at their alignment from the start
// of the buffer, as in the kernel's parameter space, with zeroed padding,
// and that kernelParams points at them.
func TestArgsLayout(t *testing.T) {
	tests := []struct {
		name     string
		build    func(*Args)
		wantOffs []uint32
		wantLen  int
	}{
		{"int then pointer", func(a *Args) { a.I32(1).Ptr(2) }, []uint32{0, 8}, 16},
		{"int then 8-aligned struct", func(a *Args) { a.I32(1).Raw(make([]byte, 12), 8) }, []uint32{0, 8}, 20},
		{"bytes then 16-aligned struct", func(a *Args) { a.Raw([]byte{1}, 1).Raw(make([]byte, 16), 16).F32(0) }, []uint32{0, 16, 32}, 36},
		{"floats", func(a *Args) { a.F32(1).F64(2).F32(3).U32(4) }, []uint32{0, 8, 16, 20}, 24},
	}
	var a Args
	for _, tt := range tests {
		a.Reset()
		a.buf = append(a.buf[:0], 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE) // dirty the padding
		a.Reset()
		tt.build(&a)
		if !slices.Equal(a.offs, tt.wantOffs) || len(a.buf) != tt.wantLen {
			t.Errorf("%s: offsets %v, length %d; want %v, %d", tt.name, a.offs, len(a.buf), tt.wantOffs, tt.wantLen)
		}
		if tt.name == "int then pointer" && !bytes.Equal(a.buf[4:8], []byte{0, 0, 0, 0}) {
			t.Errorf("%s: padding %x", tt.name, a.buf[4:8])
		}
		if uintptr(unsafe.Pointer(&a.buf[0]))%16 != 0 {
			t.Errorf("%s: buffer not 16-byte aligned", tt.name)
		}
		var pin runtime.Pinner
		p := a.kernelParams(&pin)
		if p%8 != 0 || p < uintptr(unsafe.Pointer(&a.buf[0]))+uintptr(len(a.buf)) {
			t.Errorf("%s: kernelParams %#x is misaligned or overlaps the values", tt.name, p)
		}
		array := unsafe.Slice((*uintptr)(unsafe.Add(unsafe.Pointer(&a.buf[0]), p-uintptr(unsafe.Pointer(&a.buf[0])))), len(a.offs))
		for i, off := range a.offs {
			if array[i] != uintptr(unsafe.Pointer(&a.buf[off])) {
				t.Errorf("%s: kernelParams[%d] does not point at the value", tt.name, i)
			}
		}
		pin.Unpin()
	}
	if p := new(Args).kernelParams(new(runtime.Pinner)); p != 0 {
		t.Errorf("kernelParams of no arguments = %#x, want 0", p)
	}
}

func TestArgsRawPanics(t *testing.T) {
	for _, f := range []func(){
		func() { new(Args).Raw(nil, 1) },
		func() { new(Args).Raw([]byte{1}, 3) },
		func() { new(Args).Raw([]byte{1}, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}
