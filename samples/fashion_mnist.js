// Fashion-MNIST: an MLP 784-256-128-10 (ReLU) trained with Adam (lr 1e-3), batch 128, the recipe of
// bench/torch_fmnist.py, on Debian's dataset-fashion-mnist.
//
//   zeroeng run samples/fashion_mnist.js                       # 5 epochs, data from /usr/share/datasets
//   zeroeng run samples/fashion_mnist.js -- --data DIR --epochs 1
//   ZEROENG_FMNIST_DIR=DIR zeroeng run samples/fashion_mnist.js
//   zeroeng run --nproc 2 samples/fashion_mnist.js               # data parallel over 2 ranks (DDP)
//   zeroeng run --nproc 4 samples/fashion_mnist.js -- --zero 2   # ZeRO: 1, 2 or overlap (see below)
//   zeroeng run samples/fashion_mnist.js -- --bf16               # bfloat16 model, float32 master weights
//   zeroeng run samples/fashion_mnist.js -- --steps 20           # a quick look: at most 20 steps an epoch
//   zeroeng run samples/fashion_mnist.js -- --workers 2          # batches from a DataLoader, 2 workers (see below)
//
// Every epoch prints the test accuracy; the last line is the result as JSON. With --metrics FILE,
// every step's loss and every epoch's accuracy go to FILE as JSON lines too.
//
// The random generator starts from --seed (default 0), as torch.manual_seed(0) does in the PyTorch
// script, and nothing draws from it before the model is built: the initial weights and the batch
// order of each epoch (one randperm per epoch) are PyTorch's, so the run follows PyTorch's.
const { tensor, nn, optim, io, data, dist, zero, progress, metrics } = require("zeroeng");

const usage = "usage: zeroeng run samples/fashion_mnist.js [-- --data DIR] [--epochs N] [--steps N] [--zero 1|2|overlap] [--bf16] [--workers N]";
const opts = { data: process.env.ZEROENG_FMNIST_DIR || "/usr/share/datasets/fashion-mnist", epochs: 5 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const [name, inline] = argv[i].split(/=(.*)/s);
  const value = () => (inline !== undefined ? inline : argv[++i]);
  switch (name) {
    case "--data": opts.data = value(); break;
    case "--epochs": opts.epochs = Number(value()); break;
    case "--steps": opts.steps = Number(value()); break;
    case "--zero": opts.zero = value(); break;
    case "--bf16": opts.bf16 = true; break;
    case "--workers": opts.workers = Number(value()); break;
    case "-h": case "--help": console.log(usage); process.exit(0);
    default: console.error(`fashion_mnist.js: unknown argument ${argv[i]}\n${usage}`); process.exit(2);
  }
}
if (!opts.data || !(Number.isInteger(opts.epochs) && opts.epochs > 0) || !(opts.steps === undefined || (Number.isInteger(opts.steps) && opts.steps > 0)) ||
  !(opts.workers === undefined || (Number.isInteger(opts.workers) && opts.workers >= 0))) {
  console.error(`fashion_mnist.js: --data needs a directory, --epochs and --steps a positive integer, --workers a non-negative one\n${usage}`);
  process.exit(2);
}
if (opts.zero !== undefined && !["1", "2", "overlap"].includes(opts.zero)) {
  console.error(`fashion_mnist.js: --zero takes 1 (sharded optimizer state), 2 (sharded gradients too) or overlap (stage 1, step overlapped with backward)\n${usage}`);
  process.exit(2);
}

// load reads one split: images as float32 in [0, 1], [N, 784], and int64 labels. The scope gives
// back the uint8 images as it returns, and the images are scaled in place: only the two results stay.
function load(prefix) {
  try {
    return tensor.scope(() => {
      const images = io.loadIdx(`${opts.data}/${prefix}-images-idx3-ubyte.gz`);
      const labels = io.loadIdx(`${opts.data}/${prefix}-labels-idx1-ubyte.gz`);
      return [images.reshape(-1, 784).float().div_(255), labels.long()];
    });
  } catch (e) {
    console.error(`fashion_mnist.js: cannot read the Fashion-MNIST data in ${opts.data}:\n  ${e.message}\n` +
      "Install it with `sudo apt-get install dataset-fashion-mnist` (Debian, Ubuntu), or point --data DIR\n" +
      "or ZEROENG_FMNIST_DIR at a directory holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,\n" +
      "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz.");
    process.exit(1);
  }
}
const [xTrain, yTrain] = load("train");
const [xTest, yTest] = load("t10k");
// --steps N ends each epoch after N steps (its loss is the mean of those).
const n = xTrain.shape[0], batch = 128, steps = Math.min(Math.ceil(n / batch), opts.steps || Infinity);

// With --nproc N the ranks share each batch of 128 (data parallel): every rank draws the same
// permutation, takes its N-th of each batch, and DistributedDataParallel averages the gradients,
// so the run follows the one-rank run up to rounding.
const world = dist.worldSize, rank = dist.rank;
let model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10));
// --bf16 trains in bfloat16 (weights, activations, gradients); the optimizer keeps float32 master
// weights and state, which ZeRO shards like the rest of its state.
if (opts.bf16) model.bfloat16();
const input = x => (opts.bf16 ? x.bfloat16() : x);
// --zero shards Adam's state over the ranks (ZeroRedundancyOptimizer): stage 1 under DDP; stage 2
// without DDP, the optimizer reduce-scattering the gradients itself; overlap runs the sharded step
// inside DDP's backward (schedule B).
let opt;
if (opts.zero === undefined) {
  if (world > 1) model = nn.parallel.DistributedDataParallel(model);
  opt = optim.Adam(model.parameters(), { lr: 1e-3 });
} else {
  if (opts.zero !== "2") model = nn.parallel.DistributedDataParallel(model);
  opt = zero.ZeroRedundancyOptimizer(model.parameters(), {
    optimizer: "adam", lr: 1e-3, stage: opts.zero === "2" ? 2 : 1, overlapWithDDP: opts.zero === "overlap",
  });
  if (opts.zero === "overlap") {
    model.registerCommHook(null, zero.hookWithZeroStepInterleaved(dist.commHooks.allreduceHook, model, opt, { shardBuckets: true }));
  }
}
console.log(`fashion-mnist: ${n} training and ${xTest.shape[0]} test images (${opts.data}), ` +
  `MLP 784-256-128-10${opts.bf16 ? " in bfloat16" : ""}, Adam lr 1e-3${opts.zero ? ` (ZeRO ${opts.zero})` : ""}, batch ${batch}${world > 1 ? ` over ${world} ranks` : ""}, ${opts.epochs} epoch${opts.epochs === 1 ? "" : "s"}`);

// --workers N takes the batches from a data.DataLoader (PyTorch's DataLoader order rather than the
// PyTorch script's randperm) whose N workers gather them ahead of the step; --workers 0 gathers each
// in the step, to compare.
const loader = opts.workers === undefined ? null : data.DataLoader(data.TensorDataset(xTrain, yTrain),
  { batchSize: batch, shuffle: true, ...(opts.workers > 0 ? { numWorkers: opts.workers, persistentWorkers: true } : {}) });

const accuracy = () =>
  tensor.noGrad(() => tensor.scope(() => model.forward(input(xTest)).argmax(1).eq(yTest).float().mean().item()));

let trainMs = 0, acc = 0, step = 0;
for (let epoch = 1; epoch <= opts.epochs; epoch++) {
  const bar = progress.bar({ total: steps, label: `epoch ${epoch}/${opts.epochs}` });
  const start = Date.now();
  // The permutation outlives the automatic release of each step's tensors: keep it for the epoch.
  const perm = loader ? null : tensor.randperm(n).keep();
  const batches = loader && loader[Symbol.iterator]();
  let sum = 0;
  for (let i = 0, s = 1; i < n && s <= steps; i += batch, s++) {
    const size = Math.min(batch, n - i);
    const lo = Math.floor(size * rank / world), hi = Math.floor(size * (rank + 1) / world);
    let x, y;
    if (batches) {
      [x, y] = batches.next().value;
      [x, y] = [x.narrow(0, lo, hi - lo), y.narrow(0, lo, hi - lo)];
    } else {
      const idx = perm.narrow(0, i + lo, hi - lo);
      [x, y] = [xTrain.indexSelect(0, idx), yTrain.indexSelect(0, idx)];
    }
    opt.zeroGrad();
    const loss = nn.functional.crossEntropy(model.forward(input(x)), y);
    loss.backward();
    opt.step();
    const l = loss.item();
    sum += l;
    step++;
    if (metrics.enabled) metrics.log({ step, epoch, loss: l });
    bar.update(s, { loss: l, samples: Math.min(i + batch, n) });
  }
  if (perm) perm.release();
  if (batches) batches.return(); // --steps may leave the epoch early: its workers stop
  trainMs += Date.now() - start;
  bar.done();
  acc = accuracy();
  metrics.log({ epoch, test_acc: acc, train_s: trainMs / 1e3 });
  console.log(`epoch ${epoch}  loss ${(sum / steps).toFixed(4)}  test accuracy ${acc.toFixed(4)}  (training ${(trainMs / 1e3).toFixed(1)}s)`);
}

// The result in bench/torch_fmnist.py's form; train_s counts the training steps only, as there.
const result = { workload: "fashion_mnist_mlp", dtype: opts.bf16 ? "bfloat16" : "float32", epochs: opts.epochs, test_acc: Number(acc.toFixed(4)), train_s: trainMs / 1e3 };
metrics.log(result);
console.log(JSON.stringify(result));
