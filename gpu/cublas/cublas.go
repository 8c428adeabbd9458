// Package cublas owns the run-time binding to cuBLAS (libcublas): handles,
// their stream, workspace and math mode, and cublasGemmStridedBatchedEx,
// the one product the engine needs (a batch of one is a plain GEMM). It
// only binds: package gpu decides the operands, types and layouts.
//
// The library is found by gpu/libs (Spec: libcublas.so.13, .12 or .11,
// with libcuBLASLt of the same folder loaded first; the wheels' folder is
// nvidia/cublas/lib) and called with purego, so the binary builds without
// cgo and without the CUDA toolkit. Every call's cublasStatus_t is checked:
// a failure is an *Error naming the call and the status
// ("cublasGemmStridedBatchedEx: CUBLAS_STATUS_INVALID_VALUE").
//
// Device pointers are uint64 (CUdeviceptr) and streams uintptr (CUstream),
// so that the package does not depend on the driver binding. cuBLAS's
// calls must run on a thread whose current CUDA context is the one the
// handle was created in; keeping to that is the caller's part.
//
// The C signatures and enumeration values bound here are those of
// cublas_api.h and library_types.h (CUDA 11 to 13).
package cublas

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/libs"
)

// Spec describes cuBLAS for gpu/libs. cuBLAS needs cuBLASLt of the same
// release, which outside the wheels its RUNPATH may not find.
var Spec = libs.Spec{
	Name:    "cuBLAS",
	Sonames: []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"},
	Symbol:  "cublasCreate_v2",
	Deps:    []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11"},
}

// Op is a cublasOperation_t.
type Op int32

const (
	OpN Op = 0 // CUBLAS_OP_N
	OpT Op = 1 // CUBLAS_OP_T
	OpC Op = 2 // CUBLAS_OP_C (the conjugate transpose; OpT for real types)
)

// DataType is a cudaDataType (library_types.h): the type of a matrix's
// elements.
type DataType int32

const (
	R32F    DataType = 0  // CUDA_R_32F
	R64F    DataType = 1  // CUDA_R_64F
	R16F    DataType = 2  // CUDA_R_16F
	R8I     DataType = 3  // CUDA_R_8I
	C32F    DataType = 4  // CUDA_C_32F
	C64F    DataType = 5  // CUDA_C_64F
	C16F    DataType = 6  // CUDA_C_16F
	C8I     DataType = 7  // CUDA_C_8I
	R8U     DataType = 8  // CUDA_R_8U
	C8U     DataType = 9  // CUDA_C_8U
	R32I    DataType = 10 // CUDA_R_32I
	C32I    DataType = 11 // CUDA_C_32I
	R16BF   DataType = 14 // CUDA_R_16BF
	C16BF   DataType = 15 // CUDA_C_16BF
	R8FE4M3 DataType = 28 // CUDA_R_8F_E4M3
	R8FE5M2 DataType = 29 // CUDA_R_8F_E5M2
)

// ComputeType is a cublasComputeType_t: the precision of the products and
// sums, and the type of alpha and beta.
type ComputeType int32

const (
	Compute16F         ComputeType = 64 // CUBLAS_COMPUTE_16F: half scalars
	Compute16FPedantic ComputeType = 65 // CUBLAS_COMPUTE_16F_PEDANTIC
	Compute32F         ComputeType = 68 // CUBLAS_COMPUTE_32F: float scalars
	Compute32FPedantic ComputeType = 69 // CUBLAS_COMPUTE_32F_PEDANTIC
	Compute64F         ComputeType = 70 // CUBLAS_COMPUTE_64F: double scalars
	Compute64FPedantic ComputeType = 71 // CUBLAS_COMPUTE_64F_PEDANTIC
	Compute32I         ComputeType = 72 // CUBLAS_COMPUTE_32I: int scalars
	Compute32IPedantic ComputeType = 73 // CUBLAS_COMPUTE_32I_PEDANTIC
	Compute32FFast16F  ComputeType = 74 // CUBLAS_COMPUTE_32F_FAST_16F
	Compute32FFast16BF ComputeType = 75 // CUBLAS_COMPUTE_32F_FAST_16BF
	Compute32FFastTF32 ComputeType = 77 // CUBLAS_COMPUTE_32F_FAST_TF32
)

// MathMode is a cublasMath_t, for SetMathMode.
type MathMode int32

const (
	DefaultMath      MathMode = 0 // CUBLAS_DEFAULT_MATH
	TensorOpMath     MathMode = 1 // CUBLAS_TENSOR_OP_MATH (deprecated)
	PedanticMath     MathMode = 2 // CUBLAS_PEDANTIC_MATH
	TF32TensorOpMath MathMode = 3 // CUBLAS_TF32_TENSOR_OP_MATH
	// DisallowReducedPrecisionReduction is a flag to OR with a mode
	// (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION).
	DisallowReducedPrecisionReduction MathMode = 16
)

// Algo is a cublasGemmAlgo_t.
type Algo int32

const (
	AlgoDefault         Algo = -1 // CUBLAS_GEMM_DEFAULT
	AlgoDefaultTensorOp Algo = 99 // CUBLAS_GEMM_DEFAULT_TENSOR_OP (deprecated)
)

// cublasStatus_t values (cublas_api.h).
const success = 0 // CUBLAS_STATUS_SUCCESS

var statusNames = map[int]string{
	0:  "CUBLAS_STATUS_SUCCESS",
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// Error is a failed cuBLAS call.
type Error struct {
	Call   string // "cublasGemmStridedBatchedEx"
	Status int    // the cublasStatus_t
	name   string // from the library, for a status the package does not know
}

func (e *Error) Error() string { return e.Call + ": " + e.Name() }

// Name is the status's name: "CUBLAS_STATUS_INVALID_VALUE".
func (e *Error) Name() string {
	if n, ok := statusNames[e.Status]; ok {
		return n
	}
	if e.name != "" {
		return e.name
	}
	return fmt.Sprintf("cublasStatus_t %d", e.Status)
}

// Lib is a loaded cuBLAS.
type Lib struct {
	Lib *libs.Library
	// Version is 10000·major + 100·minor + patch, from cublasGetProperty
	// (the form of CUBLAS_VERSION in the headers of cuBLAS 11.9 and later): 120405 for 12.4.5.
	// 0 when the library does not say.
	Version int

	create, destroy, setStream, setMathMode, gemm uintptr
	setWorkspace                                  uintptr // 0 when absent
	statusName, statusString                      uintptr // 0 when absent (before cuBLAS 11.4.2)
}

// Load finds cuBLAS (gpu/libs) and binds it, once per process; later calls
// return the same Lib or the same error. It needs no GPU.
func Load() (*Lib, error) { return load() }

// LoadFrom loads and binds the library at path, without caching.
func LoadFrom(path string) (*Lib, error) { return loadFrom(path) }

var load, loadFrom = libs.Loaders(Spec, bind)

func bind(lib *libs.Library) (*Lib, error) {
	l := &Lib{Lib: lib}
	syms := lib.Symbols()
	syms.Need(&l.create, "cublasCreate_v2")
	syms.Need(&l.destroy, "cublasDestroy_v2")
	syms.Need(&l.setStream, "cublasSetStream_v2")
	syms.Need(&l.setMathMode, "cublasSetMathMode")
	syms.Need(&l.gemm, "cublasGemmStridedBatchedEx")
	if err := syms.Err(); err != nil {
		return nil, err
	}
	l.setWorkspace = syms.Optional("cublasSetWorkspace_v2")
	l.statusName = syms.Optional("cublasGetStatusName")
	l.statusString = syms.Optional("cublasGetStatusString")

	// cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value),
	// with MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2
	// (library_types.h).
	if prop := syms.Optional("cublasGetProperty"); prop != 0 {
		var v [3]int32
		for i := range v {
			if s := call(prop, uintptr(i), uintptr(unsafe.Pointer(&v[i]))); s != success {
				return nil, l.err("cublasGetProperty", s)
			}
		}
		l.Version = int(v[0])*10000 + int(v[1])*100 + int(v[2])
	}
	return l, nil
}

// err makes the Error of a failed call.
func (l *Lib) err(fn string, s int32) *Error {
	e := &Error{Call: fn, Status: int(s)}
	if _, known := statusNames[e.Status]; !known {
		// const char *cublasGetStatusName(cublasStatus_t status), and
		// cublasGetStatusString likewise (cuBLAS 11.4.2).
		for _, f := range []uintptr{l.statusName, l.statusString} {
			if f != 0 && e.name == "" {
				e.name = goString(callPtr(f, uintptr(s)))
			}
		}
	}
	return e
}

// Handle is a cublasHandle_t, created in the CUDA context current when
// Create was called. Its methods may be called from several goroutines,
// as cuBLAS allows, except Destroy, which must be the last.
type Handle struct {
	lib *Lib
	h   uintptr
}

var errDestroyed = errors.New("cublas: handle used after Destroy")

// Create makes a handle (cublasCreate_v2) in the current CUDA context.
func (l *Lib) Create() (*Handle, error) {
	// cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
	var h uintptr
	if s := call(l.create, uintptr(unsafe.Pointer(&h))); s != success {
		return nil, l.err("cublasCreate_v2", s)
	}
	return &Handle{lib: l, h: h}, nil
}

// Raw is the cublasHandle_t, 0 after Destroy.
func (h *Handle) Raw() uintptr { return h.h }

// Destroy releases the handle (cublasDestroy_v2). Later calls of Destroy
// do nothing; other methods fail.
func (h *Handle) Destroy() error {
	if h.h == 0 {
		return nil
	}
	// cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
	if s := call(h.lib.destroy, h.h); s != success {
		return h.lib.err("cublasDestroy_v2", s)
	}
	h.h = 0
	return nil
}

// SetStream makes the handle's calls run on stream, a CUstream (0: the
// NULL stream). cuBLAS then uses its default workspace again, until
// SetWorkspace.
func (h *Handle) SetStream(stream uintptr) error {
	if h.h == 0 {
		return errDestroyed
	}
	// cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
	if s := call(h.lib.setStream, h.h, stream); s != success {
		return h.lib.err("cublasSetStream_v2", s)
	}
	return nil
}

// SetWorkspace gives the handle bytes of device memory at ptr as its
// workspace (cublasSetWorkspace_v2), in place of cuBLAS's own pool. The
// error wraps errors.ErrUnsupported when the library has no
// cublasSetWorkspace_v2; cuBLAS then keeps its own pool.
func (h *Handle) SetWorkspace(ptr uint64, bytes int) error {
	if h.h == 0 {
		return errDestroyed
	}
	if h.lib.setWorkspace == 0 {
		return fmt.Errorf("cublas: %s (%s) has no cublasSetWorkspace_v2: %w", h.lib.Lib.Spec.Name, h.lib.Lib.Path, errors.ErrUnsupported)
	}
	if bytes < 0 {
		return fmt.Errorf("cublas: SetWorkspace: negative size %d", bytes)
	}
	// cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle,
	//     void *workspace, size_t workspaceSizeInBytes)
	if s := call(h.lib.setWorkspace, h.h, uintptr(ptr), uintptr(bytes)); s != success {
		return h.lib.err("cublasSetWorkspace_v2", s)
	}
	return nil
}

// SetMathMode sets the handle's math mode (cublasSetMathMode).
func (h *Handle) SetMathMode(m MathMode) error {
	if h.h == 0 {
		return errDestroyed
	}
	// cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
	if s := call(h.lib.setMathMode, h.h, uintptr(uint32(m))); s != success {
		return h.lib.err("cublasSetMathMode", s)
	}
	return nil
}

// GemmStridedBatched is cublasGemmStridedBatchedEx with the default
// algorithm: for each of batch problems i,
//
//	C_i = alpha·op(A_i)·op(B_i) + beta·C_i
//
// with A_i at a + i·strideA elements (likewise B and C), column-major as
// cuBLAS is: op(A) is m×k, op(B) k×n, C m×n, with leading dimensions lda,
// ldb and ldc. a, b and c are device pointers. alpha and beta are given as
// float64 and passed, in host memory (cuBLAS's default pointer mode), as
// the scalar type of the compute type: float for the 32F types, double for
// 64F, half for 16F and int for 32I. C is not read when beta is 0.
func (h *Handle) GemmStridedBatched(transA, transB Op, m, n, k int, alpha float64,
	a uint64, aType DataType, lda int, strideA int64,
	b uint64, bType DataType, ldb int, strideB int64,
	beta float64, c uint64, cType DataType, ldc int, strideC int64,
	batch int, compute ComputeType) error {
	return h.GemmStridedBatchedAlgo(transA, transB, m, n, k, alpha, a, aType, lda, strideA,
		b, bType, ldb, strideB, beta, c, cType, ldc, strideC, batch, compute, AlgoDefault)
}

// GemmStridedBatchedAlgo is GemmStridedBatched with a chosen algorithm.
func (h *Handle) GemmStridedBatchedAlgo(transA, transB Op, m, n, k int, alpha float64,
	a uint64, aType DataType, lda int, strideA int64,
	b uint64, bType DataType, ldb int, strideB int64,
	beta float64, c uint64, cType DataType, ldc int, strideC int64,
	batch int, compute ComputeType, algo Algo) error {
	if h.h == 0 {
		return errDestroyed
	}
	for _, d := range [...]struct {
		name string
		v    int
	}{{"m", m}, {"n", n}, {"k", k}, {"lda", lda}, {"ldb", ldb}, {"ldc", ldc}, {"batch", batch}} {
		if d.v != int(int32(d.v)) {
			return fmt.Errorf("cublas: GemmStridedBatched: %s = %d does not fit cuBLAS's 32-bit int", d.name, d.v)
		}
	}
	// alpha at scalars[0:8], beta at scalars[8:16], each in the compute
	// type's scalar type. The frame is pooled heap memory, which Go does
	// not move, kept alive until the call returns: the call allocates
	// nothing.
	f := gemmFrames.Get().(*gemmFrame)
	defer gemmFrames.Put(f)
	scalars := &f.scalars
	if err := putScalar(scalars[0:8], alpha, compute); err != nil {
		return fmt.Errorf("cublas: GemmStridedBatched: alpha: %w", err)
	}
	if err := putScalar(scalars[8:16], beta, compute); err != nil {
		return fmt.Errorf("cublas: GemmStridedBatched: beta: %w", err)
	}
	// cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle,
	//     cublasOperation_t transa, cublasOperation_t transb,
	//     int m, int n, int k, const void *alpha,
	//     const void *A, cudaDataType Atype, int lda, long long int strideA,
	//     const void *B, cudaDataType Btype, int ldb, long long int strideB,
	//     const void *beta,
	//     void *C, cudaDataType Ctype, int ldc, long long int strideC,
	//     int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
	//
	// 23 integer arguments: 6 in registers, 17 on the stack (System V),
	// each int widened to a slot as C reads only its low 32 bits.
	f.args = [23]uintptr{h.h, uintptr(transA), uintptr(transB),
		uintptr(m), uintptr(n), uintptr(k), uintptr(unsafe.Pointer(&scalars[0])),
		uintptr(a), uintptr(aType), uintptr(lda), uintptr(strideA),
		uintptr(b), uintptr(bType), uintptr(ldb), uintptr(strideB),
		uintptr(unsafe.Pointer(&scalars[8])),
		uintptr(c), uintptr(cType), uintptr(ldc), uintptr(strideC),
		uintptr(batch), uintptr(compute), uintptr(algo)}
	s := callv(h.lib.gemm, f.args[:])
	runtime.KeepAlive(f)
	if s != success {
		return h.lib.err("cublasGemmStridedBatchedEx", s)
	}
	return nil
}

// gemmFrame is the memory of one GEMM call: its arguments and the scalars
// they point to.
type gemmFrame struct {
	args    [23]uintptr
	scalars [16]byte
}

var gemmFrames = sync.Pool{New: func() any { return new(gemmFrame) }}

// putScalar writes v into b as the scalar type of compute, in the
// machine's byte order.
func putScalar(b []byte, v float64, compute ComputeType) error {
	switch compute {
	case Compute32F, Compute32FPedantic, Compute32FFast16F, Compute32FFast16BF, Compute32FFastTF32:
		binary.NativeEndian.PutUint32(b, math.Float32bits(float32(v)))
	case Compute64F, Compute64FPedantic:
		binary.NativeEndian.PutUint64(b, math.Float64bits(v))
	case Compute16F, Compute16FPedantic:
		binary.NativeEndian.PutUint16(b, uint16(dtype.F16FromFloat32(float32(v))))
	case Compute32I, Compute32IPedantic:
		if v != math.Trunc(v) || v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("%v is not an int for compute type %d", v, compute)
		}
		binary.NativeEndian.PutUint32(b, uint32(int32(v)))
	default:
		return fmt.Errorf("unknown compute type %d", compute)
	}
	return nil
}

// goString copies the NUL-terminated C string at p (0: "").
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	// Through a pointer, so that vet does not take C memory held in a
	// uintptr for a misuse of unsafe.Pointer.
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}
