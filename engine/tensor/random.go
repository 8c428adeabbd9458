package tensor

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/rand"
)

// Generator is the seeded random generator that reproduces PyTorch's CPU
// generator bit for bit (engine/rand).
type Generator = rand.Generator

// NewGenerator returns a generator seeded like torch.manual_seed(seed).
func NewGenerator(seed uint64) *Generator { return rand.New(seed) }

// hostRandom fills a new tensor from host-side samples of the generator:
// fill32 for float32 (and, rounded, the half types), fill64 for float64.
// On a device whose memory is host memory the samples are written straight
// into the tensor's buffer.
func (rt *Runtime) hostRandom(op string, dt DType, shape []int, fill32 func([]float32), fill64 func([]float64)) *Tensor {
	n, err := checkedNumel(shape, Float64)
	if err != nil {
		return rt.failErr(op, err)
	}
	switch dt {
	case Float64:
		t, err := rt.empty(Float64, shape)
		if err != nil {
			return rt.failErr(op, err)
		}
		if v, ok := hostFloats[float64](t); ok {
			fill64(v)
			return t
		}
		v := make([]float64, n)
		fill64(v)
		if err := t.SetBytes(floatBytes(v)); err != nil {
			t.Release()
			return rt.failErr(op, err)
		}
		return t
	case Float32, BFloat16, Float16:
		t, err := rt.empty(Float32, shape)
		if err != nil {
			return rt.failErr(op, err)
		}
		if v, ok := hostFloats[float32](t); ok {
			fill32(v)
		} else {
			v := make([]float32, n)
			fill32(v)
			if err := t.SetBytes(floatBytes(v)); err != nil {
				t.Release()
				return rt.failErr(op, err)
			}
		}
		if dt == Float32 {
			return t
		}
		c := t.To(dt)
		t.Release()
		return c
	}
	return rt.fail(op, "%v is not a floating-point type", dt)
}

// hostFloats returns the elements of t, a new contiguous tensor of
// float32 or float64 (T), as a slice over its memory, when that memory is
// host memory.
func hostFloats[T float32 | float64](t *Tensor) ([]T, bool) {
	b, ok := HostBytes(t)
	var zero T
	size := int(unsafe.Sizeof(zero))
	if !ok || t.dt.Size() != size || len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/size), true
}

// floatBytes returns the memory of v as bytes (little-endian on every
// platform the engine runs on).
func floatBytes[T float32 | float64](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(v[0])))
}

// randomTensor returns a new tensor of dt and shape filled by f from g.
func (rt *Runtime) randomTensor(op string, g *Generator, dt DType, shape []int, f RandomFill) *Tensor {
	if _, err := checkedNumel(shape, Float64); err != nil {
		return rt.failErr(op, err)
	}
	if !dt.IsFloat() {
		return rt.fail(op, "%v is not a floating-point type", dt)
	}
	t, err := rt.empty(dt, shape)
	if err != nil {
		return rt.failErr(op, err)
	}
	if err := t.fillRandom(op, g, f, t.Numel(), 0); err != nil {
		t.Release()
		return errTensor(rt, err)
	}
	return t
}

// Rand draws uniformly from [0, 1) (torch.rand).
func (rt *Runtime) Rand(dt DType, shape ...int) *Tensor {
	return rt.RandWith(rt.gen, dt, shape...)
}

// RandWith is Rand with an explicit generator.
func (rt *Runtime) RandWith(g *Generator, dt DType, shape ...int) *Tensor {
	return rt.randomTensor("rand", g, dt, shape, Uniform(0, 1))
}

// Randn draws from the standard normal distribution (torch.randn).
func (rt *Runtime) Randn(dt DType, shape ...int) *Tensor {
	return rt.RandnWith(rt.gen, dt, shape...)
}

// RandnWith is Randn with an explicit generator.
func (rt *Runtime) RandnWith(g *Generator, dt DType, shape ...int) *Tensor {
	return rt.randomTensor("randn", g, dt, shape, Normal(0, 1))
}

// Randint draws int64 values uniformly from [low, high) (torch.randint).
func (rt *Runtime) Randint(low, high int64, shape ...int) *Tensor {
	if low >= high {
		return rt.fail("randint", "random_ expects 'from' to be less than 'to', but got from=%d >= to=%d", low, high)
	}
	n, err := checkedNumel(shape, Int64)
	if err != nil {
		return rt.failErr("randint", err)
	}
	v := make([]int64, n)
	rt.gen.RandInt64(v, low, high)
	return rt.FromInt64s(v, shape...)
}

// Randperm returns a random permutation of 0..n-1 as int64 (torch.randperm).
func (rt *Runtime) Randperm(n int) *Tensor {
	return rt.RandpermWith(rt.gen, n)
}

// RandpermWith is Randperm with an explicit generator.
func (rt *Runtime) RandpermWith(g *Generator, n int) *Tensor {
	if _, err := checkedNumel([]int{n}, Int64); err != nil {
		return rt.failErr("randperm", err)
	}
	return rt.FromInt64s(g.Randperm(n), n)
}

// UniformFill overwrites t with uniform samples from [from, to) drawn from g
// (Tensor.uniform_, nn.init.uniform_): t.FillRandom(g, Uniform(from, to)).
func (t *Tensor) UniformFill(g *Generator, from, to float64) error {
	return t.FillRandom(g, Uniform(from, to))
}

// NormalFill overwrites t with normal samples (Tensor.normal_,
// nn.init.normal_): t.FillRandom(g, Normal(mean, std)).
func (t *Tensor) NormalFill(g *Generator, mean, std float64) error {
	return t.FillRandom(g, Normal(mean, std))
}

// Dropout zeroes elements with probability p and scales the others by
// 1/(1−p) when training, as torch.nn.functional.dropout; the mask is drawn
// from g exactly as PyTorch's CPU kernel draws it. In eval mode (training
// false) or with p == 0 it returns an alias of x.
func Dropout(x *Tensor, p float64, training bool, g *Generator) *Tensor {
	rt, bad := check("dropout", x)
	if bad != nil {
		return bad
	}
	if p < 0 || p > 1 {
		return rt.fail("dropout", "dropout probability has to be between 0 and 1, but got %v", p)
	}
	if !training || p == 0 {
		return x.viewAs("AliasBackward", x.shape, x.strides)
	}
	if !x.dt.IsFloat() {
		return rt.fail("dropout", "not implemented for %v", x.dt)
	}
	var mask *Tensor
	rt.NoGrad(func() {
		mask = rt.hostRandom("dropout", x.dt, x.shape, func(v []float32) { g.DropoutMask32(v, p) }, func(v []float64) {
			// The same draws as DropoutMask32, scaled in float64 as
			// PyTorch does for double tensors.
			m := make([]float32, len(v))
			g.Bernoulli32(m, 1-p)
			for i := range v {
				v[i] = float64(m[i]) / (1 - p)
			}
		})
	})
	if mask.err != nil {
		return mask
	}
	out := x.Mul(mask)
	mask.Release()
	return out
}

// RandomFill describes an in-place random initialisation: uniform_(from, to),
// normal_(mean, std), or nn.init.trunc_normal_(mean, std, a, b) (its
// uniform draw mapped through erfinv). Make one with Uniform, Normal or
// TruncNormal; Tensor.FillRandom and Tensor.FillRandomRange apply it.
//
// The values are the generator's fills (engine/rand) in the tensor's type:
// float64 tensors get the float64 fills, float32 ones the float32 fills,
// and bfloat16 and float16 tensors the float32 fill rounded once, as every
// half-precision op on the CPU computes.
type RandomFill struct {
	dist   randomDist
	p, q   float64 // uniform: from, to; normal and truncated normal: mean, std
	lo, hi float64 // truncated normal: the bounds a, b
}

type randomDist uint8

const (
	distNone randomDist = iota
	distUniform
	distNormal
	distTruncNormal
)

// Uniform is uniform_(from, to): samples of U[from, to), one draw each
// (torch.rand is Uniform(0, 1)). The bounds are rounded to the tensor's
// type first, and each sample is x·(to−from)+from in one fused
// multiply-add, as PyTorch's CPU kernel computes it.
func Uniform(from, to float64) RandomFill { return RandomFill{dist: distUniform, p: from, q: to} }

// Normal is normal_(mean, std): samples of N(mean, std²) with mean and std
// inside the kernel, as torch.nn.init.normal_ (torch.randn is Normal(0, 1)).
// That rounds differently from randn()·std+mean.
func Normal(mean, std float64) RandomFill { return RandomFill{dist: distNormal, p: mean, q: std} }

// TruncNormal is torch.nn.init.trunc_normal_(mean, std, a, b): N(mean, std²)
// truncated to [a, b] by the inverse CDF. Each element is a uniform_ draw
// between 2·Φ((a−mean)/std)−1 and 2·Φ((b−mean)/std)−1, mapped through
// erfinv (computed in float64 and rounded to the compute type: within an
// ulp of PyTorch's float32 erfinv), scaled by std·√2, shifted by mean and
// clamped to [a, b], each step rounded in the compute type (float32 for
// float32 and the half types). std must be positive and a < b.
func TruncNormal(mean, std, a, b float64) RandomFill {
	return RandomFill{dist: distTruncNormal, p: mean, q: std, lo: a, hi: b}
}

// String names the fill as PyTorch's op.
func (f RandomFill) String() string {
	switch f.dist {
	case distUniform:
		return "uniform_"
	case distNormal:
		return "normal_"
	case distTruncNormal:
		return "trunc_normal_"
	}
	return "random fill"
}

// stream returns f's stream of n elements from g, in float64 when wide and
// float32 otherwise; invalid parameters are an error.
func (f RandomFill) stream(g *Generator, wide bool, n int) (s *rand.Stream, err error) {
	defer func() {
		if r := recover(); r != nil { // the generator rejects invalid bounds
			s, err = nil, errors.New(strings.TrimPrefix(fmt.Sprint(r), "rand: "))
		}
	}()
	switch f.dist {
	case distUniform:
		if wide {
			return g.Uniform64Stream(n, f.p, f.q), nil
		}
		return g.Uniform32Stream(n, f.p, f.q), nil
	case distNormal:
		if wide {
			return g.Normal64Stream(n, f.p, f.q), nil
		}
		return g.Normal32Stream(n, f.p, f.q), nil
	case distTruncNormal:
		switch {
		case !(f.q > 0):
			return nil, fmt.Errorf("std must be positive, got %v", f.q)
		case !(f.lo < f.hi):
			return nil, fmt.Errorf("the bounds must have a < b, got a=%v, b=%v", f.lo, f.hi)
		}
		lo, hi := f.truncBounds()
		if wide {
			return g.Uniform64Stream(n, lo, hi), nil
		}
		return g.Uniform32Stream(n, lo, hi), nil
	}
	return nil, fmt.Errorf("an empty RandomFill (make one with Uniform, Normal or TruncNormal)")
}

// truncBounds returns the bounds of a truncated normal's uniform draw,
// computed in float64 as torch.nn.init's Python does.
func (f RandomFill) truncBounds() (lo, hi float64) {
	cdf := func(x float64) float64 { return (1 + math.Erf(x/math.Sqrt2)) / 2 }
	return 2*cdf((f.lo-f.p)/f.q) - 1, 2*cdf((f.hi-f.p)/f.q) - 1
}

// truncMap32 maps uniform draws to a truncated normal in float32 (see
// TruncNormal); truncMap64 in float64. The clamp is math.Max and math.Min,
// as it always was.
func (f RandomFill) truncMap32(v []float32) {
	scale, shift := float32(f.q*math.Sqrt2), float32(f.p)
	fa, fb := float64(float32(f.lo)), float64(float32(f.hi))
	parallel.For(len(v), 4096, func(lo, hi int) {
		for i, u := range v[lo:hi] {
			x := float32(math.Erfinv(float64(u)))
			x = x * scale
			x = x + shift
			v[lo+i] = float32(math.Min(math.Max(float64(x), fa), fb))
		}
	})
}

func (f RandomFill) truncMap64(v []float64) {
	scale, shift := f.q*math.Sqrt2, f.p
	parallel.For(len(v), 4096, func(lo, hi int) {
		for i, u := range v[lo:hi] {
			v[lo+i] = math.Min(math.Max(math.Erfinv(u)*scale+shift, f.lo), f.hi)
		}
	})
}

// randomChunk is the number of elements a fill produces at a time when it
// cannot write straight into the tensor's memory: 256 KiB of float32 (512
// KiB of float64) on the host, and as much device memory when the tensor
// needs a conversion or is strided.
const randomChunk = 64 << 10

// FillRandom overwrites t in place with f's samples drawn from g, in
// row-major order, exactly as a fill of a new contiguous tensor of t's
// shape (torch's uniform_, normal_ and nn.init.trunc_normal_ on a
// contiguous tensor). A contiguous float32 or float64 tensor in host memory
// is written directly; any other (another device, a half type, a strided
// view) chunk by chunk through a host buffer and a device buffer of at most
// 64 Ki elements each, so a fill never needs memory in proportion to t. It
// is not recorded by autograd (initialisers run on parameters); it bumps
// t's version.
func (t *Tensor) FillRandom(g *Generator, f RandomFill) error {
	if ok, err := t.recordRandom(g, f); ok {
		return err
	}
	if _, bad := check(f.String(), t); bad != nil {
		return bad.err
	}
	return t.fillRandom(f.String(), g, f, t.Numel(), 0)
}

// FillRandomRange fills t, of m elements, with elements [lo, lo+m) (in
// row-major order) of the fill of n elements that FillRandom would draw from
// g's state into a tensor of n elements, and leaves g as that whole fill
// would: ranks that each build a slice of a parameter get together the
// values of the whole parameter, and their generators stay in step. The
// elements before lo and after lo+m cost their draws from the generator
// but no transform, and no memory. The extra memory is FillRandom's.
func (t *Tensor) FillRandomRange(g *Generator, f RandomFill, n, lo int) error {
	op := f.String()
	if _, bad := check(op, t); bad != nil {
		return bad.err
	}
	if m := t.Numel(); lo < 0 || n < 0 || lo > n || m > n-lo {
		return errf(op, "elements [%d, %d) are not a range of a fill of %d elements", lo, lo+m, n)
	}
	return t.fillRandom(op, g, f, n, lo)
}

// Advance moves g on exactly as filling n elements of type dt with f would,
// without computing or keeping them (what a rank does for a parameter that
// another rank initialises).
func (f RandomFill) Advance(g *Generator, dt DType, n int) error {
	op := f.String()
	if !dt.IsFloat() {
		return errf(op, "%v is not a floating-point type", dt)
	}
	if n < 0 {
		return errf(op, "a fill of %d elements", n)
	}
	s, err := f.stream(g, dt == Float64, n)
	if err != nil {
		return errf(op, "%v", err)
	}
	s.Finish()
	return nil
}

// fillRandom writes elements [lo, lo+t.Numel()) of f's fill of n elements
// from g into t (checked by the caller) and finishes the fill.
func (t *Tensor) fillRandom(op string, g *Generator, f RandomFill, n, lo int) error {
	if !t.dt.IsFloat() {
		return errf(op, "%v is not a floating-point type", t.dt)
	}
	wide := t.dt == Float64
	s, err := f.stream(g, wide, n)
	if err != nil {
		return errf(op, "%v", err)
	}
	defer s.Finish() // whatever happens, g ends where the whole fill leaves it
	t.st.version.Add(1)
	if t.coversStorage() {
		t.st.zeroPending = false // every byte is about to be written
	}
	s.Skip(lo)
	if err := t.writeStream(s, f, wide); err != nil {
		return fmt.Errorf("tensor: %s: %w", op, err)
	}
	return nil
}

// writeStream writes the next t.Numel() elements of s, mapped by f, into t.
func (t *Tensor) writeStream(s *rand.Stream, f RandomFill, wide bool) error {
	m := t.Numel()
	if m == 0 {
		return nil
	}
	v := t.view() // settles t and performs a deferred zero fill of a part
	cdt := Float32
	if wide {
		cdt = Float64
	}
	read := func(host []byte, k int) []byte {
		if wide {
			x := unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(host))), k)
			s.Read64(x)
			if f.dist == distTruncNormal {
				f.truncMap64(x)
			}
			return host[:8*k]
		}
		x := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(host))), k)
		s.Read32(x)
		if f.dist == distTruncNormal {
			f.truncMap32(x)
		}
		return host[:4*k]
	}
	// Contiguous host memory of the fill's own type: in place, at once
	// (a large normal fill transforms its blocks on the worker pool).
	if hb, ok := v.Buf.(device.HostBuffer); ok && t.dt == cdt && v.Contiguous() {
		es := cdt.Size()
		b := hb.HostBytes()[v.Offset*es : (v.Offset+m)*es]
		if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(es) == 0 {
			read(b, m)
			return nil
		}
	}
	// Otherwise chunk by chunk: into host memory, then uploaded into t, or
	// into a device buffer of the fill's type that is copied (converted,
	// strided) into t.
	dev := t.rt.dev
	c, es := min(m, randomChunk), cdt.Size()
	host := make([]float64, (c*es+7)/8) // aligned for either type
	hostBytes := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(host))), c*es)
	var stage device.Buffer
	if t.dt != cdt || !v.Contiguous() {
		var err error
		if stage, err = dev.Alloc(cdt, c); err != nil {
			return err
		}
		defer dev.Free(stage)
	}
	return forPieces(v, c, func(piece device.View) error {
		src := read(hostBytes, piece.Numel())
		if stage == nil {
			return kernel(func() error { return dev.Upload(piece, src) })
		}
		sv := device.View{Buf: stage, DType: cdt, Shape: piece.Shape, Strides: device.ContiguousStrides(piece.Shape)}
		return kernel(func() error {
			if err := dev.Upload(sv, src); err != nil {
				return err
			}
			return dev.Copy(piece, sv)
		})
	})
}

// forPieces calls fn for consecutive runs of v's elements in row-major
// order, each a view of at least one and at most limit elements: slices of a
// contiguous v, and for a strided one, runs of the outermost dimension
// whose inner extent fits (whole rows, or parts of a row).
func forPieces(v device.View, limit int, fn func(piece device.View) error) error {
	n := v.Numel()
	if n == 0 {
		return nil
	}
	if v.Contiguous() {
		for i := 0; i < n; i += limit {
			k := min(limit, n-i)
			if err := fn(device.View{Buf: v.Buf, DType: v.DType, Offset: v.Offset + i, Shape: []int{k}, Strides: []int{1}}); err != nil {
				return err
			}
		}
		return nil
	}
	// A strided view has at least one dimension. d is the dimension the
	// pieces run along; inner the elements of one step of it.
	d, inner := len(v.Shape)-1, 1
	for d > 0 && inner*v.Shape[d] <= limit {
		inner *= v.Shape[d]
		d--
	}
	rows := min(v.Shape[d], max(1, limit/inner))
	idx := make([]int, d) // the index in the dimensions before d
	for {
		base := v.Offset
		for k, i := range idx {
			base += i * v.Strides[k]
		}
		for j := 0; j < v.Shape[d]; j += rows {
			r := min(rows, v.Shape[d]-j)
			piece := device.View{Buf: v.Buf, DType: v.DType, Offset: base + j*v.Strides[d],
				Shape:   append([]int{r}, v.Shape[d+1:]...),
				Strides: append([]int{v.Strides[d]}, v.Strides[d+1:]...)}
			if err := fn(piece); err != nil {
				return err
			}
		}
		k := d - 1
		for ; k >= 0; k-- {
			if idx[k]++; idx[k] < v.Shape[k] {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return nil
		}
	}
}
