package gemm

import (
	"sync"
	"syscall"
	"unsafe"
)

// On Linux the test operands end exactly at an inaccessible page, so that
// a kernel reading or writing one element past a slice faults instead of
// passing unnoticed (the assembly has no bounds checks).

var (
	guardMu   sync.Mutex
	guardMaps [][]byte
)

func guarded(bytes int) unsafe.Pointer {
	page := syscall.Getpagesize()
	size := (bytes+page-1)/page*page + page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		panic(err)
	}
	if err := syscall.Mprotect(mem[size-page:], syscall.PROT_NONE); err != nil {
		panic(err)
	}
	guardMu.Lock()
	guardMaps = append(guardMaps, mem)
	guardMu.Unlock()
	return unsafe.Pointer(&mem[size-page-bytes])
}

// exact32 returns a slice of n float32 followed by a guard page.
func exact32(n int) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(guarded(4*n)), n)
}

// exact64 returns a slice of n float64 followed by a guard page.
func exact64(n int) []float64 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float64)(guarded(8*n)), n)
}

// freeGuarded unmaps every guarded slice; none may be used afterwards.
func freeGuarded() {
	guardMu.Lock()
	defer guardMu.Unlock()
	for _, m := range guardMaps {
		syscall.Munmap(m)
	}
	guardMaps = nil
}
