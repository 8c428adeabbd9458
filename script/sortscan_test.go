package script

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestSortScanMatchPyTorch: t.sin, cos, erf, cumsum, cumprod, sort,
// argsort, topk and prod, called from JavaScript with positional
// arguments, options objects and both, give PyTorch 1.13's values,
// indices (exactly) and input gradients of Σ out·w (float64, 1e-12) for
// every case of testdata/sortscan/gen.py.
func TestSortScanMatchPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/sortscan/sortscan.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			Name, Call         string
			Input, Weight, Out any
			Indices, Grad      any
		}
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var src strings.Builder
	src.WriteString(`const { tensor } = require("zeroeng");` + "\n")
	for _, c := range fx.Cases {
		fmt.Fprintf(&src, `{ const x = tensor.tensor(%s, { dtype: "float64", requiresGrad: true });
  const r = %s;
  const v = Array.isArray(r) ? r[0] : r, i = Array.isArray(r) ? r[1] : null;
  if (Array.isArray(r) && (r.values !== v || r.indices !== i)) throw new Error("values and indices are not the pair's");
  const grad = %t;
  if (grad) v.mul(tensor.tensor(%s, { dtype: "float64" })).sum().backward();
  console.log(JSON.stringify({ name: %q, out: v.toArray(), indices: i && i.toArray(), grad: grad ? x.grad.toArray() : null })); }
`, js(c.Input), c.Call, c.Grad != nil, js(c.Weight), c.Name)
	}
	out, err := runScript(t, t.TempDir(), "sortscan.js", src.String(), Options{AutoRelease: true})
	if err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out)
	}
	got := map[string]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		got[m["name"].(string)] = m
	}
	if len(fx.Cases) < 20 {
		t.Fatalf("only %d cases in the fixture", len(fx.Cases))
	}
	for _, c := range fx.Cases {
		g := got[c.Name]
		if g == nil {
			t.Errorf("%s: no output", c.Name)
			continue
		}
		if err := closeNested(g["out"], c.Out, 1e-12); err != nil {
			t.Errorf("%s (%s): values %v", c.Name, c.Call, err)
		}
		if c.Indices != nil {
			if err := closeNested(g["indices"], c.Indices, 0); err != nil {
				t.Errorf("%s (%s): indices %v", c.Name, c.Call, err)
			}
		} else if g["indices"] != nil {
			t.Errorf("%s (%s): a pair, PyTorch returns one tensor", c.Name, c.Call)
		}
		if c.Grad != nil {
			if err := closeNested(g["grad"], c.Grad, 1e-12); err != nil {
				t.Errorf("%s (%s): gradient %v", c.Name, c.Call, err)
			}
		}
	}
}

// TestSortScanArgumentErrors: misspelled options, a list of dims for
// prod, missing and out-of-range arguments are errors naming the method.
func TestSortScanArgumentErrors(t *testing.T) {
	runCases(t, []evalCase{
		{name: "sort misspelled option", src: "tensor.ones([2, 3]).sort({ descendng: true });",
			err: `tensor.sort: unknown option "descendng" (did you mean descending?)`},
		{name: "sort options after dim", src: "tensor.ones([2, 3]).sort(0, { dim: 1 });",
			err: `tensor.sort: unknown option "dim"`},
		{name: "argsort bad dim", src: "tensor.ones([2, 3]).argsort(2);", err: "argsort: dimension 2 out of range"},
		{name: "topk misspelled option", src: "tensor.ones([2, 3]).topk(1, { larget: false });",
			err: `tensor.topk: unknown option "larget" (did you mean largest?)`},
		{name: "topk k missing", src: "tensor.ones([2, 3]).topk();", err: "tensor.topk: k is missing"},
		{name: "topk k too large", src: "tensor.ones([2, 3]).topk(4);", err: "topk: k (4) is out of range for dimension -1 of size 3"},
		{name: "cumsum dim missing", src: "tensor.ones([2, 3]).cumsum();", err: "tensor.cumsum: dim is missing"},
		{name: "cumprod dim not an integer", src: "tensor.ones([2, 3]).cumprod(0.5);", err: "tensor.cumprod: dim must be an integer, got 0.5"},
		{name: "cumsum dim out of range", src: "tensor.ones([2, 3]).cumsum({ dim: -3 });", err: "cumsum: dimension -3 out of range"},
		{name: "prod list of dims", src: "tensor.ones([2, 3]).prod([0, 1]);", err: "tensor.prod: dim must be one integer"},
		{name: "prod keepdim without dim", src: "tensor.ones([2, 3]).prod({ keepdim: true });", err: "tensor.prod: keepdim needs a dim"},
		{name: "prod misspelled option", src: "tensor.ones([2, 3]).prod(0, { keepDim: true });",
			err: `tensor.prod: unknown option "keepDim" (did you mean keepdim?)`},
		{name: "prod integer result", src: "console.log(tensor.tensor([2, 3, 4], { dtype: 'int32' }).prod().dtype);", want: "int64"},
	})
}
