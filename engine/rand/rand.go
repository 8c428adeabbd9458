// Package rand is the engine's seeded random number generator. It reproduces,
// bit for bit (but for the rare float64 samples described below), the CPU
// generator of PyTorch 1.13 (at::CPUGeneratorImpl) and the CPU kernels that
// draw from it, so that a model initialised from a seed here holds exactly
// the weights PyTorch gives for the same seed. For example
//
//	g := rand.New(0)
//	rand.LinearInit(g, w, b, 4, 3)
//
// fills w and b with the parameters of torch.manual_seed(0); torch.nn.Linear(4, 3).
//
// The package owns the generator (an mt19937 seeded as PyTorch seeds it, with
// the cached Box-Muller sample PyTorch keeps beside it), the transforms of the
// tensor-level functions (torch.rand/uniform_, randn/normal_, randint,
// randperm, bernoulli_ and the dropout mask), the initialisation recipes of
// nn.Linear and nn.Embedding, and the generator state for checkpoints, in a
// format of its own (State) and in torch.get_rng_state's (TorchState). The
// fills work on contiguous buffers; the tensor layer maps shapes onto them.
// Each uniform and normal fill also comes as a Stream, which produces the
// same values piece by piece (or any range of them) with a block of 16
// samples of extra memory, so that a tensor is initialised in its own
// memory, or rank by rank, without a buffer of its size.
//
// # What "bit for bit" covers
//
// The fills reproduce PyTorch 1.13 as Debian builds it (python3-torch, no MKL)
// running on an x86-64 CPU with AVX2 and FMA: that is the code path PyTorch
// takes on any such CPU, AVX-512 ones included (normal_ is never dispatched to
// AVX-512). Two pieces of that path are not plain IEEE arithmetic:
//
//   - float32 normal_ on 16 or more elements runs the AVX2 kernel
//     normal_fill_AVX2 with the Cephes-style log256_ps/sincos256_ps of
//     ATen/native/cpu/avx_mathfun.h, compiled by GCC with FMA contraction;
//     normal.go and avxmath.go reproduce it exactly in portable Go, and
//     normal_amd64.s runs the same instructions on CPUs with AVX2 and FMA;
//   - the float64 Box-Muller transform (normal_ of float64 tensors, and of
//     tensors of any type under 16 elements, which draw float64 samples and
//     round them) calls the C library's log, sin and cos. The log is Arm's
//     Optimized Routines log that glibc ships, reproduced exactly (log.go).
//     Sin and cos are computed correctly rounded here (sincos.go), and
//     glibc's are not always: they differ in the last bit for about 0.15% of
//     the angles' sines and cosines, so about 0.13% of float64 normal samples
//     differ from PyTorch's by one ulp, or two (see TestFixtures and
//     TestSincosGlibc). Rounded to float32, such a difference survives with
//     a probability of about 2^-29.
//
// PyTorch on a CPU without AVX2 (or run with ATEN_CPU_CAPABILITY=default)
// takes its DEFAULT kernels, compiled without FMA: their float32 normal
// samples differ, and uniform_ with from != 0 (so nn.Linear's initialisation)
// differs in the last bit of some elements. A PyTorch built
// with MKL draws different bernoulli_/dropout masks; PyTorch's CUDA generator
// is unrelated to this one. The results here do not depend on the machine Go
// runs on.
//
// # Concurrency
//
// A Generator is not safe for concurrent use: like PyTorch's, its draws are a
// single sequence. Each rank (and each goroutine that needs random numbers)
// owns its own Generator. Large normal fills spread their arithmetic over the
// engine's CPU worker pool (engine/cpu/parallel); the result does not depend
// on it.
package rand

// Generator is PyTorch's CPU generator: an mt19937 engine plus the cached
// second sample of the double-precision Box-Muller transform. The zero value
// is not usable; create one with New.
type Generator struct {
	mt          [mtN]uint32
	left        int32  // draws until the next twist, as at::mt19937 counts them
	next        uint32 // index of the next state word to temper
	seed        uint64 // the seed as given; only its low 32 bits seed the engine
	seeded      bool
	normalValid bool    // next_double_normal_sample_ is set
	normalNext  float64 // next_double_normal_sample_
	floatValid  bool    // next_float_normal_sample_ is set (never by CPU kernels)
	floatNext   float32 // next_float_normal_sample_
}

// New returns a generator seeded with seed, as torch.Generator().manual_seed(seed).
func New(seed uint64) *Generator {
	g := new(Generator)
	g.Seed(seed)
	return g
}

// Seed reseeds g: torch.manual_seed(seed) for the CPU generator. As in
// CPUGeneratorImpl::set_current_seed, it also drops the cached normal samples.
// PyTorch wraps a negative Python seed to 64 bits, so torch.manual_seed(-1)
// is Seed(math.MaxUint64), that is Seed(uint64(int64(-1))).
func (g *Generator) Seed(seed uint64) {
	g.normalValid, g.normalNext = false, 0
	g.floatValid, g.floatNext = false, 0
	g.initMT(seed)
}

// InitialSeed returns the seed g was last seeded with (torch.initial_seed()).
func (g *Generator) InitialSeed() uint64 { return g.seed }
