// Package gpu is the CUDA implementation of device.Device: one rank's view
// of one NVIDIA GPU. It owns the policy above the bindings: which context
// and streams a rank uses, the caching allocator, compiling the kernels of
// gpu/kernels with NVRTC at first use (cached on disk by source hash and
// architecture), matrix products through cuBLAS, and the launch of every
// engine op.
//
// Nothing here needs cgo or the CUDA toolkit at build time: the driver,
// NVRTC and cuBLAS are found and loaded at run time (gpu/libs), and a
// machine without them gets an error that says what is missing and where
// it was looked for.
//
// # Streams
//
// Each Device has a compute stream, where every kernel, copy and GEMM is
// queued in program order, and a communication stream for collectives
// (nccl). Work on the host returns as soon as it is queued; Download and
// the few ops whose result the host needs (SumSquares, CrossEntropy's row
// count) wait for the compute stream. Sync waits for both.
package gpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/cublas"
	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/gpu/nvrtc"
)

// Options configure a Device.
type Options struct {
	// Ordinal is the GPU (CUDA device number) to use.
	Ordinal int
	// Index labels the device in messages as the rank's device
	// ("cuda:1"); by default it is Ordinal.
	Index int
	// TF32 lets float32 matrix products use TF32 tensor cores
	// (torch.backends.cuda.matmul.allow_tf32; off by default, as in
	// PyTorch since 1.12).
	TF32 bool
	// MaxCachedBytes bounds the freed memory the allocator keeps for
	// reuse (default: all of it, as PyTorch).
	MaxCachedBytes int64
	// MaxMemory bounds the bytes live on the device (0: its capacity): an
	// allocation past it fails with a *device.OutOfMemoryError
	// (torch.cuda.set_per_process_memory_fraction).
	MaxMemory int64
}

// Buffer is device memory handed out by a Device.
type Buffer struct {
	blk   *block
	n     int // requested bytes
	owner *Device
	// commUse is set when a collective on the communication stream has
	// used the buffer: its reuse then waits for that stream.
	commUse bool
}

// Bytes implements device.Buffer.
func (b *Buffer) Bytes() int { return b.n }

// Ptr is the device address of the buffer's first byte.
func (b *Buffer) Ptr() cuda.DevicePtr { return b.blk.ptr }

// Device is one rank's handle on one GPU. Like every device.Device it is
// used by one goroutine at a time (the rank's); the communication stream's
// goroutine only touches the allocator, which locks.
type Device struct {
	opt     Options
	drv     *cuda.Driver
	dev     *cuda.Device
	ctx     *cuda.Context
	compute *cuda.Stream
	comm    *cuda.Stream
	alloc   *allocator
	blas    *cublas.Handle
	// blasWorkspace is cuBLAS's scratch memory, set explicitly so that
	// cuBLAS does not allocate behind the caching allocator's back.
	blasWorkspace *Buffer

	// rtc loads NVRTC, which is needed only when a kernel family is not
	// in the disk cache yet.
	rtc     func() (*nvrtc.Lib, error)
	argBuf  cuda.Args
	cur     call // the launch being packed (a field, so that packing allocates nothing)
	mods    modules
	closed  bool
	closeMu sync.Mutex
}

var _ device.Device = (*Device)(nil)

// blasWorkspaceBytes is the workspace cuBLAS gets: what the cuBLAS
// documentation of cublasSetWorkspace recommends and PyTorch gives it,
// 32 MiB on Hopper (compute capability 9.x), 4 MiB elsewhere.
func blasWorkspaceBytes(dev *cuda.Device) int {
	if dev.Major == 9 {
		return 32 << 20
	}
	return 4 << 20
}

// ctxMemory is the allocator's memory on a CUDA context.
type ctxMemory struct{ ctx *cuda.Context }

func (m ctxMemory) alloc(n int) (cuda.DevicePtr, error) { return m.ctx.MemAlloc(uint64(n)) }
func (m ctxMemory) free(p cuda.DevicePtr) error         { return m.ctx.MemFree(p) }

// Open makes a Device on GPU opt.Ordinal: it loads the driver (once per
// process), retains the GPU's primary context (shared with every other
// user of that GPU in the process, PyTorch included), and creates the
// rank's streams and cuBLAS handle.
func Open(opt Options) (*Device, error) {
	drv, err := cuda.Load()
	if err != nil {
		return nil, err
	}
	blas, err := cublas.Load()
	if err != nil {
		return nil, err
	}
	return open(drv, blas, nvrtc.Load, opt)
}

func open(drv *cuda.Driver, blas *cublas.Lib, rtc func() (*nvrtc.Lib, error), opt Options) (d *Device, err error) {
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, err
	}
	if opt.Ordinal < 0 || opt.Ordinal >= n {
		return nil, fmt.Errorf("gpu: no CUDA device %d (%d found)", opt.Ordinal, n)
	}
	if opt.Index == 0 {
		opt.Index = opt.Ordinal
	}
	if opt.MaxCachedBytes <= 0 {
		opt.MaxCachedBytes = 1 << 62
	}
	dev, err := drv.Device(opt.Ordinal)
	if err != nil {
		return nil, err
	}
	ctx, err := dev.RetainPrimaryContext()
	if err != nil {
		return nil, err
	}
	d = &Device{opt: opt, drv: drv, dev: dev, ctx: ctx, rtc: rtc}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	d.alloc = newAllocator(ctxMemory{ctx}, opt.MaxCachedBytes)
	if d.compute, err = ctx.NewStream(true); err != nil {
		return nil, err
	}
	if d.comm, err = ctx.NewStream(true); err != nil {
		return nil, err
	}
	if err := d.openBLAS(blas); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Device) openBLAS(lib *cublas.Lib) error {
	return d.ctx.Do(func() error {
		h, err := lib.Create()
		if err != nil {
			return err
		}
		d.blas = h
		if err := h.SetStream(d.compute.Handle()); err != nil {
			return err
		}
		wsBytes := blasWorkspaceBytes(d.dev)
		ws, err := d.Alloc(dtype.Uint8, wsBytes)
		if err != nil {
			return err
		}
		d.blasWorkspace = ws.(*Buffer)
		err = h.SetWorkspace(uint64(d.blasWorkspace.Ptr()), wsBytes)
		if errors.Is(err, errors.ErrUnsupported) {
			// cuBLAS before 11.? allocates its own workspace.
			return nil
		}
		return err
	})
}

// Close waits for the device's work, and releases its streams, cuBLAS
// handle, cached memory and its reference on the primary context.
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if d.compute != nil {
		keep(d.Sync())
	}
	if d.blas != nil {
		keep(d.ctx.Do(d.blas.Destroy))
	}
	if d.blasWorkspace != nil {
		d.Free(d.blasWorkspace)
	}
	keep(d.mods.unload())
	if d.alloc != nil {
		keep(d.alloc.trim())
	}
	for _, s := range []*cuda.Stream{d.compute, d.comm} {
		if s != nil {
			keep(s.Destroy())
		}
	}
	if d.ctx != nil {
		keep(d.ctx.Release())
	}
	return first
}

// Kind implements device.Device.
func (d *Device) Kind() device.Kind { return device.CUDA }

// Index implements device.Device.
func (d *Device) Index() int { return d.opt.Index }

// String implements device.Device: "cuda:<index>", as PyTorch names it.
func (d *Device) String() string { return fmt.Sprintf("cuda:%d", d.opt.Index) }

// Props describes the GPU.
func (d *Device) Props() *cuda.Device { return d.dev }

// Context is the GPU's primary context, for libraries that work on the
// current context (NCCL).
func (d *Device) Context() *cuda.Context { return d.ctx }

// ComputeStream and CommStream are the rank's two queues.
func (d *Device) ComputeStream() *cuda.Stream { return d.compute }
func (d *Device) CommStream() *cuda.Stream    { return d.comm }

// Alloc implements device.Device: memory from the caching allocator.
func (d *Device) Alloc(dt dtype.DType, n int) (device.Buffer, error) {
	if n < 0 || !dt.Valid() {
		return nil, fmt.Errorf("%v: alloc of %d elements of %v", d, n, dt)
	}
	size := n * dt.Size()
	if n != 0 && size/n != dt.Size() {
		return nil, fmt.Errorf("%v: alloc of %d elements of %v overflows", d, n, dt)
	}
	if err := device.CheckLimit(d, d.opt.MaxMemory, d.alloc.memStats(), size); err != nil {
		return nil, err
	}
	b, err := d.alloc.get(size)
	if err != nil {
		return nil, fmt.Errorf("%v: alloc of %d bytes: %w", d, size, err)
	}
	return &Buffer{blk: b, n: size, owner: d}, nil
}

// Free implements device.Device. The memory goes back to the cache and may
// be handed out again at once: later work on the compute stream runs after
// the work that used it. A buffer a collective used waits for the
// communication stream first.
func (d *Device) Free(buf device.Buffer) {
	b, ok := buf.(*Buffer)
	if !ok || b.owner != d {
		panic(fmt.Sprintf("%v: Free of a buffer %T not allocated by this device", d, buf))
	}
	if b.blk == nil {
		panic(fmt.Sprintf("%v: buffer freed twice", d))
	}
	var done func() (bool, error)
	if b.commUse {
		done = d.commDone()
	}
	blk := b.blk
	b.blk = nil
	if err := d.alloc.put(blk, b.n, done); err != nil {
		// Free has no error to return; the failure is sticky in the
		// context and the next kernel or Sync reports it.
		_ = err
	}
}

// commDone records an event on the communication stream and reports when
// the stream has passed it. Without an event (creation failed) it waits for
// the whole stream.
func (d *Device) commDone() func() (bool, error) {
	ev, err := d.ctx.NewEvent(false)
	if err == nil {
		err = ev.Record(d.comm)
	}
	if err != nil {
		return func() (bool, error) { return d.comm.Query() }
	}
	return func() (bool, error) {
		done, err := ev.Query()
		if done || err != nil {
			ev.Destroy()
		}
		return done, err
	}
}

// MarkCommUse records that the communication stream uses buf, so that its
// memory is not reused before that stream is done with it.
func (d *Device) MarkCommUse(buf device.Buffer) {
	if b, ok := buf.(*Buffer); ok && b.owner == d {
		b.commUse = true
	}
}

// MemStats implements device.Device.
func (d *Device) MemStats() device.MemStats { return d.alloc.memStats() }

// ResetPeakMemStats implements device.PeakResetter
// (torch.cuda.reset_peak_memory_stats).
func (d *Device) ResetPeakMemStats() { d.alloc.resetPeak() }

// EmptyCache gives the cached memory back to the driver
// (torch.cuda.empty_cache).
func (d *Device) EmptyCache() error { return d.alloc.trim() }

// ptr is the address of v's element 0.
func (d *Device) ptr(v device.View) cuda.DevicePtr {
	if v.Buf == nil {
		return 0
	}
	return v.Buf.(*Buffer).blk.ptr + cuda.DevicePtr(v.Offset*v.DType.Size())
}

// args is the device's argument builder, reset.
func (d *Device) args() *cuda.Args { return d.argBuf.Reset() }

// temp is scratch memory; release returns it to the cache (stream-ordered,
// so it may be called as soon as the work using it is queued).
func (d *Device) temp(bytes int) (cuda.DevicePtr, func(), error) {
	b, err := d.alloc.get(bytes)
	if err != nil {
		return 0, nil, fmt.Errorf("%v: scratch of %d bytes: %w", d, bytes, err)
	}
	return b.ptr, func() { d.alloc.put(b, bytes, nil) }, nil
}

// read copies device memory into dst and waits for it.
func (d *Device) read(dst []byte, src cuda.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := d.compute.CopyDtoH(dst, src); err != nil {
		return err
	}
	return d.compute.Sync()
}

// Sync implements device.Device: it waits for both streams and reports the
// first error either has met.
func (d *Device) Sync() error {
	err := d.compute.Sync()
	if cerr := d.comm.Sync(); err == nil {
		err = cerr
	}
	return err
}

// Upload implements device.Device.
func (d *Device) Upload(dst device.View, src []byte) error {
	if !dst.Contiguous() || len(src) != dst.Numel()*dst.DType.Size() {
		return fmt.Errorf("%v: upload of %d bytes into a %v view of shape %v", d, len(src), dst.DType, dst.Shape)
	}
	if len(src) == 0 {
		return nil
	}
	// From pageable memory the driver stages the bytes before the call
	// returns, so src may be reused at once.
	return d.compute.CopyHtoD(d.ptr(dst), src)
}

// Download implements device.Device. A strided view is first packed on the
// device.
func (d *Device) Download(dst []byte, src device.View) error {
	n := src.Numel() * src.DType.Size()
	if len(dst) != n {
		return fmt.Errorf("%v: download of a %v view of shape %v into %d bytes", d, src.DType, src.Shape, len(dst))
	}
	if n == 0 {
		return nil
	}
	if src.Contiguous() {
		return d.read(dst, d.ptr(src))
	}
	buf, err := d.Alloc(src.DType, src.Numel())
	if err != nil {
		return err
	}
	defer d.Free(buf)
	packed := device.View{Buf: buf, DType: src.DType, Shape: src.Shape, Strides: device.ContiguousStrides(src.Shape)}
	if err := d.Copy(packed, src); err != nil {
		return err
	}
	return d.read(dst, d.ptr(packed))
}
