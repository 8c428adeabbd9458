package zero

import (
	"fmt"
	"strings"
	"testing"
)

// TestClipGradNorm: clipping through the ZeRO optimizer (under stage 2 a
// collective over the gradient slices) gives the plain optimizer's run
// with clip_grad_norm_ over the whole gradients.
func TestClipGradNorm(t *testing.T) {
	for _, l := range []struct {
		name string
		opts Options
	}{{"greedy", Options{}}, {"flat", Options{Partition: "flat"}}, {"stage 2", Options{Stage: 2, BucketCapMB: 0.002}}, {"stage 3", Options{Stage: 3}}, {"stage 3 offloaded", Options{Stage: 3}}} {
		for _, n := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/n=%d", l.name, n), func(t *testing.T) {
				k := kinds[3] // AdamW
				plain := run{n: n, kind: k.kind, hyper: k.hyper, clip: 0.05}
				want := plain.train(t)
				unclipped := plain
				unclipped.clip = 0
				if free := unclipped.train(t); free.params[0][0] == want.params[0][0] {
					t.Fatal("clipping at 0.05 changed nothing: the test would not see a broken clip")
				}
				z := plain
				z.zero, z.opts, z.seedRank, z.offload = true, l.opts, l.opts.Stage >= 2, strings.HasSuffix(l.name, "offloaded")
				closeTo(t, z.train(t).params, want.params, l.name)
			})
		}
	}
}
