package script

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/internal/hostmem"
)

// evalCase runs src (a script body) and compares what it prints.
type evalCase struct {
	name string
	src  string
	want string // printed output, exactly (trimmed)
	err  string // when set, the run must fail with an error containing it
}

func runCases(t *testing.T, cases []evalCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := "const { tensor, nn, optim, io, dist } = require('zeroeng');\nconst F = nn.functional;\n" + c.src
			dir := t.TempDir()
			t.Chdir(dir) // files the case writes stay in its directory
			out, err := runScript(t, dir, "case.js", src, Options{AutoRelease: true})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q (output %q)", err, c.err, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\noutput:\n%s", err, out)
			}
			if got := strings.TrimSpace(out); got != c.want {
				t.Fatalf("printed\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestTensorAPI(t *testing.T) {
	runCases(t, []evalCase{
		{"fromArray nested", `const t = tensor.fromArray([[1, 2], [3, 4]]); console.log(t.shape, t.dtype, t.toArray())`,
			"[ 2, 2 ] int64 [ [ 1, 2 ], [ 3, 4 ] ]", ""},
		{"fromArray flat with shape and dtype", `console.log(tensor.fromArray([1, 2, 3, 4, 5, 6], [2, 3], "float32"))`,
			"tensor([[1., 2., 3.],\n        [4., 5., 6.]])", ""},
		{"fromArray options", `console.log(tensor.fromArray([0.5, 1], { dtype: "float64" }).dtype)`, "float64", ""},
		{"typed array shares memory", `const a = new Float32Array([1, 2, 3]); const t = tensor.fromArray(a); a[0] = 10; console.log(t.toArray())`,
			"[ 10, 2, 3 ]", ""},
		{"typedArray view", `const t = tensor.zeros([3]); const v = t.typedArray(); v[1] = 5; console.log(t.toArray(), v instanceof Float32Array)`,
			"[ 0, 5, 0 ] true", ""},
		{"arithmetic with numbers and tensors", `const t = tensor.fromArray([1, 2, 3], { dtype: "float32" }); console.log(t.add(1).mul(t).sub(2).div(2).toArray())`,
			"[ 0, 2, 5 ]", ""},
		{"reductions", `const t = tensor.arange(6).reshape(2, 3).float(); console.log(t.sum().item(), t.sum(1).toArray(), t.mean([0], true).shape, t.max().item())`,
			"15 [ 3, 12 ] [ 1, 3 ] 5", ""},
		{"max with dim", `const [v, i] = tensor.fromArray([[1, 5], [7, 2]]).max(1); console.log(v.toArray(), i.toArray())`,
			"[ 5, 7 ] [ 1, 0 ]", ""},
		{"var unbiased and correction", `const t = tensor.fromArray([1, 2, 3, 4], {dtype: "float32"}); console.log(t.var().item().toFixed(4), t.var(0, { correction: 0 }).item())`,
			"1.6667 1.25", ""},
		{"views", `const t = tensor.arange(24).reshape([2, 3, 4]); console.log(t.permute(2, 0, 1).shape, t.transpose(0, 2).contiguous().view(-1).shape, t.narrow(1, 1, 2).shape, t.select(0, 1).shape, t.T.shape)`,
			"", "at most 2 dimensions"},
		{"views ok", `const t = tensor.arange(24).reshape([2, 3, 4]); console.log(t.permute(2, 0, 1).shape, t.transpose(0, 2).contiguous().view(-1).shape, t.narrow(1, 1, 2).shape, t.select(0, 1).shape, t.flatten(1).shape, t.unsqueeze(0).squeeze().shape)`,
			"[ 4, 2, 3 ] [ 24 ] [ 2, 2, 4 ] [ 3, 4 ] [ 2, 12 ] [ 2, 3, 4 ]", ""},
		{"cat stack split chunk", `const a = tensor.ones([2, 2]); const parts = tensor.cat([a, a], 1).split(1, 1); console.log(parts.length, tensor.stack([a, a]).shape, a.chunk(2, 0)[1].shape)`,
			"4 [ 2, 2, 2 ] [ 1, 2 ]", ""},
		{"comparisons and where", `const t = tensor.fromArray([-1, 2, -3], {dtype: "float32"}); console.log(tensor.where(t.gt(0), t, 0).toArray(), t.lt(0).toArray())`,
			"[ 0, 2, 0 ] [ true, false, true ]", ""},
		{"autograd", `const w = tensor.fromArray([1, 2, 3], {dtype: "float32"}).requiresGrad_(); w.mul(w).sum().backward(); console.log(w.grad.toArray(), w.isLeaf, w.requiresGrad)`,
			"[ 2, 4, 6 ] true true", ""},
		{"noGrad", `const w = tensor.ones([2]).requiresGrad_(); const y = tensor.noGrad(() => w.mul(2)); console.log(y.requiresGrad, tensor.isGradEnabled())`,
			"false true", ""},
		{"seeded randn reproduces torch", `tensor.manualSeed(0); console.log(tensor.randn([3]).toArray().map(v => v.toFixed(4)).join(" "), tensor.randn([2], { seed: 0 }).toArray()[0].toFixed(4))`,
			"1.5410 -0.2934 -2.1788 1.5410", ""},
		{"randint randperm arange", `console.log(tensor.randint(0, 10, [4]).dtype, tensor.isTensor(tensor.randperm(5)) && tensor.randperm(5).sort().values.toArray().join() === "0,1,2,3,4", tensor.arange(1, 4).toArray(), tensor.arange(0, 1, 0.5).toArray())`,
			"int64 true [ 1, 2, 3 ] [ 0, 0.5 ]", ""},
		{"item of bool and int", `console.log(tensor.fromArray([3]).item(), tensor.fromArray([1]).gt(0).item())`, "3 true", ""},
		{"printing", `console.log(String(tensor.zeros([2], {dtype: "float64"})), tensor.fromArray([1.5]).requiresGrad_())`,
			"tensor([0., 0.], dtype=torch.float64) tensor([1.5000], requires_grad=True)", ""},
		{"softmax and cross entropy", `const x = tensor.fromArray([[1, 2, 3]], {dtype: "float32"}); console.log(x.softmax(1).sum().item().toFixed(6), F.crossEntropy(x, tensor.fromArray([2])).item().toFixed(4))`,
			"1.000000 0.4076", ""},
		{"in place", `const t = tensor.zeros([3]); t.fill_(2).add_(1).mul_(2); t.add_(tensor.ones([3]), { alpha: 3 }); console.log(t.toArray())`,
			"[ 9, 9, 9 ]", ""},
		{"scope keeps what it returns", `const before = tensor.stats().liveTensors; const y = tensor.scope(() => { const a = tensor.ones([1000]); return a.mul(2); }); console.log(tensor.stats().liveTensors - before, y.sum().item())`,
			"1 2000", ""},
		{"scope returns objects of tensors", `const {a, b} = tensor.scope(() => ({ a: tensor.ones([2]), b: [tensor.zeros([1])] })); console.log(a.toArray(), b[0].toArray())`,
			"[ 1, 1 ] [ 0 ]", ""},
		{"engine error names op and shapes", `tensor.ones([8, 3]).matmul(tensor.ones([4, 5]))`, "", "matmul: shapes [8 3] and [4 5] cannot be multiplied"},
		{"engine error position", "\n\ntensor.ones([2]).view(3)", "", "case.js:5:"},
		{"wrong argument type", `tensor.ones([2]).add("x")`, "", "tensor.add: argument must be a number, got \"x\""},
		{"unknown dtype", `tensor.zeros([2], { dtype: "float8" })`, "", "unknown dtype \"float8\""},
		{"index out of range", `tensor.ones([3, 2]).indexSelect(0, tensor.fromArray([5]))`, "", "5"},
		{"released tensor", `const t = tensor.ones([2]); t.release(); t.sum()`, "", "released by tensor.release()"},
		{"ragged array", `tensor.fromArray([[1, 2], [3]])`, "", "ragged"},
		{"method on non-tensor", `const f = tensor.ones([1]).sum; f.call({})`, "", "not a tensor"},
	})
}

func TestModulesAndOptimizers(t *testing.T) {
	runCases(t, []evalCase{
		{"names follow PyTorch", `
class Block extends nn.Module {
  constructor() { super(); this.ln1 = nn.LayerNorm(4); this.fc = nn.Linear(4, 4, false); this.registerBuffer("mask", tensor.ones([4])); }
  forward(x) { return this.fc.forward(this.ln1.forward(x)); }
}
class Net extends nn.Module {
  constructor() { super(); this.emb = nn.Embedding(10, 4); this.blocks = nn.ModuleList([new Block(), new Block()]); this.head = nn.Parameter(tensor.zeros([4])); }
}
const net = new Net();
console.log(Object.keys(net.stateDict()).join(" "));
console.log(net.parameters().length, net.numParameters());`,
			// PyTorch's order: a module's parameters, its buffers, then its
			// children (so blocks.0.mask precedes blocks.0.ln1.weight).
			"head emb.weight blocks.0.mask blocks.0.ln1.weight blocks.0.ln1.bias blocks.0.fc.weight blocks.1.mask blocks.1.ln1.weight blocks.1.ln1.bias blocks.1.fc.weight\n8 92", ""},
		{"repr", `console.log(String(nn.Sequential(nn.Linear(2, 3), nn.GELU("tanh"), nn.Dropout(0.1))))`,
			"Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n  (1): GELU(approximate='tanh')\n  (2): Dropout(p=0.1, inplace=False)\n)", ""},
		{"train and eval reach dropout", `const m = nn.Sequential(nn.Dropout(0.5)); m.eval(); const x = tensor.ones([100]); console.log(m.forward(x).sum().item(), m[0].training)`,
			"100 false", ""},
		{"loadStateDict strict errors", `const m = nn.Linear(2, 2); m.loadStateDict({ weight: tensor.zeros([3, 3]), extra: tensor.zeros([1]) })`, "",
			`Missing key(s) in state_dict: "bias"`},
		{"optimizer param groups are live", `const m = nn.Linear(2, 2); const opt = optim.SGD(m.parameters(), { lr: 0.1, momentum: 0.9 }); opt.paramGroups[0].lr = 0.5; console.log(opt.paramGroups[0].lr, opt.paramGroups[0].momentum, opt.paramGroups[0].params.length)`,
			"0.5 0.9 2", ""},
		{"groups and scheduler", `const a = nn.Linear(2, 2), b = nn.Linear(2, 1); const opt = optim.AdamW([{ params: a.parameters() }, { params: b.parameters(), lr: 0.1 }], { lr: 0.01 });
const s = optim.lrScheduler.StepLR(opt, { stepSize: 1, gamma: 0.5 }); opt.step(); s.step(); console.log(s.getLastLr().join(" "))`,
			"0.005 0.05", ""},
		{"lambda scheduler", `const opt = optim.SGD(nn.Linear(1, 1).parameters(), { lr: 1 }); const s = optim.lrScheduler.LambdaLR(opt, step => 1 / (step + 1)); s.step(); s.step(); console.log(opt.paramGroups[0].lr.toFixed(4))`,
			"0.3333", ""},
		{"optimizer state dict layout", `const m = nn.Linear(2, 1); const opt = optim.Adam(m.parameters()); m.forward(tensor.ones([1, 2])).sum().backward(); opt.step(); const sd = opt.stateDict(); console.log(Object.keys(sd.state[0]).sort().join(" "), sd.param_groups[0].lr, sd.param_groups[0].params.join(","))`,
			"exp_avg exp_avg_sq step 0.001 0,1", ""},
		{"sgd needs lr", `optim.SGD(nn.Linear(1, 1).parameters(), {})`, "", "lr is required"},
		{"a scheduler of something else", `optim.lrScheduler.StepLR({}, { stepSize: 1 })`, "", "optim.lrScheduler.StepLR: expects an optimizer, got"},
		{"RMSprop, Adagrad and Adamax", `const m = nn.Linear(2, 1); const x = tensor.ones([1, 2]);
const opts = [optim.RMSprop(m.parameters(), { momentum: 0.9, centered: true }), optim.Adagrad(m.parameters(), { lrDecay: 0.1 }), optim.Adamax(m.parameters(), { betas: [0.8, 0.9] })];
const out = opts.map(o => { o.zeroGrad(); m.forward(x).sum().backward(); o.step(); const sd = o.stateDict(); return Object.keys(sd.state[0]).sort().join(",") + " " + o.paramGroups[0].lr; });
console.log(out.join(" | "), opts[0].paramGroups[0].alpha, opts[1].paramGroups[0].initialAccumulatorValue, opts[2].paramGroups[0].betas.join())`,
			"grad_avg,momentum_buffer,square_avg,step 0.01 | step,sum 0.01 | exp_avg,exp_inf,step 0.002 0.99 0 0.8,0.9", ""},
		{"snake_case option", `optim.AdamW(nn.Linear(1, 1).parameters(), { lr: 0.1, weight_decay: 0.1 })`, "",
			`optim.AdamW: unknown option "weight_decay" for AdamW (did you mean weightDecay?); its options are lr, betas, eps, weightDecay, amsgrad, maximize`},
		{"misspelled option", `optim.SGD(nn.Linear(1, 1).parameters(), { lr: 0.1, momentm: 0.9 })`, "", `unknown option "momentm" for SGD (did you mean momentum?)`},
		{"another optimizer's option", `optim.Adam(nn.Linear(1, 1).parameters(), { momentum: 0.9 })`, "", `unknown option "momentum" for Adam`},
		{"a group's own numbers are kept", `const opt = optim.SGD([{ params: nn.Linear(1, 1).parameters(), lrScale: 2 }], { lr: 0.1 }); console.log(opt.paramGroups[0].lrScale)`, "2", ""},
		{"a group's misspelled option", `optim.SGD([{ params: nn.Linear(1, 1).parameters(), weight_decay: 0.1 }], { lr: 0.1 })`, "", `did you mean weightDecay?`},
		{"a group's foreign option", `optim.Adam([{ params: nn.Linear(1, 1).parameters(), nesterov: true }])`, "", `unknown option "nesterov" for Adam`},
		{"setting a group's option", `const opt = optim.SGD(nn.Linear(1, 1).parameters(), { lr: 0.1 }); opt.paramGroups[0].momentun = 0.9`, "", `did you mean momentum?`},
		{"step(closure) calls the closure once, with grad, and returns its loss", `const m = nn.Linear(2, 1); const opt = optim.SGD(m.parameters(), { lr: 0.1 });
let calls = 0, grad;
const ret = tensor.noGrad(() => opt.step(() => { calls++; grad = tensor.isGradEnabled(); opt.zeroGrad(); const l = m.forward(tensor.ones([1, 2])).sum(); l.backward(); return l; }));
console.log(calls, grad, tensor.isTensor(ret), tensor.isGradEnabled(), opt.step(), opt.step(null), opt.step(() => 42))`,
			"1 true true true undefined undefined 42", ""},
		{"step(closure) steps as closure() then step()", `tensor.manualSeed(1); const a = nn.Linear(3, 2); tensor.manualSeed(1); const b = nn.Linear(3, 2);
const oa = optim.Adam(a.parameters(), { lr: 0.1 }), ob = optim.Adam(b.parameters(), { lr: 0.1 }); const x = tensor.randn([4, 3]);
for (let i = 0; i < 3; i++) {
  oa.zeroGrad(); a.forward(x).pow(2).mean().backward(); oa.step();
  ob.step(() => { ob.zeroGrad(); const l = b.forward(x).pow(2).mean(); l.backward(); return l; });
}
console.log(a.weight.sub(b.weight).abs().max().item(), a.bias.sub(b.bias).abs().max().item())`, "0 0", ""},
		{"step with a non-function closure", `optim.SGD(nn.Linear(1, 1).parameters(), { lr: 1 }).step(1)`, "", "optimizer.step: the closure must be a function that returns the loss, got 1"},
		{"step with two arguments", `optim.SGD(nn.Linear(1, 1).parameters(), { lr: 1 }).step(() => 0, 1)`, "", "optimizer.step: takes at most one argument, a closure, got 2"},
		{"wrong types are TypeErrors, bad values RangeErrors", `const classOf = f => { try { f(); return "none" } catch (e) { return e.constructor.name } };
const opt = optim.SGD(nn.Linear(1, 1).parameters(), { lr: 1 });
console.log(classOf(() => opt.step(1)), classOf(() => optim.SGD([], { lr: 1 })), classOf(() => dist.commHooks.PowerSGDState({ startPowerSGDIter: 1 })),
  classOf(() => dist.commHooks.PowerSGDState({ start_powerSGD_iter: 2 })), classOf(() => tensor.ones([2]).size(3)))`,
			"TypeError RangeError RangeError TypeError RangeError", ""},
		{"a closure's exception propagates", `optim.SGD(nn.Linear(1, 1).parameters(), { lr: 1 }).step(() => { throw new RangeError("in the closure") })`, "", "in the closure"},
		{"clip grad norm", `const p = nn.Parameter(tensor.fromArray([3, 4], {dtype: "float32"})); p.mul(p).sum().backward(); console.log(nn.utils.clipGradNorm_([p], 1).toFixed(1), p.grad.toArray().map(v => v.toFixed(2)).join(" "))`,
			"10.0 0.60 0.80", ""},
		{"save and load", `const m = nn.Linear(2, 2); io.saveSafetensors("m.safetensors", m.stateDict()); const sd = io.loadSafetensors("m.safetensors"); const m2 = nn.Linear(2, 2); m2.loadStateDict(sd); console.log(m2.weight.eq(m.weight).all().item() == true, m2.weight.sub(m.weight).abs().sum().item())`,
			"true 0", ""},
		{"module.to(bfloat16) keeps parameter identity", `const m = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3)); const before = m.parameters(); const opt = optim.SGD(before, { lr: 0.1 });
console.log(m.bfloat16() === m, m.parameters().every((p, i) => p === before[i] && p.dtype === "bfloat16" && p.requiresGrad), m.forward(tensor.ones([1, 2]).bfloat16()).dtype, m.float()[0].weight.dtype)`,
			"true true bfloat16 float32", ""},
		{"module.to accepts the rank's device and {dtype}", `const m = nn.Linear(1, 1); m.to("cpu").to({ dtype: "float16" }); console.log(m.weight.dtype)`, "float16", ""},
		{"module.to another device", `nn.Linear(1, 1).to("cuda:1")`, "", `Module.to("cuda:1"): this rank runs on cpu`},
		{"module.to an integer dtype", `nn.Linear(1, 1).to("int64")`, "", "only a floating-point dtype"},
		{"bfloat16 training keeps float32 master weights", `tensor.manualSeed(0);
const m = nn.Linear(4, 1).bfloat16(); const w0 = m.weight.float(); const opt = optim.AdamW(m.parameters(), { lr: 1e-3, weightDecay: 0 });
for (let i = 0; i < 3; i++) { opt.zeroGrad(); m.forward(tensor.ones([2, 4]).bfloat16()).sum().backward(); opt.step(); }
const st = opt.stateDict().state[0];
console.log(Object.keys(st).sort().join(" "), st.master_param.dtype, st.exp_avg.dtype, st.master_param.sub(w0).abs().max().item().toFixed(4), m.weight.sub(st.master_param).abs().max().item() <= 0.004)`,
			// Three Adam steps of lr 1e-3 move each master weight by 0.003; the
			// bfloat16 weight is the master rounded, within half a bfloat16 unit
			// (at most 0.0039 for |w| < 1).
			"exp_avg exp_avg_sq master_param step float32 float32 0.0030 true", ""},
		{"layers made without new inside a module's constructor", `class A extends nn.Module { constructor() { super(); this.l = nn.Linear(2, 3); this.n = nn.LayerNorm(3); } forward(x) { return this.n.forward(this.l.forward(x)); } }
const a = new A(); console.log(String(a.l), a.l instanceof nn.Linear, a.forward(tensor.ones([1, 2])).shape)`,
			"Linear(in_features=2, out_features=3, bias=True) true [ 1, 3 ]", ""},
		{"subclassing a layer", `class Scaled extends nn.Linear { forward(x) { return super.forward(x).mul(2); } } const s = new Scaled(2, 1); console.log(s instanceof nn.Linear, s instanceof nn.Module, s.forward(tensor.ones([1, 2])).shape)`,
			"true true [ 1, 1 ]", ""},
	})
}

func TestScriptErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, src string
		want      []string
	}{
		{"syntax", "let x = ;\n", []string{"case.js:1:9", "SyntaxError"}},
		{"thrown", "function f() { throw new RangeError('bad value'); }\nf();\n", []string{"case.js:1:22: RangeError: bad value", "at f (", "case.js:2:2"}},
		{"engine error in a module", "const { nn, tensor } = require('zeroeng');\nconst m = nn.Linear(3, 2);\nm.forward(tensor.ones([4, 5]));\n",
			[]string{"case.js:3:", "linear: input of shape [4 5] does not match weight of shape [2 3]"}},
		{"require missing", "require('./nope.js')\n", []string{"Cannot find module", "nope.js", "case.js:1:8"}},
		{"process.exit", "process.exit(3)\n", []string{"process.exit(3)"}},
		{"performance.now with an argument", "performance.now('ms')\n", []string{"case.js:1:", "performance.now: takes no arguments, got 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runScript(t, dir, "case.js", c.src, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if strings.Contains(msg, "goroutine") || strings.Contains(msg, ".go:") {
				t.Errorf("error shows Go internals: %s", msg)
			}
		})
	}
}

func TestRequireRelativeModulesAndArgs(t *testing.T) {
	dir := t.TempDir()
	if _, err := runScript(t, dir, "lib.js", "module.exports = { twice: x => 2 * x };", Options{}); err != nil {
		t.Fatal(err)
	}
	out, err := runScript(t, dir, "main.js", "const { twice } = require('./lib.js'); console.log(twice(21), process.argv.slice(2).join(','), typeof process.env.PATH)", Options{Args: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "42 a,b string" {
		t.Fatalf("output %q", out)
	}
}

// TestPerformanceNow: performance.now() is Node's: milliseconds with a
// fraction, never going back, that measure what Date.now measures, and
// timeOrigin + now() is the Unix time in milliseconds.
func TestPerformanceNow(t *testing.T) {
	out, err := runScript(t, t.TempDir(), "main.js", `
// Each reading of performance is bracketed by Date.now's (whole
// milliseconds), so that a pause between two statements cannot fail it.
const a = Date.now(), t0 = performance.now(), b = Date.now();
let prev = t0, back = 0, fractional = 0;
while (Date.now() - b < 30) {
  const t = performance.now();
  if (t < prev) back++;
  if (!Number.isInteger(t)) fractional++;
  prev = t;
}
const c = Date.now(), elapsed = performance.now() - t0, e = Date.now();
const elapsedOK = elapsed > c - b - 1 && elapsed < e - a + 1;
const f = Date.now(), now = performance.timeOrigin + performance.now(), g = Date.now();
const originOK = now > f - 1 && now < g + 1;
console.log(back, fractional > 0, elapsedOK, originOK)`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out); got != "0 true true true" {
		t.Fatalf("went back, whole milliseconds only, elapsed unlike Date.now's, origin off: %q (want 0 true true true)", got)
	}
}

func TestRunStringSyntaxError(t *testing.T) {
	r, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.RunString("snippet", "1 +")
	if err == nil || err.Error() != "snippet:1:4: SyntaxError: Unexpected end of input" {
		t.Fatalf("error %q", err)
	}
}

// TestReprMatchesPyTorch prints the tensors of testdata/repr/repr.json
// (made by gen_repr.py with PyTorch 1.13) and compares the text with
// PyTorch's repr: number style, alignment, line wrapping at 80 columns and
// summarisation.
func TestReprMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/repr/repr.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name   string
		Shape  []int
		DType  string
		Values []any // numbers, booleans, and "NaN", "Infinity", "-Infinity"
		Repr   string
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			shape, _ := json.Marshal(c.Shape)
			elems := make([]string, len(c.Values))
			for i, v := range c.Values {
				elems[i] = fmt.Sprint(v) // a string is NaN, Infinity or -Infinity: JavaScript names
			}
			values := "[" + strings.Join(elems, ", ") + "]"
			src := fmt.Sprintf("const { tensor } = require('zeroeng');\nconsole.log(tensor.fromArray(%s, %s, %q));", values, shape, c.DType)
			out, err := runScript(t, t.TempDir(), "repr.js", src, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSuffix(out, "\n"); got != c.Repr {
				t.Errorf("printed\n%s\nPyTorch prints\n%s", got, c.Repr)
			}
		})
	}
}

// TestTensorLargerThanMemory: a tensor the machine cannot hold is a
// script error at the line that asked for it, not Go's fatal
// out-of-memory with its trace.
func TestTensorLargerThanMemory(t *testing.T) {
	avail, ok := hostmem.Available()
	if !ok {
		t.Skip("the memory available is unknown here (no /proc/meminfo)")
	}
	rows := (avail+1<<30)/16 + 1
	src := fmt.Sprintf("const { tensor } = require('zeroeng');\nconst t = tensor.zeros([%d, 4]);\n", rows)
	_, err := runScript(t, t.TempDir(), "case.js", src, Options{})
	if err == nil || !strings.Contains(err.Error(), "case.js:2:") || !strings.Contains(err.Error(), "of memory available") {
		t.Fatalf("err = %v", err)
	}
}

// TestInPlaceCasts: an in-place op whose result type cannot be cast to the
// tensor's own is PyTorch's error, not a silent truncation.
func TestInPlaceCasts(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`tensor.tensor([1, 2]).add_(0.5)`, "result type float32 can't be cast to the desired output type int64"},
		{`tensor.tensor([1, 2]).add_(tensor.tensor([0.5, 1.5]))`, "result type float32 can't be cast to the desired output type int64"},
		{`tensor.tensor([1, 2]).add_(1, { alpha: 0.5 })`, "can't be cast to the desired output type int64"},
		{`tensor.tensor([1, 2]).mul_(1.5)`, "result type float32 can't be cast to the desired output type int64"},
		{`tensor.tensor([true]).add_(1)`, "can't be cast to the desired output type bool"},
	} {
		_, err := runJob(t, 1, `const { tensor } = require("zeroeng"); `+c.src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
	lines, err := runJob(t, 1, `const { tensor } = require("zeroeng"); console.log(tensor.tensor([1, 2]).add_(3).mul_(2).toArray().join(","), tensor.ones([2]).add_(tensor.tensor([1, 2])).toArray().join(","), tensor.tensor([[true], [false]]).dtype)`, dist.Options{})
	if err != nil || strings.Join(lines, "") != "8,10 2,3 bool" {
		t.Errorf("allowed in-place ops: %q, %v", lines, err)
	}
}
