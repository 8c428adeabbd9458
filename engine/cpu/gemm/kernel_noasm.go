//go:build !amd64

package gemm

// asmKernels reports no assembly kernels: this architecture uses the
// portable Go kernel.
func asmKernels() ([]*kernel[float32], []*kernel[float64]) { return nil, nil }
