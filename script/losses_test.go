package script

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// TestLossesMatchPyTorch: nn.functional's l1Loss, smoothL1Loss, nllLoss,
// binaryCrossEntropyWithLogits and oneHot give PyTorch 1.13's values and
// input gradients (float64, 1e-12) for every reduction and option of
// testdata/losses/gen.py.
func TestLossesMatchPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/losses/losses.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			Name, Fn      string
			Input, Target any
			Options       map[string]any
			Loss, Grad    any
		}
		OneHot []struct {
			Input      any
			NumClasses int
			Out        any
		}
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{"l1_loss": "l1Loss", "smooth_l1_loss": "smoothL1Loss", "nll_loss": "nllLoss", "binary_cross_entropy_with_logits": "binaryCrossEntropyWithLogits"}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var src strings.Builder
	src.WriteString(`const { tensor, nn } = require("zeroeng");` + "\n")
	for _, c := range fx.Cases {
		targetType := "float64"
		if c.Fn == "nll_loss" {
			targetType = "int64"
		}
		fmt.Fprintf(&src, `{ const x = tensor.tensor(%s, { dtype: "float64", requiresGrad: true });
  const l = nn.functional.%s(x, tensor.tensor(%s, { dtype: %q }), %s);
  l.sum().backward();
  console.log(JSON.stringify({ name: %q, loss: l.toArray(), grad: x.grad.toArray() })); }
`, js(c.Input), names[c.Fn], js(c.Target), targetType, js(c.Options), c.Name)
	}
	for _, c := range fx.OneHot {
		fmt.Fprintf(&src, "console.log(JSON.stringify({ name: %q, loss: nn.functional.oneHot(tensor.tensor(%s, { dtype: 'int64' }), %d).toArray() }));\n",
			"oneHot "+js(c.Input), js(c.Input), c.NumClasses)
	}
	lines, err := runJob(t, 1, src.String(), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]any{}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		got[m["name"].(string)] = m
	}
	for _, c := range fx.Cases {
		g := got[c.Name]
		if g == nil {
			t.Errorf("%s: no output", c.Name)
			continue
		}
		if err := closeNested(g["loss"], c.Loss, 1e-12); err != nil {
			t.Errorf("%s: loss %v", c.Name, err)
		}
		if err := closeNested(g["grad"], c.Grad, 1e-12); err != nil {
			t.Errorf("%s: gradient %v", c.Name, err)
		}
	}
	for _, c := range fx.OneHot {
		name := "oneHot " + js(c.Input)
		if err := closeNested(got[name]["loss"], c.Out, 0); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// closeNested compares nested arrays of numbers (or numbers) to a relative
// tolerance.
func closeNested(got, want any, tol float64) error {
	switch w := want.(type) {
	case float64:
		g, ok := got.(float64)
		if !ok || math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			return fmt.Errorf("%v, PyTorch %v", got, want)
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%v, PyTorch %v", got, want)
		}
		for i := range w {
			if err := closeNested(g[i], w[i], tol); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unexpected %T", want)
}
