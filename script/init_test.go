package script

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// TestInitMatchesPyTorch: nn.init's normal_, uniform_, xavier and kaiming
// initialisers draw PyTorch 1.13's values from the same seed, bit for bit
// (normal_(mean, std) and uniform_(a, b) in the kernel, in float32 and
// float64), truncNormal_ to float32 rounding (its erfinv), and calculateGain
// gives its gains (testdata/init/gen.py).
func TestInitMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/init/init.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			Name, JS, DType string
			Shape           []int
			Values          []float64
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
		opts := ""
		if c.DType != "" {
			opts = fmt.Sprintf(", { dtype: %q }", c.DType)
		}
		fmt.Fprintf(&src, "{ tensor.manualSeed(7); const t = tensor.empty(%s%s); %s; console.log(JSON.stringify({ name: %q, values: t.flatten().toArray() })); }\n", shape, opts, c.JS, c.Name)
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
		if strings.HasPrefix(c.Name, "truncNormal_") {
			// erfinv is computed in float64 and rounded: PyTorch's float32
			// erfinv is off by an ulp for about 15% of its arguments.
			if err := closeNested(got[c.Name], want, 1e-6); err != nil {
				t.Errorf("%s: %v", c.Name, err)
			}
			continue
		}
		if err := closeNested(got[c.Name], want, 0); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
	for k, v := range fx.Gains {
		if err := closeNested(got["gain "+k], v, 1e-15); err != nil {
			t.Errorf("calculateGain %s: %v", k, err)
		}
	}
}

// TestInitInPlaceUnderMemoryLimit: nn.init's random initialisers fill a
// 64 MiB parameter in its own memory, so they run on a rank whose
// --max-memory leaves room for the parameter and 2 MiB more (where one
// more tensor of its size, as tensor.randn(p.shape), does not fit), and
// raise the device's peak by less than 1 MiB; so do the layers' own
// initialisations (an nn.Embedding and an nn.Linear of 64 MiB).
func TestInitInPlaceUnderMemoryLimit(t *testing.T) {
	const prologue = `const { tensor, nn, device } = require("zeroeng");
const rises = {};
function measure(name, f, expected = 0) {
  device.resetPeakMemoryStats();
  const live = device.memoryAllocated();
  const r = f();
  rises[name] = device.maxMemoryAllocated() - live - expected;
  return r;
}
`
	jobs := map[string]string{
		"nn.init": `const p = nn.Parameter(tensor.empty([4096, 4096]));
measure('normal_', () => nn.init.normal_(p, 0, 0.02));
measure('uniform_', () => nn.init.uniform_(p, -0.1, 0.1));
measure('truncNormal_', () => nn.init.truncNormal_(p, 0, 0.02));
measure('xavierUniform_', () => nn.init.xavierUniform_(p));
measure('kaimingNormal_', () => nn.init.kaimingNormal_(p));
try { tensor.randn(p.shape); rises.outOfPlace = 'fits'; } catch (e) { rises.outOfPlace = String(e.message); }
`,
		"Embedding": "measure('Embedding', () => new nn.Embedding(4096, 4096, { paddingIdx: 3 }), 64 << 20);\n",
		"Linear":    "measure('Linear', () => new nn.Linear(4096, 4096, false), 64 << 20);\n",
	}
	for job, body := range jobs {
		path := filepath.Join(t.TempDir(), "job.js")
		if err := os.WriteFile(path, []byte(prologue+body+"console.log(JSON.stringify(rises));\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := RunJob(context.Background(), path, JobOptions{Ranks: 1, MaxMemory: 64<<20 + 2<<20,
			Rank: Options{Stdout: &out, Stderr: &out, AutoRelease: true}})
		if err != nil {
			t.Fatalf("%s: %v\n%s", job, err, out.String())
		}
		var rises map[string]any
		if err := json.Unmarshal(out.Bytes(), &rises); err != nil {
			t.Fatalf("%s: %v: %q", job, err, out.String())
		}
		t.Logf("%s: %v", job, rises)
		if job == "nn.init" {
			if len(rises) != 6 {
				t.Errorf("%s: %v", job, rises)
			}
			if o, _ := rises["outOfPlace"].(string); !strings.Contains(o, "out of memory") {
				t.Errorf("tensor.randn of the parameter's shape under the limit: %q, want out of memory", o)
			}
			delete(rises, "outOfPlace")
		}
		for name, rise := range rises {
			if r, ok := rise.(float64); !ok || r >= 1<<20 {
				t.Errorf("%s raised the device's peak by %v bytes", name, rise)
			}
		}
	}
}
