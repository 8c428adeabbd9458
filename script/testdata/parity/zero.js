// ZeroRedundancyOptimizer scenarios of PyTorch's
// test_zero_redundancy_optimizer.py: zeroeng run --nproc N zero.js -- SCENARIO [VARIANT]
// SCENARIO is a key of fixtures.json (zero-adam, zero-groups, ...);
// VARIANT is how zeroeng runs it, every one expected to give PyTorch's
// numbers: greedy (PyTorch's own layout), bucket-view, flat, stage-2
// (gradients reduce-scattered by ZeRO itself, no DDP) or an overlap
// schedule: overlap-{A,B}[-gav][-sharded], the step inside DDP's comm hook;
// js-class runs the SGD scenarios with an SGD written in JavaScript.
const { tensor, nn, optim, dist, zero } = require("zeroeng");
const F = nn.functional;
const { model, shard, values, report, STEPS } = require("./common.js");

const [scenario, variant = "greedy"] = process.argv.slice(2);

// PyTorch's optimizer and hyper-parameters for each scenario (gen.py's OPTIMIZERS).
const optimizers = {
  sgd: { optimizer: "sgd", lr: 0.1, momentum: 0.9 },
  adam: { optimizer: "adam", lr: 0.01 },
  adamw: { optimizer: "adamw", lr: 0.01, weightDecay: 0.05 },
  rmsprop: { optimizer: "rmsprop", lr: 0.01 },
  adagrad: { optimizer: "adagrad", lr: 0.1 },
  adamax: { optimizer: "adamax", lr: 0.02 },
};

// SGD written in JavaScript, PyTorch's formula (momentum buffer started
// from the first gradient), for the js-class variant: ZeRO builds it over
// this rank's parameters, as PyTorch's optimizer_class.
class SGD extends optim.Optimizer {
  constructor(params, options) {
    super(params, { lr: optim.required, momentum: 0, dampening: 0, weight_decay: 0, nesterov: false,
      maximize: false, foreach: null, differentiable: false, ...options });
  }

  step(closure) {
    const loss = closure === undefined ? undefined : tensor.enableGrad(closure);
    tensor.noGrad(() => {
      for (const g of this.paramGroups) {
        for (const p of g.params) {
          if (!p.grad) continue;
          let d = p.grad;
          if (g.momentum !== 0) {
            const s = this.state.get(p);
            if (s) s.momentum_buffer.mul_(g.momentum).add_(d, { alpha: 1 - g.dampening });
            else this.state.set(p, { momentum_buffer: d.clone().keep() });
            d = this.state.get(p).momentum_buffer;
          }
          p.add_(d, { alpha: -g.lr });
        }
      }
    });
    return loss;
  }
}

const jsClass = variant === "js-class";
const overlap = variant.match(/^overlap-([AB])(-gav)?(-sharded)?$/);
const layouts = {
  greedy: {},
  "bucket-view": { parametersAsBucketView: true },
  flat: { partition: "flat", bucketCapMB: 0.0004 },
  "stage-2": { stage: 2, bucketCapMB: 0.0004 },
};
if (!overlap && !jsClass && !layouts[variant]) throw new Error(`unknown variant ${variant}`);
const layout = overlap ? { overlapWithDDP: true } : jsClass ? {} : layouts[variant];

const net = model();
const ps = net.parameters();
// Stage 2 reduces the gradients itself; every other variant runs under DDP.
// Small buckets give the overlap several buckets to step one by one.
const ddp = variant === "stage-2" ? net
  : nn.parallel.DistributedDataParallel(net, { bucketCapMB: 0.0004, firstBucketCapMB: 0.0002, gradientAsBucketView: Boolean(overlap && overlap[2]) });

let opt, sched, addGroupAt = -1, closure = false;
const make = (params, options) => {
  if (jsClass) {
    if (options.optimizer !== "sgd") throw new Error(`js-class runs the SGD scenarios, not ${scenario}`);
    options = { ...options, optimizer: SGD };
  }
  return zero.ZeroRedundancyOptimizer(params, { ...options, ...layout, logMemory: false });
};
switch (scenario) {
  case "zero-groups":
    opt = make([{ params: ps.slice(0, 4) }, { params: ps.slice(4), lr: 0.03, weightDecay: 0.1 }],
      { optimizer: "adamw", lr: 0.01, weightDecay: 0 });
    break;
  case "zero-add-group":
    opt = make(ps.slice(0, 4), { optimizer: "adamw", lr: 0.01 });
    addGroupAt = 2;
    break;
  case "zero-scheduler":
    opt = make(ps, { ...optimizers.adam, lr: 0.05 });
    sched = optim.lrScheduler.StepLR(opt, { stepSize: 2, gamma: 0.5 });
    break;
  case "zero-sgd-mixed":
    opt = make([{ params: ps.slice(0, 2) }, { params: ps.slice(2, 4), lr: 0.05, momentum: 0.5 }],
      { optimizer: "sgd", lr: 0.1, momentum: 0.9 });
    addGroupAt = 2;
    closure = true;
    break;
  case "zero-closure":
    opt = make(ps, optimizers.adam);
    closure = true;
    break;
  default: {
    const o = optimizers[scenario.replace(/^zero-/, "")];
    if (!o) throw new Error(`unknown scenario ${scenario}`);
    opt = make(ps, o);
  }
}
if (overlap) {
  const hook = overlap[1] === "A" ? zero.hookWithZeroStep : zero.hookWithZeroStepInterleaved;
  ddp.registerCommHook(null, hook(dist.commHooks.allreduceHook, ddp, opt, { shardBuckets: Boolean(overlap[3]) }));
}

const [x, y] = shard();
const out = { losses: [] };
const lossOf = () => F.crossEntropy(ddp.forward(x), y);
for (let step = 0; step < STEPS; step++) {
  if (step === addGroupAt) opt.addParamGroup({ params: ps.slice(4), lr: 0.02 }); // zero-sgd-mixed, zero-add-group
  if (closure) {
    const loss = opt.step(() => {
      opt.zeroGrad();
      const l = lossOf();
      l.backward();
      return l;
    });
    (out.returned ??= []).push(loss.item());
    out.losses.push(loss.item());
  } else {
    opt.zeroGrad();
    const loss = lossOf();
    loss.backward();
    opt.step();
    out.losses.push(loss.item());
  }
  if (sched) sched.step();
}
if (["zero-sgd", "zero-adam", "zero-sgd-mixed"].includes(scenario)) {
  opt.consolidateStateDict(0);
  if (dist.rank === 0) {
    const sd = opt.stateDict();
    const state = {};
    for (const [i, s] of Object.entries(sd.state)) {
      state[i] = {};
      for (const [k, v] of Object.entries(s)) state[i][k] = values(v);
    }
    out.stateDict = { state, param_groups: sd.param_groups };
  } else {
    out.stateDict = null;
  }
}
report(net, out);
