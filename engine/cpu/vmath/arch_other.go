//go:build !amd64 || purego

package vmath

// archVariants: there are no assembly kernels for this platform (or the
// purego build tag asked for none).
func archVariants() []*kernels { return nil }
