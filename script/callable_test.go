package script

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// TestModulesCallable: model(x) is model.forward(x), for the built-in
// layers, a Sequential, a subclass (which may name attributes name and
// length) and the DDP wrapper; a module is still an nn.Module with the
// same state dict.
func TestModulesCallable(t *testing.T) {
	src := `const { tensor, nn } = require("zeroeng");
tensor.manualSeed(0);
const seq = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2));
const x = tensor.randn([5, 4]);
const same = (a, b) => JSON.stringify(a.toArray()) === JSON.stringify(b.toArray());
class Net extends nn.Module {
  constructor() { super(); this.name = "net"; this.length = 3; this.fc = nn.Linear(4, 2); }
  forward(x, scale) { return this.fc(x).mul(scale); }
}
const net = new Net();
const ddp = nn.parallel.DistributedDataParallel(nn.Linear(4, 2));
console.log([same(seq(x), seq.forward(x)), same(net(x, 2), net.forward(x, 2)), same(ddp(x), ddp.forward(x)),
  seq instanceof nn.Module, net.name, net.length, Object.keys(net.stateDict()).join(","), nn.ReLU()(tensor.tensor([-1, 2])).toArray().join(",")].join(" "));`
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(lines, "\n"), "true true true true net 3 fc.weight,fc.bias 0,2"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
