// GPT: a GPT-2 style decoder (token and position embeddings, pre-LayerNorm blocks with fused causal
// self-attention and a tanh-GELU MLP, the output tied to the token embedding) trained as nanoGPT and
// llm.c train GPT-2: AdamW with weight decay on the matrices only, a cosine schedule with warmup,
// gradient clipping and gradient accumulation; data parallel with DDP, or sharded with ZeRO.
//
//   zeroeng run samples/gpt.js                                   # "tiny" on this repository's Markdown, byte-level, seconds
//   zeroeng run --nproc 2 samples/gpt.js -- --zero 2             # two ranks, optimizer state and gradients sharded
//   zeroeng run --nproc 4 samples/gpt.js -- --zero 3             # parameters sharded too, each block gathered just in time
//   zeroeng run samples/gpt.js -- --data 'fineweb_train_*.bin' --val-data fineweb_val_000000.bin --config gpt2 --dtype bfloat16
//   zeroeng run samples/gpt.js -- --config bench --bench         # the side-by-side `gpt` step on random tokens, timed
//   zeroeng run samples/gpt.js -- --checkpoint ckpt --checkpoint-every 50   # resumes from ckpt when it holds a checkpoint
//
// Data (--data, --val-data): llm.c token shards (GPT-2: uint16 tokens), .npy token arrays, or any other file
// as text, one token per byte; shell-style patterns name several shards. Without --val-data the last tenth
// of --data is held out. Each rank reads its own slice of every batch, reshuffled every epoch from --seed.
//
// Checkpoints (--checkpoint DIR): the model as DIR/step-N/model.safetensors with nanoGPT's and Hugging
// Face's parameter names (transformer.h.0.attn.c_attn.weight) — under --zero 3 each rank's slices of it,
// which `zeroeng checkpoint export DIR` puts together as that file —, the optimizer (one shard per rank
// under ZeRO), the schedule, the data position and the generators. A run started on a DIR that holds a
// checkpoint resumes from it, bit for bit on the same number of ranks; SIGTERM saves one after the
// current step and exits 0. The last line printed is the result as JSON.
const { tensor, nn, optim, data, dist, zero, progress, metrics, checkpoint, device, amp, io } = require("zeroeng");
const F = nn.functional;

// Configurations: "bench" is bench/torch_cpu.py's `gpt` workload, "gpt2" is GPT-2 124M.
const configs = {
  tiny: { nLayer: 2, nHead: 4, nEmbd: 64, seqLen: 64, vocab: 256, batch: 8, steps: 200, lr: 3e-3, warmup: 20 },
  bench: { nLayer: 4, nHead: 4, nEmbd: 256, seqLen: 128, vocab: 512, batch: 8, steps: 100, lr: 1e-3, warmup: 10 },
  gpt2: { nLayer: 12, nHead: 12, nEmbd: 768, seqLen: 1024, vocab: 50257, batch: 8, steps: 5000, lr: 6e-4, warmup: 700 },
};

const usage = `usage: zeroeng run samples/gpt.js [-- options]
  --config tiny|bench|gpt2   model size (default tiny)
  --init FILE                start from the weights in this safetensors file (every parameter, with this
                             script's names and shapes: a checkpoint's model.safetensors)
  --data PATTERN             training tokens (default: this repository's *.md, as bytes)
  --val-data PATTERN         validation tokens (default: the last tenth of --data)
  --steps N --batch B --seq-len T --accum K    optimizer steps, sequences per rank, tokens per sequence,
                                               micro-batches per step (tokens per step: B·T·K·ranks)
  --lr X --min-lr-ratio R --warmup N --weight-decay W --clip C     AdamW, its schedule, clipping (0: none)
  --dtype float32|bfloat16   bfloat16: the model in bfloat16, float32 master weights in the optimizer
  --autocast bfloat16|float16  float32 weights, the forward's matrix products in the low precision (amp.autocast;
                             float16 with amp.GradScaler's loss scaling, from --loss-scale S, default 65536)
  --zero 0|1|2|3             ZeRO stage (0: plain AdamW, with --nproc > 1 under DDP; 1: AdamW's state sharded;
                             2: gradients too; 3: parameters too, each block a zero.fullyShard unit)
  --limit-all-gathers N      stage 3: blocks gathered or being gathered at once (default 2: the next block's
                             all-gather runs while one computes; 1: no prefetch)
  --offload cpu|none         stages 2 and 3: AdamW's state and float32 master weights on the host, which steps
  --checkpoint-activations   keep no activations inside the blocks: backward recomputes each block's forward
                             (nn.utils.checkpointWrapper; less memory for one more forward)
  --eval-every K --eval-batches N              validation loss every K steps, over N batches
  --seed S --bench           --seed: of the model, the shuffling and dropout (default: zeroeng run --seed, 0)
                             --bench: random tokens, no evaluation; the median step time of the steps
                             after the first 3 (bench/torch_cpu.py times 3 warm-up and 20 timed steps)
  --checkpoint DIR --checkpoint-every K --keep N   save every K steps (0: only on SIGTERM and at the end),
                             keep the newest N (0: all); resume from DIR's newest checkpoint
  --max-nonfinite N          stop with an error, status 1, when the loss has been NaN or infinite for N
                             steps in a row, before saving the last one (default 5; 0: never)`;

const opts = { config: "tiny", dtype: "float32", zero: 0, limitAllGathers: 2, offload: "none", accum: 1, weightDecay: 0.1, clip: 1.0, minLrRatio: 0.1,
  evalEvery: 50, evalBatches: 8, seed: tensor.initialSeed(), bench: false, checkpointEvery: 0, keep: 2, maxNonfinite: 5 };
const seedFrom = () => (argv.some(a => a === "--seed" || a.startsWith("--seed=")) ? "--seed" : "zeroeng run --seed");
const numeric = { "--steps": "steps", "--batch": "batch", "--seq-len": "seqLen", "--accum": "accum", "--lr": "lr",
  "--min-lr-ratio": "minLrRatio", "--warmup": "warmup", "--weight-decay": "weightDecay", "--clip": "clip",
  "--zero": "zero", "--loss-scale": "lossScale", "--limit-all-gathers": "limitAllGathers", "--eval-every": "evalEvery", "--eval-batches": "evalBatches", "--seed": "seed",
  "--checkpoint-every": "checkpointEvery", "--keep": "keep", "--max-nonfinite": "maxNonfinite" };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const [name, inline] = argv[i].split(/=(.*)/s);
  const value = () => {
    const v = inline !== undefined ? inline : argv[++i];
    if (v === undefined) fail(`${name} needs a value`);
    return v;
  };
  if (numeric[name]) {
    const v = Number(value());
    if (!Number.isFinite(v) || v < 0) fail(`${name} takes a non-negative number`);
    opts[numeric[name]] = v;
    continue;
  }
  switch (name) {
    case "--config": opts.config = value(); break;
    case "--init": opts.init = value(); break;
    case "--data": opts.data = value(); break;
    case "--val-data": opts.valData = value(); break;
    case "--dtype": opts.dtype = value(); break;
    case "--autocast": opts.autocast = value(); break;
    case "--offload": opts.offload = value(); break;
    case "--checkpoint": opts.checkpoint = value(); break;
    case "--bench": opts.bench = true; break;
    case "--checkpoint-activations": opts.checkpointActivations = true; break;
    case "-h": case "--help": console.log(usage); process.exit(0);
    default: fail(`unknown argument ${argv[i]}`);
  }
}
function fail(msg) {
  console.error(`gpt.js: ${msg}\n${usage}`);
  process.exit(2);
}
const cfg = configs[opts.config];
if (!cfg) fail(`--config is one of ${Object.keys(configs).join(", ")}`);
for (const k of ["batch", "seqLen", "steps", "lr"]) opts[k] ??= cfg[k];
opts.warmup ??= Math.min(cfg.warmup, Math.floor(opts.steps / 10)); // a short run keeps a tenth for warm-up
if (opts.warmup > opts.steps) fail(`--warmup ${opts.warmup} is longer than the ${opts.steps} steps`);
const flag = k => `--${k.replace(/[A-Z]/g, c => "-" + c.toLowerCase())}`;
for (const k of ["batch", "seqLen", "steps", "accum", "evalBatches", "limitAllGathers"]) {
  if (!(Number.isInteger(opts[k]) && opts[k] > 0)) fail(`${flag(k)} takes a positive integer`);
}
for (const k of ["checkpointEvery", "keep", "maxNonfinite"]) {
  if (!Number.isInteger(opts[k])) fail(`${flag(k)} takes a whole number`);
}
if (opts.checkpointEvery && !opts.checkpoint) fail("--checkpoint-every needs --checkpoint DIR");
if (![0, 1, 2, 3].includes(opts.zero)) fail("--zero is 0, 1, 2 or 3");
if (!["cpu", "none"].includes(opts.offload)) fail("--offload is cpu or none");
if (opts.offload !== "none" && opts.zero < 2) fail("--offload needs --zero 2 or 3");
if (!["float32", "bfloat16"].includes(opts.dtype)) fail("--dtype is float32 or bfloat16");
if (opts.autocast !== undefined) {
  if (!["bfloat16", "float16"].includes(opts.autocast)) fail("--autocast is bfloat16 or float16");
  if (opts.dtype !== "float32") fail("--autocast runs a float32 model in a lower precision: leave --dtype at float32");
}
if (opts.seqLen > cfg.seqLen) fail(`--seq-len ${opts.seqLen} exceeds the ${opts.config} model's ${cfg.seqLen} positions`);

// ---- the model ---------------------------------------------------------------------------------------
class CausalSelfAttention extends nn.Module {
  constructor(c) {
    super();
    this.c_attn = nn.Linear(c.nEmbd, 3 * c.nEmbd);
    this.c_proj = nn.Linear(c.nEmbd, c.nEmbd);
    this.nHead = c.nHead;
  }
  forward(x) {
    const [B, T, C] = x.shape, hd = C / this.nHead;
    const [q, k, v] = this.c_attn.forward(x).split(C, 2).map(t => t.view(B, T, this.nHead, hd).transpose(1, 2));
    const y = F.scaledDotProductAttention(q, k, v, { isCausal: true });
    return this.c_proj.forward(y.transpose(1, 2).contiguous().view(B, T, C));
  }
}

class MLP extends nn.Module {
  constructor(c) {
    super();
    this.c_fc = nn.Linear(c.nEmbd, 4 * c.nEmbd);
    this.c_proj = nn.Linear(4 * c.nEmbd, c.nEmbd);
  }
  forward(x) { return this.c_proj.forward(this.c_fc.forward(x).gelu({ approximate: "tanh" })); }
}

class Block extends nn.Module {
  constructor(c) {
    super();
    this.ln_1 = nn.LayerNorm(c.nEmbd);
    this.attn = new CausalSelfAttention(c);
    this.ln_2 = nn.LayerNorm(c.nEmbd);
    this.mlp = new MLP(c);
  }
  forward(x) {
    x = x.add(this.attn.forward(this.ln_1.forward(x)));
    return x.add(this.mlp.forward(this.ln_2.forward(x)));
  }
}

class Transformer extends nn.Module {
  constructor(c) {
    super();
    this.wte = nn.Embedding(c.vocab, c.nEmbd);
    this.wpe = nn.Embedding(c.seqLen, c.nEmbd);
    this.h = nn.ModuleList(Array.from({ length: c.nLayer }, () => new Block(c)));
    this.ln_f = nn.LayerNorm(c.nEmbd);
  }
}

class GPT extends nn.Module {
  constructor(c) {
    super();
    this.transformer = new Transformer(c);
    // GPT-2's initialisation: N(0, 0.02) for every matrix and embedding, zero biases, and the
    // projections into the residual stream scaled by 1/sqrt(2·layers).
    for (const [name, p] of this.namedParameters()) {
      if (name.endsWith(".bias")) nn.init.zeros_(p);
      else if (p.ndim === 2) nn.init.normal_(p, 0, name.endsWith("c_proj.weight") ? 0.02 / Math.sqrt(2 * c.nLayer) : 0.02);
    }
  }
  // forward maps token ids [B, T] to logits [B, T, vocab]; the output layer is the token embedding.
  forward(idx) {
    const t = this.transformer, T = idx.shape[1];
    let x = t.wte.forward(idx).add(t.wpe.forward(tensor.arange(T)));
    for (const block of t.h) x = block.forward(x);
    return F.linear(t.ln_f.forward(x), t.wte.weight);
  }
}

// lossOf is the mean cross entropy of the next-token predictions. Training calls it on the DDP
// wrapper when there is one, whose forward does DDP's bookkeeping.
function lossOf(m, x, y) {
  const run = () => {
    const logits = m.forward(x);
    return F.crossEntropy(logits.view(-1, logits.shape[2]), y.view(-1));
  };
  return opts.autocast ? amp.autocast(opts.autocast, run) : run();
}

// ---- data ----------------------------------------------------------------------------------------------
const world = dist.worldSize, rank = dist.rank;
tensor.manualSeed(opts.seed);
let train, val;
if (opts.bench) {
  // Random tokens, as bench/torch_cpu.py times the step.
  const n = opts.steps * opts.batch * world * opts.seqLen * opts.accum + 1;
  train = data.fromTensor(tensor.randint(0, cfg.vocab, [n]));
} else {
  const source = opts.data || `${__dirname}/../*.md`;
  train = data.loadTokens([source, ...(opts.data ? [] : [`${__dirname}/../docs/*.md`])]);
  if (opts.valData) {
    val = data.loadTokens(opts.valData);
  } else {
    const cut = Math.floor(train.length * 0.9);
    val = train.slice(cut);
    train = train.slice(0, cut);
  }
}
// The loaders serve ids below the model's vocabulary (vocabSize): a dataset's vocabSize is its format's
// (llm.c's GPT-2 shards: 50257, text: 256) or one more than an array's largest id, so data whose ids fit a
// smaller model trains it, and an id beyond the model's stops the run where it is read, naming the file,
// the byte offset and the step. Two batches are read ahead, beside the step (prefetch).
const loader = data.TokenLoader(train, { batchSize: opts.batch, seqLen: opts.seqLen, seed: opts.seed, vocabSize: cfg.vocab, prefetch: 2 });
// Validation covers a step's global batch per evaluation batch, the same windows every time.
const valLoader = val && data.TokenLoader(val, { batchSize: opts.batch * opts.accum, seqLen: opts.seqLen, shuffle: false, vocabSize: cfg.vocab });

// ---- model, optimizer, schedule --------------------------------------------------------------------------
// Under stage 3 the model is built sharded (zero.init): no rank ever holds it whole, each makes only its
// slices of the very values the model built whole from the same seed has (from --init: each rank reads
// only its slices of the file).
const build = () => {
  const m = new GPT(cfg);
  if (opts.init) {
    // Strict: every parameter must be in the file with its shape, and nothing else.
    try {
      m.loadStateDict(io.loadSafetensors(opts.init));
    } catch (e) {
      console.error(`gpt.js: --init ${opts.init}: ${e.message}`);
      process.exit(1);
    }
  }
  if (opts.dtype === "bfloat16") m.bfloat16();
  return m;
};
let model = opts.zero === 3 ? zero.init(build) : build();
const gpt = model;
// Weight decay on the matrices (embeddings, linear weights), none on biases and LayerNorm parameters.
const params = gpt.parameters();
const decay = params.filter(p => p.ndim >= 2), noDecay = params.filter(p => p.ndim < 2);
const groups = [{ params: decay, weightDecay: opts.weightDecay }, { params: noDecay, weightDecay: 0 }];
const hyper = { lr: opts.lr, betas: [0.9, 0.95], eps: 1e-8 };
// Activation checkpointing wraps each block's forward (before zero.fullyShard, so that the recomputation
// runs inside the block's gather under stage 3).
if (opts.checkpointActivations) for (const block of gpt.transformer.h) nn.utils.checkpointWrapper(block);
let opt;
if (opts.zero === 0) {
  if (world > 1) model = nn.parallel.DistributedDataParallel(model, { gradientAsBucketView: true });
  opt = optim.AdamW(groups, hyper);
} else {
  // Stage 1 shards AdamW's state (and the master weights in bfloat16) under DDP; stage 2 also the
  // gradients, which the optimizer reduce-scatters itself, without DDP; stage 3 the parameters too:
  // each block is a unit gathered just before its forward and backward and freed after, the
  // embeddings and the last LayerNorm are the model's own unit, kept from forward to backward.
  if (opts.zero === 1 && world > 1) model = nn.parallel.DistributedDataParallel(model, { gradientAsBucketView: true });
  if (opts.zero === 3) {
    for (const block of gpt.transformer.h) zero.fullyShard(block);
    zero.fullyShard(gpt, { reshardAfterForward: false });
  }
  opt = zero.ZeroRedundancyOptimizer(groups, { optimizer: "adamw", ...hyper, stage: opts.zero, partition: "flat",
    ...(opts.zero === 3 ? { limitAllGathers: opts.limitAllGathers } : {}), ...(opts.zero >= 2 ? { offload: opts.offload } : {}) });
}
const sched = optim.lrScheduler.WarmupCosine(opt, { warmup: opts.warmup, total: opts.steps, minRatio: opts.minLrRatio });
// float16 autocast scales the loss so that small gradients survive float16's range; a step whose
// gradients overflowed is skipped. Disabled, the scaler passes everything through.
const scaler = amp.GradScaler({ enabled: opts.autocast === "float16", ...(opts.lossScale ? { initScale: opts.lossScale } : {}) });
// Everything a resumed run needs to continue exactly: the weights, AdamW's state (sharded under ZeRO), the
// schedule, where the data stands, and (saved by the checkpoint itself) every rank's generator.
const ckpt = opts.checkpoint && checkpoint.Manager(opts.checkpoint, {
  state: { model: gpt, optimizer: opt, scheduler: sched, loader, ...(scaler.isEnabled() ? { scaler } : {}) },
  every: opts.checkpointEvery, keep: opts.keep });
const resumed = ckpt ? ckpt.load() : null;
if (resumed) console.log(`gpt: resumed from ${resumed.path} (step ${resumed.step}, ${resumed.worldSize} rank${resumed.worldSize === 1 ? "" : "s"})`);
const firstStep = resumed ? resumed.step + 1 : 1;
if (firstStep > opts.steps) {
  console.log(`gpt: the checkpoint is at step ${resumed.step} of ${opts.steps}: nothing left to train`);
  process.exit(0);
}
// clip scales the gradients to a total norm of at most --clip (0: no clipping) and returns their norm
// before clipping; under ZeRO stages 2 and 3 that is a collective over each rank's gradient slices.
const clip = () => {
  if (opts.clip === 0) return null;
  if (scaler.isEnabled()) scaler.unscale_(opt); // clip the real gradients
  return opts.zero === 0 ? nn.utils.clipGradNorm_(params, opts.clip) : opt.clipGradNorm_(opts.clip);
};

// noSync skips the gradient reduction of all but the last micro-batch of a step.
const noSync = fn => {
  if (model !== gpt) return model.noSync(fn);
  if (opts.zero >= 2) return opt.noSync(fn);
  return fn();
};

function evaluate() {
  valLoader.position = { epoch: 0, windows: 0 };
  let sum = 0;
  tensor.noGrad(() => {
    for (let i = 0; i < opts.evalBatches; i++) {
      tensor.scope(() => {
        const [x, y] = valLoader.next();
        sum += lossOf(gpt, x, y).item();
      });
    }
  });
  const local = tensor.fromArray([sum / opts.evalBatches], { dtype: "float64" });
  if (world > 1) dist.allReduce(local, "avg").wait();
  return local.item();
}

const numParams = gpt.numParameters();
const tokensPerStep = opts.batch * opts.seqLen * opts.accum * world;
console.log(`gpt: ${opts.config} (${cfg.nLayer} layers, d=${cfg.nEmbd}, ${cfg.nHead} heads, ${(numParams / 1e6).toFixed(2)}M parameters, ${opts.dtype}), ` +
  `${opts.bench ? "random tokens" : `${train.length} training tokens from ${train.source}`}; ` +
  `${opts.steps} steps of ${tokensPerStep} tokens (B=${opts.batch} T=${opts.seqLen} accum=${opts.accum} ranks=${world}${opts.zero ? ` ZeRO ${opts.zero}` : ""}); ` +
  `seed ${opts.seed} (${seedFrom()})`);

// ---- per-step measurements: model FLOP utilisation, memory, communication ----------------------------------
// Model FLOPs per token as nanoGPT's estimate_mfu counts them (PaLM, appendix B): 6N for the matrix products of
// forward and backward over the N parameters less the position embeddings, plus 12·L·H·Q·T for attention
// (Q the head size, T the sequence length trained on). MFU divides the rank's FLOPs per second by its share of
// the device's peak: on the CPU an estimate from the cores, clock and vector ISA, shared by the in-process ranks
// (device.properties() says how it was reached); 0 when unknown, and then no mfu is reported.
const flopsPerToken = 6 * (numParams - cfg.seqLen * cfg.nEmbd) + 12 * cfg.nLayer * cfg.nHead * (cfg.nEmbd / cfg.nHead) * opts.seqLen;
const peakFlops = device.peakFlops(opts.dtype);
// observeStep is called once the step's gradients are cleared and returns what reports the step (the metrics
// fields mfu, mem_params, mem_grads, mem_optim_state, mem_activations, mem_peak and comm_ms), given its time: memory in bytes on this rank (parameters, gradients, optimizer state as the optimizer holds them;
// activations as the step's peak of live bytes above what it leaves live, the parameters, gradients and optimizer
// state, its own tensors gone with its scope: the activations and what was in flight with them) and the time the
// rank's communication queue was busy (waiting for peers included).
function observeStep() {
  const comm0 = dist.commTime();
  device.resetPeakMemoryStats();
  return ms => {
    const m = opt.memory(), peak = device.maxMemoryAllocated(), comm1 = dist.commTime();
    return {
      mfu: peakFlops > 0 && ms > 0 ? flopsPerToken * (tokensPerStep / world) / (ms / 1e3) / peakFlops : undefined,
      mem_params: m.parameters, mem_grads: m.gradients, mem_optim_state: m.optimizerState,
      mem_activations: Math.max(0, peak - device.memoryAllocated()), mem_peak: peak,
      comm_ms: comm0 === null ? undefined : (comm1 - comm0) * 1e3,
    };
  };
}

// ---- training ----------------------------------------------------------------------------------------------
const bar = progress.bar({ total: opts.steps, label: "gpt" });
const stepMs = [];
let loss = NaN, valLoss = null, nonfinite = 0; // nonfinite: the steps in a row whose loss was not finite
for (let step = firstStep; step <= opts.steps; step++) {
  const start = Date.now();
  opt.zeroGrad(true);
  const observed = observeStep();
  const lr = opt.paramGroups[0].lr; // the rate this step uses; sched.step() sets the next one
  let sum = 0, gradNorm = null;
  // The step runs in a scope: what it makes (batches, activations, temporaries) goes back when it ends,
  // so that every step starts from the same memory and mem_activations is one step's.
  tensor.scope(() => {
    for (let micro = 1; micro <= opts.accum; micro++) {
      const [x, y] = loader.next();
      const run = () => {
        const l = lossOf(model, x, y);
        scaler.scale(l.div(opts.accum)).backward();
        sum += l.item();
      };
      if (micro < opts.accum) noSync(run);
      else run();
    }
    gradNorm = clip();
    scaler.step(opt); // opt.step(), unless float16 gradients overflowed
    scaler.update();
  });
  sched.step();
  loss = sum / opts.accum;
  if (world > 1) {
    // Every rank reports the loss of the whole global batch.
    const t = tensor.fromArray([loss], { dtype: "float64" });
    dist.allReduce(t, "avg").wait();
    loss = t.item();
  }
  const ms = Date.now() - start;
  const obs = observed(ms);
  stepMs.push(ms);
  if (valLoader && (step % opts.evalEvery === 0 || step === opts.steps)) {
    valLoss = evaluate();
    console.log(`step ${step}  loss ${loss.toFixed(4)}  val loss ${valLoss.toFixed(4)}`);
  }
  if (metrics.enabled) {
    metrics.log({ step, loss, lr, grad_norm: gradNorm, tokens_per_s: tokensPerStep / (ms / 1e3), ...obs,
      ...(scaler.isEnabled() ? { loss_scale: scaler.getScale() } : {}), ...(valLoss !== null && step % opts.evalEvery === 0 ? { val_loss: valLoss } : {}) });
  }
  bar.update(step, { loss, samples: step * opts.batch * opts.accum * world, mfu: obs.mfu === undefined ? undefined : `${(100 * obs.mfu).toFixed(1)}%` });
  // A loss that stays NaN or infinite means the parameters are no longer finite (without loss scaling
  // one such step makes every later one so): stop before this state is saved, rather than train on and
  // save NaN checkpoints. Every rank sees the same (global) loss, so every rank stops at the same step.
  nonfinite = Number.isFinite(loss) ? 0 : nonfinite + 1;
  if (opts.maxNonfinite > 0 && nonfinite >= opts.maxNonfinite) {
    bar.done();
    console.error(`gpt.js: the loss is ${loss} at step ${step}, and has not been finite since step ${step - nonfinite + 1} ` +
      `(${nonfinite} steps in a row, --max-nonfinite ${opts.maxNonfinite}): stopping without saving step ${step}`);
    process.exit(1);
  }
  // Every --checkpoint-every steps, at the end, and after SIGTERM (then the run exits here, status 0).
  if (ckpt) ckpt.save(step, { force: step === opts.steps });
}
bar.done();

const timed = stepMs.slice(Math.min(3, stepMs.length - 1)).sort((a, b) => a - b);
const median = timed[Math.floor(timed.length / 2)];
const result = { workload: opts.bench ? "gpt" : "gpt_train", config: opts.config, dtype: opts.dtype, steps: opts.steps,
  loss: Number(loss.toFixed(4)), ...(valLoss !== null ? { val_loss: Number(valLoss.toFixed(4)) } : {}),
  step_ms_median: median, tokens_per_s: Math.round(tokensPerStep / (median / 1e3)) };
metrics.log(result);
console.log(JSON.stringify(result));
