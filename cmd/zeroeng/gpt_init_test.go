package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestGPTInit: gpt.js --init FILE starts from a checkpoint's
// model.safetensors: the model trained from it on one rank, and under
// ZeRO stage 3 on two ranks (built with zero.init, each rank reading its
// slices of the file), train the same steps; a file of another
// configuration is an error naming the tensor, not a half-loaded model.
func TestGPTInit(t *testing.T) {
	if testing.Short() {
		t.Skip("five runs of gpt.js: make test-all")
	}
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	runGPT(t, 1, "--steps", "2", "--eval-every", "100", "--batch", "8", "--seed", "5", "--checkpoint", ck)
	weights := filepath.Join(ck, "step-00000002", "model.safetensors")
	common := []string{"--steps", "3", "--eval-every", "3", "--eval-batches", "2", "--init", weights}
	one := runGPT(t, 1, append([]string{"--batch", "8"}, common...)...)[0]
	for rank, got := range runGPT(t, 2, append([]string{"--batch", "4", "--zero", "3"}, common...)...) {
		if d := got.Loss - one.Loss; d > 1e-4 || d < -1e-4 || got.ValLoss-one.ValLoss > 1e-4 || one.ValLoss-got.ValLoss > 1e-4 {
			t.Errorf("rank %d under ZeRO 3 from --init: loss %v, validation %v; one rank %v, %v", rank, got.Loss, got.ValLoss, one.Loss, one.ValLoss)
		}
	}
	fresh := runGPT(t, 1, "--batch", "8", "--steps", "3", "--eval-every", "3", "--eval-batches", "2")[0]
	if fresh.Loss == one.Loss {
		t.Errorf("the loss from --init equals a fresh model's (%v): the weights were not loaded", one.Loss)
	}
	r := zeroeng(t, "../..", nil, "run", "--quiet", "samples/gpt.js", "--", "--config", "bench", "--steps", "1", "--init", weights)
	if r.code != 1 || !strings.Contains(r.stderr, "--init") || !strings.Contains(r.stderr, "transformer") {
		t.Errorf("a file of another configuration: status %d\n%s", r.code, r.stderr)
	}
}
