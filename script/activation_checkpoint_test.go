package script

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// TestActivationCheckpointFromJS: nn.utils.checkpoint gives the gradients
// without checkpointing, with non-tensor arguments passed through to the
// recomputation (goja reuses its argument stack after the call: the
// arguments must be kept), dropout replayed, and a checkpointWrapper'd
// module; a function that throws or returns no tensor is an error.
func TestActivationCheckpointFromJS(t *testing.T) {
	src := `const { tensor, nn } = require("zeroeng");
tensor.manualSeed(3);
const lin = nn.Linear(4, 4), drop = nn.Dropout(0.3);
const f = (x, opts) => drop(lin(x).tanh()).mul(opts.scale);
const grads = ck => {
  tensor.manualSeed(5);
  lin.zeroGrad();
  const x = tensor.randn([3, 4], { requiresGrad: true });
  const y = ck ? nn.utils.checkpoint(f, x, { scale: 2 }) : f(x, { scale: 2 });
  f(tensor.ones([1, 4]), { scale: 7 }); // other calls between forward and backward
  y.square().sum().backward();
  return JSON.stringify([x.grad.toArray(), lin.weight.grad.toArray(), lin.bias.grad.toArray()]);
};
const wrapped = nn.utils.checkpointWrapper(nn.Sequential(nn.Linear(4, 2)));
const x = tensor.ones([2, 4]);
wrapped(x).sum().backward();
console.log((grads(false) === grads(true)) + " " + (wrapped[0].weight.grad !== null));`
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(lines, "\n"); got != "true true" {
		t.Errorf("got %q, want the same gradients with checkpointing and a wrapped module's gradient", got)
	}
	// Under DDP with a comm hook (a JavaScript one, called per bucket), on
	// two ranks: the parameters' gradients reach the hook from the nested
	// backward, and the averaged gradients are those without checkpointing.
	ddp := `const { tensor, nn, dist } = require("zeroeng");
const run = ck => {
  tensor.manualSeed(1);
  const block = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4));
  if (ck) nn.utils.checkpointWrapper(block);
  const model = nn.parallel.DistributedDataParallel(nn.Sequential(block, nn.Linear(4, 1)));
  const state = { calls: 0 };
  model.registerCommHook(state, (st, bucket) => { st.calls++; return dist.allReduce(bucket.buffer.div(dist.worldSize)).then(t => t); });
  tensor.manualSeed(10 + dist.rank);
  model(tensor.randn([3, 4])).square().sum().backward();
  return JSON.stringify([state.calls > 0, model.parameters().map(p => p.grad.toArray())]);
};
const a = run(false), b = run(true);
console.log(a === b);`
	lines, err = runJob(t, 2, ddp, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(lines, "\n"); got != "[0] true\n[1] true" && got != "true\ntrue" {
		t.Errorf("DDP with a comm hook: %q, want the same gradients on both ranks with checkpointing", got)
	}
	for _, c := range []struct{ src, want string }{
		{`nn.utils.checkpoint(x => { throw new Error("boom"); }, tensor.ones([1]))`, "boom"},
		{`nn.utils.checkpoint(x => 3, tensor.ones([1]))`, "fn must return one tensor, got 3"},
		{`nn.utils.checkpoint(5, tensor.ones([1]))`, "fn must be a function"},
		{`nn.utils.checkpointWrapper({})`, "expects a module"},
	} {
		_, err := runJob(t, 1, `const { tensor, nn } = require("zeroeng"); `+c.src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
}
