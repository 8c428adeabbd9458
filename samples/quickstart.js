// Quickstart: a small network learns a hidden rule from examples, on the CPU, in under a second,
// with no downloads.
//
//   zeroeng run samples/quickstart.js
//
// The data are random points in 16 dimensions, each labelled with one of 4 classes by a hidden
// linear rule: the class whose column of a fixed random matrix W scores highest. A two-layer MLP
// that never sees W learns the rule from 16384 labelled points; 1024 points it has not seen tell
// how well it learned it.
const { tensor, nn, optim, progress, metrics } = require("zeroeng");

const dims = 16, classes = 4, nTrain = 16384, nTest = 1024;
const batch = 64, epochs = 5;

// Tensors made before the first backward pass (the data, the model) live until the script ends;
// those of each training step are given back automatically two steps later (script/lifetime.go).
const W = tensor.randn([dims, classes]);
const hiddenRule = x => x.matmul(W).argmax(1);
const xTrain = tensor.randn([nTrain, dims]), yTrain = hiddenRule(xTrain);
const xTest = tensor.randn([nTest, dims]), yTest = hiddenRule(xTest);

const model = nn.Sequential(nn.Linear(dims, 128), nn.ReLU(), nn.Linear(128, classes));
const opt = optim.Adam(model.parameters(), { lr: 3e-3 });
console.log(String(model));

// tensor.scope gives back every temporary of the evaluation as soon as it returns.
const accuracy = () =>
  tensor.noGrad(() => tensor.scope(() => model.forward(xTest).argmax(1).eq(yTest).float().mean().item()));

const before = accuracy();
const steps = nTrain / batch;
let step = 0;
for (let epoch = 1; epoch <= epochs; epoch++) {
  // The bar draws on stderr (a redrawn line on a terminal); it is done before the epoch's line.
  const bar = progress.bar({ total: steps, label: `epoch ${epoch}/${epochs}` });
  let sum = 0;
  for (let i = 0, s = 1; i < nTrain; i += batch, s++) {
    opt.zeroGrad();
    const loss = nn.functional.crossEntropy(model.forward(xTrain.narrow(0, i, batch)), yTrain.narrow(0, i, batch));
    loss.backward();
    opt.step();
    const l = loss.item();
    sum += l;
    step++;
    metrics.log({ step, epoch, loss: l }); // written only with --metrics FILE
    bar.update(s, { loss: l, samples: s * batch });
  }
  bar.done();
  console.log(`epoch ${epoch}  loss ${(sum / steps).toFixed(4)}`);
}

const after = accuracy();
const pct = x => (100 * x).toFixed(1) + "%";
console.log(`learned the hidden rule: ${pct(after)} of ${nTest} unseen points classified correctly ` +
  `(before training: ${pct(before)}, chance: ${pct(1 / classes)})`);
