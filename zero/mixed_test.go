package zero

import (
	"fmt"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// TestMixedPrecisionSharding trains the MLP in bfloat16 with float32
// master weights: every ZeRO layout must give the plain optimizer's
// parameters, and the master weights must be sharded with the rest of the
// state (float32: 12 bytes per parameter for Adam, 8 for SGD with
// momentum, split across the ranks).
func TestMixedPrecisionSharding(t *testing.T) {
	layouts := []struct {
		name string
		opts Options
	}{
		{"greedy", Options{}},
		{"flat", Options{Partition: "flat"}},
		{"flat bucket view", Options{Partition: "flat", ParametersAsBucketView: true, BucketCapMB: 0.002}},
		{"stage 2", Options{Stage: 2, BucketCapMB: 0.002}},
		{"stage 3", Options{Stage: 3}},
		{"stage 3 offloaded", Options{Stage: 3}},
	}
	perParam := map[string]int64{"SGD": 8, "AdamW": 12}
	for _, k := range kinds {
		bytes, ok := perParam[k.name]
		if !ok {
			continue
		}
		for _, l := range layouts {
			for _, n := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("%s/%s/n=%d", k.name, l.name, n), func(t *testing.T) {
					plain := run{n: n, kind: k.kind, hyper: k.hyper, dt: dtype.BFloat16}
					want := plain.train(t)
					z := plain
					z.zero, z.opts = true, l.opts
					z.seedRank = l.opts.Stage >= 2
					z.offload = strings.HasSuffix(l.name, "offloaded")
					got := z.train(t)
					if l.opts.Stage >= 2 && n >= 3 {
						// Stage 2 reduces the gradients with a
						// reduce-scatter, the plain run with DDP's
						// all-reduce: with three ranks or more their
						// bfloat16 additions come in other orders and
						// round differently (each addition rounds, as in
						// gloo and NCCL), so the runs agree to bfloat16's
						// precision, not bit for bit.
						closeNorm(t, got.params, want.params, 1e-2, l.name)
					} else {
						closeTo(t, got.params, want.params, l.name)
					}
					for i, ps := range got.params {
						for j, v := range ps {
							if b := float64(dtype.BF16FromFloat32(float32(v)).Float32()); b != v {
								t.Fatalf("parameter %d, element %d = %v is not a bfloat16 value", i, j, v)
							}
						}
					}

					var state int64
					for _, m := range got.mems {
						state += m.State
						if z.offload {
							// On the host: the state (float32 master
							// weights included) and the bfloat16 slices.
							state += m.HostState - m.OwnedParameters
						}
					}
					const numel = 16*32 + 32 + 32*32 + 32 + 32*4 + 4 // the MLP's parameters
					if state != numel*bytes {
						t.Errorf("%d bytes of optimizer state over %d ranks, want %d (float32 master weights and state for %d parameters)",
							state, n, numel*bytes, numel)
					}
					largest := int64(32*32+32) * bytes // 2.weight and 2.bias under the greedy partition
					for r, m := range got.mems {
						if m.State > state/int64(n)+largest {
							t.Errorf("rank %d holds %d of the %d bytes of state", r, m.State, state)
						}
					}
				})
			}
		}
	}
}
