// The cost of a step schedule's events written in JavaScript against the same schedule built into
// the engine (Go), and a Wasm one when given (docs/benchmarks.md, "Step schedules"): one rank, a
// model of many small buckets so that the events, not the arithmetic, dominate a step. Every
// schedule is the interleaved one (bucket i stepped and broadcast when bucket i+1 is ready). The
// variants run in rotated interleaved rounds in this one process; the result is each one's median
// step time and, against Go, the extra time per event.
//
//   zeroeng run bench/schedule_events.js [-- --rounds 5 --steps 200 --layers 128 --wasm sched.wasm]
const { tensor, nn, dist, zero, hooks } = require("zeroeng");

const opts = { rounds: 5, steps: 200, layers: 128, wasm: "" };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const key = argv[i].replace(/^--/, "");
  if (!(key in opts) || i + 1 >= argv.length) throw new Error(`schedule_events.js: unknown or incomplete argument ${argv[i]}`);
  opts[key] = key === "wasm" ? argv[i + 1] : Number(argv[i + 1]);
}

const js = zero.schedule({
  name: "interleaved in JavaScript",
  bucketReady(ctx, i) { if (i > 0) ctx.stepAndBroadcast(i - 1); },
  backwardEnd(ctx) { ctx.stepAndBroadcast(ctx.numBuckets - 1); },
});
const variants = { go: zero.schedules.interleaved, js };
if (opts.wasm) variants.wasm = hooks.wasmSchedule(opts.wasm, { config: JSON.stringify({ k: 1 }) });

const x = tensor.randn([4, 8]).keep();
const jobs = {};
for (const [name, schedule] of Object.entries(variants)) {
  tensor.manualSeed(0);
  const net = nn.Sequential(...Array.from({ length: opts.layers }, () => nn.Linear(8, 8)));
  // A bucket per parameter: 2 × layers buckets, each with its bucketReady.
  const model = nn.parallel.DistributedDataParallel(net, { bucketCapMB: 1e-6, firstBucketCapMB: 1e-6 });
  const opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "sgd", lr: 1e-3, overlapWithDDP: true, logMemory: false });
  model.registerCommHook(null, zero.hookWithZeroSchedule(dist.commHooks.allreduceHook, model, opt, schedule));
  jobs[name] = { model, opt, times: [] };
}
const step = ({ model, opt }) => {
  opt.zeroGrad();
  model.forward(x).sum().backward();
  opt.step();
};
const names = Object.keys(jobs);
for (const name of names) for (let s = 0; s < 10; s++) step(jobs[name]); // warm up
for (let r = 0; r < opts.rounds; r++) {
  for (let k = 0; k < names.length; k++) {
    const job = jobs[names[(k + r) % names.length]]; // each round starts with another variant
    const t0 = Date.now();
    for (let s = 0; s < opts.steps; s++) step(job);
    job.times.push((Date.now() - t0) * 1e3 / opts.steps);
  }
}
const median = a => a.slice().sort((p, q) => p - q)[Math.floor(a.length / 2)];
const buckets = 2 * opts.layers, events = buckets + 1; // bucketReady per bucket, then backwardEnd
const out = { workload: "schedule_events", buckets, handler_calls_per_step: events };
for (const name of names) {
  out[`${name}_step_us`] = Number(median(jobs[name].times).toFixed(1));
  out[`${name}_rounds_us`] = jobs[name].times.map(t => Number(t.toFixed(1)));
}
for (const name of names.filter(n => n !== "go")) {
  out[`${name}_extra_us_per_event`] = Number(((out[`${name}_step_us`] - out.go_step_us) / events).toFixed(2));
}
console.log(JSON.stringify(out));
