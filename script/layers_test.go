package script

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// fixtureTensor is a tensor as testdata/layers/gen.py writes it: flat
// values, with "inf", "-inf" and "nan" as strings (JSON has no such
// numbers).
type fixtureTensor struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Data  []any  `json:"data"`
	Grad  bool   `json:"grad,omitempty"`
}

type layerStep struct {
	Train       bool                      `json:"train"`
	Call        string                    `json:"call"`
	Inputs      []*fixtureTensor          `json:"inputs"`
	GradOut     []*fixtureTensor          `json:"gradOut"`
	Out         []*fixtureTensor          `json:"out,omitempty"`
	InputGrads  []*fixtureTensor          `json:"inputGrads,omitempty"`
	InputsAfter []*fixtureTensor          `json:"inputsAfter,omitempty"`
	ParamGrads  map[string]*fixtureTensor `json:"paramGrads,omitempty"`
	Buffers     map[string]*fixtureTensor `json:"buffers,omitempty"`
}

type layerCase struct {
	Name      string                    `json:"name"`
	Seed      int                       `json:"seed"`
	JS        string                    `json:"js"`
	DType     string                    `json:"dtype"`
	Tol       float64                   `json:"tol"`
	Repr      string                    `json:"repr"`
	StateKeys []string                  `json:"stateKeys"`
	Init      map[string]*fixtureTensor `json:"init"`
	Set       map[string]*fixtureTensor `json:"set"`
	Steps     []layerStep               `json:"steps"`
}

// layersScript is the script half of TestLayersMatchPyTorch: it runs one
// case (given as the fixture's construction, parameter values and steps)
// and prints what the fixture holds for it as one JSON line.
const layersScript = `const { tensor, nn } = require("zeroeng");
const enc = t => (t === null || t === undefined ? null : {
  dtype: t.dtype, shape: t.shape,
  data: t.flatten().toArray().map(v => (typeof v !== 'number' || Number.isFinite(v) ? v : Number.isNaN(v) ? 'nan' : v > 0 ? 'inf' : '-inf')),
});
const dec = v => (v === 'inf' ? Infinity : v === '-inf' ? -Infinity : v === 'nan' ? NaN : v);
const mk = d => tensor.tensor(d.data.map(dec), d.shape, { dtype: d.dtype, requiresGrad: Boolean(d.grad) });
function runCase(c, make, calls) {
  try {
    tensor.manualSeed(c.seed);
    const m = make();
    const res = { name: c.name, repr: String(m), keys: Object.keys(m.stateDict()), init: {}, steps: [] };
    for (const [k, v] of Object.entries(m.stateDict())) res.init[k] = enc(v);
    m.to(c.dtype);
    tensor.noGrad(() => { for (const [k, d] of Object.entries(c.set)) m.stateDict()[k].copy_(mk(d)); });
    c.steps.forEach((st, i) => {
      m.train(st.train);
      m.zeroGrad(true);
      const a = st.inputs.map(mk);
      let outs = calls[i](m, a);
      if (!Array.isArray(outs)) outs = [outs];
      let loss = null;
      outs.forEach((o, j) => {
        if (o === null) return;
        const l = o.mul(mk(st.gradOut[j])).sum();
        loss = loss === null ? l : loss.add(l);
      });
      loss.backward();
      res.steps.push({
        out: outs.map(enc),
        inputGrads: a.map((t, j) => (st.inputs[j].grad ? enc(t.grad) : null)),
        inputsAfter: a.map((t, j) => (st.inputs[j].grad ? null : enc(t))),
        paramGrads: Object.fromEntries(m.namedParameters().map(([k, p]) => [k, enc(p.grad)])),
        buffers: Object.fromEntries(m.namedBuffers().map(([k, b]) => [k, enc(b)])),
      });
    });
    console.log(JSON.stringify(res));
  } catch (e) {
    console.log(JSON.stringify({ name: c.name, error: String((e && e.stack) || e) }));
  }
}
`

// TestLayersMatchPyTorch: Conv1d, Conv2d, MaxPool2d, AvgPool2d,
// AdaptiveAvgPool2d, Dropout2d (the channels dropped drawn as PyTorch's
// from the same seed), BatchNorm1d,
// BatchNorm2d, RMSNorm, MultiheadAttention and ModuleDict, and the
// functional forms, against PyTorch 1.13 (testdata/layers/gen.py): the
// printed form, the state-dict keys, the initial parameters drawn from the same seed (to
// the bit, float32), and in float64 the outputs, the gradients of inputs
// and parameters and the buffers (running statistics) after every
// training and evaluation step, to 1e-12.
func TestLayersMatchPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/layers/layers.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct{ Cases []layerCase }
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	src.WriteString(layersScript)
	for _, c := range fx.Cases {
		given := c // what the script needs: no expected values
		given.StateKeys, given.Init, given.Repr = nil, nil, ""
		given.Steps = make([]layerStep, len(c.Steps))
		calls := make([]string, len(c.Steps))
		for i, st := range c.Steps {
			given.Steps[i] = layerStep{Train: st.Train, Inputs: st.Inputs, GradOut: st.GradOut}
			calls[i] = "(m, a) => " + st.Call
		}
		b, err := json.Marshal(given)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&src, "runCase(%s, () => %s, [%s]);\n", b, c.JS, strings.Join(calls, ", "))
	}
	lines, err := runJob(t, 1, src.String(), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		Name  string
		Error string
		Repr  string
		Keys  []string
		Init  map[string]*fixtureTensor
		Steps []layerStep
	}
	got := map[string]result{}
	var warnings []string
	for _, l := range lines {
		// Python's warnings, which the cases' inputs raise as PyTorch's do.
		if w, ok := strings.CutPrefix(l, "UserWarning: "); ok {
			warnings = append(warnings, w)
			continue
		}
		var r result
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %.200q", err, l)
		}
		got[r.Name] = r
	}
	// dropout2d warns once about a 3-D input (read as (N, C, L)) and once
	// about another number of dimensions, as torch 1.13 does.
	// (Stderr's lines may come before stdout's, so in either order.)
	slices.Sort(warnings)
	if len(warnings) != 2 || !strings.HasPrefix(warnings[0], "dropout2d: Received a 2-D input") || !strings.HasPrefix(warnings[1], "dropout2d: Received a 3D input") {
		t.Errorf("warnings %q, want dropout2d's 3D and 2-D ones, once each", warnings)
	}
	for _, c := range fx.Cases {
		t.Run(c.Name, func(t *testing.T) {
			g, ok := got[c.Name]
			switch {
			case !ok:
				t.Fatal("no output")
			case g.Error != "":
				t.Fatal(g.Error)
			}
			if g.Repr != c.Repr {
				t.Errorf("printed as\n%s\nPyTorch\n%s", g.Repr, c.Repr)
			}
			if strings.Join(g.Keys, ",") != strings.Join(c.StateKeys, ",") {
				t.Errorf("stateDict keys %q, PyTorch %q", g.Keys, c.StateKeys)
			}
			for k, want := range c.Init {
				if err := sameTensor(g.Init[k], want, 0); err != nil {
					t.Errorf("initial %s: %v", k, err)
				}
			}
			if len(g.Steps) != len(c.Steps) {
				t.Fatalf("%d steps, want %d", len(g.Steps), len(c.Steps))
			}
			for i, want := range c.Steps {
				gs := g.Steps[i]
				check := func(what string, got, want *fixtureTensor) {
					if err := sameTensor(got, want, c.Tol); err != nil {
						t.Errorf("step %d: %s: %v", i, what, err)
					}
				}
				for j := range want.Out {
					check(fmt.Sprintf("output %d", j), at(gs.Out, j), want.Out[j])
				}
				for j := range want.InputGrads {
					check(fmt.Sprintf("gradient of input %d", j), at(gs.InputGrads, j), want.InputGrads[j])
					check(fmt.Sprintf("input %d after the call", j), at(gs.InputsAfter, j), want.InputsAfter[j])
				}
				for k, w := range want.ParamGrads {
					check("gradient of "+k, gs.ParamGrads[k], w)
				}
				for k, w := range want.Buffers {
					check("buffer "+k, gs.Buffers[k], w)
				}
				if len(gs.Buffers) != len(want.Buffers) || len(gs.ParamGrads) != len(want.ParamGrads) {
					t.Errorf("step %d: parameters %d and buffers %d, PyTorch %d and %d", i, len(gs.ParamGrads), len(gs.Buffers), len(want.ParamGrads), len(want.Buffers))
				}
			}
		})
	}
}

func at(ts []*fixtureTensor, i int) *fixtureTensor {
	if i < len(ts) {
		return ts[i]
	}
	return nil
}

// sameTensor compares dtype, shape and values to a relative tolerance
// (absolute below 1); infinities and NaN must match exactly.
func sameTensor(got, want *fixtureTensor, tol float64) error {
	switch {
	case want == nil && got == nil:
		return nil
	case want == nil:
		return fmt.Errorf("got a %v tensor, PyTorch none", got.Shape)
	case got == nil:
		return fmt.Errorf("got none, PyTorch a %v tensor", want.Shape)
	case got.DType != want.DType:
		return fmt.Errorf("dtype %s, PyTorch %s", got.DType, want.DType)
	case fmt.Sprint(got.Shape) != fmt.Sprint(want.Shape) || len(got.Data) != len(want.Data):
		return fmt.Errorf("shape %v (%d values), PyTorch %v", got.Shape, len(got.Data), want.Shape)
	}
	for i := range want.Data {
		g, w := fixtureNumber(got.Data[i]), fixtureNumber(want.Data[i])
		ok := g == w || (math.IsNaN(g) && math.IsNaN(w))
		if !ok && !math.IsInf(w, 0) && !math.IsNaN(w) {
			ok = math.Abs(g-w) <= tol*math.Max(1, math.Abs(w))
		}
		if !ok {
			return fmt.Errorf("element %d is %v, PyTorch %v (tolerance %g)", i, g, w, tol)
		}
	}
	return nil
}

func fixtureNumber(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case bool:
		if x {
			return 1
		}
		return 0
	case string:
		switch x {
		case "inf":
			return math.Inf(1)
		case "-inf":
			return math.Inf(-1)
		}
	}
	return math.NaN()
}

// TestLayersLoadPyTorchSafetensors: a model of the new layers trained one
// step in PyTorch and saved as safetensors (batch norm's running
// statistics and num_batches_tracked included) loads strictly into the
// same model built in the script, whose stateDict has PyTorch's keys, and
// gives PyTorch's output in eval mode.
func TestLayersLoadPyTorchSafetensors(t *testing.T) {
	path, err := filepath.Abs("testdata/layers/layers.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`const { tensor, nn, io } = require("zeroeng");
const f = io.loadSafetensors(%q);
const model = nn.ModuleDict([
  ["features", nn.Sequential(nn.Conv2d(2, 4, 3, { padding: 1 }), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))],
  ["attn", nn.MultiheadAttention(4, 2, { batchFirst: true })],
  ["norm", nn.RMSNorm(4)],
  ["bn", nn.BatchNorm1d(4, { momentum: null })],
]);
const sd = {};
for (const k of JSON.parse(f.__metadata__.keys)) sd[k] = f["model." + k];
const keys = Object.keys(model.stateDict());
const loaded = model.loadStateDict(sd);
model.eval();
const x = f.x;
const h = model.get("features").forward(x);
let s = h.flatten(2).transpose(1, 2);
const [a] = model.get("attn").forward(s, s, s);
s = model.get("norm").forward(s.add(a));
const y = model.get("bn").forward(s.mean(1));
const err = y.sub(f.y).abs().max().item();
console.log(JSON.stringify({ keys, want: JSON.parse(f.__metadata__.keys), loaded, err, tracked: model.get("bn").numBatchesTracked.item() }));
`, path)
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Keys, Want []string
		Loaded     struct{ MissingKeys, UnexpectedKeys []string }
		Err        float64
		Tracked    int
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("%v: %q", err, lines)
	}
	if strings.Join(r.Keys, ",") != strings.Join(r.Want, ",") {
		t.Errorf("stateDict keys\n%q\nPyTorch's\n%q", r.Keys, r.Want)
	}
	if len(r.Loaded.MissingKeys)+len(r.Loaded.UnexpectedKeys) != 0 {
		t.Errorf("loadStateDict: %+v", r.Loaded)
	}
	if r.Tracked != 1 {
		t.Errorf("num_batches_tracked %d after loading, PyTorch's 1", r.Tracked)
	}
	// float32 throughout: PyTorch's kernels sum in other orders.
	if r.Err > 1e-5 {
		t.Errorf("eval output differs from PyTorch's by %g", r.Err)
	}
}

// TestSyncBatchNormMatchesBatchNormOnWholeBatch: on in-process ranks
// holding uneven slices of one batch, SyncBatchNorm gives each rank its
// slice of what BatchNorm computes on the whole batch: the output, the
// input's gradient (whose backward sums the statistics' gradients over the
// ranks), the parameters' gradients summed over the ranks, the running
// statistics and num_batches_tracked after three training steps
// (momentum 0.2 and cumulative), and the evaluation output. With
// processGroup, each group of ranks normalises over its own batch only.
// convertSyncBatchnorm swaps BatchNorm layers for SyncBatchNorm ones that
// hold the same parameters.
func TestSyncBatchNormMatchesBatchNormOnWholeBatch(t *testing.T) {
	const src = `const { tensor, nn, dist } = require("zeroeng");
const ranks = %d; // the group size
const [pg] = ranks === dist.worldSize ? [dist] : dist.newSubgroups(ranks);
const r = pg.rank;
const rows = [5, 3, 4, 6].slice(0, ranks), start = rows.slice(0, r).reduce((a, b) => a + b, 0), total = rows.reduce((a, b) => a + b, 0);
const groupSeed = Math.floor(dist.rank / ranks);
let worst = 0;
const diff = (a, b) => { worst = Math.max(worst, a.sub(b).abs().max().item()); };
for (const momentum of [0.2, null]) {
  tensor.manualSeed(10 + groupSeed); // the same whole batch on every rank of a group
  const full = nn.BatchNorm2d(3, { momentum }).double();
  const sync = nn.SyncBatchNorm(3, { momentum, processGroup: ranks === dist.worldSize ? null : pg }).double();
  tensor.noGrad(() => {
    const w = tensor.randn([3], { dtype: "float64" }), b = tensor.randn([3], { dtype: "float64" });
    full.weight.copy_(w); sync.weight.copy_(w); full.bias.copy_(b); sync.bias.copy_(b);
  });
  for (let step = 0; step < 4; step++) {
    const train = step < 3;
    full.train(train); sync.train(train); full.zeroGrad(true); sync.zeroGrad(true);
    const x = tensor.randn([total, 3, 2, 2], { dtype: "float64" }).mul(2).add(step);
    const g = tensor.randn([total, 3, 2, 2], { dtype: "float64" });
    const xf = x.clone().requiresGrad_(true), xs = x.narrow(0, start, rows[r]).clone().requiresGrad_(true);
    const yf = full.forward(xf), ys = sync.forward(xs);
    yf.mul(g).sum().backward();
    ys.mul(g.narrow(0, start, rows[r])).sum().backward();
    diff(ys, yf.narrow(0, start, rows[r]));
    diff(xs.grad, xf.grad.narrow(0, start, rows[r]));
    for (const k of ["weight", "bias"]) diff(pg.allReduce(sync[k].grad.clone()).wait(), full[k].grad);
    diff(sync.runningMean, full.runningMean);
    diff(sync.runningVar, full.runningVar);
    if (sync.numBatchesTracked.item() !== full.numBatchesTracked.item() || full.numBatchesTracked.item() !== Math.min(step + 1, 3)) worst = Infinity;
  }
}
const model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3));
const before = model.parameters();
const converted = nn.SyncBatchNorm.convertSyncBatchnorm(model);
const same = converted === model && converted[1] instanceof nn.SyncBatchNorm &&
  converted.parameters().every((p, i) => p === before[i]) && converted[1].runningMean === model[1].runningMean &&
  JSON.stringify(Object.keys(converted.stateDict())) === JSON.stringify(["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"]);
console.log(JSON.stringify({ rank: dist.rank, worst, same }));
`
	for _, c := range []struct{ world, group int }{{2, 2}, {4, 2}} {
		t.Run(fmt.Sprintf("%d ranks in groups of %d", c.world, c.group), func(t *testing.T) {
			lines, err := runJob(t, c.world, fmt.Sprintf(src, c.group), dist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(lines) != c.world {
				t.Fatalf("%d lines from %d ranks: %q", len(lines), c.world, lines)
			}
			for _, l := range lines {
				var r struct {
					Rank  int
					Worst float64
					Same  bool
				}
				_, line, _ := strings.Cut(l, "] ") // "[rank] " before each line
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatalf("%v: %q", err, l)
				}
				if !(r.Worst <= 1e-12) {
					t.Errorf("rank %d: SyncBatchNorm differs from BatchNorm on the whole batch by %g", r.Rank, r.Worst)
				}
				if !r.Same {
					t.Errorf("rank %d: convertSyncBatchnorm did not swap the BatchNorm for a SyncBatchNorm holding the same parameters", r.Rank)
				}
			}
		})
	}
}

// TestLayersReject: a misspelled option, a bad argument, an input of the
// wrong shape or dtype is an error naming the function and what is wrong,
// never a silent result; and ModuleDict keeps its names in insertion order.
func TestLayersReject(t *testing.T) {
	const conv = "const c = nn.Conv2d(3, 4, 3); "
	const mha = "const m = nn.MultiheadAttention(8, 2); const q = tensor.randn([5, 3, 8]); "
	cases := []evalCase{
		{name: "conv option", src: `nn.Conv2d(3, 4, 3, { stide: 2 })`, err: `nn.Conv2d: unknown option "stide" (did you mean stride?)`},
		{name: "conv snake_case", src: `nn.Conv1d(3, 4, 3, { padding_mode: "zeros" })`, err: `(did you mean paddingMode?)`},
		{name: "conv paddingMode reflect", src: `nn.Conv2d(3, 4, 3, { paddingMode: "reflect" })`, err: `nn.Conv2d: paddingMode 'reflect' is not implemented; only 'zeros' is`},
		{name: "conv paddingMode unknown", src: `nn.Conv2d(3, 4, 3, { paddingMode: "mirror" })`, err: `nn.Conv2d: paddingMode must be one of`},
		{name: "conv groups", src: `nn.Conv2d(3, 4, 3, { groups: 2 })`, err: `nn.Conv2d: inChannels must be divisible by groups`},
		{name: "conv same strided", src: `nn.Conv2d(3, 4, 3, { padding: "same", stride: 2 })`, err: `padding='same' is not supported for strided convolutions`},
		{name: "conv padding string", src: `nn.Conv2d(3, 4, 3, { padding: "full" })`, err: `nn.Conv2d: invalid padding string 'full'`},
		{name: "conv kernel", src: `nn.Conv2d(3, 4, [3, 3, 3])`, err: `nn.Conv2d: kernelSize must be an integer or an array of 2 integers`},
		{name: "conv channels", src: conv + `c.forward(tensor.randn([2, 5, 6, 6]))`,
			err: `nn.functional.conv2d: given groups=1, weight of size [4 3 3 3], expected input[2 5 6 6] to have 3 channels, but got 5 channels instead`},
		{name: "conv input dims", src: conv + `c.forward(tensor.randn([6, 6]))`, err: `nn.functional.conv2d: expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [6 6]`},
		{name: "conv dtype", src: conv + `c.forward(tensor.randn([1, 3, 6, 6], { dtype: "float64" }))`, err: `nn.functional.conv2d: input (float64) and weight (float32, bias float32) must have the same dtype`},
		{name: "conv kernel too large", src: `nn.Conv2d(3, 4, 5).forward(tensor.randn([1, 3, 3, 3]))`, err: `Kernel size can't be greater than actual input size`},
		{name: "F.conv2d stride", src: `F.conv2d(tensor.randn([1, 1, 4, 4]), tensor.randn([1, 1, 2, 2]), null, { stride: 0 })`, err: `nn.functional.conv2d: non-positive stride is not supported`},
		{name: "F.conv1d option", src: `F.conv1d(tensor.randn([1, 1, 4]), tensor.randn([1, 1, 2]), null, { dilaton: 1 })`, err: `(did you mean dilation?)`},
		{name: "F.conv1d padding", src: `F.conv1d(tensor.randn([1, 1, 4]), tensor.randn([1, 1, 2]), null, { padding: "half" })`, err: `nn.functional.conv1d: invalid padding string "half"`},
		{name: "pool option", src: `nn.MaxPool2d(2, { ceil_mode: true })`, err: `(did you mean ceilMode?)`},
		{name: "pool padding", src: `nn.MaxPool2d(2, { padding: 2 }).forward(tensor.randn([1, 1, 4, 4]))`, err: `nn.functional.maxPool2d: pad should be smaller than or equal to half of kernel size`},
		{name: "pool input dims", src: `F.maxPool2d(tensor.randn([2, 2]), 2)`, err: `nn.functional.maxPool2d: expected 3D or 4D (batch mode) tensor for input`},
		{name: "pool output too small", src: `F.maxPool2d(tensor.randn([1, 1, 2, 2]), 3)`, err: `Output size is too small`},
		{name: "avgpool option", src: `nn.AvgPool2d(2, { count_include_pad: false })`, err: `(did you mean countIncludePad?)`},
		{name: "avgpool divisor zero", src: `F.avgPool2d(tensor.randn([1, 1, 4, 4]), 2, { divisorOverride: 0 })`, err: `nn.functional.avgPool2d: divisor must be not zero`},
		{name: "avgpool padding", src: `nn.AvgPool2d(3, { padding: 2 }).forward(tensor.randn([1, 1, 6, 6]))`, err: `nn.functional.avgPool2d: pad should be smaller than or equal to half of kernel size`},
		{name: "avgpool input dims", src: `F.avgPool2d(tensor.randn([4, 4]), 2)`, err: `nn.functional.avgPool2d: expected 3D or 4D (batch mode) tensor for input`},
		{name: "adaptive output size", src: `nn.AdaptiveAvgPool2d([1, 2, 3])`, err: `nn.AdaptiveAvgPool2d: outputSize must be a non-negative integer or an array of 2`},
		{name: "F.adaptive output size", src: `F.adaptiveAvgPool2d(tensor.randn([1, 2, 4, 4]), [2])`, err: `nn.functional.adaptiveAvgPool2d: outputSize must be an integer or an array of 2`},
		{name: "dropout2d p", src: `nn.Dropout2d(1.5)`, err: `nn.Dropout2d: dropout probability has to be between 0 and 1, but got 1.5`},
		{name: "dropout2d option", src: `nn.Dropout2d(0.5, { inPlace: true })`, err: `(did you mean inplace?)`},
		{name: "dropout2d inplace with grad", src: `F.dropout2d(tensor.randn([2, 3, 2, 2], { requiresGrad: true }), { inplace: true })`, err: `nn.functional.dropout2d: inplace:`},
		{name: "dropout2d inplace", src: `const x = tensor.ones([4, 8, 2, 2]); const y = F.dropout2d(x, 0.5, true, true);
const s = x.sum([2, 3]).flatten().toArray();
console.log(y === x, s.every(v => v === 0 || v === 8), s.some(v => v === 0), String(nn.Dropout2d({ p: 0.1, inplace: true })))`,
			want: `true true true Dropout2d(p=0.1, inplace=True)`},
		{name: "batchnorm option", src: `nn.BatchNorm1d(3, { track_running_stats: false })`, err: `(did you mean trackRunningStats?)`},
		{name: "batchnorm1d dims", src: `nn.BatchNorm1d(3).forward(tensor.randn([2, 3, 4, 5]))`, err: `nn.BatchNorm1d: expected 2D or 3D input (got 4D input)`},
		{name: "batchnorm2d dims", src: `nn.BatchNorm2d(3).forward(tensor.randn([2, 3, 4]))`, err: `nn.BatchNorm2d: expected 4D input (got 3D input)`},
		{name: "batchnorm one value", src: `nn.BatchNorm2d(3).forward(tensor.randn([1, 3, 1, 1]))`, err: `expected more than 1 value per channel when training, got input size [1 3 1 1]`},
		{name: "batchnorm channels", src: `nn.BatchNorm1d(3).forward(tensor.randn([4, 5]))`, err: `nn.functional.batchNorm: running_mean should contain 5 elements not 3`},
		{name: "batchnorm eval without stats", src: `F.batchNorm(tensor.randn([4, 3]), null, null)`, err: `running_mean and running_var must be defined in evaluation mode`},
		{name: "F.batchNorm option", src: `F.batchNorm(tensor.randn([4, 3]), null, null, { traning: true })`, err: `(did you mean training?)`},
		{name: "syncbatchnorm option", src: `nn.SyncBatchNorm(3, { process_group: null })`, err: `(did you mean processGroup?)`},
		{name: "rmsnorm option", src: `nn.RMSNorm(4, { elementwise_affine: false })`, err: `(did you mean elementwiseAffine?)`},
		{name: "rmsnorm shape", src: `nn.RMSNorm(4).forward(tensor.randn([2, 3]))`, err: `nn.functional.rmsNorm: given normalized_shape=[4], expected input with shape [*, 4], but got input of size [2 3]`},
		{name: "mha heads", src: `nn.MultiheadAttention(8, 3)`, err: `nn.MultiheadAttention: embedDim must be divisible by numHeads`},
		{name: "mha kdim", src: `nn.MultiheadAttention(8, 2, { kdim: 4 })`, err: `nn.MultiheadAttention: kdim and vdim must equal embedDim (8)`},
		{name: "mha option", src: `nn.MultiheadAttention(8, 2, { batch_first: true })`, err: `(did you mean batchFirst?)`},
		{name: "mha forward option", src: mha + `m.forward(q, q, q, { need_weights: false })`, err: `nn.MultiheadAttention.forward: unknown option "need_weights" (did you mean needWeights?)`},
		{name: "mha isCausal without mask", src: mha + `m.forward(q, q, q, { isCausal: true })`, err: `need attnMask if specifying the isCausal hint`},
		{name: "mha mask shape", src: mha + `m.forward(q, q, q, { attnMask: tensor.zeros([4, 4]) })`, err: `the shape of the 2D attnMask is [4,4], but should be [5,5]`},
		{name: "mha mask dtype", src: mha + `m.forward(q, q, q, { attnMask: tensor.zeros([5, 5], { dtype: "int64" }) })`, err: `only float, byte, and bool types are supported for attnMask, not int64`},
		{name: "mha key dims", src: mha + `m.forward(q, tensor.randn([5, 8]), q)`, err: `for batched (3-D) query, expected key and value to be 3-D but found 2-D and 3-D tensors respectively`},
		{name: "mha embedding dim", src: mha + `const k = tensor.randn([5, 3, 6]); m.forward(k, k, k)`, err: `was expecting embedding dimension of 8, but got 6`},
		{name: "moduledict dot", src: `nn.ModuleDict({ "a.b": nn.ReLU() })`, err: `nn.ModuleDict: module name can't contain ".", got: a.b`},
		{name: "moduledict method name", src: `nn.ModuleDict({ keys: nn.ReLU() })`, err: `nn.ModuleDict: attribute 'keys' already exists`},
		{name: "moduledict missing", src: `nn.ModuleDict().get("x")`, err: `nn.ModuleDict: no module named 'x'`},
		{name: "moduledict not a module", src: `nn.ModuleDict({ a: 1 })`, err: `nn.ModuleDict: a is not a Module`},
		{name: "moduledict order", src: `const d = nn.ModuleDict([["b", nn.ReLU()], ["2", nn.Linear(1, 1)]]);
d.set("a", nn.Linear(1, 2)); d.pop("b"); d.eval();
console.log(JSON.stringify([d.keys(), d.length, [...d], d.has("a"), d.has("b"), Object.keys(d.stateDict()), d.get("a").training, d.values().length]));`,
			want: `[["2","a"],2,["2","a"],true,false,["2.weight","2.bias","a.weight","a.bias"],false,2]`},
	}
	runCases(t, cases)
}
