//go:build race

package gemm

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are meaningless, and it slows the portable kernel
// tenfold, so the largest shapes are left to the normal run.
const raceEnabled = true
