package script

import "testing"

// TestPyTorchNames covers the names a port from PyTorch reaches for:
// data.Subset and data.randomSplit, the function forms of tensor methods,
// nn.utils.consumePrefixInStateDictIfPresent, the hint of a state dict of
// a DistributedDataParallel model, and the suggestion for a misspelt
// method. The expected values are PyTorch 1.13's.
func TestPyTorchNames(t *testing.T) {
	const ds = "const { data } = require('zeroeng');\nconst ds = data.TensorDataset(tensor.arange(10), tensor.arange(10).mul(10));\n"
	runCases(t, []evalCase{
		{"Subset length and get", ds + `const s = data.Subset(ds, [3, 1, -1]); console.log(s.length, s.get(0)[1].item(), s.get(-1)[0].item(), s.indices)`,
			"3 30 9 [ 3, 1, -1 ]", ""},
		{"Subset of an array with tensor indices", `const { data } = require('zeroeng'); const s = new data.Subset(['a', 'b', 'c'], tensor.fromArray([2, 0])); console.log(s.length, s.get(0), s.get(1), s instanceof data.Subset)`,
			"2 c a true", ""},
		{"Subset in a DataLoader", ds + `for (const [x, y] of data.DataLoader(data.Subset(ds, [4, 2, 7]), { batchSize: 2 })) console.log(x.toArray(), y.toArray())`,
			"[ 4, 2 ] [ 40, 20 ]\n[ 7 ] [ 70 ]", ""},
		{"Subset out of range", ds + `data.Subset(ds, [10])`, "", "data.Subset: index 10 is out of range for a dataset of length 10"},
		{"Subset of a non-dataset", `const { data } = require('zeroeng'); data.Subset(3, [0])`, "", "data.Subset: expects a map-style dataset"},
		// random_split(range(10), [3, 7], generator=torch.Generator().manual_seed(42))
		{"randomSplit counts as PyTorch", ds + `const [a, b] = data.randomSplit(ds, [3, 7], { seed: 42 }); console.log(JSON.stringify([a.indices, b.indices]))`,
			"[[2,6,1],[8,4,5,0,9,3,7]]", ""},
		// random_split(range(11), [0.3, 0.3, 0.4], generator=torch.Generator().manual_seed(0))
		{"randomSplit fractions as PyTorch", `const { data } = require('zeroeng'); const parts = data.randomSplit([...Array(11).keys()], [0.3, 0.3, 0.4], { seed: 0 }); console.log(JSON.stringify(parts.map(p => p.indices)))`,
			"[[10,0,4,3],[5,8,2],[1,9,7,6]]", ""},
		{"randomSplit default generator", ds + `tensor.manualSeed(42); const [a] = data.randomSplit(ds, [3, 7]); console.log(JSON.stringify(a.indices))`,
			"[2,6,1]", ""},
		{"randomSplit wrong sum", ds + `data.randomSplit(ds, [3, 6])`, "", "sum of input lengths (3 + 6) does not equal the length of the input dataset (10)"},
		{"randomSplit bad fraction", ds + `data.randomSplit(ds, [1.5, -0.5])`, "", "fraction at index 0 is not between 0 and 1"},
		{"randomSplit unknown option", ds + `data.randomSplit(ds, [5, 5], { generator: 1 })`, "", `unknown option "generator"`},

		{"argmax function", `const t = tensor.fromArray([[3, 1, 1], [0, 5, 0]]); console.log(tensor.argmax(t).item(), tensor.argmax(t, 0, true).toArray())`,
			"4 [ [ 0, 1, 0 ] ]", ""},
		{"argmin method and function", `const t = tensor.fromArray([[3, 1, 1], [0, 5, 0]]); console.log(tensor.argmin(t).item(), t.argmin(1).toArray(), t.float().argmin(0, true).toArray())`,
			"3 [ 1, 0 ] [ [ 1, 0, 1 ] ]", ""},
		{"argmin NaN and extremes", `console.log(tensor.fromArray([2, NaN, 1], "float32").argmin().item(), tensor.fromArray([-(2n ** 63n), 2n ** 63n - 1n, 0n].map(Number), "int64").argmin().item(), tensor.fromArray([5, 0, 255], "uint8").argmin().item())`,
			"1 0 1", ""},
		{"function forms", `const t = tensor.fromArray([[1, -2], [3, 4]], "float32"); console.log(tensor.sum(t, 1).toArray(), tensor.abs(t).toArray(), tensor.transpose(t, 0, 1).toArray(), tensor.max(t).item(), tensor.softmax(t, 1).shape)`,
			"[ -1, 7 ] [ [ 1, 2 ], [ 3, 4 ] ] [ [ 1, 3 ], [ -2, 4 ] ] 4 [ 2, 2 ]", ""},
		{"function form of a non-tensor", `tensor.argmax([1, 2])`, "", "tensor.argmax: expects a tensor first"},

		{"consumePrefix", `const sd = { 'module.a.weight': 1, b: 2, 'module.b': 3, 'c.module.d': 4 }; nn.utils.consumePrefixInStateDictIfPresent(sd, 'module.'); console.log(JSON.stringify(sd))`,
			`{"a.weight":1,"b":3,"c.module.d":4}`, ""},
		{"consumePrefix metadata", `const sd = { 'module.w': 1 }; sd._metadata = { '': 0, module: 1, 'module.x': 2 }; nn.utils.consumePrefixInStateDictIfPresent(sd, 'module.'); console.log(JSON.stringify(sd))`,
			`{"_metadata":{"":1,"x":2},"w":1}`, ""},
		{"consumePrefix then load", `const m = nn.Linear(2, 2); const sd = {}; for (const [k, v] of Object.entries(nn.Linear(2, 2).stateDict())) sd['module.' + k] = v;
nn.utils.consumePrefixInStateDictIfPresent(sd, 'module.'); m.loadStateDict(sd); console.log(m.weight.eq(sd.weight).all().item())`, "true", ""},
		{"DDP state dict into the bare model", `const m = nn.Linear(2, 2); const sd = {}; for (const [k, v] of Object.entries(m.stateDict())) sd['module.' + k] = v; m.loadStateDict(sd)`,
			"", `saved from a DistributedDataParallel model (its keys start with "module."): load it into the wrapped model (nn.parallel.DistributedDataParallel(model).loadStateDict(sd)), or strip the prefix with nn.utils.consumePrefixInStateDictIfPresent(sd, "module.")`},
		{"bare state dict into a wrapped model", `class W extends nn.Module { constructor() { super(); this.module = nn.Linear(2, 2); } }
const w = new W(); w.loadStateDict(nn.Linear(2, 2).stateDict())`, "", "load it into the wrapped one's module (model.module.loadStateDict(sd))"},
		{"other missing keys have no hint", `const m = nn.Linear(2, 2); try { m.loadStateDict({ weight: m.weight }) } catch (e) { console.log(e.message.includes('DistributedDataParallel')) }`,
			"false", ""},

		{"misspelt module method", `const m = nn.Linear(2, 2); m.foward(tensor.ones([1, 2]))`, "", "TypeError: Object has no method 'foward': did you mean 'forward'?"},
		{"misspelt tensor method", `tensor.ones([2]).unsqeeze(0)`, "", "TypeError: Object has no method 'unsqeeze': did you mean 'unsqueeze'?"},
		{"misspelt module function", `nn.Liner(2, 2)`, "", "TypeError: Object has no method 'Liner': did you mean 'Linear'?"},
		{"unknown method, nothing near", `const o = {}; o.qqqqqqqq()`, "", "TypeError: Object has no member 'qqqqqqqq'"},
	})
}

// TestTorchGradFnName compares the engine's autograd names, as the script
// shows them (repr's grad_fn), with PyTorch 1.13's for the same ops.
func TestTorchGradFnName(t *testing.T) {
	cases := []struct {
		op     string
		scalar bool
		want   string
	}{
		{"MulBackward", false, "MulBackward0"},             // a * b
		{"mul", false, "MulBackward0"},                     // a * 2
		{"add", false, "AddBackward0"},                     // a + 1
		{"rsub", false, "RsubBackward1"},                   // 1 - a
		{"rdiv", false, "MulBackward0"},                    // 1 / a
		{"pow", false, "PowBackward0"},                     // a ** 2
		{"PowBackward", false, "PowBackward1"},             // a ** b
		{"square", false, "PowBackward0"},                  // a.square()
		{"SumBackward", true, "SumBackward0"},              // a.sum()
		{"SumBackward", false, "SumBackward1"},             // a.sum(0)
		{"ProdBackward", true, "ProdBackward0"},            // a.prod()
		{"ProdBackward", false, "ProdBackward1"},           // a.prod(0)
		{"MaxBackward", true, "MaxBackward1"},              // a.max()
		{"MaxBackward", false, "MaxBackward0"},             // a.max(0)
		{"MmBackward", false, "MmBackward0"},               // a @ b.t()
		{"AddmmBackward", false, "AddmmBackward0"},         // F.linear with bias
		{"ViewBackward", false, "ViewBackward0"},           // a.view(3, 2)
		{"relu", false, "ReluBackward0"},                   // a.relu()
		{"reluBackward", false, "ReluBackward0"},           // a.relu()
		{"exp", false, "ExpBackward0"},                     // a.exp()
		{"CrossEntropyBackward", true, "NllLossBackward0"}, // F.cross_entropy
		{"geluTanhBackward", false, "GeluBackward0"},       // F.gelu(a, approximate='tanh')
		{"NarrowBackward", false, "SliceBackward0"},        // a.narrow(0, 0, 1)
		{"NativeBatchNormBackward", false, "NativeBatchNormBackward0"},
		{"MaxPool2DWithIndicesBackward", false, "MaxPool2DWithIndicesBackward0"},
		{"NativeLayerNormBackward", false, "NativeLayerNormBackward0"},
		{"ClampBackward1", false, "ClampBackward1"}, // a.clamp(0, 1)
		{"NormBackward1", true, "NormBackward1"},    // a.norm()
		{"LogSoftmaxBackward", false, "LogSoftmaxBackward0"},
		{"ToCopyBackward", false, "ToCopyBackward0"},
	}
	for _, c := range cases {
		if got := torchGradFnName(c.op, c.scalar); got != c.want {
			t.Errorf("torchGradFnName(%q, %v) = %q, want %q", c.op, c.scalar, got, c.want)
		}
	}
}
