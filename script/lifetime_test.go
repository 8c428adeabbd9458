package script

import (
	"strings"
	"testing"
)

// TestTrainingLoopMemoryIsBounded: a PyTorch-style loop that never releases
// anything explicitly holds a bounded number of tensors, however many steps
// it runs, and setup tensors stay usable to the end.
func TestTrainingLoopMemoryIsBounded(t *testing.T) {
	src := `const { tensor, nn, optim } = require("zeroeng");
const x = tensor.randn([64, 8]), y = tensor.randn([64, 1]);  // setup: lives to the end
const m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1));
const opt = optim.SGD(m.parameters(), { lr: 0.01 });
const live = [];
let prev = null;
for (let step = 0; step < 60; step++) {
  opt.zeroGrad();
  const h = m.forward(x);
  const loss = nn.functional.mseLoss(h, y);
  if (prev) prev.item();  // the last step's tensors are usable until this step's backward
  loss.backward();
  opt.step();
  loss.item();
  prev = loss;
  live.push(tensor.stats().liveTensors);
}
console.log(live[10] === live[59], x.sum().item() === x.sum().item());
`
	out, err := runScript(t, t.TempDir(), "loop.js", src, Options{AutoRelease: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.TrimSpace(out) != "true true" {
		t.Fatalf("live tensors grew with the steps, or setup data was released: %s", out)
	}
}

func TestAutomaticReleaseRules(t *testing.T) {
	cases := []struct {
		name, body, want, err string
	}{
		{"two steps later a tensor is released", `
let old;
for (let i = 0; i < 4; i++) { const l = w.mul(2).sum(); if (i === 1) old = l; l.backward(); }
old.item();`, "", "released automatically at backward pass 3"},
		{"keep survives", `
let kept;
for (let i = 0; i < 4; i++) { const l = w.mul(2).sum(); if (i === 1) kept = w.mul(3).keep(); l.backward(); }
console.log(kept.sum().item());`, "6", ""},
		{"setup survives", `
const setup = tensor.ones([2]);
for (let i = 0; i < 4; i++) w.mul(2).sum().backward();
console.log(setup.sum().item());`, "2", ""},
		{"parameters and grads are never released", `
for (let i = 0; i < 4; i++) w.mul(2).sum().backward();
console.log(w.grad.toArray());`, "[ 8, 8 ]", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := "const { tensor, nn } = require('zeroeng');\nconst w = nn.Parameter(tensor.ones([2]));\n" + c.body
			out, err := runScript(t, t.TempDir(), "rules.js", src, Options{AutoRelease: true})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(out) != c.want {
				t.Fatalf("output %q, want %q", out, c.want)
			}
		})
	}
}

// TestNoAutomaticReleaseWithoutAutoRelease: the REPL keeps everything.
func TestNoAutomaticReleaseWithoutAutoRelease(t *testing.T) {
	src := `const { tensor, nn } = require("zeroeng");
const w = nn.Parameter(tensor.ones([2]));
let old;
for (let i = 0; i < 5; i++) { const l = w.mul(2).sum(); if (i === 1) old = l; l.backward(); }
console.log(old.item());`
	out, err := runScript(t, t.TempDir(), "repl.js", src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "4" {
		t.Fatalf("output %q", out)
	}
}
