package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stepPeaks runs a sample for its steps with --metrics and returns rank
// 0's mem_peak of every step.
func stepPeaks(t *testing.T, ranks int, sample string, args ...string) []float64 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	all := append([]string{"run", "--quiet", "--nproc", fmt.Sprint(ranks), "--metrics", path, sample, "--"}, args...)
	r := zeroeng(t, "../..", nil, all...)
	if r.code != 0 {
		t.Fatalf("%v: status %d\n%s\n%s", args, r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var peaks []float64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Rank int      `json:"rank"`
			Peak *float64 `json:"mem_peak"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Peak != nil && m.Rank == 0 {
			peaks = append(peaks, *m.Peak)
		}
	}
	return peaks
}

// TestSamplesMemoryIsFlat: every sample configuration trains 100 steps
// without its memory growing: each step's peak from the third on is at
// most the second step's (the first builds the optimizer state). A step
// that leaves anything behind — activations held for later steps, a
// checkpointed segment's recomputation, an offloaded slice — shows here as
// a peak that climbs. (Small tensors such as the losses go back when the
// garbage collector finds them: the allowance is 64 KiB.)
func TestSamplesMemoryIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("100 steps of each sample configuration: make test-all")
	}
	common := []string{"--steps", "100", "--eval-every", "1000", "--batch", "4"}
	for _, c := range []struct {
		sample string
		ranks  int
		args   []string
	}{
		{"samples/gpt.js", 1, nil},
		{"samples/gpt.js", 1, []string{"--checkpoint-activations"}},
		{"samples/gpt.js", 1, []string{"--autocast", "bfloat16"}},
		{"samples/gpt.js", 2, nil},
		{"samples/gpt.js", 2, []string{"--zero", "1", "--dtype", "bfloat16"}},
		{"samples/gpt.js", 2, []string{"--zero", "2", "--accum", "2"}},
		{"samples/gpt.js", 2, []string{"--zero", "2", "--offload", "cpu"}},
		{"samples/gpt.js", 2, []string{"--zero", "3", "--checkpoint-activations"}},
		{"samples/gpt.js", 2, []string{"--zero", "3", "--offload", "cpu"}},
		{"samples/llama.js", 1, []string{"--checkpoint-activations"}},
		{"samples/llama.js", 2, []string{"--zero", "3"}},
	} {
		t.Run(fmt.Sprintf("%s %d ranks %s", filepath.Base(c.sample), c.ranks, strings.Join(c.args, " ")), func(t *testing.T) {
			t.Parallel()
			peaks := stepPeaks(t, c.ranks, c.sample, append(slices.Clone(common), c.args...)...)
			if len(peaks) != 100 {
				t.Fatalf("%d steps with mem_peak in the metrics, want 100", len(peaks))
			}
			for i := 2; i < len(peaks); i++ {
				if peaks[i] > peaks[1]+64<<10 {
					t.Fatalf("the peak grows: %.0f bytes at step 2, %.0f at step %d", peaks[1], peaks[i], i+1)
				}
			}
		})
	}
}
