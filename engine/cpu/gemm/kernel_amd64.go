//go:build amd64

package gemm

//go:generate go run gen_kernels.go

import "golang.org/x/sys/cpu"

// The assembly micro-kernels (gemm_avx512_amd64.s, gemm_avx2_amd64.s). Each
// computes a whole tile; see kernel for the contract.

//go:noescape
func sgemmAVX512(k int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dgemmAVX512(k int, a, b, c *float64, ldc int, alpha, beta float64)

//go:noescape
func sgemmAVX2(k int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dgemmAVX2(k int, a, b, c *float64, ldc int, alpha, beta float64)

//go:noescape
func sgemmWindowsAVX512(k int, a, b *float32, offs *int32, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dgemmWindowsAVX512(k int, a, b *float64, offs *int32, c *float64, ldc int, alpha, beta float64)

//go:noescape
func sgemmWindows8AVX512(k int, a, b *float32, offs *int32, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dgemmWindows8AVX512(k int, a, b *float64, offs *int32, c *float64, ldc int, alpha, beta float64)

//go:noescape
func sgemmWindowsAVX2(k int, a, b *float32, offs *int32, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dgemmWindowsAVX2(k int, a, b *float64, offs *int32, c *float64, ldc int, alpha, beta float64)

//go:noescape
func sgemmRowsAVX512(k int, a *float32, offs *int32, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dgemmRowsAVX512(k int, a *float64, offs *int32, b, c *float64, ldc int, alpha, beta float64)

//go:noescape
func sgemmRows16AVX512(k int, a *float32, offs *int32, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dgemmRows8AVX512(k int, a *float64, offs *int32, b, c *float64, ldc int, alpha, beta float64)

//go:noescape
func sgemmPositionsAVX512(k int, a *float32, offs *int32, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func sgemmPositions8AVX512(k int, a *float32, offs *int32, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func sgemmRowsAVX2(k int, a *float32, offs *int32, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dgemmRowsAVX2(k int, a *float64, offs *int32, b, c *float64, ldc int, alpha, beta float64)

// asmKernels lists the assembly kernels this CPU supports, fastest first.
// cpu.X86 reports AVX2 and AVX-512 only when the OS also saves the YMM and
// ZMM registers on context switches.
func asmKernels() (k32 []*kernel[float32], k64 []*kernel[float64]) {
	// The rows kernels hold a row offset per register: 6 rows, 8 for
	// AVX-512's one vector wide (gen_kernels.go says why); AVX-512 has
	// them one and two vectors wide (rowsFor picks).
	var rows32 []*rowsKernel[float32]
	var rows64 []*rowsKernel[float64]
	avx2 := cpu.X86.HasAVX2 && cpu.X86.HasFMA
	if avx2 {
		rows32 = []*rowsKernel[float32]{{6, 16, sgemmRowsAVX2}}
		rows64 = []*rowsKernel[float64]{{6, 8, dgemmRowsAVX2}}
	}
	if cpu.X86.HasAVX512F {
		// 12×32 float32: 24 accumulators in 2 ZMM per row, 2 for the B
		// row, 6 for A broadcasts; 24 FMAs per 14 loads keeps both FMA
		// ports busy.
		k32 = append(k32, &kernel[float32]{"avx512", 12, 32, sgemmAVX512,
			[]*windowsKernel[float32]{{12, sgemmWindowsAVX512}, {8, sgemmWindows8AVX512}},
			[]*rowsKernel[float32]{{8, 16, sgemmRows16AVX512}, {6, 32, sgemmRowsAVX512}},
			[]*positionsKernel[float32]{{14, 32, sgemmPositionsAVX512}, {8, 32, sgemmPositions8AVX512}}})
		k64 = append(k64, &kernel[float64]{"avx512", 12, 16, dgemmAVX512,
			[]*windowsKernel[float64]{{12, dgemmWindowsAVX512}, {8, dgemmWindows8AVX512}},
			[]*rowsKernel[float64]{{8, 8, dgemmRows8AVX512}, {6, 16, dgemmRowsAVX512}}, nil})
	}
	if avx2 {
		// 6×16 float32: 12 YMM accumulators, 2 for B, 2 for broadcasts.
		k32 = append(k32, &kernel[float32]{"avx2", 6, 16, sgemmAVX2, []*windowsKernel[float32]{{6, sgemmWindowsAVX2}}, rows32, nil})
		k64 = append(k64, &kernel[float64]{"avx2", 6, 8, dgemmAVX2, []*windowsKernel[float64]{{6, dgemmWindowsAVX2}}, rows64, nil})
	}
	return k32, k64
}
