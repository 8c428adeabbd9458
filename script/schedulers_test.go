package script

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// TestSchedulersFromJS: the schedulers of torch.optim.lr_scheduler from a
// script give PyTorch 1.13's learning rates (the values of
// engine/optim/testdata/gen_optim.py's fixtures), and their options are
// checked.
func TestSchedulersFromJS(t *testing.T) {
	src := `const { tensor, optim } = require("zeroeng");
const lrs = (make, n) => {
  const opt = optim.SGD([tensor.zeros([1], { requiresGrad: true })], { lr: 0.1 });
  const s = make(opt), out = [s.getLastLr()[0]];
  for (let i = 0; i < n; i++) { opt.step(); s.step(); out.push(s.getLastLr()[0]); }
  return out.map(v => v.toPrecision(12)).join(" ");
};
console.log(lrs(o => optim.lrScheduler.ExponentialLR(o, { gamma: 0.9 }), 3));
console.log(lrs(o => optim.lrScheduler.MultiStepLR(o, { milestones: [2, 5, 5], gamma: 0.5 }), 6));
console.log(lrs(o => optim.lrScheduler.LinearLR(o, { startFactor: 0.25, endFactor: 0.9, totalIters: 4 }), 5));
console.log(lrs(o => optim.lrScheduler.CosineAnnealingLR(o, { TMax: 5, etaMin: 0.01 }), 6));
{
  const opt = optim.SGD([tensor.zeros([1], { requiresGrad: true })], { lr: 0.1 });
  const s = optim.lrScheduler.ReduceLROnPlateau(opt, { factor: 0.5, patience: 1, cooldown: 1, minLr: 0.02 });
  const out = [];
  for (const m of [1.0, 0.9, 0.95, 0.95, 0.91, 0.96, 0.97, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.4]) {
    s.step(out.length % 2 ? tensor.tensor([m], { dtype: "float64" }).sum() : m);
    out.push(s.getLastLr()[0].toPrecision(12));
  }
  const sd = s.stateDict();
  s.loadStateDict(sd);
  console.log("plateau " + out.join(" ") + " " + JSON.stringify(sd));
}`
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"0.100000000000 0.0900000000000 0.0810000000000 0.0729000000000",
		"0.100000000000 0.100000000000 0.0500000000000 0.0500000000000 0.0500000000000 0.0125000000000 0.0125000000000",
		"0.0250000000000 0.0412500000000 0.0575000000000 0.0737500000000 0.0900000000000 0.0900000000000",
		"0.100000000000 0.0914057647469 0.0689057647469 0.0410942352531 0.0185942352531 0.0100000000000 0.0185942352531",
		// PyTorch's, engine/optim/testdata's plateau_min.
		"plateau 0.100000000000 0.100000000000 0.100000000000 0.0500000000000 0.0500000000000 0.0500000000000 0.0250000000000 0.0250000000000 0.0250000000000 0.0200000000000 0.0200000000000 0.0200000000000 0.0200000000000 0.0200000000000 0.0200000000000",
	}
	got := strings.Join(lines, "\n")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("no line %q in\n%s", w, got)
		}
	}
	for _, c := range []struct{ src, want string }{
		{`optim.lrScheduler.CosineAnnealingLR(opt, { T_max: 5 })`, "did you mean TMax?"},
		{`optim.lrScheduler.CosineAnnealingLR(opt, { etaMin: 0 })`, "TMax is required"},
		{`optim.lrScheduler.MultiStepLR(opt, { milestones: [5, 2] })`, "milestones must be increasing"},
		{`optim.lrScheduler.ExponentialLR(opt, {})`, "gamma is required"},
		{`optim.lrScheduler.LinearLR(opt, { startFactor: 0 })`, "start_factor must be in (0, 1]"},
		{`optim.lrScheduler.ReduceLROnPlateau(opt, { min_lr: 0.1 })`, "did you mean minLr?"},
		{`optim.lrScheduler.ReduceLROnPlateau(opt, { factor: 2 })`, "factor should be < 1.0"},
	} {
		_, err := runJob(t, 1, `const { tensor, optim } = require("zeroeng"); const opt = optim.SGD([tensor.zeros([1], { requiresGrad: true })], { lr: 0.1 }); `+c.src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
}

// TestMoreSchedulersFromJS: OneCycleLR (with the momentum it cycles in the
// optimizer's groups), SequentialLR over schedulers made from the script,
// ConstantLR and PolynomialLR give PyTorch 1.13's rates and momenta (the
// values below are PyTorch's); SequentialLR's state dict round-trips; bad
// arguments are errors naming them.
func TestMoreSchedulersFromJS(t *testing.T) {
	src := `const { tensor, optim } = require("zeroeng");
const run = (makeOpt, make, n, mom) => {
  const opt = makeOpt([tensor.zeros([1], { requiresGrad: true })]);
  const s = make(opt), out = [s.getLastLr()[0]], m = mom ? [mom(opt.paramGroups[0])] : [];
  for (let i = 0; i < n; i++) { opt.step(); s.step(); out.push(s.getLastLr()[0]); if (mom) m.push(mom(opt.paramGroups[0])); }
  return JSON.stringify([out, m]);
};
const sgd = ps => optim.SGD(ps, { lr: 0.1 }), L = optim.lrScheduler;
console.log("0 " + run(ps => optim.SGD(ps, { lr: 0.1, momentum: 0.9 }), o => L.OneCycleLR(o, { maxLr: 0.5, totalSteps: 6 }), 5, g => g.momentum));
console.log("1 " + run(ps => optim.Adam(ps, { lr: 0.1 }), o => L.OneCycleLR(o, { maxLr: [0.5], totalSteps: 6, threePhase: true, annealStrategy: "linear" }), 5, g => g.betas[0]));
console.log("2 " + run(sgd, o => L.SequentialLR(o, { schedulers: [L.LinearLR(o, { startFactor: 0.1, totalIters: 3 }), L.CosineAnnealingLR(o, { TMax: 6, etaMin: 0.001 })], milestones: [3] }), 8));
console.log("3 " + run(sgd, o => L.ConstantLR(o, { factor: 0.4, totalIters: 3 }), 4));
console.log("4 " + run(sgd, o => L.PolynomialLR(o, { totalIters: 4, power: 2 }), 5));
{
  // A resume: a fresh optimizer and scheduler, the optimizer's state (its
  // rates) and the scheduler's loaded.
  const mk = opt => L.SequentialLR(opt, { schedulers: [L.ConstantLR(opt, { factor: 0.5, totalIters: 2 }), L.ExponentialLR(opt, { gamma: 0.9 })], milestones: [2] });
  const o1 = sgd([tensor.zeros([1], { requiresGrad: true })]), a = mk(o1);
  for (let i = 0; i < 3; i++) a.step();
  const sd = JSON.parse(JSON.stringify(a.stateDict()));
  const o2 = sgd([tensor.zeros([1], { requiresGrad: true })]), b = mk(o2);
  o2.loadStateDict(o1.stateDict());
  b.loadStateDict(sd);
  a.step(); b.step();
  console.log("sequential resume " + (a.getLastLr()[0] === b.getLastLr()[0]) + " " + b.lastEpoch + " " + sd._schedulers.length);
}`
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2][]float64{
		{{0.020000000000000018, 0.49720771772545586, 0.4058728269748815, 0.23131855133348753, 0.0667387650944153, 2e-06}, {0.95, 0.8505584586887436, 0.8688255099070633, 0.9037365046793212, 0.9366525935914912, 0.95}},
		{{0.02, 0.3799999999999999, 0.017647294117647056, 0.011765529411764704, 0.0058837647058823505, 1.9999999999985307e-06}, {0.95, 0.875, 0.95, 0.95, 0.95, 0.95}},
		{{0.010000000000000002, 0.04, 0.07, 0.1, 0.09336825748732973, 0.07525000000000001, 0.0505, 0.025750000000000012, 0.007631742512670284}, {}},
		{{0.04000000000000001, 0.04000000000000001, 0.04000000000000001, 0.10000000000000002, 0.10000000000000002}, {}},
		{{0.1, 0.05625, 0.024999999999999998, 0.0062499999999999995, 0.0, 0.0}, {}},
	}
	byLabel := map[string]string{}
	for _, l := range lines {
		label, rest, _ := strings.Cut(l, " ")
		byLabel[label] = rest
	}
	for i, w := range want {
		var got [2][]float64
		line := byLabel[strconv.Itoa(i)]
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d: %v: %q", i, err, line)
		}
		for k := range 2 {
			if len(got[k]) != len(w[k]) {
				t.Errorf("line %d: %v, PyTorch %v", i, got, w)
				continue
			}
			for j := range w[k] {
				if math.Abs(got[k][j]-w[k][j]) > 1e-15*math.Abs(w[k][j]) {
					t.Errorf("line %d: %v, PyTorch %v", i, got[k], w[k])
					break
				}
			}
		}
	}
	if got := byLabel["sequential"]; got != "resume true 4 2" {
		t.Errorf("SequentialLR after a state dict round trip: %q", got)
	}
	for _, c := range []struct{ src, want string }{
		{`optim.lrScheduler.OneCycleLR(opt, { totalSteps: 5 })`, "maxLr is required"},
		{`optim.lrScheduler.OneCycleLR(opt, { maxLr: 1 })`, "define either total_steps or (epochs and steps_per_epoch)"},
		{`optim.lrScheduler.OneCycleLR(opt, { maxLr: 1, total_steps: 5 })`, "did you mean totalSteps?"},
		{`optim.lrScheduler.OneCycleLR(opt, { maxLr: [1, 2], totalSteps: 5 })`, "expected 1 values for max_lr, got 2"},
		{`optim.lrScheduler.OneCycleLR(optim.Adagrad([tensor.zeros([1], { requiresGrad: true })]), { maxLr: 1, totalSteps: 5 })`, "cycleMomentum: false"},
		{`const s = optim.lrScheduler.OneCycleLR(opt, { maxLr: 1, totalSteps: 2 }); s.step(); s.step(); s.step()`, "tried to step 4 times; the specified number of total steps is 2"},
		{`optim.lrScheduler.SequentialLR(opt, { schedulers: [optim.lrScheduler.StepLR(opt, 2)], milestones: [3] })`, "one milestone fewer than schedulers"},
		{`optim.lrScheduler.SequentialLR(opt, { schedulers: [{}], milestones: [] })`, "schedulers[0] is"},
		{`const o2 = optim.SGD([tensor.zeros([1], { requiresGrad: true })], { lr: 1 }); optim.lrScheduler.SequentialLR(opt, { schedulers: [optim.lrScheduler.StepLR(o2, 2)], milestones: [] })`, "another optimizer"},
		{`optim.lrScheduler.ConstantLR(opt, { factor: 2 })`, "factor must be between 0 and 1"},
	} {
		_, err := runJob(t, 1, `const { tensor, optim } = require("zeroeng"); const opt = optim.SGD([tensor.zeros([1], { requiresGrad: true })], { lr: 0.1 }); `+c.src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
}
