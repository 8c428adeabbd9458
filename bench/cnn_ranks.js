// Rank scaling of the Fashion-MNIST CNN (bench/sidebyside.sh cnn-ranks; bench/torch_cnn_ranks.py is
// PyTorch's twin): the CNN of bench/cnn.js trained data-parallel (DistributedDataParallel) with batch
// 64 per rank on random images, Adam. Rank 0 prints one JSON line: the median step (ms) and the samples
// a second over every rank. Run it on 1 rank and on 2 to compare:
//
//   zeroeng run --quiet bench/cnn_ranks.js [-- STEPS]
//   zeroeng run --quiet --nproc 2 bench/cnn_ranks.js [-- STEPS]
const { tensor, nn, optim, dist } = require("zeroeng");
const F = nn.functional;
const steps = Number(process.argv[2] || 40);
tensor.manualSeed(0);

let model = nn.Sequential(
  nn.Conv2d(1, 16, 3, { padding: 1 }), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(16, 32, 3, { padding: 1 }), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
  nn.Flatten(), nn.Linear(32 * 7 * 7, 10));
if (dist.worldSize > 1) model = nn.parallel.DistributedDataParallel(model);
const opt = optim.Adam(model.parameters(), { lr: 1e-3 });
tensor.manualSeed(1 + dist.rank); // each rank its own data
const x = tensor.rand([64, 1, 28, 28]).keep();
const y = tensor.randint(0, 10, [64]).keep();

const stepMs = [];
for (let i = 0; i < steps; i++) {
  if (dist.worldSize > 1) dist.barrier(); // every rank times the same steps
  const t0 = Date.now();
  tensor.scope(() => {
    opt.zeroGrad();
    F.crossEntropy(model.forward(x), y).backward();
    opt.step();
  });
  if (i >= 3) stepMs.push(Date.now() - t0);
}
const s = [...stepMs].sort((p, q) => p - q);
const ms = s[Math.floor(s.length / 2)];
if (dist.rank === 0) {
  console.log(JSON.stringify({ workload: "cnn-ranks", world: dist.worldSize, step_ms: ms,
    samples_per_s: Math.round(dist.worldSize * 64 * 1000 / ms) }));
}
