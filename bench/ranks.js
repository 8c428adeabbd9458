// Rank scaling (bench/sidebyside.sh ranks; bench/torch_ranks.py is PyTorch's twin): a model trained
// data-parallel (DistributedDataParallel) with a fixed batch per rank on random data, Adam. Rank 0
// prints one JSON line: the median step (ms) and the samples a second over every rank. Run it on 1
// rank and on 2 to compare:
//
//   zeroeng run --quiet [--threads 1] bench/ranks.js -- MODEL [STEPS]
//   zeroeng run --quiet --nproc 2 bench/ranks.js -- MODEL [STEPS]
//
// MODEL: cnn, the Fashion-MNIST CNN of bench/cnn.js, batch 64 per rank; mlp, the MLP of
// samples/fashion_mnist.js (784-256-128-10), batch 64 per rank.
const { tensor, nn, optim, dist } = require("zeroeng");
const F = nn.functional;
const [name, stepsArg] = process.argv.slice(2);
const steps = Number(stepsArg || 60);
const models = {
  cnn: () => nn.Sequential(
    nn.Conv2d(1, 16, 3, { padding: 1 }), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, { padding: 1 }), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(32 * 7 * 7, 10)),
  mlp: () => nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)),
};
const inputs = { cnn: [64, 1, 28, 28], mlp: [64, 784] };
if (!models[name] || !(Number.isInteger(steps) && steps >= 10)) {
  console.error(`usage: zeroeng run bench/ranks.js -- ${Object.keys(models).join("|")} [STEPS >= 10]`);
  process.exit(2);
}
tensor.manualSeed(0);
let model = models[name]();
if (dist.worldSize > 1) model = nn.parallel.DistributedDataParallel(model);
const opt = optim.Adam(model.parameters(), { lr: 1e-3 });
tensor.manualSeed(1 + dist.rank); // each rank its own data
const x = tensor.rand(inputs[name]).keep();
const y = tensor.randint(0, 10, [inputs[name][0]]).keep();

// Timed as bench/torch_ranks.py times PyTorch's: the ranks meet at a barrier before each step, each
// step is timed on its own (performance.now), the first 3 warm up, and the median is the step.
const stepMs = [];
for (let i = 0; i < steps; i++) {
  if (dist.worldSize > 1) dist.barrier().wait();
  const t0 = performance.now();
  tensor.scope(() => {
    opt.zeroGrad();
    F.crossEntropy(model.forward(x), y).backward();
    opt.step();
  });
  if (i >= 3) stepMs.push(performance.now() - t0);
}
const s = [...stepMs].sort((p, q) => p - q);
const ms = s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
if (dist.rank === 0) {
  console.log(JSON.stringify({ workload: `${name}-ranks`, world: dist.worldSize, step_ms: Number(ms.toFixed(3)),
    samples_per_s: Math.round(dist.worldSize * inputs[name][0] * 1000 / ms) }));
}
