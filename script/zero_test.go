package script

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// zeroScript trains a small model for 4 steps on a global batch of 8 split
// across the ranks, with the optimizer OPT (and SETUP after it), each step
// STEP (plainStep, or closureStep), and prints the parameters as JSON.
const (
	plainStep = `opt.zeroGrad();
  nn.functional.crossEntropy(model.forward(x), y).backward();
  opt.step();`
	// closureStep steps as PyTorch's optimizer.step(closure): the closure
	// runs under noGrad here, and step must enable gradients for it.
	closureStep = `const loss = tensor.noGrad(() => opt.step(() => {
    opt.zeroGrad();
    const l = nn.functional.crossEntropy(model.forward(x), y);
    l.backward();
    return l;
  }));
  if (!tensor.isTensor(loss) || !(loss.item() > 0)) throw new Error("step(closure) returned " + loss);`
)

const zeroScript = `const { tensor, nn, optim, dist, zero } = require("zeroeng");
tensor.manualSeed(3);
const net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3));
const WRAP;
const OPT;
SETUP
const n = dist.worldSize, per = 8 / n, r = dist.rank;
const xs = [], ys = [];
for (let i = 0; i < 8 * 6; i++) xs.push(Math.sin(i));
for (let i = 0; i < 8; i++) ys.push(i % 3);
const x = tensor.fromArray(xs, [8, 6], "float32").narrow(0, r * per, per);
const y = tensor.fromArray(ys, [8], "int64").narrow(0, r * per, per);
for (let step = 0; step < 4; step++) {
  STEP
}
CHECK
console.log(JSON.stringify(net.parameters().map(p => p.toArray().flat())));
`

func TestZeroFromJS(t *testing.T) {
	plain := strings.NewReplacer("WRAP", "model = net", "OPT", `opt = optim.AdamW(net.parameters(), { lr: 0.01 })`, "SETUP", "", "CHECK", "", "STEP", plainStep).Replace(zeroScript)
	want, err := runJob(t, 1, plain, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ddpWrap := "model = nn.parallel.DistributedDataParallel(net, { bucketCapMB: 0.0002, firstBucketCapMB: 0.0001 })"
	zopt := func(extra string) string {
		return `opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", lr: 0.01, logMemory: false` + extra + ` })`
	}
	stateCheck := `opt.consolidateStateDict(0);
if (r === 0) {
  const sd = opt.stateDict();
  if (Object.keys(sd.state).length !== 4 || sd.param_groups[0].lr !== 0.01) throw new Error("state dict: " + JSON.stringify(Object.keys(sd.state)));
  if (sd.state[2].exp_avg.shape.join() !== "3,8") throw new Error("exp_avg shape " + sd.state[2].exp_avg.shape);
}
const m = opt.memory();
if (!((r > 0 || m.optimizerState > 0) && m.parameters === 4 * (6 * 8 + 8 + 8 * 3 + 3))) throw new Error("memory " + JSON.stringify(m));`
	for _, c := range []struct{ name, wrap, opt, setup string }{
		{"greedy", ddpWrap, zopt(""), ""},
		{"DDP with a closure", ddpWrap, `opt = optim.AdamW(net.parameters(), { lr: 0.01 }); const closure = true`, ""},
		{"greedy with a closure", ddpWrap, zopt("") + "; const closure = true", ""},
		{"stage 2 with a closure", "model = net", zopt(`, stage: 2, bucketCapMB: 0.0001`) + "; const closure = true", ""},
		{"schedule A with a closure", ddpWrap, zopt(`, overlapWithDDP: true`) + "; const closure = true",
			"model.registerCommHook(null, zero.hookWithZeroStep(dist.commHooks.allreduceHook, model, opt));"},
		{"flat bucket view", ddpWrap, zopt(`, partition: "flat", parametersAsBucketView: true`), ""},
		{"stage 2", "model = net", zopt(`, stage: 2, bucketCapMB: 0.0001`), ""},
		{"schedule A", ddpWrap, zopt(`, overlapWithDDP: true`),
			"model.registerCommHook(null, zero.hookWithZeroStep(dist.commHooks.allreduceHook, model, opt));"},
		{"schedule B around a JavaScript hook, sharded", ddpWrap, zopt(`, overlapWithDDP: true`),
			"model.registerCommHook({}, zero.hookWithZeroStepInterleaved((s, b) => dist.allReduce(b.buffer.div(dist.worldSize)), model, opt, { shardBuckets: true }));"},
		{"groups", ddpWrap, `opt = zero.ZeroRedundancyOptimizer([{ params: net.parameters().slice(0, 2) }, { params: net.parameters().slice(2), lr: 0.01 }], { optimizer: "adamw", lr: 0.01, logMemory: false })`, ""},
	} {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				step, check := plainStep, stateCheck
				if strings.Contains(c.opt, "const closure") {
					step = closureStep
				}
				if !strings.Contains(c.opt, "zero.") {
					check = ""
				}
				src := strings.NewReplacer("WRAP", c.wrap, "OPT", c.opt, "SETUP", c.setup, "CHECK", check, "STEP", step).Replace(zeroScript)
				got, err := runJob(t, n, src, dist.Options{})
				if err != nil {
					t.Fatal(err)
				}
				for rank, line := range got {
					line = strings.TrimPrefix(line, fmt.Sprintf("[%d] ", rank))
					if err := closeJSON(line, want[0]); err != nil {
						t.Errorf("rank %d: %v", rank, err)
					}
				}
			})
		}
	}
}

// closeJSON compares two JSON arrays of arrays of numbers to 1e-5.
func closeJSON(got, want string) error {
	var a, b [][]float64
	if err := json.Unmarshal([]byte(got), &a); err != nil {
		return fmt.Errorf("%v in %q", err, got)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		return err
	}
	if len(a) != len(b) {
		return fmt.Errorf("%d parameters, want %d", len(a), len(b))
	}
	for i := range b {
		for j := range b[i] {
			if math.Abs(a[i][j]-b[i][j]) > 1e-5 {
				return fmt.Errorf("parameter %d[%d] = %v, one rank on the whole batch %v", i, j, a[i][j], b[i][j])
			}
		}
	}
	return nil
}

func TestZeroErrorsFromJS(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { lr: 0.1 })`, "options.optimizer is required"},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "lion" })`, "lion"},
		{`zero.ZeroRedundancyOptimizer([], { optimizer: "adam" })`, "non-empty array"},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adam", stage: 3 })`, "stage 3"},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adam", overlapWithDdp: true })`, `unknown option "overlapWithDdp" (did you mean overlapWithDDP?)`},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adam", weight_decay: 0.1 })`, `did you mean weightDecay?`},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "rmsprop", centred: true })`, `did you mean centered?`},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adam", stage: 2, partition: "greedy" })`, "needs partition"},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adam" }).stateDict()`, "consolidateStateDict"},
		{`zero.hookWithZeroStep(dist.commHooks.allreduceHook, net, null)`, "DistributedDataParallel model"},
		{`const m = nn.parallel.DistributedDataParallel(net); m.registerCommHook(null, zero.hookWithZeroStep(dist.commHooks.allreduceHook, m, zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adam" })))`, "overlapWithDDP"},
	} {
		src := `const { nn, dist, zero } = require("zeroeng"); const net = nn.Linear(2, 2);
` + c.src
		_, err := runJob(t, 1, src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.src, err, c.want)
		}
	}
}

func TestZeroGroupOptionsFromJS(t *testing.T) {
	src := `const { nn, zero } = require("zeroeng");
const net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2));
const ps = net.parameters();
const opt = zero.ZeroRedundancyOptimizer([{ params: ps.slice(0, 2), lr: 0.5 }, { params: ps.slice(2) }], { optimizer: "sgd", lr: 0.1, momentum: 0.9 });
opt.addParamGroup({ params: [nn.Parameter(ps[0].detach().clone())], momentum: 0 });
console.log(opt.paramGroups.map(g => g.lr + "/" + g.momentum).join(" "), JSON.stringify(opt.shards()));`
	got, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `0.5/0.9 0.1/0.9 0.1/0 [16]`; got[0] != want {
		t.Errorf("got %q, want %q (group options on the first group only; later groups start from the defaults)", got[0], want)
	}
}

// TestZeroStepBeforeTheOverlapHook: under overlapWithDDP, step() before
// the overlap hook is registered does nothing and warns, once, as
// PyTorch's step warns and returns.
func TestZeroStepBeforeTheOverlapHook(t *testing.T) {
	src := `const { tensor, nn, dist, zero } = require("zeroeng");
const net = nn.Linear(2, 2);
const before = net.weight.toArray().flat().join();
const model = nn.parallel.DistributedDataParallel(net);
const opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "sgd", lr: 0.1, overlapWithDDP: true, logMemory: false });
model.forward(tensor.ones([1, 2])).sum().backward();
const r1 = opt.step(), r2 = opt.step();
console.log("unchanged", net.weight.toArray().flat().join() === before, r1, r2);`
	got, err := runJob(t, 2, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Join(got, "\n")
	if strings.Count(out, "unchanged true undefined undefined") != 2 {
		t.Errorf("output:\n%s", out)
	}
	if c := strings.Count(out, "step() did nothing"); c != 2 {
		t.Errorf("%d warnings, want one per rank:\n%s", c, out)
	}
}

// TestZeroAttributes: PyTorch's rank, world size, process group and local
// optimizer (the parameters this rank updates, and their state).
func TestZeroAttributes(t *testing.T) {
	src := `const { tensor, nn, dist, zero } = require("zeroeng");
tensor.manualSeed(0);
const net = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2));
const model = nn.parallel.DistributedDataParallel(net);
const opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adam", lr: 0.01, logMemory: false });
model.forward(tensor.ones([2, 4])).sum().backward();
opt.step();
const local = opt.optim;
const mine = local.paramGroups[0].params;
const ok = mine.every(p => local.state.get(p).exp_avg.shape.join() === p.shape.join() && local.state.get(p).step === 1);
console.log(JSON.stringify({ rank: opt.rank, size: opt.worldSize, world: opt.processGroup === dist, n: mine.length, ok, lr: local.paramGroups[0].lr }));`
	got, err := runJob(t, 2, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for r, line := range got {
		var v struct {
			Rank, Size, N int
			World, OK     bool
			LR            float64
		}
		line = strings.TrimPrefix(line, fmt.Sprintf("[%d] ", r))
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if v.Size != 2 || !v.World || !v.OK || v.LR != 0.01 {
			t.Errorf("rank %d: %s", r, line)
		}
		total += v.N
	}
	if total != 4 {
		t.Errorf("the ranks' local optimizers hold %d parameters, want the 4 of the model: %v", total, got)
	}
}

// optimizerClass is a small optimizer written in JavaScript (SGD without
// momentum, plus a step counter in its state, so that state dicts have
// something to carry).
const optimizerClass = `class Plain extends optim.Optimizer {
  constructor(params, options) { super(params, { lr: optim.required, ...options }); }
  step(closure) {
    const loss = closure === undefined ? undefined : tensor.enableGrad(closure);
    tensor.noGrad(() => {
      for (const g of this.paramGroups) for (const p of g.params) {
        if (!p.grad) continue;
        const s = this.state.get(p) ?? { n: 0, last: tensor.zeros(p.shape).keep() };
        s.n++;
        s.last.copy_(p.grad);
        this.state.set(p, s);
        p.add_(p.grad, { alpha: -g.lr });
      }
    });
    return loss;
  }
}
`

// TestOptimizerClass: optim.Optimizer's groups, defaults and state dicts,
// and ZeRO over a class written in JavaScript: its state consolidated and
// reloaded into another ZeRO gives the same next step.
func TestOptimizerClass(t *testing.T) {
	src := `const { tensor, nn, optim, dist, zero } = require("zeroeng");
` + optimizerClass + `
tensor.manualSeed(0);
const net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2));
const model = nn.parallel.DistributedDataParallel(net);
const x = tensor.ones([2, 4]).mul(dist.rank + 1);
const train = opt => { opt.zeroGrad(); model.forward(x).square().sum().backward(); opt.step(); };
const opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: Plain, lr: 0.05, logMemory: false });
for (let i = 0; i < 3; i++) train(opt);
opt.consolidateStateDict(1);
const sd = dist.rank === 1 ? opt.stateDict() : null;
const counts = sd && Object.values(sd.state).map(s => s.n);
// Every rank loads rank 1's consolidated state (its tensors, as arrays, through an object broadcast).
const wire = dist.broadcastObject(sd && { state: Object.fromEntries(Object.entries(sd.state).map(([k, s]) =>
  [k, { n: s.n, last: s.last.toArray().flat(Infinity), shape: s.last.shape }])), param_groups: sd.param_groups }, 1);
for (const s of Object.values(wire.state)) { s.last = tensor.fromArray(s.last, s.shape, "float32"); delete s.shape; }
const saved = net.parameters().map(p => p.clone().keep());
train(opt);
const after = net.parameters().map(p => p.toArray());
tensor.noGrad(() => net.parameters().forEach((p, i) => p.copy_(saved[i])));
const again = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: Plain, lr: 0.5, logMemory: false });
again.loadStateDict(wire);
const n = again.optim.paramGroups[0].params.map(p => again.optim.state.get(p).n);
train(again);
const same = JSON.stringify(net.parameters().map(p => p.toArray())) === JSON.stringify(after);
console.log(JSON.stringify({ counts, lr: again.paramGroups[0].lr, n, same }));`
	got, err := runJob(t, 2, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The greedy partition: the 8x4 weight on rank 0; the 2x8 weight and
	// both biases on rank 1.
	want := []string{`[0] {"counts":null,"lr":0.05,"n":[3],"same":true}`, `[1] {"counts":[3,3,3,3],"lr":0.05,"n":[3,3,3],"same":true}`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, c := range []struct{ src, want string }{
		{`new Plain([], { lr: 1 })`, "empty parameter list"},
		{`new Plain(net.parameters(), {})`, "required option lr"},
		{`new Plain([net.weight, net.weight], { lr: 1 })`, "more than one parameter group"},
		{`new Plain([net.weight.mul(2)], { lr: 1 })`, "non-leaf"},
		{`new Plain(net.parameters(), { lr: 1 }).loadStateDict({ state: {}, param_groups: [] })`, "0 parameter groups, the optimizer 1"},
		{`new (class extends optim.Optimizer {})(net.parameters()).step()`, "step is not implemented"},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: Plain, lr: 1, stage: 2 })`, "greedy partition of stage 1"},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: Plain, lr: 1 }).stateDict()`, "consolidateStateDict(to) on every rank first"},
		{`optim.lrScheduler.StepLR(new Plain(net.parameters(), { lr: 1 }), { stepSize: 1 })`, "not one written in JavaScript"},
	} {
		src := `const { tensor, nn, optim, dist, zero } = require("zeroeng"); const net = nn.Linear(2, 2);
` + optimizerClass + c.src
		_, err := runJob(t, 1, src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.src, err, c.want)
		}
	}
}

// TestOptimizerClassJoin: uneven inputs under dist.join with ZeRO over a
// class written in JavaScript give what the built-in SGD gives (which
// TestParityWithPyTorch checks against PyTorch).
func TestOptimizerClassJoin(t *testing.T) {
	src := `const { tensor, nn, optim, dist, zero } = require("zeroeng");
` + optimizerClass + `
tensor.manualSeed(0);
const net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2));
const model = nn.parallel.DistributedDataParallel(net);
const opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: OPTIMIZER, lr: 0.05, logMemory: false });
dist.join([model, opt], () => {
  for (let i = 0; i < 2 + 2 * dist.rank; i++) {
    opt.zeroGrad();
    model.forward(tensor.ones([2, 4]).mul(i + dist.rank)).square().sum().backward();
    opt.step();
  }
});
console.log(JSON.stringify(net.parameters().map(p => p.toArray().flat())));`
	builtin, err := runJob(t, 3, strings.Replace(src, "OPTIMIZER", `"sgd"`, 1), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	class, err := runJob(t, 3, strings.Replace(src, "OPTIMIZER", "Plain", 1), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for rank := range builtin {
		if err := closeJSON(strings.TrimPrefix(class[rank], fmt.Sprintf("[%d] ", rank)), strings.TrimPrefix(builtin[rank], fmt.Sprintf("[%d] ", rank))); err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
	}
}

// TestZeroStage3FromJS: zero.fullyShard on each layer and then the model,
// and a stage-3 ZeroRedundancyOptimizer, train the same weights as one
// rank on the whole batch; outside withFullParams a parameter cannot be
// read, and says why.
func TestZeroStage3FromJS(t *testing.T) {
	plain := strings.NewReplacer("WRAP", "model = net", "OPT", `opt = optim.AdamW(net.parameters(), { lr: 0.01 })`, "SETUP", "", "CHECK", "", "STEP", plainStep).Replace(zeroScript)
	want, err := runJob(t, 1, plain, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const print = `console.log(JSON.stringify(net.parameters().map(p => p.toArray().flat())));`
	check := `let why = "";
try { net[0].weight.toArray(); } catch (e) { why = e.message; }
if (!why.includes("parameter of zero unit 0, which ZeRO stage 3 shards")) throw new Error("reading a sharded parameter: " + why);
opt.withFullParams(() => { ` + print + ` });`
	// The template declares "const OPT;": the units are marked in a comma
	// expression before the optimizer is made.
	units := `zero.fullyShard(net[0]), zero.fullyShard(net[2]), zero.fullyShard(net, { reshardAfterForward: false }),`
	zopt := func(extra string) string {
		return `opt = (` + units + ` zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", lr: 0.01, logMemory: false, stage: 3` + extra + ` }))`
	}
	for _, c := range []struct{ name, opt, step string }{
		{"units", zopt(""), plainStep},
		{"no prefetch", zopt(", limitAllGathers: 1"), plainStep},
		{"offloaded", zopt(`, offload: "cpu"`) + `; if (opt.options.stage !== 3) throw new Error("stage")`, plainStep},
		{"kept until backward", strings.ReplaceAll(zopt(""), "zero.fullyShard(net[0])", "zero.fullyShard(net[0], { reshardAfterForward: false })"), plainStep},
		{"groups and a closure", `opt = (` + units + ` zero.ZeroRedundancyOptimizer([{ params: net.parameters().slice(0, 2) }, { params: net.parameters().slice(2), lr: 0.01 }], { optimizer: "adamw", lr: 0.01, logMemory: false, stage: 3 })); const closure = true`, closureStep},
	} {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				src := strings.NewReplacer("WRAP", "model = net", "OPT", c.opt, "SETUP", "", "CHECK", check, "STEP", c.step).Replace(zeroScript)
				src = strings.Replace(src, print+"\n", "", 1) // the script's own print reads outside withFullParams
				got, err := runJob(t, n, src, dist.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != n {
					t.Fatalf("%d lines from %d ranks: %q", len(got), n, got)
				}
				for rank, line := range got {
					line = strings.TrimPrefix(line, fmt.Sprintf("[%d] ", rank))
					if err := closeJSON(line, want[0]); err != nil {
						t.Errorf("rank %d: %v", rank, err)
					}
				}
			})
		}
	}
	// Units are marked before the optimizer is made, and only once.
	for _, c := range []struct{ src, want string }{
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", stage: 3 })`, "call zero.fullyShard on each block"},
		{`zero.fullyShard(net); zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", stage: 3, logMemory: false }); zero.fullyShard(net[0])`, "the stage-3 optimizer is made already"},
		{`zero.fullyShard(net); zero.fullyShard(net)`, "is a unit already"},
		{`zero.fullyShard(net, { reshard_after_forward: false })`, "did you mean reshardAfterForward?"},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", stage: 2, offload: "nvme" })`, `offload must be "cpu" or "none", got "nvme"`},
		{`zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", offload: "cpu" })`, "offload needs stage 2 or 3"},
	} {
		_, err := runJob(t, 1, `const { nn, zero } = require("zeroeng"); const net = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1)); `+c.src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
}

// TestZeroStage3StateDict: under stage 3 model.stateDict() is collective
// and returns whole copies on every rank, and loadStateDict writes every
// rank's slices, as FSDP's full state dict.
func TestZeroStage3StateDict(t *testing.T) {
	src := `const { tensor, nn, zero } = require("zeroeng");
tensor.manualSeed(1);
const net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3));
zero.fullyShard(net[0]); zero.fullyShard(net[2]); zero.fullyShard(net);
const opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", lr: 0.1, stage: 3, logMemory: false });
const sd = net.stateDict();
const flat = o => Object.keys(o).map(k => o[k].toArray().flat()).flat();
const before = flat(sd);
if (Object.keys(sd).join() !== "0.weight,0.bias,2.weight,2.bias" || before.length !== 6 * 8 + 8 + 8 * 3 + 3) throw new Error("state dict " + Object.keys(sd));
opt.zeroGrad();
net.forward(tensor.ones([2, 6])).sum().backward();
opt.step();
const after = flat(net.stateDict());
if (after.every((v, i) => v === before[i])) throw new Error("the step changed nothing");
net.loadStateDict(sd);
const back = flat(net.stateDict());
if (!back.every((v, i) => v === before[i])) throw new Error("loadStateDict did not restore the weights");
console.log("ok");`
	lines, err := runJob(t, 2, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(lines, " ") != "[0] ok [1] ok" {
		t.Errorf("output %q", lines)
	}
}
