//go:build amd64 && !purego

package rand

import "golang.org/x/sys/cpu"

// useAVX2 selects normalBlocksAVX2 for the float32 Box-Muller transform.
// x/sys/cpu reports AVX2 only when the OS saves the Y registers. Tests turn
// it off to check the portable code.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// normalBlocksAVX2 transforms blocks*16 uniforms at d in place, exactly as
// normal16AVX2 does each block of 16 (normal_amd64.s).
//
//go:noescape
func normalBlocksAVX2(d *float32, blocks int, mean, std float32)

// normalBlocks applies normal16AVX2 to each block of 16 elements of d
// (len(d) a multiple of 16).
func normalBlocks(d []float32, mean, std float32) {
	if !useAVX2 {
		normalBlocksGo(d, mean, std)
		return
	}
	if len(d) >= 16 {
		normalBlocksAVX2(&d[0], len(d)/16, mean, std)
	}
}
