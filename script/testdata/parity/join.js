// Uneven inputs under PyTorch's Join context: zeroeng run --nproc N join.js -- [ddp]
// Rank r trains 3 + r steps on two rows each, with DDP and
// ZeroRedundancyOptimizer (Adam) joined, or with "ddp" DDP and a plain
// Adam. Both must give what PyTorch's DDP with a local Adam gives under
// ddp.join(), the reference PyTorch's own test_zero_join checks ZeRO
// against: a rank that ran out of inputs contributes zeros, and ZeRO steps
// its shard with the averaged gradients of the others.
const { nn, optim, dist, zero } = require("zeroeng");
const { model, rows, report } = require("./common.js");

const plain = process.argv[2] === "ddp";
const net = model();
const ddp = nn.parallel.DistributedDataParallel(net);
const opt = plain ? optim.Adam(net.parameters(), { lr: 0.01 })
  : zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adam", lr: 0.01, logMemory: false });
const out = { losses: [] };
dist.join(plain ? [ddp] : [ddp, opt], () => {
  for (let step = 0; step < 3 + dist.rank; step++) {
    const [x, y] = rows((2 * (dist.rank + step)) % 12, 2);
    opt.zeroGrad();
    const loss = nn.functional.crossEntropy(ddp.forward(x), y);
    loss.backward();
    opt.step();
    out.losses.push(loss.item());
  }
});
report(net, out);
