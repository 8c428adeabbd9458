//go:build amd64 && !purego

package vmath

//go:generate go run gen_asm.go

import "golang.org/x/sys/cpu"

// archVariants returns the assembly variants this CPU and OS support, best
// first. AVX-512 needs F (the vector width and masks) and DQ (VPMOVD2M,
// VEXTRACTF32X8, VXORPS on Z registers); both variants need AVX2 and FMA.
// x/sys/cpu reports a feature only when the OS saves the registers it uses.
func archVariants() []*kernels {
	var v []*kernels
	hasAVX2 := cpu.X86.HasAVX2 && cpu.X86.HasFMA
	if hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ {
		k := avx512Kernels // generated; the hand-written kernels join it here
		k.maxPool2x2 = maxPool2x2AVX512Go
		k.maxPool2x2Backward = maxPool2x2BackwardAVX512Go
		k.copyRows, k.copyRowsAdd = copyRowsAVX512, copyRowsAddAVX512
		v = append(v, k.fill())
	}
	if hasAVX2 {
		k := avx2Kernels
		k.maxPool2x2 = maxPool2x2AVX2Go
		k.copyRows, k.copyRowsAdd = copyRowsAVX2, copyRowsAddAVX2
		v = append(v, k.fill())
	}
	return v
}
