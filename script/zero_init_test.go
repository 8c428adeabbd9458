package script

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// zeroInitJS builds a small GPT-like model (a tied embedding, two residual
// MLP blocks, GPT-2's initialisation: zero biases, normal matrices, the
// projections into the residual stream scaled), whole or inside zero.init,
// optionally in bfloat16 or from a safetensors file, shards it under stage
// 3 and trains three steps. It prints the device's peak while the model
// and the optimizer were made, each step's global loss as exact bits, and
// the weights after the steps.
//
//	job.js LAZY DTYPE INIT   (LAZY 0 or 1; DTYPE float32 or bfloat16; INIT a file or "-"; SAVE a file or "-")
const zeroInitJS = `const { tensor, nn, zero, dist, device, io } = require("zeroeng");
const [lazy, dt, init, save] = [process.argv[2] === "1", process.argv[3], process.argv[4], process.argv[5]];
tensor.manualSeed(7);
class Block extends nn.Module {
  constructor() { super(); this.ln = nn.LayerNorm(32); this.fc = nn.Linear(32, 128); this.proj = nn.Linear(128, 32); }
  forward(x) { return x.add(this.proj(nn.functional.gelu(this.fc(this.ln(x))))); }
}
class Net extends nn.Module {
  constructor() {
    super();
    this.wte = nn.Embedding(64, 32);
    this.h = nn.ModuleList([new Block(), new Block()]);
    for (const [name, p] of this.namedParameters()) {
      if (name.endsWith(".bias")) nn.init.zeros_(p);
      else if (p.ndim === 2) nn.init.normal_(p, 0, name.endsWith("proj.weight") ? 0.02 / Math.sqrt(4) : 0.02);
    }
  }
  forward(idx) {
    let x = this.wte(idx);
    for (const b of this.h) x = b(x);
    return nn.functional.linear(x, this.wte.weight);
  }
}
device.resetPeakMemoryStats();
const build = () => {
  const m = new Net();
  if (init !== "-") m.loadStateDict(io.loadSafetensors(init));
  if (dt === "bfloat16") m.bfloat16();
  return m;
};
const model = lazy ? zero.init(build) : build();
if (save !== "-") io.saveSafetensors(save, model.stateDict());
else {
  for (const b of model.h) zero.fullyShard(b);
  zero.fullyShard(model, { reshardAfterForward: false });
  const opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "adamw", lr: 1e-2, stage: 3, logMemory: false });
  console.log("build-peak", device.maxMemoryAllocated());
  const n = dist.worldSize, r = dist.rank;
  for (let s = 1; s <= 3; s++) {
    const idx = tensor.randint(0, 64, [12, 16], { seed: s }).narrow(0, r * 12 / n, 12 / n);
    opt.zeroGrad();
    const logits = model(idx);
    const loss = nn.functional.crossEntropy(logits.view(-1, 64).float(), idx.view(-1));
    loss.backward();
    opt.step();
    console.log("loss", s, new Float64Array([dist.allReduce(loss.detach().float(), "avg").wait().item()]).join());
  }
  const sd = model.stateDict();
  console.log("weights", JSON.stringify(Object.keys(sd).map(k => [k, sd[k].float().toArray().flat()])));
}
`

// TestZeroInitBuildsSharded: a model built inside zero.init — no parameter
// ever whole on a rank — trains under stage 3 exactly as the same script
// building it whole: the same losses bit for bit and the same weights, in
// float32 and in bfloat16 (model.bfloat16() inside zero.init), from its
// own initialisation and from a safetensors file (loadStateDict inside
// zero.init reads only each rank's slices of it), on 2 and 3 ranks; and the
// device's peak while the model and its optimizer are made stays below
// the whole model's size.
func TestZeroInitBuildsSharded(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "job.js")
	if err := os.WriteFile(script, []byte(zeroInitJS), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(ranks int, args ...string) [][]string {
		t.Helper()
		lines, err := runJobLines(t, script, ranks, 0, args...)
		if err != nil {
			t.Fatal(err)
		}
		return lines
	}
	weights := filepath.Join(dir, "w.safetensors")
	run(1, "0", "float32", "-", weights)                      // another model's weights, saved whole
	const whole = (64*32 + 2*(2*32+32*128+128+128*32+32)) * 4 // float32 bytes
	for _, c := range []struct {
		ranks int
		dtype string
		init  string
	}{{2, "float32", "-"}, {3, "float32", "-"}, {2, "bfloat16", "-"}, {2, "float32", weights}} {
		t.Run(fmt.Sprintf("%d ranks %s init=%s", c.ranks, c.dtype, filepath.Base(c.init)), func(t *testing.T) {
			eager := run(c.ranks, "0", c.dtype, c.init, "-")
			lazy := run(c.ranks, "1", c.dtype, c.init, "-")
			for r := range c.ranks {
				for _, k := range []string{"loss 1", "loss 2", "loss 3", "weights"} {
					if g, w := field(lazy[r], k), field(eager[r], k); g == "" || g != w {
						t.Fatalf("rank %d, %s: built with zero.init %.200s, built whole %.200s", r, k, g, w)
					}
				}
				// Built lazily: this rank's slices of the parameters and of
				// their gradients (and the padding, a few elements per unit;
				// in bfloat16, the largest piece of a parameter made in
				// float32 before its rounding); built whole: the model.
				lazyPeak, _ := strconv.Atoi(field(lazy[r], "build-peak"))
				eagerPeak, _ := strconv.Atoi(field(eager[r], "build-peak"))
				size := 4
				if c.dtype == "bfloat16" {
					size = 2
				}
				if slices := 2 * whole / 4 * size / c.ranks; lazyPeak == 0 || lazyPeak > slices+64*size+64*32*4/c.ranks || eagerPeak < whole/4*size {
					t.Errorf("rank %d: the peak while building was %d bytes with zero.init and %d without; the slices are %d, the model %d", r, lazyPeak, eagerPeak, slices, whole/4*size)
				}
			}
		})
	}
}

// runJobLines runs the script at path on ranks (under a device memory cap
// when maxMemory > 0) and returns each rank's lines of output.
func runJobLines(t *testing.T, path string, ranks int, maxMemory int64, args ...string) ([][]string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := RunJob(context.Background(), path, JobOptions{Ranks: ranks, MaxMemory: maxMemory,
		Rank: Options{Stdout: &out, Stderr: &errOut, AutoRelease: true, Args: args}})
	lines := make([][]string, ranks)
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		rank := 0
		if ranks > 1 {
			if _, err := fmt.Sscanf(l, "[%d]", &rank); err != nil {
				continue
			}
			_, l, _ = strings.Cut(l, "] ")
		}
		lines[rank] = append(lines[rank], l)
	}
	if err != nil {
		err = errors.Join(err, errors.New(errOut.String()))
	}
	return lines, err
}
