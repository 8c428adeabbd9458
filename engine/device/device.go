// Package device owns the contract between the tensor layer and the hardware
// back ends: the Device interface that the CPU (engine/cpu) and CUDA (gpu/)
// devices implement, and the plain descriptions of memory regions
// (View, GemmOperand) that kernels receive.
//
// The tensor layer validates user input (shapes, dtypes, dims) and lays out
// operands before it calls a kernel, so kernels may assume well-formed
// arguments; they return an error only for conditions that depend on data
// (an index out of range) or on the hardware (out of memory, a failed launch).
// The package depends on nothing but engine/dtype so that back ends never
// import the tensor layer.
package device

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Kind is the family of a device.
type Kind uint8

const (
	CPU Kind = iota
	CUDA
)

func (k Kind) String() string {
	switch k {
	case CPU:
		return "cpu"
	case CUDA:
		return "cuda"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Buffer is a block of device memory. Back ends define their own concrete
// types and only ever receive buffers they allocated.
type Buffer interface {
	// Bytes is the usable size of the buffer in bytes.
	Bytes() int
}

// HostBuffer is implemented by buffers that live in host memory, so that the
// tensor layer and file writers can read them without a copy.
type HostBuffer interface {
	Buffer
	HostBytes() []byte
}

// HostMemory is implemented by devices whose memory is host memory and that
// can adopt memory allocated elsewhere (a JavaScript typed array), so that
// a tensor can share it without a copy. The device never pools or reuses
// an adopted buffer.
type HostMemory interface {
	WrapHost(b []byte) Buffer
}

// View is a strided region of a buffer: element (i0, i1, ...) lives at
// element index Offset + Σ ik·Strides[k]. A stride of 0 broadcasts.
type View struct {
	Buf     Buffer
	DType   dtype.DType
	Offset  int
	Shape   []int
	Strides []int
}

// Numel is the number of elements the view addresses.
func (v View) Numel() int {
	n := 1
	for _, s := range v.Shape {
		n *= s
	}
	return n
}

// Contiguous reports whether the view is densely packed in row-major order.
func (v View) Contiguous() bool { return IsContiguous(v.Shape, v.Strides) }

// IsContiguous reports whether strides lay shape out densely in row-major
// order. Extents of 1 may have any stride, and an empty shape is
// contiguous whatever its strides, as in PyTorch.
func IsContiguous(shape, strides []int) bool {
	want := 1
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == 0 {
			return true
		}
		if shape[i] != 1 && strides[i] != want {
			return false
		}
		want *= shape[i]
	}
	return true
}

// ContiguousStrides returns the row-major strides of shape, as PyTorch
// computes them (an extent of 0 steps like an extent of 1).
func ContiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= max(shape[i], 1)
	}
	return st
}

// MemStats describes the memory a device holds for one owner (a rank).
type MemStats struct {
	LiveBuffers int64 // buffers handed out and not yet freed
	LiveBytes   int64 // bytes of those buffers
	PeakBytes   int64 // high-water mark of LiveBytes
	PooledBytes int64 // freed bytes kept for reuse
	Allocs      int64 // buffers obtained from the system (pool misses)
	Reuses      int64 // buffers served from the pool
}

// PeakResetter is implemented by devices that can restart MemStats'
// PeakBytes from the bytes live now (torch.cuda.reset_peak_memory_stats).
type PeakResetter interface {
	ResetPeakMemStats()
}

// PeakFlopser is implemented by devices that know (or estimate) the peak
// arithmetic rate of their kernels for an element type: FLOP/s (a fused
// multiply-add counts two), and a note saying where the number comes from.
// 0 means unknown.
type PeakFlopser interface {
	PeakFlops(dt dtype.DType) (flops float64, note string)
}

// UnaryOp selects an elementwise function of one tensor (and a scalar).
type UnaryOp uint8

const (
	Neg        UnaryOp = iota
	Exp                // e^x
	Log                // natural log
	Sqrt               //
	Rsqrt              // 1/√x
	Abs                //
	Sign               // -1, 0, 1
	Relu               //
	Gelu               // exact, erf form
	GeluTanh           // tanh approximation
	Silu               // x·σ(x)
	Tanh               //
	Sigmoid            //
	AddScalar          // x + s
	MulScalar          // x · s
	PowScalar          // x ^ s
	RSubScalar         // s − x
	RDivScalar         // s / x
	Square             // x²
	Reciprocal         // 1/x
	Sin                //
	Cos                //
	Erf                // the error function
	numUnaryOps
)

var unaryNames = [...]string{"neg", "exp", "log", "sqrt", "rsqrt", "abs", "sign", "relu", "gelu", "gelu_tanh",
	"silu", "tanh", "sigmoid", "add_scalar", "mul_scalar", "pow_scalar", "rsub_scalar", "rdiv_scalar", "square", "reciprocal",
	"sin", "cos", "erf"}

func (o UnaryOp) String() string {
	if int(o) < len(unaryNames) {
		return unaryNames[o]
	}
	return fmt.Sprintf("unary(%d)", uint8(o))
}

// ActivationOp selects the backward of an activation whose gradient is
// computed from the saved input (or output) without intermediate tensors.
type ActivationOp uint8

const (
	ReluBackward     ActivationOp = iota // dx = (y ≤ 0 ? 0 : dy), given the output y (a NaN y passes dy, as PyTorch)
	GeluBackward                         // given the input x
	GeluTanhBackward                     // given the input x
	SiluBackward                         // given the input x
	TanhBackward                         // dx = dy·(1−y²), given the output y
	SigmoidBackward                      // dx = dy·y·(1−y), given the output y
)

// BinaryOp selects an elementwise function of two tensors.
type BinaryOp uint8

const (
	Add BinaryOp = iota
	Sub
	Mul
	Div
	Pow
	Maximum
	Minimum
	Eq // comparisons write Bool
	Ne
	Lt
	Le
	Gt
	Ge
	numBinaryOps
)

var binaryNames = [...]string{"add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"}

func (o BinaryOp) String() string {
	if int(o) < len(binaryNames) {
		return binaryNames[o]
	}
	return fmt.Sprintf("binary(%d)", uint8(o))
}

// IsComparison reports whether the op writes a Bool result.
func (o BinaryOp) IsComparison() bool { return o >= Eq && o <= Ge }

// ReduceOp selects a reduction.
type ReduceOp uint8

const (
	Sum ReduceOp = iota
	Max
	Min
	Prod // the product; 1 over no elements, as torch.prod
)

var reduceNames = [...]string{"sum", "max", "min", "prod"}

func (o ReduceOp) String() string {
	if int(o) < len(reduceNames) {
		return reduceNames[o]
	}
	return fmt.Sprintf("reduce(%d)", uint8(o))
}

// ScanOp selects a cumulative operation along one axis.
type ScanOp uint8

const (
	CumSum  ScanOp = iota // running sums (torch.cumsum)
	CumProd               // running products (torch.cumprod)
)

func (o ScanOp) String() string {
	switch o {
	case CumSum:
		return "cumsum"
	case CumProd:
		return "cumprod"
	}
	return fmt.Sprintf("scan(%d)", uint8(o))
}

// GemmOperand is one matrix operand of a (batched) matrix multiply: matrix b
// of the batch starts at element Offset + b·BatchStride and has rows Ld
// elements apart. Trans means the stored matrix is the transpose of the
// logical operand.
type GemmOperand struct {
	Buf         Buffer
	DType       dtype.DType
	Offset      int
	Ld          int
	BatchStride int
	Trans       bool
}

// CrossEntropyOptions mirror torch.nn.functional.cross_entropy's arguments.
type CrossEntropyOptions struct {
	IgnoreIndex    int64
	LabelSmoothing float64
}

// AdamHyper holds the hyper-parameters of one Adam/AdamW step of one tensor.
// BiasCorrection1/2 are 1−β₁ᵗ and 1−β₂ᵗ computed on the host in float64,
// as PyTorch computes them in Python.
type AdamHyper struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	BiasCorrection1, BiasCorrection2   float64
	Decoupled                          bool // AdamW: decay the weights, not the gradient
	AMSGrad                            bool
	Maximize                           bool
}

// SGDHyper holds the hyper-parameters of one SGD step of one tensor.
type SGDHyper struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov, Maximize                   bool
	FirstStep                            bool // the momentum buffer is initialised from the gradient
}

// Device is a compute device as seen by one owner (one rank): its memory and
// its kernels. A Device value is used by one goroutine at a time (the rank's);
// back ends share their hardware resources (worker pool, GPU) underneath.
// Kernels may run asynchronously with respect to the host on devices that
// queue work (CUDA streams); Sync waits for everything queued.
type Device interface {
	Kind() Kind
	Index() int
	String() string // "cpu", "cuda:0"

	// Memory. Alloc returns uninitialised memory for n elements of dt.
	Alloc(dt dtype.DType, n int) (Buffer, error)
	Free(Buffer)
	MemStats() MemStats
	// Upload writes contiguous little-endian host bytes into a contiguous
	// view; Download reads any view into contiguous host bytes.
	Upload(dst View, src []byte) error
	Download(dst []byte, src View) error
	Sync() error

	// Copy copies src into dst elementwise, converting the element type.
	// Shapes are equal; src may broadcast (stride 0).
	Copy(dst, src View) error
	Fill(dst View, value float64) error
	// Unary computes dst = op(src, scalar). Shapes are equal.
	Unary(op UnaryOp, dst, src View, scalar float64) error
	// ActivationBackward computes dx = dy·f'(...) from the saved tensor.
	ActivationBackward(op ActivationOp, dx, dy, saved View) error
	// Binary computes dst = a op b. a and b have dst's shape, broadcast
	// through zero strides. Comparisons write a Bool dst.
	Binary(op BinaryOp, dst, a, b View) error
	// Where computes dst = cond ? a : b (cond is Bool; all broadcast to dst).
	Where(dst, cond, a, b View) error
	// Reduce reduces src over the axes where dst has extent 1 and src does
	// not (dst has src's rank). Float sums accumulate in at least float32
	// with pairwise or wider accumulation.
	Reduce(op ReduceOp, dst, src View) error
	// ArgMax writes the values and int64 indices of the maximum along axis
	// (dst and indices have extent 1 there). Ties take the first index.
	ArgMax(values, indices, src View, axis int) error
	// Scan writes the inclusive running sums or products of src along axis
	// into dst (src's shape), from the first element, or from the last
	// when reverse is set (suffix sums: the backward of a cumulative sum,
	// without a flipped copy). Floats accumulate in float64 and each
	// element is rounded once, as PyTorch's CPU kernels (whose accumulator
	// type for float32 is double); int64 wraps.
	Scan(op ScanOp, dst, src View, axis int, reverse bool) error
	// Sort orders src along axis into values and writes each value's int64
	// position along axis into indices (both of src's shape): ascending,
	// or descending when descending is set. The order is total, so the
	// result is the same on every device: NaN sorts above every number
	// (last ascending, first descending), as in torch.sort, and equal
	// values (+0 and −0 included) keep their index order, as a stable
	// sort. Values are moved, never rounded; values must not overlap src.
	Sort(values, indices, src View, axis int, descending bool) error

	// Gemm computes dst = alpha·op(a)·op(b) + beta·dst for batch matrices of
	// m×k times k×n. dst is row-major with row stride dst.Ld.
	Gemm(dst, a, b GemmOperand, batch, m, n, k int, alpha, beta float64) error

	// Softmax and LogSoftmax over the last axis of contiguous rows.
	Softmax(dst, src View, log bool) error
	SoftmaxBackward(dx, dy, y View, log bool) error
	// LayerNorm normalises the contiguous rows of x over its last axis,
	// scaling by w and shifting by b (either may be an empty view, Buf ==
	// nil), and writes the per-row mean and 1/σ (float32 for half inputs)
	// for the backward pass. σ uses the biased variance, as PyTorch.
	LayerNorm(dst, mean, rstd, x, w, b View, eps float64) error
	// LayerNormBackward writes dx, dw and db (dw, db may be empty views:
	// Buf == nil).
	LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w View) error
	// CrossEntropy computes per-row losses of logits [N, C] against int64
	// targets [N]; ignored rows get 0. It returns the number of rows that
	// were not ignored.
	CrossEntropy(loss, logits, target View, opt CrossEntropyOptions) (int, error)
	// CrossEntropyBackward writes dlogits from per-row upstream gradients.
	CrossEntropyBackward(dlogits, dloss, logits, target View, opt CrossEntropyOptions) error

	// IndexSelect gathers slices of src along axis at int64 indices.
	IndexSelect(dst, src, index View, axis int) error
	// IndexAdd adds src's slices into dst along axis at int64 indices.
	IndexAdd(dst, src, index View, axis int) error
	// Gather and ScatterAdd follow torch.gather / Tensor.scatter_add_.
	Gather(dst, src, index View, axis int) error
	ScatterAdd(dst, src, index View, axis int) error

	// Attention computes softmax(q·kᵀ·scale [causal mask])·v for q, k, v of
	// shape [B, H, T, D] (last axis contiguous) into out, and keeps the
	// probabilities [B, H, T, T] for the backward pass.
	Attention(out, probs, q, k, v View, scale float64, causal bool) error
	AttentionBackward(dq, dk, dv, dout, q, k, v, probs View, scale float64) error

	// Optimizer steps over contiguous tensors of equal size.
	AdamStep(p, g, m, v, vmax View, h AdamHyper) error
	SGDStep(p, g, buf View, h SGDHyper) error
	// SumSquares returns Σx² of a contiguous float view in float64.
	SumSquares(x View) (float64, error)
}
