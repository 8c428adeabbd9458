// ResNet: a small residual network (PyTorch's BasicBlock: two 3×3 convolutions with batch norm, the
// input added back, a 1×1 strided convolution where the shape changes; global average pooling; a
// linear classifier) learning to classify synthetic 32×32 RGB images: each of 4 classes is a bright
// square in one quadrant, under noise. bench/torch_resnet.py is its PyTorch twin.
//
//   zeroeng run samples/resnet.js                       # 1 rank
//   zeroeng run --nproc 2 samples/resnet.js             # 2 ranks: DistributedDataParallel, each half a batch
//   zeroeng run samples/resnet.js -- --steps 100 --batch 64 --width 16
//
// Prints the loss as it learns, the accuracy on 512 held-out images, and a JSON line with the median
// step time.
const { tensor, nn, optim, dist } = require("zeroeng");
const F = nn.functional;

const opts = { steps: 60, batch: 32, width: 16, lr: 0.05, seed: tensor.initialSeed() };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const key = { "--steps": "steps", "--batch": "batch", "--width": "width", "--lr": "lr", "--seed": "seed" }[argv[i]];
  if (!key) {
    console.error(`resnet.js: unknown argument ${argv[i]} (--steps N --batch B --width W --lr X --seed S)`);
    process.exit(2);
  }
  const v = Number(argv[++i]);
  if (!Number.isFinite(v) || v <= 0) {
    console.error(`resnet.js: ${argv[i - 1]} takes a positive number`);
    process.exit(2);
  }
  opts[key] = v;
}
const world = dist.worldSize, rank = dist.rank;
if (opts.batch % world !== 0) {
  console.error(`resnet.js: --batch ${opts.batch} is not divisible by the ${world} ranks`);
  process.exit(2);
}

class BasicBlock extends nn.Module {
  constructor(inC, outC, stride) {
    super();
    this.conv1 = nn.Conv2d(inC, outC, 3, { stride, padding: 1, bias: false });
    this.bn1 = nn.BatchNorm2d(outC);
    this.conv2 = nn.Conv2d(outC, outC, 3, { padding: 1, bias: false });
    this.bn2 = nn.BatchNorm2d(outC);
    this.downsample = stride !== 1 || inC !== outC
      ? nn.Sequential(nn.Conv2d(inC, outC, 1, { stride, bias: false }), nn.BatchNorm2d(outC)) : null;
  }
  forward(x) {
    const out = this.bn2.forward(this.conv2.forward(this.bn1.forward(this.conv1.forward(x)).relu()));
    return out.add(this.downsample ? this.downsample.forward(x) : x).relu();
  }
}

class ResNet extends nn.Module {
  constructor(width, classes) {
    super();
    this.stem = nn.Sequential(nn.Conv2d(3, width, 3, { padding: 1, bias: false }), nn.BatchNorm2d(width), nn.ReLU());
    this.layer1 = nn.Sequential(new BasicBlock(width, width, 1), new BasicBlock(width, width, 1));
    this.layer2 = nn.Sequential(new BasicBlock(width, 2 * width, 2), new BasicBlock(2 * width, 2 * width, 1));
    this.pool = nn.AdaptiveAvgPool2d(1);
    this.fc = nn.Linear(2 * width, classes);
  }
  forward(x) {
    const h = this.layer2.forward(this.layer1.forward(this.stem.forward(x)));
    return this.fc.forward(this.pool.forward(h).flatten(1));
  }
}

// Images of class c hold a bright 12×12 square in quadrant c, under unit noise: the same draws on every
// rank (the generator is seeded alike), each rank taking its own part of every batch.
tensor.manualSeed(opts.seed);
const classes = 4;
function images(n) {
  const y = tensor.randint(0, classes, [n]);
  const mask = tensor.zeros([classes, 1, 32, 32]);
  tensor.noGrad(() => {
    for (let c = 0; c < classes; c++) {
      const r = c < 2 ? 2 : 18, k = c % 2 === 0 ? 2 : 18;
      mask.narrow(0, c, 1).narrow(2, r, 12).narrow(3, k, 12).fill_(2);
    }
  });
  const x = tensor.randn([n, 3, 32, 32]).add(mask.indexSelect(0, y));
  return [x, y];
}
const [xTest, yTest] = images(512).map(t => t.keep());

const model0 = new ResNet(opts.width, classes);
const model = world > 1 ? nn.parallel.DistributedDataParallel(model0) : model0;
const opt = optim.SGD(model.parameters(), { lr: opts.lr, momentum: 0.9, weightDecay: 5e-4 });
const per = opts.batch / world;
const stepMs = [];
let loss = NaN;
for (let step = 1; step <= opts.steps; step++) {
  const start = performance.now();
  tensor.scope(() => {
    const [x, y] = images(opts.batch);
    const mine = t => t.narrow(0, rank * per, per);
    opt.zeroGrad();
    const l = F.crossEntropy(model.forward(mine(x)), mine(y));
    l.backward();
    opt.step();
    const t = l.detach().clone();
    if (world > 1) dist.allReduce(t, "avg").wait();
    loss = t.item();
  });
  if (step > 3) stepMs.push(performance.now() - start);
  if (rank === 0 && (step % 10 === 0 || step === 1)) console.log(`step ${step}  loss ${loss.toFixed(4)}`);
}
model0.eval();
// A batch at a time, each in a scope of its own: a scope keeps every activation made in it until it
// closes, and all 512 images at once would hold about 900 MB of them.
let correct = 0;
tensor.noGrad(() => {
  for (let i = 0; i < xTest.shape[0]; i += opts.batch) {
    const n = Math.min(opts.batch, xTest.shape[0] - i);
    correct += tensor.scope(() => model0.forward(xTest.narrow(0, i, n)).argmax(1).eq(yTest.narrow(0, i, n)).sum().item());
  }
});
const accuracy = correct / xTest.shape[0];
const median = a => { const s = [...a].sort((p, q) => p - q); return s.length ? s[Math.floor(s.length / 2)] : null; };
if (rank === 0) {
  console.log(`accuracy on 512 held-out images: ${(100 * accuracy).toFixed(1)}% (chance: 25%)`);
  console.log(JSON.stringify({ workload: "resnet", ranks: world, batch: opts.batch, steps: opts.steps, loss: Number(loss.toFixed(4)),
    accuracy: Number(accuracy.toFixed(4)), step_ms_median: stepMs.length ? Number(median(stepMs).toFixed(2)) : null }));
}
