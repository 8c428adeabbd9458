package script

import (
	"bytes"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// TestAutocastFromJS: amp.autocast runs products in bfloat16 and the loss
// in float32 with float32 weights and gradients; enabled: false inside a
// region turns it off; outside nothing is cast; fn's value is returned.
func TestAutocastFromJS(t *testing.T) {
	src := `const { tensor, nn, amp } = require("zeroeng");
const lin = nn.Linear(4, 3);
const x = tensor.ones([2, 4]);
const [y, inner, loss] = amp.autocast("bfloat16", () => {
  const y = lin.forward(x);
  const inner = amp.autocast({ enabled: false }, () => lin.forward(x));
  return [y, inner, nn.functional.mseLoss(y, tensor.zeros([2, 3]))];
});
loss.backward();
console.log([y.dtype, inner.dtype, loss.dtype, lin.weight.grad.dtype, lin.forward(x).dtype].join(" "));`
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(lines, "\n"); got != "bfloat16 float32 float32 float32 float32" {
		t.Errorf("types: %q, want products bfloat16, disabled float32, loss float32, gradient float32, outside float32", got)
	}
	for _, c := range []struct{ src, want string }{
		{`amp.autocast("float32", () => 1)`, "dtype must be bfloat16 or float16"},
		{`amp.autocast({ dtype: "bfloat16", enable: true }, () => 1)`, `unknown option "enable"`},
		{`amp.autocast("bfloat16")`, "fn must be a function"},
	} {
		_, err := runJob(t, 1, `const { amp } = require("zeroeng"); `+c.src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
}

// TestGradScalerFromJS: PyTorch's GradScaler rules. The loss is scaled,
// the gradients come back unscaled (clipping after unscale_ sees the real
// ones); a step with an infinite gradient is skipped and the scale backed
// off; after growthInterval clean steps it grows; the state round-trips;
// misuse is PyTorch's error.
func TestGradScalerFromJS(t *testing.T) {
	src := `const { tensor, optim, amp } = require("zeroeng");
const p = tensor.ones([3], { requiresGrad: true });
const opt = optim.SGD([p], { lr: 0.5 });
const scaler = amp.GradScaler({ initScale: 1024, growthInterval: 2 });
const out = [];
for (const k of [1, Infinity, 1, 1, 1]) {
  opt.zeroGrad();
  scaler.scale(p.mul(k).sum()).backward();
  scaler.unscale_(opt);
  const g = p.grad.toArray()[0];
  scaler.step(opt);
  scaler.update();
  out.push([g, p.toArray()[0], scaler.getScale()].join(","));
}
const sd = scaler.stateDict();
const other = amp.GradScaler();
other.loadStateDict(JSON.parse(JSON.stringify(sd)));
console.log(out.join(" ") + " | " + other.getScale() + " " + sd._growth_tracker);`
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Step 1 clean (tracker 1), 2 infinite (skipped, 512), 3 clean (1), 4
	// clean (grows to 1024), 5 clean (tracker 1).
	want := "1,0.5,1024 Infinity,0.5,512 1,0,512 1,-0.5,1024 1,-1,1024 | 1024 1"
	if got := strings.Join(lines, "\n"); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	for _, c := range []struct{ src, want string }{
		{`s.scale(p.sum()).backward(); s.unscale_(opt); s.unscale_(opt)`, "unscale_() has already been called on this optimizer since the last update()"},
		{`s.scale(p.sum()).backward(); s.step(opt); s.step(opt)`, "step() has already been called since the last update()"},
		{`amp.GradScaler({ growthFactor: 0.5 })`, "growthFactor must be above 1.0"},
		{`amp.GradScaler({ init_scale: 2 })`, "did you mean initScale?"},
		{`s.scale("loss")`, "expects a tensor or an array of tensors"},
	} {
		_, err := runJob(t, 1, `const { tensor, optim, amp } = require("zeroeng"); const p = tensor.ones([3], { requiresGrad: true }); const opt = optim.SGD([p], { lr: 0.1 }); const s = amp.GradScaler(); `+c.src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
}

// TestGradScalerWarnsWhenEveryStepIsSkipped: a GradScaler that has skipped
// every step of a whole growth interval says so once, with the step and
// the scale, on the rank's stderr; a clean step starts the count again.
func TestGradScalerWarnsWhenEveryStepIsSkipped(t *testing.T) {
	src := `const { tensor, optim, amp } = require("zeroeng");
const p = tensor.ones([3], { requiresGrad: true });
const opt = optim.SGD([p], { lr: 0.5 });
const scaler = amp.GradScaler({ initScale: 1024, growthInterval: 3 });
for (const k of [Infinity, Infinity, 1, Infinity, Infinity, Infinity, NaN, NaN, NaN]) {
  opt.zeroGrad();
  scaler.scale(p.mul(k).sum()).backward();
  scaler.step(opt);
  scaler.update();
}`
	var stdout, stderr bytes.Buffer
	r, err := New(Options{AutoRelease: true, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.RunString("s.js", src); err != nil {
		t.Fatal(err)
	}
	// Steps 1-2 skipped (512, 256), 3 clean, 4-6 skipped: 128, 64, 32.
	want := "zeroeng: amp.GradScaler: the last 3 steps (growthInterval) were all skipped for infinite or NaN gradients, up to step 6; the scale is now 32:"
	if got := stderr.String(); strings.Count(got, "amp.GradScaler") != 1 || !strings.Contains(got, want) {
		t.Errorf("stderr %q, want once %q", got, want)
	}
}
