// The setting every parity scenario shares with gen.py: the model with
// PyTorch's initial weights, the batch, this rank's rows of it, and the
// result line the Go test compares with PyTorch's (fixtures.json).
const { tensor, nn, dist } = require("zeroeng");
const fixtures = require("./fixtures.json");

// model is Linear(6, 10) - Tanh - Linear(10, 8) - Tanh - Linear(8, 3)
// with the weights torch.manual_seed(0) gives it.
function model() {
  const net = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 3));
  tensor.noGrad(() => {
    for (const [name, p] of net.namedParameters()) {
      p.copy_(tensor.fromArray(fixtures.init[name], p.shape, "float32"));
    }
  });
  return net;
}

const x = tensor.fromArray(fixtures.x, [12, 6], "float32");
const y = tensor.fromArray(fixtures.y, [12], "int64");

// rows returns rows [from, from + n) of the batch.
const rows = (from, n) => [x.narrow(0, from, n), y.narrow(0, from, n)];

// shard is this rank's equal share of the batch.
function shard() {
  const per = 12 / dist.worldSize;
  return rows(dist.rank * per, per);
}

// values lists a tensor's (or a number's) elements in order.
const values = v => [typeof v === "number" ? v : v.toArray()].flat(Infinity);

// report prints this rank's result as one JSON line.
function report(net, out) {
  const params = {};
  for (const [name, p] of net.namedParameters()) params[name] = values(p);
  console.log(JSON.stringify({ ...out, params }));
}

module.exports = { model, rows, shard, values, report, STEPS: 5 };
