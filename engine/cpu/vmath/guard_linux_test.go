package vmath

import (
	"syscall"
	"testing"
	"unsafe"
)

// fencedPage maps three pages and makes the first and last inaccessible, so
// that a slice placed at either edge of the middle page faults on any read
// or write past its ends: the masked tails must not touch memory outside
// the slice, even within the same vector.
type fencedPage struct{ mem []byte }

func newFencedPage(t *testing.T) *fencedPage {
	ps := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 3*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip("mmap:", err)
	}
	if err := syscall.Mprotect(mem[:ps], syscall.PROT_NONE); err != nil {
		t.Skip("mprotect:", err)
	}
	if err := syscall.Mprotect(mem[2*ps:], syscall.PROT_NONE); err != nil {
		t.Skip("mprotect:", err)
	}
	return &fencedPage{mem}
}

// slice returns n float32s at the start (atEnd false) or the end of the
// accessible page, filled with src.
func (f *fencedPage) slice(n int, atEnd bool, src []float32) []float32 {
	ps := len(f.mem) / 3
	off := ps
	if atEnd {
		off = 2*ps - 4*n
	}
	s := unsafe.Slice((*float32)(unsafe.Pointer(&f.mem[off])), n)
	copy(s, src)
	return s
}

func (f *fencedPage) free() { syscall.Munmap(f.mem) }

func TestPageEdges(t *testing.T) {
	ps := syscall.Getpagesize()
	pages := make([]*fencedPage, 5)
	for i := range pages {
		pages[i] = newFencedPage(t)
		defer pages[i].free()
	}
	r := newRand(5)
	for _, o := range ops {
		for _, k := range variants {
			for _, n := range tailLengths {
				if 4*n > ps {
					continue
				}
				for _, atEnd := range []bool{false, true} {
					ins := make([][]float32, o.ins)
					for i := range ins {
						ins[i] = pages[i].slice(n, atEnd, r.slice(n, o.scale))
					}
					out := pages[4].slice(n, atEnd, r.slice(n, 1))
					o.run(k, out, ins) // a fault here fails the test binary
				}
			}
		}
	}
}
