package script

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// TestInitMatchesPyTorch: nn.init's xavier and kaiming initialisers draw
// PyTorch 1.13's values from the same seed (to float32 rounding: PyTorch
// scales its draws in double, the script in float32 ops), and calculateGain
// gives its gains (testdata/init/gen.py).
func TestInitMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/init/init.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			Name, JS string
			Shape    []int
			Values   []float64
		}
		Gains map[string]float64
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	src.WriteString(`const { tensor, nn } = require("zeroeng");` + "\n")
	for _, c := range fx.Cases {
		shape, _ := json.Marshal(c.Shape)
		fmt.Fprintf(&src, "{ tensor.manualSeed(7); const t = tensor.empty(%s); %s; console.log(JSON.stringify({ name: %q, values: t.flatten().toArray() })); }\n", shape, c.JS, c.Name)
	}
	for k := range fx.Gains {
		name, param, _ := strings.Cut(k, ":")
		if param == "" {
			param = "undefined"
		}
		fmt.Fprintf(&src, "console.log(JSON.stringify({ name: %q, values: nn.init.calculateGain(%q, %s) }));\n", "gain "+k, name, param)
	}
	lines, err := runJob(t, 1, src.String(), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, l := range lines {
		var m struct {
			Name   string
			Values any
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		got[m.Name] = m.Values
	}
	for _, c := range fx.Cases {
		want := make([]any, len(c.Values))
		for i, v := range c.Values {
			want[i] = v
		}
		if err := closeNested(got[c.Name], want, 1e-6); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
	for k, v := range fx.Gains {
		if err := closeNested(got["gain "+k], v, 1e-15); err != nil {
			t.Errorf("calculateGain %s: %v", k, err)
		}
	}
}
