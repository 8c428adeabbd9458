//go:build !amd64 || purego

package rand

// useAVX2 is false: there is no assembly version here.
var useAVX2 = false

// normalBlocks applies normal16AVX2 to each block of 16 elements of d
// (len(d) a multiple of 16).
func normalBlocks(d []float32, mean, std float32) { normalBlocksGo(d, mean, std) }

// normalBlocksAVX2 is never called where useAVX2 is false.
func normalBlocksAVX2(d *float32, blocks int, mean, std float32) {
	panic("rand: no AVX2 assembly in this build")
}
