package script

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// opsCase is one case of testdata/ops/ops.json (see gen.py there).
type opsCase struct {
	Name   string
	JS     string
	Tol    float64
	List   bool
	Inputs map[string]struct { // marshalled again for the script
		Data         any    `json:"data"`
		Shape        []int  `json:"shape"`
		DType        string `json:"dtype"`
		RequiresGrad bool   `json:"requiresGrad"`
	}
	Out      []opsResult
	Upstream []any
	Grads    map[string]any
	Raises   string
}

type opsResult struct {
	Values       any
	Shape        []int
	DType        string
	RequiresGrad bool
}

// TestOpsMatchPyTorch: the tensor ops composed in engine/tensor/compose.go
// (clamp, norm, repeat, flip, unbind, all, any, where, repeatInterleave,
// sub_, div_, linspace, eye) and requiresGrad on the factories give, from
// JavaScript, PyTorch 1.13's values, shapes, dtypes, requires_grad and
// input gradients for every case of testdata/ops/gen.py: float64 to 1e-12,
// float32 and linspace bit for bit where the case says so. Where PyTorch
// raises, the script must throw.
func TestOpsMatchPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/ops/ops.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct{ Cases []opsCase }
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) < 200 {
		t.Fatalf("only %d cases in the fixture", len(fx.Cases))
	}
	names := map[string]bool{}
	for _, c := range fx.Cases {
		if names[c.Name] {
			t.Fatalf("two cases are named %q", c.Name)
		}
		names[c.Name] = true
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var src strings.Builder
	src.WriteString(`const { tensor } = require("zeroeng");
const enc = v => Array.isArray(v) ? v.map(enc) : (typeof v === "number" && !Number.isFinite(v)) ? String(v) : v;
const dec = v => Array.isArray(v) ? v.map(dec) : typeof v === "string" ? Number(v) : v;
const mk = s => tensor.tensor(dec(s.data), s.shape, { dtype: s.dtype, requiresGrad: s.requiresGrad });
const result = o => ({ values: enc(o.toArray()), shape: o.shape, dtype: o.dtype, requiresGrad: o.requiresGrad });
`)
	for _, c := range fx.Cases {
		fmt.Fprintf(&src, "{ const name = %s;\n  try {\n", js(c.Name))
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range c.Inputs {
				if !yield(k) {
					return
				}
			}
		}) {
			fmt.Fprintf(&src, "    const %s = mk(%s);\n", k, js(c.Inputs[k]))
		}
		fmt.Fprintf(&src, "    const out = (%s);\n    const outs = %v ? out : [out];\n", c.JS, c.List)
		src.WriteString("    const res = { name, out: outs.map(result) };\n")
		if c.Grads != nil {
			fmt.Fprintf(&src, `    const ups = %s;
    let loss = null;
    outs.forEach((o, i) => { const l = o.mul(tensor.tensor(dec(ups[i]), o.shape, { dtype: o.dtype })).sum(); loss = loss === null ? l : loss.add(l); });
    loss.backward();
    res.grads = {};
`, js(c.Upstream))
			for k := range c.Grads {
				fmt.Fprintf(&src, "    res.grads[%q] = %s.grad === null ? null : enc(%s.grad.toArray());\n", k, k, k)
			}
		}
		src.WriteString("    console.log(JSON.stringify(res));\n  } catch (e) { console.log(JSON.stringify({ name, error: String(e && e.message || e) })); }\n}\n")
	}
	lines, err := runJob(t, 1, src.String(), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Name  string
		Out   []opsResult
		Grads map[string]any
		Error *string
	}
	results := map[string]got{}
	for _, l := range lines {
		var g got
		if err := json.Unmarshal([]byte(l), &g); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		results[g.Name] = g
	}
	for _, c := range fx.Cases {
		g, ok := results[c.Name]
		switch {
		case !ok:
			t.Errorf("%s: no output", c.Name)
			continue
		case c.Raises != "":
			if g.Error == nil {
				t.Errorf("%s: %s gave %v; PyTorch raises %q", c.Name, c.JS, g.Out, c.Raises)
			} else if !strings.HasPrefix(*g.Error, "tensor") || strings.Contains(*g.Error, "is not defined") {
				t.Errorf("%s: %s threw %q, not an error of the tensor API", c.Name, c.JS, *g.Error)
			} else {
				t.Logf("%s: %q (PyTorch: %q)", c.Name, *g.Error, c.Raises)
			}
			continue
		case g.Error != nil:
			t.Errorf("%s: %s threw %q", c.Name, c.JS, *g.Error)
			continue
		case len(g.Out) != len(c.Out):
			t.Errorf("%s: %d results, PyTorch %d", c.Name, len(g.Out), len(c.Out))
			continue
		}
		for i, w := range c.Out {
			o := g.Out[i]
			if !slices.Equal(o.Shape, w.Shape) || o.DType != w.DType || o.RequiresGrad != w.RequiresGrad {
				t.Errorf("%s: result %d is %v %v requiresGrad=%v, PyTorch %v %v %v", c.Name, i, o.DType, o.Shape, o.RequiresGrad, w.DType, w.Shape, w.RequiresGrad)
			}
			if w.Values != nil {
				if err := opsMatch(o.Values, w.Values, c.Tol); err != nil {
					t.Errorf("%s: result %d: %v", c.Name, i, err)
				}
			}
		}
		for k, w := range c.Grads {
			if err := opsMatch(g.Grads[k], w, c.Tol); err != nil {
				t.Errorf("%s: gradient of %s: %v", c.Name, k, err)
			}
		}
	}
}

// opsMatch compares nested results: numbers to a relative tolerance (0:
// exactly), the strings that stand for non-finite numbers, booleans and
// nulls exactly.
func opsMatch(got, want any, tol float64) error {
	switch w := want.(type) {
	case float64:
		g, ok := got.(float64)
		if !ok || math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			return fmt.Errorf("%v, PyTorch %v", got, want)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%v, PyTorch %v", got, want)
		}
		for i := range w {
			if err := opsMatch(g[i], w[i], tol); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	case string, bool, nil:
		if got != want {
			return fmt.Errorf("%v, PyTorch %v", got, want)
		}
	default:
		return fmt.Errorf("unexpected %T in the fixture", want)
	}
	return nil
}

// TestOpsArguments: the argument forms of the composed ops that PyTorch's
// fixture does not cover: a misspelled option, a missing or mistyped
// argument is an error naming the function and the argument.
func TestOpsArguments(t *testing.T) {
	cases := []struct{ js, want string }{
		{"x.clamp({ mn: 0 })", `tensor.clamp: unknown option "mn" (did you mean min?)`},
		{"x.clamp({ min: 0 }, 1)", "tensor.clamp: give min and max either as arguments or as options"},
		{"x.clamp('a')", "tensor.clamp: min must be a number"},
		{"x.norm(2, { dims: 1 })", `tensor.norm: unknown option "dims"`},
		{"x.norm(2, 'a')", "tensor.norm: dim must be an integer"},
		{"x.flip()", "tensor.flip: dims is missing"},
		{"x.flip([0], 1)", "tensor.flip: give dims as one array or as integer arguments"},
		{"x.repeat(2, 1.5)", "tensor.repeat: sizes must be an integer"},
		{"x.repeatInterleave(tensor.tensor([[2]]))", "repeats must be a 0-d or 1-d integer tensor"},
		{"x.repeatInterleave(2, { dims: 0 })", `tensor.repeatInterleave: unknown option "dims"`},
		{"x.all([0, 1])", "tensor.all: dim must be an integer"},
		{"x.any({ keepdim: true })", "tensor.any: keepdim needs a dim"},
		{"x.where(x.gt(0))", "tensor.where: other is missing"},
		{"x.where(x, x)", "tensor.where: the condition must be a bool tensor"},
		{"x.sub_(1, 2)", "tensor.sub_(other, options): options must be an object { alpha }"},
		{"x.sub_(1, { alfa: 2 })", `tensor.sub_: unknown option "alfa"`},
		{"x.div_(2, { roundingMode: 'floor' })", "tensor.div_: takes one argument, other (roundingMode is not supported)"},
		{"x.div_('a')", "tensor.div_: other must be a number"},
		{"tensor.linspace(0, 1)", "tensor.linspace: steps is missing"},
		{"tensor.linspace(0, 1, 5, 'float64')", "tensor.linspace(start, end, steps, options): options must be an object"},
		{"tensor.eye(2, 3, { dtyp: 'int64' })", `tensor.eye: unknown option "dtyp" (did you mean dtype?)`},
		{"tensor.randint(5, [2], { dtype: 'int8' })", "tensor.randint: unknown dtype"},
		{"tensor.zeros(2, { requiresGrad: true, dtype: 'int32' })", "tensor.zeros: requiresGrad: only tensors of floating point dtype can require gradients, not int32"},
		// Accepted forms.
		{"tensor.eye(2, null, { dtype: 'float64' }).dtype", "float64"},
		{"tensor.eye(2, 3).shape.join('x')", "2x3"},
		{"x.clamp({ min: tensor.tensor(0.5, { dtype: 'float64' }) }).toArray().join(' ')", "1 0.5 0.5 3"},
		{"x.norm(null, 0).item()", "3.7416573867739413"},
		{"x.flip([0]).toArray().join(' ')", "3 -2 0 1"},
		{"x.repeat([2]).shape[0]", "8"},
		{"x.unbind().length", "4"},
		{"(x.requiresGrad_(), tensor.noGrad(() => x.sub_(1).div_(2)), x.isLeaf + ' ' + x.requiresGrad + ' ' + x.toArray())", "true true 0,-0.5,-1.5,1"},
	}
	var src strings.Builder
	src.WriteString(`const { tensor } = require("zeroeng");` + "\n")
	for i, c := range cases {
		fmt.Fprintf(&src, `try { const x = tensor.tensor([1, 0, -2, 3], { dtype: "float64" }); console.log(JSON.stringify([%d, String((() => { return %s; })())])); } catch (e) { console.log(JSON.stringify([%d, String(e.message)])); }
`, i, c.js, i)
	}
	lines, err := runJob(t, 1, src.String(), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	for _, l := range lines {
		var r [2]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		got[int(r[0].(float64))] = r[1].(string)
	}
	for i, c := range cases {
		if g, ok := got[i]; !ok || !strings.Contains(g, c.want) {
			t.Errorf("%s: %q, want %q", c.js, g, c.want)
		}
	}
}

// TestRepeatInterleaveTensor: repeatInterleave with a tensor of counts
// (values and gradients from torch 1.13: x.repeat_interleave(tensor([1, 2]),
// dim=0) and tensor([1, 2, 3]).repeat_interleave(tensor([2, 0, 1]))), and
// PyTorch's errors.
func TestRepeatInterleaveTensor(t *testing.T) {
	src := `const { tensor } = require("zeroeng");
const x = tensor.tensor([[1, 2], [3, 4]], { dtype: "float32", requiresGrad: true });
const y = x.repeatInterleave(tensor.tensor([1, 2]), { dim: 0 });
y.mul(tensor.arange(6, { dtype: "float32" }).view(3, 2)).sum().backward();
console.log(JSON.stringify([y.toArray(), x.grad.toArray(), tensor.tensor([1, 2, 3]).repeatInterleave(tensor.tensor([2, 0, 1])).toArray()]));`
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(lines, ""), "[[[1,2],[3,4],[3,4]],[[0,1],[6,8]],[1,1,3]]"; got != want {
		t.Errorf("got %s, PyTorch %s", got, want)
	}
	for _, c := range []struct{ src, want string }{
		{`tensor.ones([3]).repeatInterleave(tensor.tensor([1, 2]), 0)`, "repeats must have the same size as input along dim 0"},
		{`tensor.ones([2]).repeatInterleave(tensor.tensor([1.5, 2]), 0)`, "repeats must be a 0-d or 1-d integer tensor"},
		{`tensor.ones([2]).repeatInterleave(tensor.tensor([1, -2]), 0)`, "repeats can not be negative"},
	} {
		_, err := runJob(t, 1, `const { tensor } = require("zeroeng"); `+c.src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
}

// TestCumsumDtype: cumsum and cumprod take PyTorch's dtype, casting the
// input first (a bool mask's count as float32; the gradient comes back in
// the input's type), as torch 1.13 gives for the same calls.
func TestCumsumDtype(t *testing.T) {
	src := `const { tensor } = require("zeroeng");
const m = tensor.tensor([true, false, true]);
const x = tensor.tensor([1, 2, 3], { dtype: "float32", requiresGrad: true });
x.cumsum(0, { dtype: "float64" }).sum().backward();
console.log([m.cumsum(0).dtype, m.cumsum(0, { dtype: "float32" }).dtype, m.cumsum({ dim: 0, dtype: "float64" }).toArray().join(","), x.grad.dtype, x.grad.toArray().join(","), m.cumprod(0, { dtype: "int32" }).dtype].join(" "));`
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(lines, ""), "int64 float32 1,1,2 float32 3,2,1 int32"; got != want {
		t.Errorf("got %q, PyTorch %q", got, want)
	}
}
