package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// llamaFixture is samples/testdata/llama/expected.json: PyTorch 1.13's run
// of llama.js's tiny model (samples/testdata/llama/gen.py) from
// init.safetensors on tokens.npy.
type llamaFixture struct {
	Args        []string  `json:"args"`
	GlobalBatch int       `json:"globalBatch"`
	Parameters  int       `json:"parameters"`
	Losses      []float64 `json:"losses"`
	GradNorms   []float64 `json:"gradNorms"`
}

// llamaSteps runs samples/llama.js with --metrics and returns each rank's
// logged steps: the loss and the gradient norm before clipping, by step.
func llamaSteps(t *testing.T, ranks int, args ...string) [][]map[string]any {
	t.Helper()
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	all := append([]string{"run", "--quiet", "--metrics", metrics, "--nproc", fmt.Sprint(ranks), "samples/llama.js", "--"}, args...)
	r := zeroeng(t, "../..", nil, all...)
	if r.code != 0 {
		t.Fatalf("%v: status %d\n%s\n%s", args, r.code, r.stdout, r.stderr)
	}
	out := make([][]map[string]any, ranks)
	for _, m := range readJSONLines(t, metrics) {
		rank, _ := m["rank"].(float64)
		if _, ok := m["step"].(float64); ok && m["workload"] == nil && int(rank) < ranks {
			out[int(rank)] = append(out[int(rank)], m)
		}
	}
	return out
}

// TestLlamaMatchesPyTorch: llama.js's tiny LLaMA (RMSNorm, rotary
// embeddings, grouped-query attention, SwiGLU), started from PyTorch's
// initial weights, trains as PyTorch 1.13 trains the same model: each
// step's loss and gradient norm are PyTorch's to 1e-5 (float32 rounding)
// over 5 AdamW steps with warm-up, cosine decay, weight decay groups and
// clipping. The global batch is the fixture's on one rank, accumulated,
// and split over two ranks under DDP and ZeRO stages 2 and 3; with the
// decoder layers' activations checkpointed, too.
func TestLlamaMatchesPyTorch(t *testing.T) {
	const dir = "samples/testdata/llama"
	b, err := os.ReadFile(filepath.Join("../..", dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want llamaFixture
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Losses) == 0 || len(want.Losses) != len(want.GradNorms) || want.GlobalBatch%2 != 0 {
		t.Fatalf("expected.json: %d losses, %d gradient norms, global batch %d", len(want.Losses), len(want.GradNorms), want.GlobalBatch)
	}
	data := filepath.Join(dir, "tokens.npy")
	common := append(want.Args, "--init", filepath.Join(dir, "init.safetensors"), "--data", data, "--val-data", data, "--eval-batches", "1")
	g := want.GlobalBatch
	for _, c := range []struct {
		name  string
		ranks int
		args  []string
	}{
		{"one rank", 1, []string{"--batch", fmt.Sprint(g)}},
		{"accumulation", 1, []string{"--batch", fmt.Sprint(g / 2), "--accum", "2"}},
		{"DDP on 2 ranks", 2, []string{"--batch", fmt.Sprint(g / 2)}},
		{"ZeRO 2 on 2 ranks", 2, []string{"--batch", fmt.Sprint(g / 2), "--zero", "2"}},
		{"ZeRO 3 on 2 ranks", 2, []string{"--batch", fmt.Sprint(g / 2), "--zero", "3"}},
		{"activation checkpointing", 1, []string{"--batch", fmt.Sprint(g), "--checkpoint-activations"}},
		{"activation checkpointing under ZeRO 3", 2, []string{"--batch", fmt.Sprint(g / 2), "--zero", "3", "--checkpoint-activations"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for rank, steps := range llamaSteps(t, c.ranks, append(c.args, common...)...) {
				if len(steps) != len(want.Losses) {
					t.Fatalf("rank %d logged %d steps, want %d", rank, len(steps), len(want.Losses))
				}
				for i, s := range steps {
					loss, _ := s["loss"].(float64)
					norm, _ := s["grad_norm"].(float64)
					if s["step"] != float64(i+1) || math.Abs(loss-want.Losses[i]) > 1e-5 || math.Abs(norm-want.GradNorms[i]) > 1e-5*want.GradNorms[i] {
						t.Errorf("rank %d, step %v: loss %v, gradient norm %v; PyTorch: step %d, %v, %v", rank, s["step"], loss, norm, i+1, want.Losses[i], want.GradNorms[i])
					}
				}
			}
		})
	}
}

// TestLlamaSample: the tiny LLaMA learns this repository's Markdown, byte
// by byte, well below the uniform loss ln 256 = 5.55; its parameter count
// is the PyTorch model's; bad arguments and an --init file of another
// model are errors that say what is wrong.
func TestLlamaSample(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 60 steps (-short): make test-all")
	}
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	r := zeroeng(t, "../..", nil, "run", "--quiet", "--metrics", metrics, "samples/llama.js", "--", "--steps", "60", "--eval-every", "60")
	if r.code != 0 {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	var res gptResult
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "{") {
			if err := json.Unmarshal([]byte(line), &res); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
		}
	}
	if res.Workload != "llama_train" || res.ValLoss == 0 || res.ValLoss > 3.8 || res.Loss > 3.8 {
		t.Errorf("after 60 steps: %+v; want the loss and the validation loss below 3.8", res)
	}
	b, err := os.ReadFile("../../samples/testdata/llama/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var fix llamaFixture
	if err := json.Unmarshal(b, &fix); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%.2fM parameters", float64(fix.Parameters)/1e6); !strings.Contains(r.stdout, want) {
		t.Errorf("the header does not say %q:\n%s", want, r.stdout)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--bogus"}, 2, "llama.js: unknown argument --bogus"},
		{[]string{"--config", "huge"}, 2, "--config is one of tiny, bench, llama-110m"},
		{[]string{"--no-shuffle=yes"}, 2, "--no-shuffle takes no value"},
		{[]string{"--bench", "--data", "x.bin"}, 2, "--bench trains on random tokens"},
		{[]string{"--seq-len", "65"}, 2, "--seq-len 65 exceeds the tiny model's 64 positions"},
		{[]string{"--config", "bench", "--init", "samples/testdata/llama/init.safetensors"}, 1,
			"--init samples/testdata/llama/init.safetensors: Error(s) in loading state_dict"},
		// A file of another dtype is converted, and the run says so.
		{[]string{"--init", "samples/testdata/llama/init.safetensors", "--dtype", "bfloat16", "--steps", "1", "--eval-every", "1"}, 0,
			"--init samples/testdata/llama/init.safetensors holds float32 weights and the run is bfloat16: they are converted to bfloat16, rounding"},
	} {
		r := zeroeng(t, "../..", nil, append([]string{"run", "samples/llama.js", "--"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: status %d, stderr %.300q; want %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
}
