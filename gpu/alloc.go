package gpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/gpu/cuda"
)

// Block sizes. Requests are rounded up so that a freed block serves the
// next request of about the same size: small requests to 512 bytes (the
// alignment cuBLAS and vector loads want), large ones to 2 MiB, so that a
// training step's tensors, which have the same sizes every step, are all
// served from the cache after the first step.
const (
	smallRound = 512
	largeRound = 2 << 20
	largeSize  = 1 << 20
)

func roundSize(n int) int {
	if n <= 0 {
		return smallRound
	}
	r := smallRound
	if n >= largeSize {
		r = largeRound
	}
	return (n + r - 1) / r * r
}

// memory is where the allocator gets device memory: the CUDA context, or a
// fake in tests.
type memory interface {
	alloc(bytes int) (cuda.DevicePtr, error)
	free(p cuda.DevicePtr) error
}

// pendingUse is a freed block that another stream (the communication
// stream) may still be reading or writing: it is reused only after done
// reports true.
type pendingUse struct {
	b    *block
	done func() (bool, error)
}

type block struct {
	ptr  cuda.DevicePtr
	size int // rounded size
}

// allocator is a caching device allocator, one per Device (per rank), after
// PyTorch's CUDACachingAllocator: cudaMalloc and cudaFree synchronise the
// whole device and cost tens of microseconds, so freed blocks are kept and
// handed out again. Memory freed on the compute stream can be reused at
// once by later work on the same stream (the stream orders them); memory a
// collective on the communication stream still uses is held back until the
// event recorded after it completes.
type allocator struct {
	mem memory

	mu      sync.Mutex
	free    map[int][]*block // cached blocks by rounded size
	pending []pendingUse
	stats   device.MemStats
	// limit bounds the cached bytes; beyond it freed blocks go back to the
	// driver.
	limit int64
}

func newAllocator(mem memory, limit int64) *allocator {
	return &allocator{mem: mem, free: map[int][]*block{}, limit: limit}
}

// get returns a block of at least n bytes.
func (a *allocator) get(n int) (*block, error) {
	size := roundSize(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.reapLocked(); err != nil {
		return nil, err
	}
	if l := a.free[size]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		a.free[size] = l[:len(l)-1]
		a.stats.PooledBytes -= int64(size)
		a.stats.Reuses++
		a.countLocked(n, 1)
		return b, nil
	}
	p, err := a.mem.alloc(size)
	var ce *cuda.Error
	if err != nil && errors.As(err, &ce) && ce.Code == cuda.ErrorOutOfMemory {
		// The cache may hold what the request needs in other sizes: give it
		// back to the driver and try once more, as PyTorch does.
		if ferr := a.releaseCachedLocked(); ferr != nil {
			return nil, ferr
		}
		p, err = a.mem.alloc(size)
		if err != nil {
			err = fmt.Errorf("%w (the caching allocator had released its %d cached bytes; %d bytes live in %d buffers)",
				err, a.stats.PooledBytes, a.stats.LiveBytes, a.stats.LiveBuffers)
		}
	}
	if err != nil {
		return nil, err
	}
	a.stats.Allocs++
	a.countLocked(n, 1)
	return &block{ptr: p, size: size}, nil
}

func (a *allocator) countLocked(n int, sign int64) {
	a.stats.LiveBuffers += sign
	a.stats.LiveBytes += sign * int64(n)
	a.stats.PeakBytes = max(a.stats.PeakBytes, a.stats.LiveBytes)
}

// put returns a block of n requested bytes to the cache. done, when not
// nil, reports whether another stream has finished with it.
func (a *allocator) put(b *block, n int, done func() (bool, error)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.countLocked(n, -1)
	if done != nil {
		a.pending = append(a.pending, pendingUse{b, done})
		return nil
	}
	return a.cacheLocked(b)
}

func (a *allocator) cacheLocked(b *block) error {
	if a.stats.PooledBytes+int64(b.size) > a.limit {
		return a.mem.free(b.ptr)
	}
	a.free[b.size] = append(a.free[b.size], b)
	a.stats.PooledBytes += int64(b.size)
	return nil
}

// reapLocked moves the pending blocks whose other-stream use has completed
// into the cache.
func (a *allocator) reapLocked() error {
	kept := a.pending[:0]
	var first error
	for _, p := range a.pending {
		done, err := p.done()
		switch {
		case err != nil:
			// The stream failed (a sticky CUDA error); the block cannot be
			// trusted to be idle, so it is leaked rather than reused.
			first = firstErr(first, err)
		case done:
			first = firstErr(first, a.cacheLocked(p.b))
		default:
			kept = append(kept, p)
		}
	}
	clear(a.pending[len(kept):])
	a.pending = kept
	return first
}

func firstErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// releaseCachedLocked frees every cached block.
func (a *allocator) releaseCachedLocked() error {
	var first error
	for size, l := range a.free {
		for _, b := range l {
			first = firstErr(first, a.mem.free(b.ptr))
		}
		delete(a.free, size)
	}
	a.stats.PooledBytes = 0
	return first
}

// trim frees the cached blocks (torch.cuda.empty_cache).
func (a *allocator) trim() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.reapLocked(); err != nil {
		return err
	}
	return a.releaseCachedLocked()
}

func (a *allocator) memStats() device.MemStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

func (a *allocator) resetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.PeakBytes = a.stats.LiveBytes
}
