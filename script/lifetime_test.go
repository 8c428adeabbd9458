package script

import (
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestTrainingLoopMemoryIsBounded: a PyTorch-style loop that never releases
// anything explicitly holds a bounded amount of memory, however many steps
// it runs, and setup tensors stay usable to the end. The activations (64
// KiB each) go back two backward passes after they were made; a leak
// would add at least 128 KiB a step. The small tensors (the losses) go
// back when the garbage collector finds them, so their count may vary.
func TestTrainingLoopMemoryIsBounded(t *testing.T) {
	src := `const { tensor, nn, optim } = require("zeroeng");
const x = tensor.randn([1024, 8]), y = tensor.randn([1024, 1]);  // setup: lives to the end
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
  live.push(tensor.stats().liveBytes);
}
console.log(live[59] - live[10] < (1 << 20), x.sum().item() === x.sum().item());
`
	out, err := runScript(t, t.TempDir(), "loop.js", src, Options{AutoRelease: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.TrimSpace(out) != "true true" {
		t.Fatalf("live memory grew with the steps, or setup data was released: %s", out)
	}
}

// TestSmallTensorsGoBackWhenUnreachable: the small tensors a loop drops
// are released once the garbage collector has found them (at the next
// backward pass), so that they do not pile up either.
func TestSmallTensorsGoBackWhenUnreachable(t *testing.T) {
	r, err := New(Options{AutoRelease: true, Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	run := func(src string) {
		t.Helper()
		if _, err := r.RunString("loop.js", src); err != nil {
			t.Fatal(err)
		}
	}
	run(`const { tensor, nn } = require('zeroeng');
const w = nn.Parameter(tensor.ones([2]));
function step() { w.mul(2).sum().backward(); }
for (let i = 0; i < 3; i++) step();`)
	before := r.rt.Stats().LiveTensors
	run(`for (let i = 0; i < 200; i++) step();`)
	if grown := r.rt.Stats().LiveTensors; grown < before+100 {
		t.Logf("the collector ran during the loop: %d live tensors, %d before", grown, before)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		run(`step(); step();`)
		after := r.rt.Stats().LiveTensors
		if after <= before+8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d live tensors after the collector ran, %d before the loop", after, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAutomaticReleaseRules(t *testing.T) {
	cases := []struct {
		name, body, want, err string
	}{
		{"two steps later a tensor over 4 KiB is released", `
const big = nn.Parameter(tensor.ones([2048]));
let old;
for (let i = 0; i < 4; i++) { const a = big.mul(2); if (i === 1) old = a; a.sum().backward(); }
old.sum();`, "", "released automatically at backward pass 3"},
		{"a small tensor lives while the script refers to it", `
let old;
for (let i = 0; i < 4; i++) { const l = w.mul(2).sum(); if (i === 1) old = l; l.backward(); }
console.log(old.item());`, "4", ""},
		{"a best value", `
let best = null;
for (let i = 0; i < 6; i++) { const l = w.mul(i === 2 ? 0.5 : 2).sum(); if (best === null || l.item() < best.item()) best = l; l.backward(); }
console.log(best.item());`, "1", ""},
		{"a running total", `
let total = tensor.zeros([]), n = 0;
for (let i = 0; i < 6; i++) { const l = w.mul(2).sum(); l.backward(); if (i % 3 === 2) { total = total.add(l.detach()); n++; } }
console.log(total.item() / n);`, "4", ""},
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
