//go:build race

package checkpoint

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// the stream buffers a load reuses are allocated again: counts of the
// bytes a load allocates mean nothing there.
const raceEnabled = true
