package script

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// stage3JS trains a stack of Linear and Tanh layers (WIDTH wide, LAYERS
// deep) under ZeRO stage 3 (each Linear a unit, then the model), ZeRO
// stage 2 or plain AdamW (STAGE 0, one rank), on a global batch of 12 rows
// per step that the ranks split, and checkpoints it through a Manager:
//
//	job.js DIR save STAGE WIDTH LAYERS CONSOLIDATED   trains steps 1-5, saving after step 3
//	job.js DIR resume STAGE WIDTH LAYERS              loads, then trains steps 4-5
//
// It prints "weights <json>" (the full state dict's values, for a small
// model) after step 3 (save) or after the load (resume), "loss <step>
// <bits>" (the global mean, as exact bits) per step, the device's peaks
// around the save and the load above the bytes live before (save) or after
// (load) them, and its peak over the whole run.
const stage3JS = `const { tensor, nn, optim, zero, dist, checkpoint, device } = require("zeroeng");
const [dir, mode] = [process.argv[2], process.argv[3]];
const [stage, width, layers] = [4, 5, 6].map(i => Number(process.argv[i]));
const consolidated = process.argv[7] === "1";
tensor.manualSeed(mode === "save" ? 1 : 99); // a resume starts from other weights
const blocks = [];
for (let i = 0; i < layers; i++) blocks.push(nn.Linear(width, width), nn.Tanh());
const model = nn.Sequential(...blocks);
const lr = mode === "save" ? 0.01 : 0.5; // and another learning rate
let opt;
if (stage === 3) {
  for (let i = 0; i < layers; i++) zero.fullyShard(model[2 * i]);
  zero.fullyShard(model);
  opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "adamw", lr, stage: 3, logMemory: false });
} else if (stage === 2) {
  opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "adamw", lr, stage: 2, logMemory: false });
} else {
  opt = optim.AdamW(model.parameters(), { lr });
}
const ckpt = checkpoint.Manager(dir, { state: { model, optimizer: opt }, consolidated });
const n = dist.worldSize, r = dist.rank;
const weights = () => {
  const sd = model.stateDict();
  return JSON.stringify(Object.keys(sd).map(k => [k, sd[k].toArray().flat()]));
};
const step = s => {
  const x = tensor.randn([12, width], { seed: s }).narrow(0, r * 12 / n, 12 / n);
  const loss = model(x).pow(2).mean();
  opt.zeroGrad();
  loss.backward();
  opt.step();
  const global = dist.allReduce(loss.detach(), "avg").wait();
  console.log("loss", s, new Float64Array([global.item()]).join());
};
let first = 1, peak = 0;
if (mode === "resume") {
  device.resetPeakMemoryStats();
  const got = ckpt.load();
  console.log("load-peak", device.maxMemoryAllocated() - device.memoryAllocated());
  if (width <= 16) console.log("weights", weights());
  first = got.step + 1;
}
for (let s = first; s <= 5; s++) {
  step(s);
  if (mode === "save" && s === 3) {
    if (width <= 16) console.log("weights", weights());
    peak = device.maxMemoryAllocated();
    device.resetPeakMemoryStats();
    const live = device.memoryAllocated();
    console.log("live", live);
    ckpt.save(s, { force: true });
    console.log("save-peak", device.maxMemoryAllocated() - live);
  }
}
console.log("run-peak", Math.max(peak, device.maxMemoryAllocated()));
`

// runStage3 runs stage3JS on ranks (under a device memory cap when
// maxMemory > 0) and returns each rank's lines.
func runStage3(t *testing.T, ranks int, maxMemory int64, args ...string) ([][]string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.js")
	if err := os.WriteFile(path, []byte(stage3JS), 0o644); err != nil {
		t.Fatal(err)
	}
	return runJobLines(t, path, ranks, maxMemory, args...)
}

// field returns the rest of the first line starting with name.
func field(lines []string, name string) string {
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			return rest
		}
	}
	return ""
}

// TestZeroStage3Checkpoint: a stage-3 model saved by a Manager on 2 and 3
// ranks resumes bit for bit on as many ranks (the weights, then every
// loss), and loads exactly the saved weights resharded onto another world
// size (3→2, 2→3, 2→1), onto ZeRO stage 2 and onto plain AdamW, from
// which training goes on with the same losses to rounding.
func TestZeroStage3Checkpoint(t *testing.T) {
	for _, c := range []struct {
		ranks, stage, resumeRanks, resumeStage int
		consolidated                           bool
	}{
		{2, 3, 2, 3, false},
		{3, 3, 3, 3, true},
		{3, 3, 2, 3, false},
		{2, 3, 3, 3, false},
		{2, 3, 1, 3, false},
		{2, 3, 2, 2, false},
		{2, 3, 1, 0, true},
		{1, 0, 3, 3, false},
	} {
		name := fmt.Sprintf("stage %d on %d → stage %d on %d", c.stage, c.ranks, c.resumeStage, c.resumeRanks)
		if c.consolidated {
			name += " (consolidated)"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cons := "0"
			if c.consolidated {
				cons = "1"
			}
			want, err := runStage3(t, c.ranks, 0, dir, "save", strconv.Itoa(c.stage), "8", "3", cons)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "step-00000003", "model.safetensors")); (err == nil) != (c.consolidated || c.stage != 3) {
				t.Errorf("model.safetensors: %v (consolidated %v)", err, c.consolidated)
			}
			got, err := runStage3(t, c.resumeRanks, 0, dir, "resume", strconv.Itoa(c.resumeStage), "8", "3")
			if err != nil {
				t.Fatal(err)
			}
			for r := range c.resumeRanks {
				if w := field(got[r], "weights"); w == "" || w != field(want[0], "weights") {
					t.Fatalf("rank %d loaded other weights than were saved:\n%.300s\nsaved:\n%.300s", r, w, field(want[0], "weights"))
				}
			}
			for s := 4; s <= 5; s++ {
				g, w := field(got[0], fmt.Sprint("loss ", s)), field(want[0], fmt.Sprint("loss ", s))
				if c.ranks == c.resumeRanks && c.stage == c.resumeStage {
					if g != w {
						t.Errorf("step %d: loss %s after resuming, %s uninterrupted", s, g, w)
					}
					continue
				}
				gv, _ := strconv.ParseFloat(g, 64)
				wv, _ := strconv.ParseFloat(w, 64)
				if g == "" || math.Abs(gv-wv) > 1e-5*math.Abs(wv) {
					t.Errorf("step %d: loss %s after resharding, %s uninterrupted", s, g, w)
				}
			}
		})
	}
}

// TestZeroStage3CheckpointMemory: saving and loading a stage-3 model
// through a Manager keeps every rank's device memory at its slices and
// state plus at most one tensor (a Linear(256, 256)'s weight) and a margin,
// where gathering the model around them, as checkpoints did, needs the
// whole model on every rank; under a memory cap that training fits and
// that gathering the model would exceed, a save and a resume succeed.
func TestZeroStage3CheckpointMemory(t *testing.T) {
	// Wide layers: the model (2.1 MB) against what training needs beyond
	// the state and the script's small tensors awaiting Go's collector.
	const width, layers = 256, 8
	const oneTensor, margin = width * width * 4, 4 << 10
	const whole = layers * (width*width + width) * 4
	dir := t.TempDir()
	lines, err := runStage3(t, 2, 0, dir, "save", "3", strconv.Itoa(width), strconv.Itoa(layers), "1")
	if err != nil {
		t.Fatal(err)
	}
	trainPeak, live := 0, 0
	for r, l := range lines {
		t.Logf("rank %d of 2: save peak %s bytes above the live %s (the model is %d bytes, one tensor %d)", r, field(l, "save-peak"), field(l, "live"), whole, oneTensor)
		if p, _ := strconv.Atoi(field(l, "save-peak")); p > oneTensor+margin {
			t.Errorf("rank %d: the save took %d bytes above the live ones (one tensor is %d; the model %d)", r, p, oneTensor, whole)
		}
		p, _ := strconv.Atoi(field(l, "run-peak"))
		trainPeak = max(trainPeak, p)
		p, _ = strconv.Atoi(field(l, "live"))
		live = max(live, p)
	}
	for _, ranks := range []int{2, 3} {
		lines, err := runStage3(t, ranks, 0, dir, "resume", "3", strconv.Itoa(width), strconv.Itoa(layers))
		if err != nil {
			t.Fatal(err)
		}
		for r, l := range lines {
			t.Logf("rank %d of %d: load peak %s bytes above the live bytes after it", r, ranks, field(l, "load-peak"))
			if p, _ := strconv.Atoi(field(l, "load-peak")); p > oneTensor+margin {
				t.Errorf("%d ranks, rank %d: the load peaked %d bytes above the live ones after it (one tensor is %d; the model %d)", ranks, r, p, oneTensor, whole)
			}
		}
	}
	// Under a cap: what training takes (on each rank, its slices,
	// gradient slices and AdamW state, and a few units at a time), which
	// gathering the model on top of the state exceeds.
	// Halfway: the script's temporaries are released at times that vary.
	limit := int64(trainPeak+live+whole) / 2
	if limit < int64(trainPeak)+32<<10 {
		t.Fatalf("training peaked at %d bytes, %d live at the save: no cap between them keeps the model (%d bytes) from being gathered", trainPeak, live, whole)
	}
	t.Logf("cap %d bytes: training peaked at %d, %d live at the save", limit, trainPeak, live)
	capped := t.TempDir()
	if _, err := runStage3(t, 2, limit, capped, "save", "3", strconv.Itoa(width), strconv.Itoa(layers), "1"); err != nil {
		t.Fatalf("saving under a cap of %d bytes: %v", limit, err)
	}
	if _, err := runStage3(t, 2, limit, capped, "resume", "3", strconv.Itoa(width), strconv.Itoa(layers)); err != nil {
		t.Fatalf("resuming under a cap of %d bytes: %v", limit, err)
	}
	// The cap bites: gathering the model around a save does not fit.
	path := filepath.Join(t.TempDir(), "gather.js")
	os.WriteFile(path, []byte(strings.Replace(stage3JS, "ckpt.save(s, { force: true });", "opt.withFullParams(() => {});", 1)), 0o644)
	var out bytes.Buffer
	err = RunJob(context.Background(), path, JobOptions{Ranks: 2, MaxMemory: limit, Rank: Options{Stdout: &out, Stderr: &out, AutoRelease: true, Args: []string{t.TempDir(), "save", "3", strconv.Itoa(width), strconv.Itoa(layers)}}})
	if err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("gathering the model under the cap: %v", err)
	}
}

// TestZeroStage3StateDictForms: under stage 3 model.stateDict() takes
// FSDP's options: the full form gathers one tensor at a time (the peak is
// the copies it returns and one tensor), on every rank or on rank 0 only;
// the sharded form is each rank's part of every parameter, without
// communication; loadStateDict takes both back, writing the slices
// directly, and refuses a sharded one made under other ranks. Unknown or
// wrong options are errors.
func TestZeroStage3StateDictForms(t *testing.T) {
	src := `const { tensor, nn, zero, dist, device } = require("zeroeng");
tensor.manualSeed(1);
const model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64));
for (const i of [0, 2, 4]) zero.fullyShard(model[i]);
zero.fullyShard(model);
const opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "adamw", lr: 0.1, stage: 3, logMemory: false });
const values = sd => Object.keys(sd).map(k => sd[k].toArray().flat()).flat();
const peakOf = fn => { device.resetPeakMemoryStats(); const live = device.memoryAllocated(); const v = fn(); return [v, device.maxMemoryAllocated() - live]; };
const [full, fullPeak] = peakOf(() => model.stateDict());
const [only, onlyPeak] = peakOf(() => model.stateDict({ type: "full", rank0Only: true, offloadToCpu: true }));
const [sharded, shardedPeak] = peakOf(() => model.stateDict({ type: "sharded" }));
const want = values(full);
if (Object.keys(full).join() !== "0.weight,0.bias,2.weight,2.bias,4.weight,4.bias") throw new Error("keys " + Object.keys(full));
if (dist.rank === 0 ? values(only).join() !== want.join() : Object.keys(only).length !== 0) throw new Error("rank0Only");
const s = sharded["2.weight"];
if (!tensor.isTensor(s.shard) || s.shape.join() !== "64,64" || s.shard.numel() === 0) throw new Error("shard " + JSON.stringify({ offset: s.offset, shape: s.shape }));
const piece = want.slice(64 * 64 + 64 + s.offset, 64 * 64 + 64 + s.offset + s.shard.numel());
if (s.shard.toArray().join() !== piece.join()) throw new Error("the shard is not this rank's part");
opt.zeroGrad();
model(tensor.ones([2, 64])).sum().backward();
opt.step();
if (values(model.stateDict()).join() === want.join()) throw new Error("the step changed nothing");
model.loadStateDict(sharded);
if (values(model.stateDict()).join() !== want.join()) throw new Error("the sharded state dict did not load back");
opt.zeroGrad();
model(tensor.ones([2, 64])).sum().backward();
opt.step();
model.loadStateDict(full);
if (values(model.stateDict()).join() !== want.join()) throw new Error("the full state dict did not load back");
const errors = [];
for (const f of [() => model.stateDict({ typ: "full" }), () => model.stateDict({ type: "local" }),
                 () => model.stateDict({ type: "sharded", rank0Only: true }),
                 () => model.loadStateDict({ ...sharded, "0.weight": { shard: s.shard, offset: s.offset + 1, shape: [64, 64] } })]) {
  try { f(); errors.push("none"); } catch (e) { errors.push(e.message); }
}
console.log(JSON.stringify({ fullPeak, onlyPeak, shardedPeak, errors }));`
	lines, err := runJob(t, 2, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const oneTensor, model, margin = 64 * 64 * 4, 3 * (64*64 + 64) * 4, 4 << 10
	for r, l := range lines {
		var got struct {
			FullPeak, OnlyPeak, ShardedPeak int
			Errors                          []string
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(l, fmt.Sprintf("[%d] ", r))), &got); err != nil {
			t.Fatalf("rank %d: %v: %s", r, err, l)
		}
		t.Logf("rank %d: stateDict() peaked %d bytes above the live ones, { rank0Only } %d, { type: \"sharded\" } %d (the model is %d bytes)", r, got.FullPeak, got.OnlyPeak, got.ShardedPeak, model)
		if got.FullPeak > model+oneTensor+margin {
			t.Errorf("rank %d: the full state dict peaked %d bytes above the live ones: more than its copies (%d) and one tensor", r, got.FullPeak, model)
		}
		onlyMax := oneTensor + margin
		if r == 0 {
			onlyMax += model
		}
		if got.OnlyPeak > onlyMax {
			t.Errorf("rank %d: the rank-0 full state dict peaked %d bytes above the live ones", r, got.OnlyPeak)
		}
		if got.ShardedPeak > model/2+margin {
			t.Errorf("rank %d: the sharded state dict peaked %d bytes above the live ones", r, got.ShardedPeak)
		}
		for i, want := range []string{`unknown option "typ" (did you mean type?)`, `type must be "full" or "sharded", got "local"`,
			`rank0Only applies to type "full"`, `0.weight: the shard holds elements`} {
			if i >= len(got.Errors) || !strings.Contains(got.Errors[i], want) {
				t.Errorf("rank %d: error %d is %q, want %q", r, i, got.Errors, want)
			}
		}
	}
}
