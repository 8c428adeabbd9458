//go:build linux

package wasm

import (
	"context"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// withGuestMemory gives each guest instantiated with ctx a linear memory
// of its own mapping: the limit reserved as anonymous pages (MAP_NORESERVE),
// which the kernel hands out zeroed as the guest first touches them and
// takes back when the instance closes (Free).
//
// The memory is reserved at its limit so that it never moves (the host's
// views of it across calls need that). Reserved with make, as wazero does
// by default, it lived in Go's heap: an instance that reused the span of a
// closed one had the whole limit cleared first (512 MiB by default, tens of
// milliseconds and as many resident pages at every start), and a closed
// instance's pages stayed with the process until the heap gave them back.
func withGuestMemory(ctx context.Context) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(mapGuestMemory))
}

func mapGuestMemory(_, max uint64) experimental.LinearMemory {
	if max > 0 && max <= 1<<32 {
		// A page past the limit: compiled code may read a few bytes past an
		// access at the very end (as it may in a heap span rounded up to
		// pages); the guest never sees them.
		b, err := syscall.Mmap(-1, 0, int(max)+slack, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
		if err == nil {
			return &mappedMemory{b: b, max: max}
		}
	}
	// No mapping (an empty memory, or none to be had): Go's heap, as
	// wazero would; a failure to grow is the guest's memory.grow of -1.
	return &heapMemory{b: make([]byte, 0, max)}
}

// slack is the mapping's length past the limit.
const slack = 64 << 10

// mappedMemory is a guest memory in a mapping of its limit (and slack).
type mappedMemory struct {
	b   []byte
	max uint64
}

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	return m.b[:size:m.max]
}

// Free gives the pages back to the kernel but keeps the addresses
// reserved: a module closed while its guest runs (an interrupt, a time
// limit) lets the guest's compiled code go on until its next check, and
// its accesses must land in memory that exists (they read zeros; with
// munmap they were a segmentation fault). An address range costs nothing
// but address space, of which a 64-bit process has 128 TiB.
func (m *mappedMemory) Free() {
	if m.b != nil {
		_ = syscall.Madvise(m.b, syscall.MADV_DONTNEED)
		m.b = nil
	}
}

// heapMemory is a guest memory in Go's heap, reserved at its limit: the
// fallback when no mapping can be had.
type heapMemory struct{ b []byte }

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.b)) {
		return nil
	}
	return m.b[:size]
}

func (m *heapMemory) Free() { m.b = nil }
