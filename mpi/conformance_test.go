package mpi

import (
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist/disttest"
)

// TestConformance runs engine/dist/disttest's suite, the checks every
// dist.ProcessGroup must pass, in every process of MPI jobs of 1 to 4
// ranks (and of 3 with Options.Debug's checks that the ranks' calls
// match).
func TestConformance(t *testing.T) {
	body := func(w *World) error { return disttest.RunRank(w.Group(0), newRuntime(), disttest.Cases()) }
	if isChild() {
		mpiTest(t, nil, nil, body)
		return
	}
	mpiTest(t, []int{1, 2, 3, 4}, nil, nil)
	t.Run("debug", func(t *testing.T) { mpiTest(t, []int{3}, []string{debugEnv + "=1"}, nil) })
}
