// The CNN workload of bench/sidebyside.sh (bench/torch_cnn.py is PyTorch's twin): a small Fashion-MNIST
// CNN, Conv2d 1→16 → BatchNorm2d → ReLU → MaxPool2d → Conv2d 16→32 → BatchNorm2d → ReLU → MaxPool2d →
// Linear, batch 64 of random 28×28 images, Adam. Prints one JSON line: the median training step (ms),
// the median of an evaluation forward over 10,000 images in batches of 1,000, and each layer's
// forward + backward (ms, the gradient of its output's sum), timed in isolation at the shapes the
// model gives it.
//
//   zeroeng run --quiet bench/cnn.js [-- STEPS]
const { tensor, nn, optim } = require("zeroeng");
const F = nn.functional;
const steps = Number(process.argv[2] || 40);
tensor.manualSeed(0);

const model = nn.Sequential(
  nn.Conv2d(1, 16, 3, { padding: 1 }), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(16, 32, 3, { padding: 1 }), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
  nn.Flatten(), nn.Linear(32 * 7 * 7, 10));
const opt = optim.Adam(model.parameters(), { lr: 1e-3 });
const x = tensor.rand([64, 1, 28, 28]).keep();
const y = tensor.randint(0, 10, [64]).keep();

const median = a => { const s = [...a].sort((p, q) => p - q); return s[Math.floor(s.length / 2)]; };
const now = () => performance.now(); // milliseconds with a fraction; layers are timed over groups of RUNS runs
const RUNS = 20;

const stepMs = [];
for (let i = 0; i < steps; i++) {
  const t0 = now();
  tensor.scope(() => {
    opt.zeroGrad();
    F.crossEntropy(model.forward(x), y).backward();
    opt.step();
  });
  if (i >= 3) stepMs.push(now() - t0);
}

model.eval();
const evalX = tensor.rand([1000, 1, 28, 28]).keep();
const evalMs = [];
for (let r = 0; r < 3; r++) {
  const t0 = now();
  tensor.noGrad(() => { for (let b = 0; b < 10; b++) tensor.scope(() => model.forward(evalX).argmax(1)); });
  evalMs.push(now() - t0);
}
model.train();

// Each layer alone, at its place's input shape: forward, then backward of the output's sum.
const layers = {};
let input = x;
const names = ["conv1", "bn1", "relu1", "pool1", "conv2", "bn2", "relu2", "pool2"];
for (let i = 0; i < names.length; i++) {
  const layer = model[i];
  const inp = input.detach().requiresGrad_(true).keep();
  const ms = [];
  for (let g = 0; g < 6; g++) {
    const t0 = now();
    for (let r = 0; r < RUNS; r++) {
      tensor.scope(() => { layer.forward(inp).sum().backward(); });
      inp.grad = null;
    }
    if (g > 0) ms.push((now() - t0) / RUNS);
  }
  layers[names[i]] = Number(median(ms).toFixed(2));
  input = tensor.noGrad(() => layer.forward(input)).keep();
}
console.log(JSON.stringify({ workload: "cnn", step_ms: Number(median(stepMs).toFixed(2)), eval_ms: Number(median(evalMs).toFixed(1)), layers_ms: layers }));
