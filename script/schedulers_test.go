package script

import (
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
