package script

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// TestUnknownOptionKeys: every options object of the host API is checked
// against the keys its function takes (the cases the issue found silently
// ignored, and one per kind of function), and the keys it takes work.
func TestUnknownOptionKeys(t *testing.T) {
	var cases []evalCase
	for _, c := range []struct{ src, err string }{
		{`optim.AdamW(nn.Linear(2, 2).parameters(), { lr: 0.1, weight_decay: 0.1 })`, `optim.AdamW: unknown option "weight_decay" for AdamW (did you mean weightDecay?)`},
		{`optim.SGD(nn.Linear(2, 2).parameters(), { lr: 0.1, momentm: 0.9 })`, `(did you mean momentum?)`},
		{`nn.Linear(4, 8, { bais: false })`, `nn.Linear: unknown option "bais" (did you mean bias?)`},
		{`tensor.randn([2, 3], { requiresgrad: true })`, `tensor.randn: unknown option "requiresgrad" (did you mean requiresGrad?)`},
		{`tensor.zeros([2], { dtyp: "float64" })`, `tensor.zeros: unknown option "dtyp" (did you mean dtype?)`},
		{`optim.lrScheduler.StepLR(optim.SGD(nn.Linear(2, 2).parameters(), { lr: 1 }), { step_size: 2 })`, `(did you mean stepSize?)`},
		{`nn.LayerNorm(4, { elementwise_affine: false })`, `(did you mean elementwiseAffine?)`},
		{`nn.Embedding(4, 3, { padding_idx: 0 })`, `(did you mean paddingIdx?)`},
		{`nn.CrossEntropyLoss({ label_smoothing: 0.1 })`, `(did you mean labelSmoothing?)`},
		{`F.crossEntropy(tensor.ones([2, 3]), tensor.zeros([2], { dtype: "int64" }), { ignore_index: 1 })`, `(did you mean ignoreIndex?)`},
		{`tensor.ones([2]).sum({ dim: 0, keepdims: true })`, `tensor.sum: unknown option "keepdims" (did you mean keepdim?)`},
		{`tensor.ones([2, 2]).std({ dim: 0, unbiassed: false })`, `(did you mean unbiased?)`},
		{`tensor.arange(0, 4, 1, { dtyp: "int64" })`, `(did you mean dtype?)`},
		{`tensor.fromArray([1, 2], { dtpye: "float64" })`, `tensor.fromArray: unknown option "dtpye"`},
		{`tensor.ones([2]).requiresGrad_().sum().backward({ retain_graph: true })`, `(did you mean retainGraph?)`},
		{`nn.init.normal_(nn.Linear(2, 2).weight, { mean: 0, sd: 1 })`, `(did you mean std?)`},
		{`nn.Dropout({ P: 0.1 })`, `(did you mean p?)`},
	} {
		cases = append(cases, evalCase{name: c.src, src: c.src + ";", err: c.err})
	}
	cases = append(cases, evalCase{name: "the keys that are taken", src: `const l = nn.Linear(4, 8, { bias: false });
const r = tensor.randn([2, 3], { requiresGrad: true, seed: 1 });
const ln = nn.LayerNorm(4, { eps: 1e-6, elementwiseAffine: false });
const d = nn.Dropout({ p: 0.25 });
const s = tensor.ones([2, 2]).sum({ dim: 0, keepdim: true });
console.log(l.bias, r.requiresGrad, r.isLeaf, ln.weight, ln.eps, d.p, s.shape.join("x"), tensor.zeros([1], { dtype: "float64", requiresGrad: true }).requiresGrad);`,
		want: "null true true null 1e-06 0.25 1x2 true"})
	runCases(t, cases)
}

// TestOperatorsOnTensors: JavaScript's arithmetic and comparisons on a
// tensor fail at once, naming the methods to use; text still works.
func TestOperatorsOnTensors(t *testing.T) {
	const want = "JavaScript's operators do not apply to tensors"
	runCases(t, []evalCase{
		{name: "x + 1", src: "const x = tensor.ones([2]); x + 1;", err: want},
		{name: "x - y", src: "const x = tensor.ones([2]); x - x;", err: want},
		{name: "x < 1", src: "const x = tensor.ones([2]); x < 1;", err: want},
		{name: "Number(x)", src: "Number(tensor.ones([1]));", err: want},
		{name: "text", src: "const x = tensor.ones([2]); console.log(`${x}` === String(x), x.toString());", want: "true tensor([1., 1.])"},
	})
}

// TestImportStatementHint: an ES module import or export names the
// CommonJS way scripts load zeroeng.
func TestImportStatementHint(t *testing.T) {
	for _, src := range []string{"import { tensor } from \"zeroeng\";\n", "const x = 1;\nexport default x;\n"} {
		_, err := runScript(t, t.TempDir(), "case.js", src, Options{})
		if err == nil || !strings.Contains(err.Error(), `require("zeroeng") instead of import`) {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// TestOptionsOfTheReview: the options objects a review found read
// without a check, or read wrong, and the errors it found reported out of
// order; each with what is taken (one case per item of the review, in its
// order).
func TestOptionsOfTheReview(t *testing.T) {
	const grad = `const l = nn.Linear(2, 1); l.forward(tensor.ones([1, 2])).sum().backward();
const show = () => console.log(l.weight.grad === null ? "none" : l.weight.grad.toArray().flat().join());
`
	const plain = `class Plain extends optim.Optimizer { constructor(p, o) { super(p, { lr: 1, ...o }); } step() {} }
`
	runCases(t, []evalCase{
		// 1. Module.zeroGrad: an options object is read, not taken as true.
		{name: "Module.zeroGrad({ setToNone: false })", src: grad + `l.zeroGrad({ setToNone: false }); show(); l.zeroGrad({ setToNone: true }); show();`, want: "0,0\nnone"},
		{name: "Module.zeroGrad(boolean)", src: grad + `l.zeroGrad(); show(); l.zeroGrad(true); show();`, want: "0,0\nnone"},
		{name: "Module.zeroGrad({ set_to_none })", src: grad + `l.zeroGrad({ set_to_none: true });`, err: `Module.zeroGrad: unknown option "set_to_none" (did you mean setToNone?)`},
		// 2. optim.Optimizer.zeroGrad checks its keys.
		{name: "Optimizer.zeroGrad({ set_to_none })", src: grad + plain + `new Plain(l.parameters()).zeroGrad({ set_to_none: true });`, err: `Plain.zeroGrad: unknown option "set_to_none" (did you mean setToNone?)`},
		{name: "Optimizer.zeroGrad({ setToNone })", src: grad + plain + `const o = new Plain(l.parameters()); o.zeroGrad({ setToNone: false }); show(); o.zeroGrad({ setToNone: true }); show();`, want: "0,0\nnone"},
		// 3. Module.to({ dtype, device }).
		{name: "Module.to({ device })", src: `const m = nn.Linear(1, 1); console.log(m.to({ device: "cpu" }) === m, m.weight.dtype);`, want: "true float32"},
		{name: "Module.to({ dtype, device })", src: `const m = nn.Linear(1, 1).to({ dtype: "float64", device: "cpu:0" }); console.log(m.weight.dtype, m.bias.dtype);`, want: "float64 float64"},
		{name: "Module.to({ dtpye })", src: `nn.Linear(1, 1).to({ dtpye: "float64" });`, err: `Module.to: unknown option "dtpye" (did you mean dtype?)`},
		{name: "Module.to({ device: another })", src: `nn.Linear(1, 1).to({ dtype: "float64", device: "cuda" });`, err: `Module.to("cuda"): this rank runs on cpu`},
		{name: "Module.to({})", src: `nn.Linear(1, 1).to({});`, err: `Module.to: expects a dtype ("bfloat16"), a device or { dtype, device }`},
		// 4. t.to({ dtype, device }) honours both; a device is the tensor's own.
		{name: "t.to({ dtype, device: another })", src: `tensor.ones([2]).to({ dtype: "float64", device: "cuda:0" });`, err: `tensor.to("cuda:0"): this rank runs on cpu`},
		{name: "t.to(another device)", src: `tensor.ones([2]).to("cuda");`, err: `tensor.to("cuda"): this rank runs on cpu`},
		{name: "t.to({ device: unknown })", src: `tensor.ones([2]).to({ device: "tpu" });`, err: `tensor.to: unknown device "tpu"`},
		{name: "t.to({ dtype, device })", src: `console.log(tensor.ones([2]).to({ dtype: "float64", device: "cpu" }).dtype);`, want: "float64"},
		{name: "t.to(device) is the tensor", src: `const x = tensor.ones([2], { requiresGrad: true });
const y = x.to("cpu"); y.mul(3).sum().backward();
console.log(y === x, x.to({ device: "cpu" }) === x, x.grad.toArray().join());`, want: "true true 3,3"},
		// 5. nn.GELU's options are checked when it is made.
		{name: "nn.GELU({ approximat })", src: `nn.GELU({ approximat: "tanh" });`, err: `nn.GELU: unknown option "approximat" (did you mean approximate?)`},
		{name: "nn.GELU's forms", src: `const x = tensor.fromArray([1]);
console.log(String(nn.GELU({ approximate: "tanh" })), String(nn.GELU("tanh")), String(nn.GELU()),
  nn.GELU({ approximate: "tanh" }).forward(x).item() === x.gelu("tanh").item());`, want: "GELU(approximate='tanh') GELU(approximate='tanh') GELU() true"},
		// 7. StepLR's stepSize is required.
		{name: "StepLR without stepSize", src: `optim.lrScheduler.StepLR(optim.SGD(nn.Linear(2, 2).parameters(), { lr: 1 }), { gamma: 0.5 });`, err: `optim.lrScheduler.StepLR: stepSize is required`},
		// 8. WarmupCosine's total is required; warmup and minRatio default to 0.
		{name: "WarmupCosine({})", src: `optim.lrScheduler.WarmupCosine(optim.SGD(nn.Linear(2, 2).parameters(), { lr: 1 }), {});`, err: `total is required`},
		{name: "WarmupCosine without total", src: `optim.lrScheduler.WarmupCosine(optim.SGD(nn.Linear(2, 2).parameters(), { lr: 1 }), { warmup: 2 });`, err: `total is required`},
		{name: "WarmupCosine({ total })", src: `const o = optim.SGD(nn.Linear(2, 2).parameters(), { lr: 1 });
const s = optim.lrScheduler.WarmupCosine(o, { total: 2 }); const lrs = [o.paramGroups[0].lr];
for (let i = 0; i < 2; i++) { o.step(); s.step(); lrs.push(o.paramGroups[0].lr.toFixed(3)); }
console.log(lrs.join(" "));`, want: "1 0.500 0.000"},
		// 9. A negative paddingIdx counts from the end, as PyTorch's; out
		// of range is an error, in F.embedding and nn.Embedding alike.
		{name: "F.embedding paddingIdx -1", src: `const w = tensor.ones([3, 2], { requiresGrad: true });
F.embedding(tensor.fromArray([0, 2, 2]), w, { paddingIdx: -1 }).sum().backward();
console.log(JSON.stringify(w.grad.toArray()));`, want: "[[1,1],[0,0],[0,0]]"},
		{name: "F.embedding paddingIdx past the end", src: `F.embedding(tensor.fromArray([0]), tensor.ones([3, 2]), { paddingIdx: 3 });`, err: `nn.functional.embedding: paddingIdx 3 must be within numEmbeddings 3`},
		{name: "F.embedding paddingIdx before the start", src: `F.embedding(tensor.fromArray([0]), tensor.ones([3, 2]), { paddingIdx: -4 });`, err: `paddingIdx -4 must be within numEmbeddings 3`},
		{name: "nn.Embedding paddingIdx -1", src: `const e = nn.Embedding(3, 2, { paddingIdx: -1 });
console.log(e.paddingIdx, JSON.stringify(e.weight.toArray()[2]));`, want: "2 [0,0]"},
		{name: "nn.Embedding paddingIdx past the end", src: `nn.Embedding(3, 2, { paddingIdx: 3 });`, err: `nn.Embedding: paddingIdx 3 must be within numEmbeddings 3`},
		// 10. zerosLike, onesLike, emptyLike take { dtype, requiresGrad }.
		{name: "zerosLike({ dtype, requiresGrad })", src: `const x = tensor.ones([2, 3]);
const z = tensor.zerosLike(x, { dtype: "float64" }), o = tensor.onesLike(x, { requiresGrad: true }), e = tensor.emptyLike(x, { dtype: "int64" });
console.log(z.dtype, z.shape.join("x"), z.sum().item(), o.dtype, o.requiresGrad, o.isLeaf, o.sum().item(), e.dtype, e.shape.join("x"), tensor.zerosLike(x).dtype);`,
			want: "float64 2x3 0 float32 true true 6 int64 2x3 float32"},
		{name: "zerosLike({ dtyp })", src: `tensor.zerosLike(tensor.ones([2]), { dtyp: "float64" });`, err: `tensor.zerosLike: unknown option "dtyp" (did you mean dtype?)`},
		{name: "onesLike(t, dtype)", src: `tensor.onesLike(tensor.ones([2]), "float64");`, err: `tensor.onesLike(input, options): options must be an object { dtype, requiresGrad }, got "float64"`},
		// 11. PostLocalSGDState(null) names what it got.
		{name: "PostLocalSGDState(null)", src: `dist.commHooks.PostLocalSGDState(null);`, err: `dist.commHooks.PostLocalSGDState(options): options must be an object { startLocalSGDIter, subgroup, ... }, got null`},
		// 12. An unknown key is reported before a missing required one.
		{name: "checkpoint.Manager({ stat })", src: `require("zeroeng").checkpoint.Manager("ckpt", { stat: {} });`, err: `checkpoint.Manager: unknown option "stat" (did you mean state?)`},
	})
}

// TestZeroOptionsOfTheReview: ZeRO's options checked before its required
// optimizer, and ZeRO over an optimizer class: its keys, the spellings of
// the class's keys, and logMemory (items 6 and 12 of the review).
func TestZeroOptionsOfTheReview(t *testing.T) {
	const head = `const { tensor, nn, optim, dist, zero } = require("zeroeng"); const net = nn.Linear(2, 2);
class Plain extends optim.Optimizer {
  constructor(params, options) { super(params, { lr: optim.required, weightDecay: 0, ...options }); }
  step() {
    tensor.noGrad(() => { for (const g of this.paramGroups) for (const p of g.params) {
      const s = this.state.get(p) ?? { n: 0, last: tensor.zeros(p.shape).keep() };
      s.n++; s.last.copy_(p.grad); this.state.set(p, s); p.add_(p.grad, { alpha: -g.lr });
    } });
  }
}
const train = opt => { opt.zeroGrad(); net.forward(tensor.ones([1, 2])).sum().backward(); opt.step(); };
`
	for _, c := range []struct{ name, src, want, err string }{
		{name: "optimzer", src: `zero.ZeroRedundancyOptimizer(net.parameters(), { optimzer: "adamw" })`, err: `zero.ZeroRedundancyOptimizer: unknown option "optimzer" (did you mean optimizer?)`},
		{name: "no optimizer", src: `zero.ZeroRedundancyOptimizer(net.parameters(), { lr: 0.1, weightDecay: 0 })`, err: `options.optimizer is required`},
		{name: "class: weight_decay for the class's weightDecay", src: `zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: Plain, lr: 1, weight_decay: 0.1 })`,
			err: `zero.ZeroRedundancyOptimizer(Plain): unknown option "weight_decay" (did you mean weightDecay?)`},
		{name: "class: log_memory", src: `zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: Plain, lr: 1, log_memory: false })`,
			err: `unknown option "log_memory" (did you mean logMemory?)`},
		{name: "class: its own keys", src: `const opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: Plain, lr: 0.5, weightDecay: 0.1, beta1: 1, beta2: 2, logMemory: false });
train(opt); console.log(JSON.stringify(opt.optim.defaults));`, want: `{"lr":0.5,"weightDecay":0.1,"beta1":1,"beta2":2}`},
		{name: "class: logMemory", src: `const opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: Plain, lr: 1 });
train(opt); train(opt); console.log(JSON.stringify(opt.memory()));`,
			// Once, after the first step (runJob sorts the lines).
			want: "zero: rank 0 of 1 (stage 1, greedy partition) holds parameters 0.00 MiB, gradients 0.00 MiB, optimizer state 0.00 MiB\n" +
				`{"parameters":24,"gradients":24,"optimizerState":24,"ownedParameters":24,"total":72}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := runJob(t, 1, head+c.src, dist.Options{})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := strings.Join(got, "\n"); s != c.want {
				t.Fatalf("printed\n%s\nwant\n%s", s, c.want)
			}
		})
	}
}
