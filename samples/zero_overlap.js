// DDP + ZeRO + overlap: the optimizer step runs inside backward, sharded over the ranks, on a
// step schedule of your choice — the built-ins or one written here.
//
//   zeroeng run --nproc 4 samples/zero_overlap.js
//   zeroeng run --nproc 4 --net 10Gbit,20us samples/zero_overlap.js -- --schedule A
//   zeroeng run --nproc 4 --net 1Gbit,20us samples/zero_overlap.js -- --schedule lag-2
//   zeroeng run --nproc 4 samples/zero_overlap.js -- --schedule none --steps 50
//   zeroeng run --nproc 4 samples/zero_overlap.js -- --schedule stage2
//
// Each rank holds a replica of an MLP wrapped in DistributedDataParallel. ZeroRedundancyOptimizer
// gives each rank the AdamW state of the parameters it updates, and under stage 1 (every schedule
// but stage2) a rank updates whole parameters: the greedy partition (shardBuckets in DDP's hook)
// gives each one, largest first, to the least loaded rank, but cannot cut one. So the state follows
// the sizes of the parameters, not the number of ranks: on 4 ranks the 1024×1024 matrix, two thirds
// of the elements, is one rank's (8.00 MiB of state), the two 1 MiB matrices are two others'
// (2.00 MiB each) and the biases are the last one's (0.02 MiB), as the "zero:" lines at the start
// say. --schedule stage2 shows the even split: ZeRO's flat partition lays the parameters out in
// flat buckets cut into equal slices, 3.00 MiB of state and 1.50 MiB of gradients on every rank.
//
// The overlap hook wraps DDP's all-reduce hook: as buckets of gradients are reduced during
// backward, each rank updates its parameters in them and broadcasts them to the others, so that by
// the end of backward the step is done. When each bucket is stepped is the schedule's choice:
// --schedule B (the default, zero.schedules.interleaved) steps bucket i once bucket i+1 is ready; A
// (afterBackward) steps them all once the last bucket is handed over; lag-K is a schedule written
// below in a few lines (B is lag-1); FILE.wasm is a schedule compiled to WebAssembly
// (samples/schedules: `make schedules` builds lag_k.wasm); none reduces during backward and steps
// afterwards (the plain DDP + ZeRO loop). Without DDP, ZeRO stage 2 reduce-scatters the gradients
// during backward itself: stage2 steps after backward (as DeepSpeed), stage2-asReduced steps and
// all-gathers each bucket's slice as soon as its reduce-scatter is retired, while backward goes on.
//
// The run checks itself: every rank must end with the same parameters, and the loss must fall.
// With --net (an emulated link) the communication takes real time and the schedules differ in
// step time; the last line is the result as JSON.
const { tensor, nn, dist, zero, hooks, progress, metrics } = require("zeroeng");

const usage = "usage: zeroeng run --nproc N samples/zero_overlap.js [-- --schedule A|B|lag-K|FILE.wasm|none|stage2|stage2-asReduced] [--steps N] [--buckets-mb MB]";
const opts = { schedule: "B", steps: 30, bucketsMB: 1 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const [name, inline] = argv[i].split(/=(.*)/s);
  const value = () => (inline !== undefined ? inline : argv[++i]);
  switch (name) {
    case "--schedule": opts.schedule = value(); break;
    case "--steps": opts.steps = Number(value()); break;
    case "--buckets-mb": opts.bucketsMB = Number(value()); break;
    case "-h": case "--help": console.log(usage); process.exit(0);
    default: console.error(`zero_overlap.js: unknown argument ${argv[i]}\n${usage}`); process.exit(2);
  }
}
const lagK = /^lag-([1-9][0-9]*)$/.exec(opts.schedule);
const wasm = opts.schedule.endsWith(".wasm");
const stage2 = opts.schedule.startsWith("stage2");
if (!(["A", "B", "none", "stage2", "stage2-asReduced"].includes(opts.schedule) || lagK || wasm) || !(Number.isInteger(opts.steps) && opts.steps > 0) || !(opts.bucketsMB > 0)) {
  console.error(`zero_overlap.js: --schedule takes A, B, lag-K (K ≥ 1), FILE.wasm, none, stage2 or stage2-asReduced, --steps a positive integer, --buckets-mb a positive size\n${usage}`);
  process.exit(2);
}

// lag-K: a step schedule of our own. Bucket i is stepped and its parameters broadcast when bucket
// i+K is ready, so that K reductions stay in flight while backward goes on; the last K buckets
// follow once backward has handed over the last one. The engine keeps it honest: a step waits for
// its bucket's reduction, and with strict: true a bucket left unstepped would be an error.
const lag = k => zero.schedule({
  name: `lag-${k}`,
  bucketReady(ctx, i) {
    if (i >= k) ctx.stepAndBroadcast(i - k);
  },
  backwardEnd(ctx) {
    for (let i = Math.max(0, ctx.numBuckets - k); i < ctx.numBuckets; i++) ctx.stepAndBroadcast(i);
  },
});

const rank = dist.rank, world = dist.worldSize, batch = 64;
// Every rank builds the same model (DDP would broadcast rank 0's anyway) and draws its own data.
tensor.manualSeed(0);
const net = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 256));
// Small buckets so that this model spans several and the schedules have something to interleave.
const model = stage2 ? net : nn.parallel.DistributedDataParallel(net, { bucketCapMB: opts.bucketsMB, firstBucketCapMB: opts.bucketsMB / 2 });
const overlap = opts.schedule !== "none" && !stage2;
const opt = zero.ZeroRedundancyOptimizer(model.parameters(), {
  optimizer: "adamw", lr: 1e-3, weightDecay: 0.01, overlapWithDDP: overlap,
  ...(stage2 ? { stage: 2, bucketCapMB: opts.bucketsMB } : {}),
  ...(opts.schedule === "stage2-asReduced" ? { schedule: zero.schedules.asReduced } : {}),
});
if (overlap) {
  const schedule = lagK ? lag(Number(lagK[1])) : wasm ? hooks.wasmSchedule(opts.schedule)
    : opts.schedule === "A" ? zero.schedules.afterBackward : zero.schedules.interleaved;
  model.registerCommHook(null, zero.hookWithZeroSchedule(dist.commHooks.allreduceHook, model, opt, schedule, { shardBuckets: true, strict: true }));
}

// A hidden linear map to learn; each rank sees its own batches of it.
tensor.manualSeed(1);
const target = tensor.randn([256, 256]).div(16).keep();
tensor.manualSeed(100 + rank);

const bar = progress.bar({ total: opts.steps, label: `schedule ${opts.schedule}` });
let first = 0, last = 0;
const times = [];
for (let step = 1; step <= opts.steps; step++) {
  const t0 = Date.now();
  const x = tensor.randn([batch, 256]);
  const loss = nn.functional.mseLoss(model.forward(x), x.matmul(target));
  opt.zeroGrad();
  loss.backward();
  // Under a schedule the update already ran in backward; step() waits for its broadcasts or all-gathers.
  opt.step();
  times.push(Date.now() - t0);
  const l = loss.item();
  if (step === 1) first = l;
  last = l;
  if (metrics.enabled) metrics.log({ step, loss: l });
  bar.update(step, { loss: l });
}
bar.done();

// Every rank must hold the same parameters: compare sums through an all-gather.
const sums = tensor.stack(net.parameters().map(p => p.sum()));
const all = tensor.zeros([world, sums.shape[0]]);
dist.allGather(all, sums).wait();
const inSync = all.sub(sums.unsqueeze(0)).abs().max().item() === 0;
if (!inSync) throw new Error(`rank ${rank}: parameters differ between ranks`);
if (!(last < first)) throw new Error(`rank ${rank}: the loss did not fall (${first} → ${last})`);

const sorted = times.slice(1).sort((a, b) => a - b);
const m = opt.memory();
console.log(JSON.stringify({
  workload: "zero_overlap", schedule: opts.schedule, world, steps: opts.steps,
  first_loss: Number(first.toFixed(5)), last_loss: Number(last.toFixed(5)), in_sync: inSync,
  step_ms_median: sorted[Math.floor(sorted.length / 2)],
  optimizer_state_bytes: m.optimizerState, parameter_bytes: m.parameters,
}));
