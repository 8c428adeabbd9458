package cuda

import (
	"bytes"
	"fmt"
	"runtime"
	"unsafe"
)

// CUjit_option values (cuda.h, enum CUjit_option_enum).
const (
	jitErrorLogBuffer          = 5 // CU_JIT_ERROR_LOG_BUFFER: char *
	jitErrorLogBufferSizeBytes = 6 // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: unsigned int in, bytes written out
)

// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (cuda.h, enum
// CUfunction_attribute_enum).
const funcAttrMaxDynamicSharedSizeBytes = 8

// jitLogSize is the room given to the JIT compiler's error log.
const jitLogSize = 16 << 10

// Module is a loaded module: PTX compiled by the driver's JIT, or a cubin.
type Module struct {
	ctx *Context
	h   uintptr // CUmodule; 0 once unloaded
}

// LoadModule loads a module from an image in memory (cuModuleLoadDataEx):
// PTX text, a cubin or a fatbin. When loading fails, the JIT compiler's
// error log is the Error's Detail.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, &Error{Call: "cuModuleLoadDataEx", Code: ErrorInvalidImage, Detail: "an empty image"}
	}
	// The driver reads PTX up to its NUL and a cubin or fatbin as far as
	// its header says: a copy with a NUL after it serves both.
	img := make([]byte, len(image)+1)
	copy(img, image)
	log := make([]byte, jitLogSize)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSizeBytes} // CUjit_option, a C enum
	// optionValues is a void*[]: the buffer's address, and the size as an
	// integer in a pointer's place. It holds the address of Go memory as a
	// uintptr, which the garbage collector does not see: log is pinned so
	// that it stays where that address says, as are the arrays passed.
	vals := []uintptr{uintptr(unsafe.Pointer(&log[0])), jitLogSize}
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&img[0])
	pin.Pin(&log[0])
	pin.Pin(&opts[0])
	pin.Pin(&vals[0])
	var h uintptr
	r, failed := c.callOut(c.d.fn.cuModuleLoadDataEx, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&img[0])),
		uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	if r != Success {
		e := c.err("cuModuleLoadDataEx", r, failed)
		if failed == "" {
			e.Detail = jitLog(log, vals[1])
		}
		return nil, e
	}
	return &Module{ctx: c, h: h}, nil
}

// jitLog returns the text of a JIT log buffer, of which the driver says it
// wrote n bytes.
func jitLog(log []byte, n uintptr) string {
	if n < uintptr(len(log)) {
		log = log[:n]
	}
	if i := bytes.IndexByte(log, 0); i >= 0 {
		log = log[:i]
	}
	return string(bytes.TrimSpace(log))
}

// Function returns the kernel of the given name (cuModuleGetFunction): the
// name as compiled, mangled unless the kernel is extern "C".
func (m *Module) Function(name string) (Function, error) {
	if m.h == 0 {
		return Function{}, &Error{Call: "cuModuleGetFunction(" + name + ")", Code: ErrorInvalidHandle, Detail: errUnloadedModule}
	}
	cname := make([]byte, len(name)+1)
	copy(cname, name)
	var h uintptr
	r, failed := m.ctx.callOut(m.ctx.d.fn.cuModuleGetFunction, uintptr(unsafe.Pointer(&h)), m.h, uintptr(unsafe.Pointer(&cname[0])))
	if r != Success {
		return Function{}, m.ctx.err("cuModuleGetFunction("+name+")", r, failed)
	}
	return Function{ctx: m.ctx, h: h, name: name}, nil
}

// Unload unloads the module (cuModuleUnload); its functions become
// invalid.
func (m *Module) Unload() error {
	if m.h == 0 {
		return &Error{Call: "cuModuleUnload", Code: ErrorInvalidHandle, Detail: errUnloadedModule}
	}
	if err := m.ctx.do("cuModuleUnload", m.ctx.d.fn.cuModuleUnload, m.h); err != nil {
		return err
	}
	m.h = 0
	return nil
}

// Dim3 is a grid's size in blocks, or a block's in threads.
type Dim3 struct{ X, Y, Z uint32 }

// Function is a kernel of a loaded module. The zero Function is not
// usable.
type Function struct {
	ctx  *Context
	h    uintptr // CUfunction
	name string
}

// Name returns the kernel's name.
func (f Function) Name() string { return f.name }

// Handle returns the raw CUfunction.
func (f Function) Handle() uintptr { return f.h }

// Launch queues the kernel on stream s, a nil s being the NULL stream
// (cuLaunchKernel), with the arguments of args (none for a nil args).
// sharedBytes is the dynamic shared memory per block.
//
// Launch does not allocate: callers keep an Args per call site and Reset
// it.
func (f Function) Launch(grid, block Dim3, sharedBytes uint32, s *Stream, args *Args) error {
	if f.ctx == nil {
		return &Error{Call: "cuLaunchKernel", Code: ErrorInvalidHandle, Detail: errZeroFunction}
	}
	var stream uintptr
	if s != nil {
		if s.h == 0 {
			return &Error{Call: f.launchCall(grid, block, sharedBytes), Code: ErrorInvalidHandle, Detail: errDestroyedStream}
		}
		stream = s.h
	}
	// kernelParams is read by the driver during the call only: it copies
	// the values into the launch. The array and the values are Go memory
	// that the call names by uintptr, which keeps nothing alive and in
	// place; pinning them does, as the cgo rules ask of Go memory that C
	// reaches through a pointer stored in Go memory.
	var pin runtime.Pinner
	var params uintptr
	if args != nil {
		params = args.kernelParams(&pin)
	}
	r, failed := f.ctx.call(f.ctx.d.fn.cuLaunchKernel, f.h,
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedBytes), stream, params, 0)
	pin.Unpin()
	if r != Success {
		return f.ctx.err(f.launchCall(grid, block, sharedBytes), r, failed)
	}
	return nil
}

func (f Function) launchCall(grid, block Dim3, shared uint32) string {
	return fmt.Sprintf("cuLaunchKernel(%s, grid (%d,%d,%d), block (%d,%d,%d), shared %d)",
		f.name, grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, shared)
}

// SetMaxDynamicShared lets launches of the kernel have up to bytes of
// dynamic shared memory (cuFuncSetAttribute with
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES): beyond 48 KiB a kernel
// must opt in, up to Device.MaxSharedPerBlockOptin less its static shared
// memory.
func (f Function) SetMaxDynamicShared(bytes int) error {
	if f.ctx == nil {
		return &Error{Call: "cuFuncSetAttribute", Code: ErrorInvalidHandle, Detail: errZeroFunction}
	}
	r, failed := f.ctx.call(f.ctx.d.fn.cuFuncSetAttribute, f.h, funcAttrMaxDynamicSharedSizeBytes, uintptr(bytes))
	if r != Success {
		return f.ctx.err(fmt.Sprintf("cuFuncSetAttribute(%s, MAX_DYNAMIC_SHARED_SIZE_BYTES, %d)", f.name, bytes), r, failed)
	}
	return nil
}
