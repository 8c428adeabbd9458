// LLaMA: a LLaMA-style decoder (pre-RMSNorm blocks, rotary position embeddings, grouped-query causal
// attention, a SwiGLU MLP, no biases anywhere, an output layer of its own) trained as gpt.js trains GPT:
// AdamW with weight decay on the matrices only, a cosine schedule with warmup, gradient clipping and
// gradient accumulation; data parallel with DDP, or sharded with ZeRO.
//
//   zeroeng run samples/llama.js                                 # "tiny" on this repository's Markdown, byte-level, seconds
//   zeroeng run --nproc 2 samples/llama.js -- --zero 2           # two ranks, optimizer state and gradients sharded
//   zeroeng run --nproc 4 samples/llama.js -- --zero 3           # parameters sharded too, each layer gathered just in time
//   zeroeng run samples/llama.js -- --config bench --bench       # beside /usr/bin/python3 bench/torch_llama.py, timed
//   zeroeng run samples/llama.js -- --init weights.safetensors   # start from these weights (Hugging Face's names)
//
// The model is Hugging Face's LlamaForCausalLM, and its parameters carry that model's names
// (model.layers.0.self_attn.q_proj.weight, lm_head.weight), so that its weights load with --init and
// samples/testdata/llama/gen.py builds the same model in PyTorch. Meta's names map onto them as
// tok_embeddings → model.embed_tokens, attention.wq|wk|wv|wo → self_attn.q_proj|k_proj|v_proj|o_proj,
// feed_forward.w1|w3|w2 → mlp.gate_proj|up_proj|down_proj, attention_norm → input_layernorm,
// ffn_norm → post_attention_layernorm, norm → model.norm, output → lm_head. The rotary embedding is
// Hugging Face's rotate-half form: Meta's weights need its wq and wk rows permuted (as Hugging Face's
// convert_llama_weights_to_hf.py does) before they load here.
//
// Data (--data, --val-data) and checkpoints (--checkpoint DIR) are gpt.js's: llm.c token shards
// (Llama 3's uint32 ones too), .npy token arrays, or text as bytes; each rank reads its own slice of
// every global batch, reshuffled every epoch (--no-shuffle: in file order, as a side-by-side run in
// another framework reads it). The last line printed is the result as JSON.
const { tensor, nn, optim, data, dist, zero, progress, metrics, checkpoint, device, io, amp } = require("zeroeng");
const F = nn.functional;

// Configurations. The MLP's hidden size is LLaMA's: 2/3 of 4·dim, rounded up to a multiple of
// multipleOf (Meta's multiple_of), so that SwiGLU's three matrices cost what a 4·dim GELU MLP's two
// do: tiny 64 → 192, bench 256 → 768, llama-110m 768 → 2048. "bench" is the side-by-side workload of
// bench/torch_llama.py; "llama-110m" has the shape of llama2.c's stories110M (vocabulary 32000,
// 12 layers of 768), its output layer untied (134M parameters).
const configs = {
  tiny: { nLayer: 2, nHead: 4, nKvHead: 2, dim: 64, multipleOf: 32, seqLen: 64, vocab: 256, batch: 8, steps: 200, lr: 3e-3, warmup: 20 },
  bench: { nLayer: 4, nHead: 8, nKvHead: 4, dim: 256, multipleOf: 256, seqLen: 128, vocab: 512, batch: 8, steps: 100, lr: 1e-3, warmup: 10 },
  "llama-110m": { nLayer: 12, nHead: 12, nKvHead: 12, dim: 768, multipleOf: 32, seqLen: 1024, vocab: 32000, batch: 8, steps: 5000, lr: 6e-4, warmup: 700 },
};
for (const c of Object.values(configs)) {
  c.hidden = c.multipleOf * Math.ceil(Math.floor(2 * 4 * c.dim / 3) / c.multipleOf);
  c.normEps = 1e-5; // Llama 2's rms_norm_eps
  c.ropeTheta = 10000;
}

const usage = `usage: zeroeng run samples/llama.js [-- options]
  --config tiny|bench|llama-110m   model size (default tiny)
  --data PATTERN             training tokens (default: this repository's *.md, as bytes)
  --val-data PATTERN         validation tokens (default: the last tenth of --data)
  --no-shuffle               read the windows in file order, not reshuffled every epoch
  --init FILE                start from the weights in this safetensors file (every parameter, Hugging
                             Face's names) instead of the random initialisation
  --steps N --batch B --seq-len T --accum K    optimizer steps, sequences per rank, tokens per sequence,
                                               micro-batches per step (tokens per step: B·T·K·ranks)
  --lr X --min-lr-ratio R --warmup N --weight-decay W --clip C     AdamW, its schedule, clipping (0: none)
  --dtype float32|bfloat16   bfloat16: the model in bfloat16, float32 master weights in the optimizer
  --autocast bfloat16|float16  float32 weights, the forward's matrix products in the low precision (amp.autocast;
                             float16 with amp.GradScaler's loss scaling)
  --checkpoint-activations   keep no activations inside the decoder layers: backward recomputes them
  --zero 0|1|2|3             ZeRO stage (0: plain AdamW, with --nproc > 1 under DDP; 1: AdamW's state sharded;
                             2: gradients too; 3: parameters too, each decoder layer a zero.fullyShard unit)
  --limit-all-gathers N      stage 3: layers gathered or being gathered at once (default 2)
  --offload cpu|none         stages 2 and 3: AdamW's state and float32 master weights on the host, which steps
  --eval-every K --eval-batches N              validation loss every K steps, over N batches
  --seed S --bench           --seed: of the model and the shuffling (default: zeroeng run --seed, 0)
                             --bench: random tokens, no evaluation; the median step time of the steps
                             after the first 3 (bench/torch_llama.py times 3 warm-up and 20 timed steps)
  --checkpoint DIR --checkpoint-every K --keep N   save every K steps (0: only on SIGTERM and at the end),
                             keep the newest N (0: all); resume from DIR's newest checkpoint
  --max-nonfinite N          stop with an error, status 1, when the loss has been NaN or infinite for N
                             steps in a row, before saving the last one (default 5; 0: never)`;

const opts = { config: "tiny", dtype: "float32", zero: 0, limitAllGathers: 2, offload: "none", accum: 1, weightDecay: 0.1, clip: 1.0, minLrRatio: 0.1,
  evalEvery: 50, evalBatches: 8, seed: tensor.initialSeed(), bench: false, shuffle: true, checkpointEvery: 0, keep: 2, maxNonfinite: 5 };
const seedFrom = () => (argv.some(a => a === "--seed" || a.startsWith("--seed=")) ? "--seed" : "zeroeng run --seed");
const numeric = { "--steps": "steps", "--batch": "batch", "--seq-len": "seqLen", "--accum": "accum", "--lr": "lr",
  "--min-lr-ratio": "minLrRatio", "--warmup": "warmup", "--weight-decay": "weightDecay", "--clip": "clip",
  "--zero": "zero", "--limit-all-gathers": "limitAllGathers", "--eval-every": "evalEvery", "--eval-batches": "evalBatches", "--seed": "seed",
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
  const flagOnly = () => {
    if (inline !== undefined) fail(`${name} takes no value`);
  };
  switch (name) {
    case "--config": opts.config = value(); break;
    case "--data": opts.data = value(); break;
    case "--val-data": opts.valData = value(); break;
    case "--init": opts.init = value(); break;
    case "--dtype": opts.dtype = value(); break;
    case "--autocast": opts.autocast = value(); break;
    case "--checkpoint-activations": flagOnly(); opts.checkpointActivations = true; break;
    case "--offload": opts.offload = value(); break;
    case "--checkpoint": opts.checkpoint = value(); break;
    case "--bench": flagOnly(); opts.bench = true; break;
    case "--no-shuffle": flagOnly(); opts.shuffle = false; break;
    case "-h": case "--help": console.log(usage); process.exit(0);
    default: fail(`unknown argument ${argv[i]}`);
  }
}
function fail(msg) {
  console.error(`llama.js: ${msg}\n${usage}`);
  process.exit(2);
}
if (!Object.hasOwn(configs, opts.config)) fail(`--config is one of ${Object.keys(configs).join(", ")}`);
const cfg = configs[opts.config];
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
if (opts.bench && (opts.data || opts.valData || !opts.shuffle)) fail("--bench trains on random tokens: it takes no --data, --val-data or --no-shuffle");

// ---- the model ---------------------------------------------------------------------------------------
// RMSNorm is Hugging Face's LlamaRMSNorm: x / sqrt(mean(x²) + eps) · weight, over the last dim, with no
// bias and no mean subtracted. A bfloat16 input is normalised in float32 and cast back before the weight
// multiplies it, as there. (nn.RMSNorm is torch.nn.RMSNorm, composed in the input's type; for a float32
// model the two agree, and the sample keeps Hugging Face's form for bfloat16, as its checkpoints expect.)
class RMSNorm extends nn.Module {
  constructor(dim, eps) {
    super();
    this.weight = nn.Parameter(tensor.ones(dim));
    this.eps = eps;
  }
  forward(x) {
    const h = x.dtype === "float32" ? x : x.float();
    const y = h.mul(h.square().mean({ dim: -1, keepdim: true }).add(this.eps).rsqrt());
    return this.weight.mul(y.dtype === x.dtype ? y : y.to({ dtype: x.dtype }));
  }
  extraRepr() { return `(${this.weight.shape[0]},), eps=${this.eps}`; }
}

// Rotary position embeddings: the tables of cos and sin [positions, headDim] of the angles t·θ^(−2i/headDim)
// for i < headDim/2, each repeated for both halves of a head as Hugging Face's LlamaRotaryEmbedding lays
// them out. They are computed once here in float64 and rounded to float32 (Hugging Face computes the
// angles in float32, off by some 1e-5 radians at position 1000; samples/testdata/llama/gen.py computes
// them as here).
class Rotary {
  constructor(positions, headDim, theta) {
    const half = headDim / 2, cos = new Float32Array(positions * headDim), sin = new Float32Array(positions * headDim);
    for (let i = 0; i < half; i++) {
      const invFreq = 1 / Math.pow(theta, (2 * i) / headDim);
      for (let t = 0; t < positions; t++) {
        const a = t * invFreq;
        cos[t * headDim + i] = cos[t * headDim + half + i] = Math.cos(a);
        sin[t * headDim + i] = sin[t * headDim + half + i] = Math.sin(a);
      }
    }
    this.half = half;
    this.tables = { float32: [tensor.fromArray(cos, [positions, headDim]).keep(), tensor.fromArray(sin, [positions, headDim]).keep()] };
  }
  // apply rotates q or k [B, heads, T, headDim] by their positions 0..T−1: x·cos + rotateHalf(x)·sin with
  // rotateHalf(x) = [−x₂, x₁] of x's halves x₁, x₂. The tables are cast to x's dtype once, as Hugging
  // Face casts them to the activations' dtype.
  apply(x) {
    const T = x.shape[2];
    this.tables[x.dtype] ??= this.tables.float32.map(t => t.to({ dtype: x.dtype }).keep());
    const [cos, sin] = this.tables[x.dtype].map(t => t.narrow(0, 0, T));
    const rotated = tensor.cat([x.narrow(3, this.half, this.half).neg(), x.narrow(3, 0, this.half)], 3);
    return x.mul(cos).add(rotated.mul(sin));
  }
}

// Attention is grouped-query causal self-attention: nHead query heads share nKvHead key and value heads,
// each repeated to the nHead/nKvHead query heads beside it (Hugging Face's repeat_kv: query head h reads
// key head ⌊h·nKvHead/nHead⌋).
class Attention extends nn.Module {
  constructor(c) {
    super();
    const hd = c.dim / c.nHead;
    this.q_proj = nn.Linear(c.dim, c.nHead * hd, false);
    this.k_proj = nn.Linear(c.dim, c.nKvHead * hd, false);
    this.v_proj = nn.Linear(c.dim, c.nKvHead * hd, false);
    this.o_proj = nn.Linear(c.nHead * hd, c.dim, false);
    this.nHead = c.nHead;
    this.nKvHead = c.nKvHead;
  }
  forward(x, rope) {
    const [B, T, C] = x.shape, H = this.nHead, KV = this.nKvHead, hd = C / H;
    const q = rope.apply(this.q_proj.forward(x).view(B, T, H, hd).transpose(1, 2));
    let k = rope.apply(this.k_proj.forward(x).view(B, T, KV, hd).transpose(1, 2));
    let v = this.v_proj.forward(x).view(B, T, KV, hd).transpose(1, 2);
    if (KV !== H) {
      const repeat = t => t.unsqueeze(2).expand(B, KV, H / KV, T, hd).reshape(B, H, T, hd);
      k = repeat(k);
      v = repeat(v);
    }
    const y = F.scaledDotProductAttention(q, k, v, { isCausal: true });
    return this.o_proj.forward(y.transpose(1, 2).contiguous().view(B, T, C));
  }
}

// MLP is SwiGLU: down(silu(gate(x)) · up(x)), Meta's w2(silu(w1 x) · w3 x).
class MLP extends nn.Module {
  constructor(c) {
    super();
    this.gate_proj = nn.Linear(c.dim, c.hidden, false);
    this.up_proj = nn.Linear(c.dim, c.hidden, false);
    this.down_proj = nn.Linear(c.hidden, c.dim, false);
  }
  forward(x) { return this.down_proj.forward(this.gate_proj.forward(x).silu().mul(this.up_proj.forward(x))); }
}

class DecoderLayer extends nn.Module {
  constructor(c) {
    super();
    this.self_attn = new Attention(c);
    this.mlp = new MLP(c);
    this.input_layernorm = new RMSNorm(c.dim, c.normEps);
    this.post_attention_layernorm = new RMSNorm(c.dim, c.normEps);
  }
  forward(x, rope) {
    x = x.add(this.self_attn.forward(this.input_layernorm.forward(x), rope));
    return x.add(this.mlp.forward(this.post_attention_layernorm.forward(x)));
  }
}

class LlamaModel extends nn.Module {
  constructor(c) {
    super();
    this.embed_tokens = nn.Embedding(c.vocab, c.dim);
    this.layers = nn.ModuleList(Array.from({ length: c.nLayer }, () => new DecoderLayer(c)));
    this.norm = new RMSNorm(c.dim, c.normEps);
  }
}

class Llama extends nn.Module {
  constructor(c) {
    super();
    this.model = new LlamaModel(c);
    this.lm_head = nn.Linear(c.dim, c.vocab, false);
    this.rope = new Rotary(c.seqLen, c.dim / c.nHead, c.ropeTheta);
    // Hugging Face's initialisation (initializer_range 0.02): N(0, 0.02) for every matrix and the
    // embedding; the norms' weights stay ones.
    for (const [, p] of this.namedParameters()) if (p.ndim === 2) nn.init.normal_(p, 0, 0.02);
  }
  // forward maps token ids [B, T] to logits [B, T, vocab].
  forward(idx) {
    const m = this.model;
    let x = m.embed_tokens.forward(idx);
    for (const layer of m.layers) x = layer.forward(x, this.rope);
    return this.lm_head.forward(m.norm.forward(x));
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
const world = dist.worldSize;
tensor.manualSeed(opts.seed);
let train, val;
if (opts.bench) {
  // Random tokens, as bench/torch_llama.py times the step.
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
// the byte offset and the step.
const loader = data.TokenLoader(train, { batchSize: opts.batch, seqLen: opts.seqLen, seed: opts.seed, shuffle: opts.shuffle, vocabSize: cfg.vocab, prefetch: 2 });
// Validation covers a step's global batch per evaluation batch, the same windows every time.
const valLoader = val && data.TokenLoader(val, { batchSize: opts.batch * opts.accum, seqLen: opts.seqLen, shuffle: false, vocabSize: cfg.vocab });

// ---- model, optimizer, schedule --------------------------------------------------------------------------
// Under stage 3 the model is built sharded (zero.init): no rank ever holds it whole, each makes only its
// slices of the very values the model built whole has (from --init: each rank reads only its slices).
const build = () => {
  const m = new Llama(cfg);
  if (opts.init) {
    // Strict: every parameter must be in the file with its shape, and nothing else, so that a file of
    // another configuration or with other names is an error naming the tensor, not a half-loaded model.
    try {
      const weights = io.loadSafetensors(opts.init);
      m.loadStateDict(weights);
      // A file of another dtype (Hugging Face's Llama files are bfloat16) is converted as PyTorch's
      // load_state_dict converts it: say so, and whether that is exact.
      const held = [...new Set(Object.values(weights).map(t => t.dtype))].filter(d => d !== opts.dtype);
      if (held.length && dist.rank === 0) {
        const exact = held.every(d => opts.dtype === "float32" && (d === "bfloat16" || d === "float16"));
        console.error(`llama.js: --init ${opts.init} holds ${held.join(", ")} weights and the run is ${opts.dtype}: ` +
          (exact ? "they are widened, exactly" : `they are converted to ${opts.dtype}, rounding`));
      }
    } catch (e) {
      console.error(`llama.js: --init ${opts.init}: ${e.message}`);
      process.exit(1);
    }
  }
  if (opts.dtype === "bfloat16") m.bfloat16();
  return m;
};
let model = opts.zero === 3 ? zero.init(build) : build();
const llama = model;
// Weight decay on the matrices (the embedding, the projections, the output layer), none on the norms.
const params = llama.parameters();
const decay = params.filter(p => p.ndim >= 2), noDecay = params.filter(p => p.ndim < 2);
const groups = [{ params: decay, weightDecay: opts.weightDecay }, { params: noDecay, weightDecay: 0 }];
const hyper = { lr: opts.lr, betas: [0.9, 0.95], eps: 1e-8 };
// Activation checkpointing wraps each decoder layer's forward (before zero.fullyShard, so that the
// recomputation runs inside the layer's gather under stage 3).
if (opts.checkpointActivations) for (const layer of llama.model.layers) nn.utils.checkpointWrapper(layer);
let opt;
if (opts.zero === 0) {
  if (world > 1) model = nn.parallel.DistributedDataParallel(model, { gradientAsBucketView: true });
  opt = optim.AdamW(groups, hyper);
} else {
  // As in gpt.js: stage 1 shards AdamW's state under DDP; stage 2 the gradients too, reduce-scattered by
  // the optimizer without DDP; stage 3 the parameters too, each decoder layer a unit gathered just before
  // its forward and backward, the embedding, the last norm and the output layer the model's own unit.
  if (opts.zero === 1 && world > 1) model = nn.parallel.DistributedDataParallel(model, { gradientAsBucketView: true });
  if (opts.zero === 3) {
    for (const layer of llama.model.layers) zero.fullyShard(layer);
    zero.fullyShard(llama, { reshardAfterForward: false });
  }
  opt = zero.ZeroRedundancyOptimizer(groups, { optimizer: "adamw", ...hyper, stage: opts.zero, partition: "flat",
    ...(opts.zero === 3 ? { limitAllGathers: opts.limitAllGathers } : {}), ...(opts.zero >= 2 ? { offload: opts.offload } : {}) });
}
const sched = optim.lrScheduler.WarmupCosine(opt, { warmup: opts.warmup, total: opts.steps, minRatio: opts.minLrRatio });
// float16 autocast scales the loss so that small gradients survive float16's range (see gpt.js).
const scaler = amp.GradScaler({ enabled: opts.autocast === "float16" });
const ckpt = opts.checkpoint && checkpoint.Manager(opts.checkpoint, {
  state: { model: llama, optimizer: opt, scheduler: sched, loader, ...(scaler.isEnabled() ? { scaler } : {}) },
  every: opts.checkpointEvery, keep: opts.keep });
const resumed = ckpt ? ckpt.load() : null;
if (resumed) console.log(`llama: resumed from ${resumed.path} (step ${resumed.step}, ${resumed.worldSize} rank${resumed.worldSize === 1 ? "" : "s"})`);
const firstStep = resumed ? resumed.step + 1 : 1;
if (firstStep > opts.steps) {
  console.log(`llama: the checkpoint is at step ${resumed.step} of ${opts.steps}: nothing left to train`);
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
  if (model !== llama) return model.noSync(fn);
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
        sum += lossOf(llama, x, y).item();
      });
    }
  });
  const local = tensor.fromArray([sum / opts.evalBatches], { dtype: "float64" });
  if (world > 1) dist.allReduce(local, "avg").wait();
  return local.item();
}

const numParams = llama.numParameters();
const tokensPerStep = opts.batch * opts.seqLen * opts.accum * world;
console.log(`llama: ${opts.config} (${cfg.nLayer} layers, d=${cfg.dim}, ${cfg.nHead} heads, ${cfg.nKvHead} key/value heads, ` +
  `MLP ${cfg.hidden}, ${(numParams / 1e6).toFixed(2)}M parameters, ${opts.dtype}${opts.init ? `, from ${opts.init}` : ""}), ` +
  `${opts.bench ? "random tokens" : `${train.length} training tokens from ${train.source}`}; ` +
  `${opts.steps} steps of ${tokensPerStep} tokens (B=${opts.batch} T=${opts.seqLen} accum=${opts.accum} ranks=${world}${opts.zero ? ` ZeRO ${opts.zero}` : ""}); ` +
  `seed ${opts.seed} (${seedFrom()})`);

// ---- per-step measurements: model FLOP utilisation, memory, communication ----------------------------------
// Model FLOPs per token as gpt.js counts them (PaLM, appendix B): 6N for the matrix products of forward and
// backward over the N parameters less the input embedding (a lookup, not a product; the output layer is
// a product of its own here), plus 12·L·H·Q·T for attention (Q the head size, T the sequence length).
const flopsPerToken = 6 * (numParams - cfg.vocab * cfg.dim) + 12 * cfg.nLayer * cfg.nHead * (cfg.dim / cfg.nHead) * opts.seqLen;
const peakFlops = device.peakFlops(opts.dtype);
// observeStep is gpt.js's: called once the step's gradients are cleared, it returns what reports the
// step's metrics (mfu, mem_params, mem_grads, mem_optim_state, mem_activations, mem_peak, comm_ms) given
// its time in ms.
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
const bar = progress.bar({ total: opts.steps, label: "llama" });
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
    metrics.log({ step, loss, lr, grad_norm: gradNorm, tokens_per_s: tokensPerStep / (ms / 1e3), ...obs, ...(valLoss !== null && step % opts.evalEvery === 0 ? { val_loss: valLoss } : {}) });
  }
  bar.update(step, { loss, samples: step * opts.batch * opts.accum * world, mfu: obs.mfu === undefined ? undefined : `${(100 * obs.mfu).toFixed(1)}%` });
  // A loss that stays NaN or infinite means the parameters are no longer finite (without loss scaling
  // one such step makes every later one so): stop before this state is saved, rather than train on and
  // save NaN checkpoints. Every rank sees the same (global) loss, so every rank stops at the same step.
  nonfinite = Number.isFinite(loss) ? 0 : nonfinite + 1;
  if (opts.maxNonfinite > 0 && nonfinite >= opts.maxNonfinite) {
    bar.done();
    console.error(`llama.js: the loss is ${loss} at step ${step}, and has not been finite since step ${step - nonfinite + 1} ` +
      `(${nonfinite} steps in a row, --max-nonfinite ${opts.maxNonfinite}): stopping without saving step ${step}`);
    process.exit(1);
  }
  // Every --checkpoint-every steps, at the end, and after SIGTERM (then the run exits here, status 0).
  if (ckpt) ckpt.save(step, { force: step === opts.steps });
}
bar.done();

const timed = stepMs.slice(Math.min(3, stepMs.length - 1)).sort((a, b) => a - b);
const median = timed[Math.floor(timed.length / 2)];
const result = { workload: opts.bench ? "llama" : "llama_train", config: opts.config, dtype: opts.dtype, steps: opts.steps,
  loss: Number(loss.toFixed(4)), ...(valLoss !== null ? { val_loss: Number(valLoss.toFixed(4)) } : {}),
  step_ms_median: median, tokens_per_s: Math.round(tokensPerStep / (median / 1e3)) };
metrics.log(result);
console.log(JSON.stringify(result));
