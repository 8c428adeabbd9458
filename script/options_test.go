package script

import (
	"strings"
	"testing"
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
