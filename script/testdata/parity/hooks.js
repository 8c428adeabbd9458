// DDP comm-hook scenarios: zeroeng run --nproc N hooks.js -- SCENARIO [gav]
// DDP with the hook (hook-allreduce, hook-fp16, hook-powersgd) and plain
// SGD (lr 0.1, momentum 0.9); "gav" adds gradientAsBucketView.
const { nn, optim, dist } = require("zeroeng");
const { model, shard, report, STEPS } = require("./common.js");

const [scenario, variant] = process.argv.slice(2);
const hooks = {
  "hook-allreduce": () => [null, dist.commHooks.allreduceHook],
  "hook-fp16": () => [null, dist.commHooks.fp16CompressHook],
  "hook-powersgd": () => [dist.commHooks.PowerSGDState({ matrixApproximationRank: 1, startPowerSGDIter: 2,
    minCompressionRate: 0.5, useErrorFeedback: true, warmStart: true, randomSeed: 0 }), dist.commHooks.powerSGDHook],
};
if (!hooks[scenario]) throw new Error(`unknown scenario ${scenario}`);
const net = model();
const ddp = nn.parallel.DistributedDataParallel(net, { gradientAsBucketView: variant === "gav" });
ddp.registerCommHook(...hooks[scenario]());
const opt = optim.SGD(net.parameters(), { lr: 0.1, momentum: 0.9 });
const [x, y] = shard();
const out = { losses: [] };
for (let step = 0; step < STEPS; step++) {
  opt.zeroGrad();
  const loss = nn.functional.crossEntropy(ddp.forward(x), y);
  loss.backward();
  opt.step();
  out.losses.push(loss.item());
}
report(net, out);
