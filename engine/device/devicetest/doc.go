// Package devicetest owns the conformance suite of the device.Device back
// ends: a table of cases that run every method of the interface on a
// reference device (the CPU of engine/cpu) and on a device under test with
// the same input bytes, and compare what the two give back.
//
// A back end's tests call it with a fresh CPU device as the reference:
//
//	func TestConformance(t *testing.T) {
//		gpuDevice := openGPU(t) // skips without a GPU
//		devicetest.Conformance(t, cpu.New(cpu.Options{}), gpuDevice)
//	}
//
// or ConformanceWith to pass Options (TF32 tolerances, a seed, a filter).
// Each case is a subtest named after the op and the case, such as
// "Unary/gelu/bf16/strided" or "Gemm/f32/tn/33x65x129/ld", so that one
// can be rerun alone with go test -run. Check runs the same cases and
// returns the failures instead of reporting them, for tests of the harness
// itself. The package imports engine/device, engine/dtype and the standard
// library only (not the tensor layer, nor engine/cpu), so that the tests of
// any back end can import it without a cycle.
//
// # What a case does
//
// A case allocates every operand on both devices and uploads the same bytes
// to both: random inputs from a math/rand/v2 PCG seeded with the suite's seed
// and the case's name, and, for outputs, poison (all bytes 0xFF: a NaN in
// every floating-point type, -1 or 255 in the integer ones), so that an
// element the device under test does not write cannot match. Buffers are
// larger than the views the op sees (offsets, padded rows, a guard after the
// last element), and whole buffers are compared, so that a write outside the
// view is caught as well. After the op the device under test is synced
// (device.Device.Sync) and its error reported; outputs are downloaded from
// both devices and compared on the host, and the inputs of the device under
// test are checked to be unchanged. A case also checks that the device under
// test holds no more live buffers afterwards than before (MemStats).
//
// When the reference returns an error the device under test must return one
// too, from the op or from the Sync that follows (a GPU may find a bad index
// only when the kernel runs), and vice versa. Cases that expect errors are in
// two groups that run last, because a device may be less usable after an
// error: "Unsupported/..." (dtypes the CPU rejects: a back end that supports
// more may leave them out with Options.Filter) and "IndexError/..." (indices
// out of range, targets out of range).
//
// # Tolerances
//
// Integer and bool outputs must be equal, byte for byte. Moves and
// selections must give the same floating-point values: Upload, Download,
// Copy, Fill, Where, IndexSelect, Gather, ArgMax, Sort, Reduce Max and Min, Unary
// neg/abs/relu/sign, ActivationBackward relu and Binary maximum/minimum; with
// one exception: a conversion from float64 to bfloat16 or float16 (Copy,
// Fill) may differ by one unit in the last place, since the CPU rounds
// through float32. Other floating-point outputs pass when, with b the
// reference's element and a the device under test's,
//
//	|a − b| ≤ tol(dtype)·m·max(f, |b|) + tol(acc)·S·√n
//
// where:
//
//   - tol is 1e-5 for float32, 1e-12 for float64, 1e-2 for bfloat16 and
//     1e-3 for float16; Options.TF32 makes it 3e-4 (TF32Tol) for float32
//     Gemm, Attention and AttentionBackward, and Options.Tol overrides any.
//   - f is 1, except for softmax probabilities (Softmax without log), where
//     it is 1e-3: they are much smaller than 1 and keep a small relative
//     error.
//   - m is 1, except for the 16-bit destinations of IndexAdd and ScatterAdd,
//     where it is the largest number of additions into one element, since a
//     device may round after each (as PyTorch's CUDA atomics do).
//   - The second term is the size-aware allowance of an element that sums
//     n > 1 terms of magnitude about S in an order the device chooses: Reduce
//     Sum and Prod (n: the elements reduced into one; products of values
//     near 1), Scan (n = the row length), Gemm (n = k, S = |alpha|),
//     SumSquares, LayerNormBackward (dw, db: n = rows; dx: n = the row
//     length, S = 0.1), the log-softmax backward (n = the row length, S =
//     0.1), Attention (out: n = keys; probs: n = D), AttentionBackward (n =
//     max(queries, keys)), IndexAdd and ScatterAdd (n = additions + 1); acc
//     is float64 for float64 data and float32 otherwise (half-precision data
//     accumulates in float32). It is 0 for every other output.
//
// A NaN passes only where the reference has a NaN (of any payload), and an
// infinity only where it has the same one; +0 and -0 are equal. Failure
// messages print the rule, the first mismatching elements (buffer index,
// view coordinates, both values) and the largest error, measured as
// |a − b|/max(f, |b|).
//
// Some cases give the ops operands more general than the tensor layer sends
// today but that the CPU accepts (the contract of device.Device has views):
// strided and broadcast CrossEntropyBackward dloss ("/strided", "/bcast"),
// strided loss and targets, and attention gradients interleaved in one
// buffer ("/packed"). Their names say so, for a back end that must leave
// them out for a while (Options.Filter).
//
// # Seeds
//
// The seed is DefaultSeed unless Options.Seed or the DEVICETEST_SEED
// environment variable (which wins; "random" takes one from the clock) says
// otherwise. Every failure message ends with the seed and how to rerun it.
package devicetest
