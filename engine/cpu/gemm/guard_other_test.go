//go:build !linux

package gemm

func exact32(n int) []float32 { return make([]float32, n) }
func exact64(n int) []float64 { return make([]float64, n) }
func freeGuarded()            {}
