// Package gemm owns the pure Go matrix multiplication of the CPU backend:
// single and double precision GEMM in row-major CBLAS semantics, a strided
// batched variant, the implicit products whose large operand is read in
// place rather than packed (GemmWindows: B's rows are runs of a buffer at
// given offsets, GemmWindowsA the same with A packed once for many
// products; GemmRows: A's rows are; a convolution without im2col,
// windows.go; GemmPositionsA: GemmWindowsA's product with its tiles turned,
// positions by channels, for narrow window rows, positions.go), and the
// machinery behind them (operand packing, cache
// blocking, multi-threading on the shared worker pool of
// engine/cpu/parallel, and register-blocked micro-kernels).
//
// The micro-kernels are written in Go assembly for amd64: an AVX-512 kernel
// (12×32 float32 tile, 12×16 float64 tile) and an AVX2+FMA kernel (6×16,
// 6×8) for machines without AVX-512. A portable Go kernel serves the other
// architectures and is the reference the assembly is tested against. The
// kernel is chosen once at start-up from the CPU's features
// (golang.org/x/sys/cpu).
//
// The package is always available: it needs no cgo and no native library.
// engine/cpu/blas decides whether a call goes here or to a CBLAS library.
//
// The entry points are internal kernels: the tensor layer validates user
// input before calling them, so invalid dimensions (negative sizes, slices
// too short, leading dimensions too small) panic with a message naming the
// argument instead of returning an error.
package gemm
