//go:build race

package vmath

// raceEnabled: the race detector makes sync.Pool drop a quarter of the
// items put back, so the layer-norm kernels' staging buffers are allocated
// again at random: allocation counts mean nothing there.
const raceEnabled = true
