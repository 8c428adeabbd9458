// The host-API listing of issue 3, verbatim in its statements: scripts and conformance checks
// outside this repository are written against this surface.
const { tensor, nn, optim, io, dist } = require("zeroeng");
const sd = io.loadSafetensors("init.safetensors");      // { name: Tensor }
const x = io.loadNpy("x.npy"), y = io.loadNpy("y.npy");  // float32 and int64 tensors
const model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4));
model.loadStateDict(sd);
const opt = optim.AdamW(model.parameters(), { lr: 1e-2, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0.01 });
for (let s = 0; s < x.shape[0]; s++) {
  opt.zeroGrad();
  const loss = nn.functional.crossEntropy(model.forward(x.select(0, s)), y.select(0, s));
  loss.backward();
  opt.step();
  console.log(s, loss.item());
}
io.saveSafetensors("final.safetensors", model.stateDict());
console.log(dist.rank, dist.worldSize, tensor.fromArray([1, 2, 3, 4], [2, 2], "float32").narrow(1, 0, 1).toArray());
