package dist_test

import (
	"fmt"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist/disttest"
)

// TestConformance runs the backend-independent suite of package disttest
// on in-process worlds of 1 to 4 ranks.
func TestConformance(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) { disttest.RunInProcess(t, n) })
	}
}
