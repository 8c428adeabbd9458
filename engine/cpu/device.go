// Package cpu is the CPU implementation of device.Device: host memory with a
// per-owner buffer pool, and the kernels of every engine op, parallelised over
// the shared worker pool (engine/cpu/parallel), with matrix products in
// engine/cpu/blas and float32 vector math in engine/cpu/vmath.
//
// Each rank creates its own Device with New: the pool and its statistics are
// per rank, the worker pool and BLAS library are shared by the process.
package cpu

import (
	"fmt"
	"runtime/debug"
	"sync"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/internal/hostmem"
)

// alignment of every buffer, in bytes: one AVX-512 vector / cache line.
const alignment = 64

// Buffer is host memory handed out by a CPU Device.
type Buffer struct {
	data     []byte // len is the requested size, the backing array is aligned
	owner    *Device
	external bool // adopted with WrapHost: never pooled
}

// Bytes implements device.Buffer.
func (b *Buffer) Bytes() int { return len(b.data) }

// HostBytes implements device.HostBuffer.
func (b *Buffer) HostBytes() []byte { return b.data }

// Device is one owner's view of the CPU.
type Device struct {
	index int

	mu    sync.Mutex // the pool may be reached from a rank's comm queue too
	pool  map[int][]*Buffer
	stats device.MemStats
	// MaxPooledBytes bounds the freed memory kept for reuse; beyond it,
	// freed buffers are left to the Go collector.
	maxPooled int64
	maxMemory int64 // Options.MaxMemory
}

// Options configure a CPU Device.
type Options struct {
	// Index distinguishes the devices of in-process ranks in messages
	// ("cpu:1"); it does not pin threads.
	Index int
	// MaxPooledBytes bounds the memory kept for reuse (default 8 GiB).
	MaxPooledBytes int64
	// MaxMemory bounds the bytes of the buffers handed out and not yet
	// freed (0: no bound): an allocation past it fails with a
	// *device.OutOfMemoryError, as a GPU's would at its capacity.
	MaxMemory int64
}

// New returns a CPU device with its own buffer pool.
func New(opt Options) *Device {
	if opt.MaxPooledBytes <= 0 {
		opt.MaxPooledBytes = 8 << 30
	}
	blas.Resolve() // the workers' polling follows the choice of GEMM
	return &Device{index: opt.Index, pool: map[int][]*Buffer{}, maxPooled: opt.MaxPooledBytes, maxMemory: opt.MaxMemory}
}

var _ device.Device = (*Device)(nil)

func (d *Device) Kind() device.Kind { return device.CPU }
func (d *Device) Index() int        { return d.index }
func (d *Device) String() string {
	if d.index == 0 {
		return "cpu"
	}
	return fmt.Sprintf("cpu:%d", d.index)
}

// Alloc returns a buffer of n elements of dt, from the pool when a freed
// buffer of exactly that size exists. Training steps allocate the same sizes
// every step, so exact-size reuse makes the steady state allocation-free.
func (d *Device) Alloc(dt dtype.DType, n int) (device.Buffer, error) {
	if n < 0 || !dt.Valid() {
		return nil, fmt.Errorf("cpu: alloc of %d elements of %v", n, dt)
	}
	size := n * dt.Size()
	if n != 0 && size/n != dt.Size() {
		return nil, fmt.Errorf("cpu: alloc of %d elements of %v overflows", n, dt)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := device.CheckLimit(d, d.maxMemory, d.stats, size); err != nil {
		return nil, err
	}
	var b *Buffer
	if free := d.pool[size]; len(free) > 0 {
		b = free[len(free)-1]
		free[len(free)-1] = nil
		d.pool[size] = free[:len(free)-1]
		d.stats.PooledBytes -= int64(size)
		d.stats.Reuses++
	} else {
		if err := d.checkRoom(size); err != nil {
			return nil, fmt.Errorf("cpu: %d elements of %v: %w", n, dt, err)
		}
		b = &Buffer{data: alignedBytes(size), owner: d}
		d.stats.Allocs++
	}
	d.stats.LiveBuffers++
	d.stats.LiveBytes += int64(size)
	d.stats.PeakBytes = max(d.stats.PeakBytes, d.stats.LiveBytes)
	return b, nil
}

// checkRoom refuses a large allocation that the machine cannot hold (Go
// would die of it with a fatal error), after giving the pool back to try.
// Called with d.mu held.
func (d *Device) checkRoom(size int) error {
	if size < checkRoomFrom {
		return nil
	}
	err := hostmem.Check(int64(size))
	if err != nil && d.stats.PooledBytes > 0 {
		d.trimLocked()
		debug.FreeOSMemory()
		err = hostmem.Check(int64(size))
	}
	return err
}

// checkRoomFrom is the smallest allocation checked against the memory
// available: reading /proc/meminfo costs microseconds, nothing next to
// filling 64 MiB.
const checkRoomFrom = 64 << 20

func alignedBytes(size int) []byte {
	if size == 0 {
		return []byte{}
	}
	raw := make([]byte, size+alignment-1)
	skip := (alignment - int(uintptr(unsafe.Pointer(&raw[0]))%alignment)) % alignment
	return raw[skip : skip+size : skip+size]
}

// WrapHost implements device.HostMemory: the buffer is b itself, which the
// device neither counts nor pools.
func (d *Device) WrapHost(b []byte) device.Buffer {
	return &Buffer{data: b, owner: d, external: true}
}

// Free returns a buffer to the pool.
func (d *Device) Free(buf device.Buffer) {
	b, ok := buf.(*Buffer)
	if !ok || b.owner != d {
		panic(fmt.Sprintf("cpu: Free of a buffer %T not allocated by %v", buf, d))
	}
	if b.external {
		return
	}
	size := len(b.data)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.LiveBuffers--
	d.stats.LiveBytes -= int64(size)
	if d.stats.PooledBytes+int64(size) <= d.maxPooled {
		d.pool[size] = append(d.pool[size], b)
		d.stats.PooledBytes += int64(size)
	}
}

// Trim drops every pooled buffer.
func (d *Device) Trim() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.trimLocked()
}

func (d *Device) trimLocked() {
	clear(d.pool)
	d.stats.PooledBytes = 0
}

// MemStats implements device.Device.
func (d *Device) MemStats() device.MemStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// ResetPeakMemStats implements device.PeakResetter.
func (d *Device) ResetPeakMemStats() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.PeakBytes = d.stats.LiveBytes
}

// Sync implements device.Device; CPU kernels complete before they return.
func (d *Device) Sync() error { return nil }

// Upload implements device.Device.
func (d *Device) Upload(dst device.View, src []byte) error {
	if !dst.Contiguous() || len(src) != dst.Numel()*dst.DType.Size() {
		return fmt.Errorf("cpu: upload of %d bytes into a %v view of shape %v", len(src), dst.DType, dst.Shape)
	}
	copy(bytesOf(dst), src)
	return nil
}

// Download implements device.Device.
func (d *Device) Download(dst []byte, src device.View) error {
	if len(dst) != src.Numel()*src.DType.Size() {
		return fmt.Errorf("cpu: download of a %v view of shape %v into %d bytes", src.DType, src.Shape, len(dst))
	}
	if src.Contiguous() {
		copy(dst, bytesOf(src))
		return nil
	}
	hostDst := &Buffer{data: dst}
	return d.Copy(device.View{Buf: hostDst, DType: src.DType, Shape: src.Shape, Strides: device.ContiguousStrides(src.Shape)}, src)
}

// bytesOf returns the bytes of a contiguous view.
func bytesOf(v device.View) []byte {
	es := v.DType.Size()
	return v.Buf.(*Buffer).data[v.Offset*es : (v.Offset+v.Numel())*es]
}

// elems reinterprets a whole buffer as a slice of T (base of every kernel's
// index arithmetic).
func elems[T any](buf device.Buffer) []T {
	data := buf.(*Buffer).data
	var zero T
	n := len(data) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&data[0])), n)
}
