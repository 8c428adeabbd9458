package bench

import (
	"fmt"
	"testing"
)

// ZeroPeakInFlight is the allowance of TestZeroPeak over the formula: what
// a step may hold besides the formula's state, in bytes, from the model's
// sizes and the bucket cap:
//   - the activations: each layer's output and its ReLU's, the input,
//     target and loss temporaries, and the activation gradients backward
//     holds at once, (2·layers + 8) rows of the batch;
//   - the gradient autograd is making (one layer's weight and bias),
//     before DDP or stage 2 copies it into its bucket;
//   - stage 1 (parameters as separate tensors): the step gathers through
//     a scratch buffer of a bucket's size, one at a time;
//   - stage 2: the staging buckets of the reduce-scatters in flight (at
//     most two) and the one filling; the step's scratch buffer comes
//     after they are freed.
func ZeroPeakInFlight(c ZeroPeakConfig) int64 {
	capMB := c.BucketCapMB
	if capMB == 0 {
		capMB = 25
	}
	layer := int64(4 * (c.Width*c.Width + c.Width))
	act := int64(2*c.Layers+8) * int64(c.Batch*c.Width) * 4
	// ZeRO's flat buckets: layers in reverse, closed at the cap.
	capBytes := int64(capMB * (1 << 20))
	bucket := layer * ((capBytes + layer - 1) / layer)
	bucket = min(bucket, layer*int64(c.Layers))
	b := act + layer
	switch c.Stage {
	case 1:
		b += bucket
	case 2:
		b += 3 * bucket
	}
	return b
}

// TestZeroPeak trains the MLP of docs/benchmarks.md (6 × Linear(2048,
// 2048), 25.2 M parameters, 2 ranks) under DDP with and without
// gradientAsBucketView, ZeRO stages 1 and 2 and stage 2 with offload,
// and holds each rank's peak to the formula and ZeroPeakInFlight. With
// -v it prints the table.
func TestZeroPeak(t *testing.T) {
	if testing.Short() {
		t.Skip("the 25.2 M-parameter MLP on 2 ranks: zero/peak_test.go checks the same on a small one")
	}
	for _, c := range []ZeroPeakConfig{
		{Stage: 0}, {Stage: 0, GradientAsBucketView: true},
		{Stage: 1}, {Stage: 1, GradientAsBucketView: true},
		{Stage: 2}, {Stage: 2, Offload: true},
		// Buckets of one layer: two of them in flight and one filling.
		{Stage: 2, BucketCapMB: 8}, {Stage: 2, Offload: true, BucketCapMB: 8},
	} {
		c.World, c.Layers, c.Width, c.Batch, c.Steps = 2, 6, 2048, 4, 4
		name := fmt.Sprintf("stage %d gav=%v offload=%v cap=%v", c.Stage, c.GradientAsBucketView, c.Offload, c.BucketCapMB)
		t.Run(name, func(t *testing.T) {
			res, err := RunZeroPeak(c)
			if err != nil {
				t.Fatal(err)
			}
			allow := mib2(ZeroPeakInFlight(c))
			t.Logf("%s: formula %.1f MiB, accounted %v MiB, peak %v MiB (allowed in flight %.1f MiB)", name, res.FormulaMiB, res.AccountedMiB, res.PeakMiB, allow)
			for r := range c.World {
				if res.AccountedMiB[r] != res.FormulaMiB {
					t.Errorf("rank %d: accounted %.1f MiB, formula %.1f MiB", r, res.AccountedMiB[r], res.FormulaMiB)
				}
				if res.PeakMiB[r] > res.FormulaMiB+allow+0.1 {
					t.Errorf("rank %d: peak %.1f MiB over the formula %.1f MiB and %.1f MiB in flight", r, res.PeakMiB[r], res.FormulaMiB, allow)
				}
			}
		})
	}
}
