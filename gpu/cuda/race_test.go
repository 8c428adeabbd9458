//go:build race

package cuda_test

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// pooled calls allocate now and then, and allocation counts mean nothing.
const raceEnabled = true
