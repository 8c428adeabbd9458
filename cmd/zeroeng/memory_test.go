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

// runPeak runs a sample for its steps (under --max-memory cap when cap >
// 0) and returns the result, the highest mem_peak of any rank and step,
// and the number of steps rank 0 logged.
func runPeak(t *testing.T, ranks int, cap int64, sample string, args ...string) (result, float64, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	all := []string{"run", "--quiet", "--nproc", fmt.Sprint(ranks), "--metrics", path}
	if cap > 0 {
		all = append(all, "--max-memory", fmt.Sprint(cap))
	}
	r := zeroeng(t, "../..", nil, append(append(all, sample, "--"), args...)...)
	b, _ := os.ReadFile(path)
	peak, steps := 0.0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Rank int      `json:"rank"`
			Peak *float64 `json:"mem_peak"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Peak != nil {
			peak = max(peak, *m.Peak)
			if m.Rank == 0 {
				steps++
			}
		}
	}
	return r, peak, steps
}

// TestMemoryCaps: each memory feature trains under a per-rank cap
// (--max-memory) at which the configuration it improves on runs out of
// memory, the condition it exists for: ZeRO stage 3 (the model built
// sharded with zero.init) where stage 2 fails, and it saves and resumes
// under the cap; llama.js the same from --init weights; stage 2 with
// offload where stage 2 fails; stage 1 where DDP fails; activation
// checkpointing for 100 steps where the plain model fails at step 1. The
// cap is halfway between the two configurations' peaks, measured first
// without a cap, so the test says which side moved if one does. The loser
// fails with an out-of-memory error naming the rank's device.
func TestMemoryCaps(t *testing.T) {
	if testing.Short() {
		t.Skip("a few dozen training runs: make test-all")
	}
	gpt := []string{"--config", "bench", "--bench", "--batch", "1", "--seq-len", "32", "--steps", "3"}
	llama := []string{"--config", "tiny", "--init", "samples/testdata/llama/init.safetensors", "--batch", "1", "--seq-len", "16", "--steps", "3", "--eval-every", "100"}
	for _, c := range []struct {
		name          string
		sample        string
		ranks         int
		common        []string
		winner, loser []string
		winnerSteps   []string // the winner's own run under the cap, when longer
		resume        bool
	}{
		{"stage 3 where stage 2 runs out", "samples/gpt.js", 4, gpt, []string{"--zero", "3"}, []string{"--zero", "2"}, nil, true},
		{"llama stage 3 from --init where stage 2 runs out", "samples/llama.js", 4, llama, []string{"--zero", "3"}, []string{"--zero", "2"}, nil, false},
		{"stage 2 with offload where stage 2 runs out", "samples/gpt.js", 2, gpt, []string{"--zero", "2", "--offload", "cpu"}, []string{"--zero", "2"}, nil, false},
		{"stage 1 where DDP runs out", "samples/gpt.js", 2, gpt, []string{"--zero", "1"}, []string{"--zero", "0"}, nil, false},
		{"activation checkpointing where the plain model runs out", "samples/gpt.js", 1,
			[]string{"--config", "bench", "--bench", "--batch", "16", "--seq-len", "64", "--steps", "3"},
			[]string{"--checkpoint-activations"}, nil, []string{"--steps", "100"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := func(extra ...[]string) []string {
				out := slices.Clone(c.common)
				for _, e := range extra {
					out = append(out, e...)
				}
				return out
			}
			_, winPeak, _ := runPeak(t, c.ranks, 0, c.sample, args(c.winner)...)
			_, losePeak, _ := runPeak(t, c.ranks, 0, c.sample, args(c.loser)...)
			if winPeak == 0 || winPeak >= losePeak {
				t.Fatalf("peaks %.0f bytes with %v, %.0f without: nothing saved", winPeak, c.winner, losePeak)
			}
			limit := int64(winPeak+losePeak) / 2
			t.Logf("peaks %.1f MiB with %v, %.1f MiB with %v: cap %.1f MiB", winPeak/(1<<20), c.winner, losePeak/(1<<20), c.loser, float64(limit)/(1<<20))
			extra := []string{}
			if c.resume {
				extra = []string{"--checkpoint", t.TempDir(), "--checkpoint-every", "2"}
			}
			r, _, steps := runPeak(t, c.ranks, limit, c.sample, args(c.winner, c.winnerSteps, extra)...)
			if r.code != 0 {
				t.Fatalf("%v under a cap of %d bytes: status %d\n%s", c.winner, limit, r.code, r.stderr)
			}
			if c.resume { // six steps, resuming from step 3's checkpoint
				r, _, steps2 := runPeak(t, c.ranks, limit, c.sample, append(args(c.winner, extra), "--steps", "6")...)
				if r.code != 0 || !strings.Contains(r.stdout, "resumed from") || steps2 != 3 {
					t.Fatalf("resuming under the cap: status %d, %d steps\n%s\n%s", r.code, steps2, r.stdout, r.stderr)
				}
			}
			r, _, lostAt := runPeak(t, c.ranks, limit, c.sample, args(c.loser, c.winnerSteps)...)
			if r.code != 1 || !strings.Contains(r.stderr, "out of memory") || !strings.Contains(r.stderr, "cpu") {
				t.Fatalf("%v under the cap: status %d, want an out-of-memory error naming the device\n%s", c.loser, r.code, r.stderr)
			}
			t.Logf("%v: %d steps under the cap; %v: out of memory after %d", c.winner, steps, c.loser, lostAt)
			if c.winnerSteps != nil && lostAt != 0 {
				t.Errorf("%v trained %d steps under the cap before running out, want none", c.loser, lostAt)
			}
		})
	}
}
