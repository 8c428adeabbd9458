package gpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/gpu/kernels"
)

// TestSortScanConstants: the launch plan of Sort and Scan assumes the
// kernels' tile and block sizes. A host tile larger than the kernels' would
// skip stages of the sorting network that no kernel then runs.
func TestSortScanConstants(t *testing.T) {
	src, err := kernels.Source(famSortScan)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("#define ZE_SORT_TILE %d ", sortTile),
		fmt.Sprintf("#define ZE_SCAN_BLOCK %d ", blockSize),
	} {
		if !strings.Contains(src, want) {
			t.Errorf("sortscan.cu does not say %q", want)
		}
	}
	for _, k := range kernelsUsed[famSortScan] {
		sig, err := kernels.Lookup(famSortScan, k)
		if err != nil {
			t.Fatal(err)
		}
		if sig.MaxThreads < blockSize {
			t.Errorf("%s: __launch_bounds__(%d), launched with %d threads", k, sig.MaxThreads, blockSize)
		}
	}
}
