//! gpt.rs: samples/gpt.js as a WebAssembly training program in Rust, over the Rust SDK
//! (sdk/rust): a GPT-2 style decoder (token and position embeddings, pre-LayerNorm blocks with
//! fused causal self-attention and a tanh-GELU MLP, the output tied to the token embedding)
//! trained as nanoGPT and llm.c train GPT-2: AdamW with weight decay on the matrices only, a
//! cosine schedule with warmup, gradient clipping and gradient accumulation; data parallel with
//! DDP, or sharded with ZeRO. It makes the script's calls in the script's order, so that its
//! losses are the script's bit for bit, on one rank or several, under every ZeRO stage.
//!
//!   make programs      # samples/programs/build/gpt_rust.wasm
//!   zeroeng run samples/programs/build/gpt_rust.wasm                  # "tiny" on ./*.md and ./docs/*.md
//!   zeroeng run --nproc 2 samples/programs/build/gpt_rust.wasm -- --zero 3
//!   zeroeng run samples/programs/build/gpt_rust.wasm -- --config bench --bench
//!   zeroeng run samples/programs/build/gpt_rust.wasm -- --checkpoint ckpt --checkpoint-every 50
//!
//! The model is the script's tree of modules with the script's parameter names
//! (transformer.h.0.attn.c_attn.weight): the API's nn.ModuleDict, nn.ModuleList, nn.Linear,
//! nn.LayerNorm and nn.Embedding, each container's `forward` set to a Rust closure (a
//! zeroeng::Function, ABI 1.1). The API calls those as it calls a script class's forward: DDP
//! through its module, zero.fullyShard (stage 3) and nn.utils.checkpointWrapper by wrapping the
//! forward in place; under --zero 3 the model is built inside zero.init's builder, a closure
//! too, as are noSync's and amp.autocast's bodies. The calls of each forward are handle-only
//! (op, invoke) where the API's method takes handles and numbers; the rest go by name with JSON.
//!
//! The flags are the script's (--help lists them). A program has no files of its own: the
//! default data is *.md and docs/*.md of the working directory (the script reads its
//! repository's: run this from the repository's root, or give --data).
//!
//! Build (Debian's rustc 1.63 with libstd-rust-dev-wasm32; no crate beyond the SDK):
//!   rustc --edition 2021 --crate-type rlib --crate-name zeroeng --target wasm32-wasi -O \
//!       -o build/libzeroeng.rlib sdk/rust/src/lib.rs
//!   rustc --edition 2021 --target wasm32-wasi -O --extern zeroeng=build/libzeroeng.rlib \
//!       -o gpt_rust.wasm samples/programs/rust/gpt.rs

use std::cell::{Cell, RefCell};
use std::process::exit;
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

use zeroeng::{args, call, call_f64, call_object, call_tensor, dict, lookup, no_grad, number_string, scope, to_fixed, Error, Function, Object, Result, Tensor, Value};

/// A model size (the script's `configs`): "bench" is bench/torch_cpu.py's `gpt` workload,
/// "gpt2" is GPT-2 124M.
#[derive(Clone, Copy)]
struct Config {
    name: &'static str,
    n_layer: i64,
    n_head: i64,
    n_embd: i64,
    seq_len: i64,
    vocab: i64,
    batch: f64,
    steps: f64,
    lr: f64,
    warmup: f64,
}

const CONFIGS: [Config; 3] = [
    Config { name: "tiny", n_layer: 2, n_head: 4, n_embd: 64, seq_len: 64, vocab: 256, batch: 8.0, steps: 200.0, lr: 3e-3, warmup: 20.0 },
    Config { name: "bench", n_layer: 4, n_head: 4, n_embd: 256, seq_len: 128, vocab: 512, batch: 8.0, steps: 100.0, lr: 1e-3, warmup: 10.0 },
    Config { name: "gpt2", n_layer: 12, n_head: 12, n_embd: 768, seq_len: 1024, vocab: 50257, batch: 8.0, steps: 5000.0, lr: 6e-4, warmup: 700.0 },
];

const USAGE: &str = "  --config tiny|bench|gpt2   model size (default tiny)
  --init FILE                start from the weights in this safetensors file (every parameter, with this
                             program's names and shapes: a checkpoint's model.safetensors)
  --data PATTERN             training tokens (default: *.md and docs/*.md of the working directory, as bytes)
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
                             steps in a row, before saving the last one (default 5; 0: never)";

/// The script's options, with its defaults; the numbers are JavaScript's (f64), checked as
/// the script checks them.
struct Options {
    config: String,
    dtype: String,
    zero: f64,
    limit_all_gathers: f64,
    offload: String,
    accum: f64,
    weight_decay: f64,
    clip: f64,
    min_lr_ratio: f64,
    eval_every: f64,
    eval_batches: f64,
    seed: f64,
    bench: bool,
    checkpoint_every: f64,
    keep: f64,
    max_nonfinite: f64,
    steps: Option<f64>,
    batch: Option<f64>,
    seq_len: Option<f64>,
    lr: Option<f64>,
    warmup: Option<f64>,
    loss_scale: Option<f64>,
    init: Option<String>,
    data: Option<String>,
    val_data: Option<String>,
    autocast: Option<String>,
    checkpoint: Option<String>,
    checkpoint_activations: bool,
    /// Whether --seed was given (the header names where the seed came from).
    seed_given: bool,
}

/// What the run trains with, once the options are checked.
struct Settings {
    cfg: Config,
    steps: i64,
    batch: i64,
    seq_len: i64,
    accum: i64,
    lr: f64,
    warmup: f64,
    zero: i64,
}

/// fail ends the program as the script's fail does: the message, the usage, status 2.
fn fail(prog: &str, msg: &str) -> ! {
    eprintln!("{}: {}\nusage: zeroeng run {} [-- options]\n{}", prog, msg, prog, USAGE);
    exit(2);
}

/// js_number is JavaScript's Number(s): the decimal or 0x/0o/0b number the trimmed text is,
/// 0 for none, NaN for anything else.
fn js_number(s: &str) -> f64 {
    let t = s.trim();
    if t.is_empty() {
        return 0.0;
    }
    for (prefix, radix) in [("0x", 16), ("0X", 16), ("0o", 8), ("0O", 8), ("0b", 2), ("0B", 2)] {
        if let Some(digits) = t.strip_prefix(prefix) {
            return u64::from_str_radix(digits, radix).map_or(f64::NAN, |v| v as f64);
        }
    }
    match t {
        "Infinity" | "+Infinity" => return f64::INFINITY,
        "-Infinity" => return f64::NEG_INFINITY,
        _ => {}
    }
    if !t.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) {
        return f64::NAN;
    }
    t.parse::<f64>().unwrap_or(f64::NAN)
}

fn parse_args(prog: &str, argv: &[String], initial_seed: f64) -> Options {
    let mut o = Options {
        config: "tiny".into(),
        dtype: "float32".into(),
        zero: 0.0,
        limit_all_gathers: 2.0,
        offload: "none".into(),
        accum: 1.0,
        weight_decay: 0.1,
        clip: 1.0,
        min_lr_ratio: 0.1,
        eval_every: 50.0,
        eval_batches: 8.0,
        seed: initial_seed,
        bench: false,
        checkpoint_every: 0.0,
        keep: 2.0,
        max_nonfinite: 5.0,
        steps: None,
        batch: None,
        seq_len: None,
        lr: None,
        warmup: None,
        loss_scale: None,
        init: None,
        data: None,
        val_data: None,
        autocast: None,
        checkpoint: None,
        checkpoint_activations: false,
        seed_given: argv.iter().any(|a| a == "--seed" || a.starts_with("--seed=")),
    };
    let mut i = 0;
    while i < argv.len() {
        let (name, inline) = match argv[i].split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (argv[i].clone(), None),
        };
        let mut value = || -> String {
            match inline.clone() {
                Some(v) => v,
                None => {
                    i += 1;
                    argv.get(i).cloned().unwrap_or_else(|| fail(prog, &format!("{} needs a value", name)))
                }
            }
        };
        let numeric: Option<&mut f64> = match name.as_str() {
            "--zero" => Some(&mut o.zero),
            "--limit-all-gathers" => Some(&mut o.limit_all_gathers),
            "--accum" => Some(&mut o.accum),
            "--weight-decay" => Some(&mut o.weight_decay),
            "--clip" => Some(&mut o.clip),
            "--min-lr-ratio" => Some(&mut o.min_lr_ratio),
            "--eval-every" => Some(&mut o.eval_every),
            "--eval-batches" => Some(&mut o.eval_batches),
            "--seed" => Some(&mut o.seed),
            "--checkpoint-every" => Some(&mut o.checkpoint_every),
            "--keep" => Some(&mut o.keep),
            "--max-nonfinite" => Some(&mut o.max_nonfinite),
            "--steps" => Some(o.steps.insert(0.0)),
            "--batch" => Some(o.batch.insert(0.0)),
            "--seq-len" => Some(o.seq_len.insert(0.0)),
            "--lr" => Some(o.lr.insert(0.0)),
            "--warmup" => Some(o.warmup.insert(0.0)),
            "--loss-scale" => Some(o.loss_scale.insert(0.0)),
            _ => None,
        };
        if let Some(slot) = numeric {
            let v = js_number(&value());
            if !v.is_finite() || v < 0.0 {
                fail(prog, &format!("{} takes a non-negative number", name));
            }
            *slot = v;
        } else {
            match name.as_str() {
            "--config" => o.config = value(),
            "--init" => o.init = Some(value()),
            "--data" => o.data = Some(value()),
            "--val-data" => o.val_data = Some(value()),
            "--dtype" => o.dtype = value(),
            "--autocast" => o.autocast = Some(value()),
            "--offload" => o.offload = value(),
            "--checkpoint" => o.checkpoint = Some(value()),
            "--bench" => o.bench = true,
            "--checkpoint-activations" => o.checkpoint_activations = true,
            "-h" | "--help" => {
                println!("usage: zeroeng run {} [-- options]\n{}", prog, USAGE);
                exit(0);
            }
            _ => fail(prog, &format!("unknown argument {}", argv[i])),
            }
        }
        i += 1;
    }
    o
}

/// settle applies the script's checks and defaults.
fn settle(prog: &str, o: &mut Options) -> Settings {
    let cfg = match CONFIGS.iter().find(|c| c.name == o.config) {
        Some(c) => *c,
        None => fail(prog, "--config is one of tiny, bench, gpt2"),
    };
    let batch = *o.batch.get_or_insert(cfg.batch);
    let seq_len = *o.seq_len.get_or_insert(cfg.seq_len as f64);
    let steps = *o.steps.get_or_insert(cfg.steps);
    let lr = *o.lr.get_or_insert(cfg.lr);
    // A short run keeps a tenth for warm-up.
    let warmup = *o.warmup.get_or_insert(cfg.warmup.min((steps / 10.0).floor()));
    if warmup > steps {
        fail(prog, &format!("--warmup {} is longer than the {} steps", number_string(warmup), number_string(steps)));
    }
    let positive = |x: f64| x == x.trunc() && x > 0.0;
    for (flag, v) in [("--batch", batch), ("--seq-len", seq_len), ("--steps", steps), ("--accum", o.accum), ("--eval-batches", o.eval_batches), ("--limit-all-gathers", o.limit_all_gathers)] {
        if !positive(v) {
            fail(prog, &format!("{} takes a positive integer", flag));
        }
    }
    for (flag, v) in [("--checkpoint-every", o.checkpoint_every), ("--keep", o.keep), ("--max-nonfinite", o.max_nonfinite)] {
        if v != v.trunc() {
            fail(prog, &format!("{} takes a whole number", flag));
        }
    }
    if o.checkpoint_every != 0.0 && o.checkpoint.is_none() {
        fail(prog, "--checkpoint-every needs --checkpoint DIR");
    }
    if ![0.0, 1.0, 2.0, 3.0].contains(&o.zero) {
        fail(prog, "--zero is 0, 1, 2 or 3");
    }
    if o.offload != "cpu" && o.offload != "none" {
        fail(prog, "--offload is cpu or none");
    }
    if o.offload != "none" && o.zero < 2.0 {
        fail(prog, "--offload needs --zero 2 or 3");
    }
    if o.dtype != "float32" && o.dtype != "bfloat16" {
        fail(prog, "--dtype is float32 or bfloat16");
    }
    if let Some(a) = &o.autocast {
        if a != "bfloat16" && a != "float16" {
            fail(prog, "--autocast is bfloat16 or float16");
        }
        if o.dtype != "float32" {
            fail(prog, "--autocast runs a float32 model in a lower precision: leave --dtype at float32");
        }
    }
    if seq_len > cfg.seq_len as f64 {
        fail(prog, &format!("--seq-len {} exceeds the {} model's {} positions", number_string(seq_len), cfg.name, cfg.seq_len));
    }
    Settings { cfg, steps: steps as i64, batch: batch as i64, seq_len: seq_len as i64, accum: o.accum as i64, lr, warmup, zero: o.zero as i64 }
}

fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64)
}

/// The tensor argument i of a forward.
fn tensor_arg(args: &[Value], i: usize, what: &str) -> Result<Tensor> {
    match args.get(i) {
        Some(Value::Tensor(t)) => Ok(t.borrowed()),
        Some(v) => Err(Error::new(format!("{}: argument {} is {}, not a tensor", what, i, v.describe()))),
        None => Err(Error::new(format!("{}: argument {} is missing", what, i))),
    }
}

// ---- the model ------------------------------------------------------------------------------

/// A module made by name, shared by the closures that call it.
fn module(path: &str, args: &[Value]) -> Result<Rc<Object>> {
    Ok(Rc::new(call_object(path, args)?))
}

/// An nn.ModuleDict of the named modules, in order (its state-dict names read "name.weight").
fn module_dict(entries: &[(&str, &Rc<Object>)]) -> Result<Rc<Object>> {
    let pairs: Vec<Value> = entries.iter().map(|(k, m)| Value::Array(vec![Value::from(*k), Value::from(&***m)])).collect();
    module("nn.ModuleDict", &args![pairs])
}

/// set_forward makes f the module's forward (an own property, as a script's class method is a
/// property the wrappers find): one tensor in, one tensor out.
fn set_forward(m: &Object, what: &'static str, f: impl Fn(&Tensor) -> Result<Tensor> + 'static) -> Result<()> {
    let forward = Function::new(move |args| Ok(Value::from(f(&tensor_arg(&args, 0, what)?)?)))?;
    m.set("forward", &Value::from(&forward))
}

/// The functions the forwards call by handle.
struct Functions {
    linear: Object,
    arange: Object,
}

/// build makes samples/gpt.js's GPT: its modules in the script's order of construction (so
/// that their initial weights are the same draws), then GPT-2's initialisation over
/// namedParameters, then --init and --dtype. It returns the model and its blocks.
fn build(cfg: Config, opts: &Options, prog: &str, fns: &Rc<Functions>) -> Result<(Object, Vec<Rc<Object>>)> {
    let (c, nh) = (cfg.n_embd, cfg.n_head);
    let wte = module("nn.Embedding", &args![cfg.vocab, c])?;
    let wpe = module("nn.Embedding", &args![cfg.seq_len, c])?;
    let mut blocks = Vec::new();
    for _ in 0..cfg.n_layer {
        let ln_1 = module("nn.LayerNorm", &args![c])?;
        let c_attn = module("nn.Linear", &args![c, 3 * c])?;
        let attn_proj = module("nn.Linear", &args![c, c])?;
        let attn = module_dict(&[("c_attn", &c_attn), ("c_proj", &attn_proj)])?;
        let ln_2 = module("nn.LayerNorm", &args![c])?;
        let c_fc = module("nn.Linear", &args![c, 4 * c])?;
        let mlp_proj = module("nn.Linear", &args![4 * c, c])?;
        let mlp = module_dict(&[("c_fc", &c_fc), ("c_proj", &mlp_proj)])?;
        let block = module_dict(&[("ln_1", &ln_1), ("attn", &attn), ("ln_2", &ln_2), ("mlp", &mlp)])?;

        // CausalSelfAttention.forward
        set_forward(&attn, "attn.forward", move |x| {
            let shape = x.shape()?;
            let (b, t, c) = (shape[0], shape[1], shape[2]);
            let hd = c / nh;
            let qkv = c_attn.op("forward", &[x.into()])?.method("split", &args![c, 2])?.into_tensors()?;
            let mut heads = Vec::with_capacity(3);
            for part in &qkv {
                heads.push(part.op("view", &[b.into(), t.into(), nh.into(), hd.into()])?.op("transpose", &[1.into(), 2.into()])?);
            }
            let y = call_tensor("nn.functional.scaledDotProductAttention", &args![&heads[0], &heads[1], &heads[2], dict! { "isCausal" => true }])?;
            let merged = y.op("transpose", &[1.into(), 2.into()])?.op("contiguous", &[])?.op("view", &[b.into(), t.into(), c.into()])?;
            attn_proj.op("forward", &[(&merged).into()])
        })?;
        // MLP.forward
        set_forward(&mlp, "mlp.forward", move |x| {
            let h = c_fc.op("forward", &[x.into()])?.method_tensor("gelu", &args![dict! { "approximate" => "tanh" }])?;
            mlp_proj.op("forward", &[(&h).into()])
        })?;
        // Block.forward
        let (a, m) = (attn.clone(), mlp.clone());
        set_forward(&block, "block.forward", move |x| {
            let x = x.op("add", &[(&a.op("forward", &[(&ln_1.op("forward", &[x.into()])?).into()])?).into()])?;
            x.op("add", &[(&m.op("forward", &[(&ln_2.op("forward", &[(&x).into()])?).into()])?).into()])
        })?;
        blocks.push(block);
    }
    let h = module("nn.ModuleList", &args![blocks.iter().map(|b| Value::from(&**b)).collect::<Vec<_>>()])?;
    let ln_f = module("nn.LayerNorm", &args![c])?;
    let transformer = module_dict(&[("wte", &wte), ("wpe", &wpe), ("h", &h), ("ln_f", &ln_f)])?;
    let gpt = call_object("nn.ModuleDict", &args![vec![Value::Array(vec!["transformer".into(), Value::from(&*transformer)])]])?;

    // GPT-2's initialisation: N(0, 0.02) for every matrix and embedding, zero biases, and the
    // projections into the residual stream scaled by 1/sqrt(2·layers).
    for pair in gpt.method("namedParameters", &[])?.into_array()? {
        let mut pair = pair.into_array()?.into_iter();
        let (name, p) = match (pair.next(), pair.next()) {
            (Some(Value::String(name)), Some(Value::Tensor(p))) => (name, p),
            _ => return Err(Error::new("namedParameters() did not return [name, tensor] pairs")),
        };
        if name.ends_with(".bias") {
            call("nn.init.zeros_", &args![&p])?;
        } else if p.shape()?.len() == 2 {
            let std = if name.ends_with("c_proj.weight") { 0.02 / (2.0 * cfg.n_layer as f64).sqrt() } else { 0.02 };
            call("nn.init.normal_", &args![&p, 0, std])?;
        }
    }

    // GPT.forward maps token ids [B, T] to logits [B, T, vocab]; the output layer is the token
    // embedding.
    let hs = blocks.clone();
    let fns = fns.clone();
    set_forward(&gpt, "gpt.forward", move |idx| {
        let t = idx.shape()?[1];
        let tok = wte.op("forward", &[idx.into()])?;
        let pos = wpe.op("forward", &[(&fns.arange.invoke(&[t.into()])?).into()])?;
        let mut x = tok.op("add", &[(&pos).into()])?;
        for block in &hs {
            x = block.op("forward", &[(&x).into()])?;
        }
        let y = ln_f.op("forward", &[(&x).into()])?;
        let w = wte.get("weight")?.into_tensor()?;
        fns.linear.invoke(&[(&y).into(), (&w).into()])
    })?;

    if let Some(init) = &opts.init {
        // Strict: every parameter must be in the file with its shape, and nothing else.
        if let Err(e) = call_object("io.loadSafetensors", &args![init]).and_then(|sd| gpt.method("loadStateDict", &args![&sd])) {
            eprintln!("{}: --init {}: {}", prog, init, e);
            exit(1);
        }
    }
    if opts.dtype == "bfloat16" {
        gpt.op_object("bfloat16", &[])?; // the module itself: a second handle, released
    }
    Ok((gpt, blocks))
}

// ---- training -------------------------------------------------------------------------------

/// What the step's closures (noSync's and amp.autocast's bodies) share with the loop.
struct Trainer {
    /// What a step's forward runs on: the DDP wrapper when there is one, else the model.
    model: Object,
    gpt: Object,
    scaler: Object,
    autocast: Option<String>,
    accum: f64,
    /// The batch and model the next loss is of (lossOf's arguments, for autocast's body).
    pending: RefCell<Option<(Object, Tensor, Tensor)>>,
    /// The micro-batch the next run is of.
    batch: RefCell<Option<(Tensor, Tensor)>>,
    /// The step's sum of micro-batch losses.
    sum: Cell<f64>,
    cross_entropy: Object,
    /// autocast's body: the loss of `pending`.
    autocast_body: RefCell<Option<Function>>,
}

impl Trainer {
    /// The loss of model m on x, y: lossOf's run.
    fn loss_inner(&self, m: &Object, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let logits = m.op("forward", &[x.into()])?;
        let vocab = logits.shape()?[2];
        let flat = logits.op("view", &[(-1).into(), vocab.into()])?;
        let targets = y.op("view", &[(-1).into()])?;
        self.cross_entropy.invoke(&[(&flat).into(), (&targets).into()])
    }

    /// lossOf is the mean cross entropy of the next-token predictions, under amp.autocast with
    /// --autocast. Training calls it on the DDP wrapper when there is one.
    fn loss_of(&self, m: &Object, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        match &self.autocast {
            None => self.loss_inner(m, x, y),
            Some(dtype) => {
                *self.pending.borrow_mut() = Some((m.borrowed(), x.borrowed(), y.borrowed()));
                let body = self.autocast_body.borrow();
                let f = body.as_ref().ok_or_else(|| Error::new("no autocast body"))?;
                call_tensor("amp.autocast", &args![dtype, f])
            }
        }
    }

    /// run is one micro-batch: its loss, scaled, backward, summed.
    fn run(&self) -> Result<()> {
        let batch = self.batch.borrow_mut().take().ok_or_else(|| Error::new("no micro-batch to run"))?;
        let l = self.loss_of(&self.model, &batch.0, &batch.1)?;
        let share = l.op("div", &[self.accum.into()])?;
        // A disabled scaler returns its argument: a second handle on share's tensor, which
        // must not be released (dropped) before backward.
        let scaled = self.scaler.op("scale", &[(&share).into()])?;
        scaled.op_unit("backward", &[])?;
        self.sum.set(self.sum.get() + l.item()?);
        Ok(())
    }
}

/// The value of a plain object's field, or undefined.
fn field(v: &Value, key: &str) -> Value {
    v.get(key).map_or(Value::Null, Value::borrowed)
}

fn train(prog: &str) -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = parse_args(prog, &argv, call_f64("tensor.initialSeed", &[])?);
    let s = settle(prog, &mut opts);
    let cfg = s.cfg;

    // ---- data
    let world = call_f64("dist.worldSize", &[])?;
    call("tensor.manualSeed", &args![opts.seed])?;
    let (train, val) = if opts.bench {
        // Random tokens, as bench/torch_cpu.py times the step.
        let n = s.steps as f64 * s.batch as f64 * world * s.seq_len as f64 * s.accum as f64 + 1.0;
        let tokens = call_tensor("tensor.randint", &args![0, cfg.vocab, vec![Value::from(n)]])?;
        (call_object("data.fromTensor", &args![&tokens])?, None)
    } else {
        let sources: Vec<Value> = match &opts.data {
            Some(d) => vec![d.into()],
            None => vec!["*.md".into(), "docs/*.md".into()],
        };
        let all = call_object("data.loadTokens", &args![sources])?;
        match &opts.val_data {
            Some(v) => (all, Some(call_object("data.loadTokens", &args![v])?)),
            None => {
                let cut = (all.get("length")?.to_f64()? * 0.9).floor();
                let val = all.method_object("slice", &args![cut])?;
                (all.method_object("slice", &args![0, cut])?, Some(val))
            }
        }
    };
    // The loaders serve ids below the model's vocabulary (vocabSize): a dataset's vocabSize is its
    // format's (llm.c's GPT-2 shards: 50257, text: 256) or one more than an array's largest id, so data
    // whose ids fit a smaller model trains it, and an id beyond the model's stops the run where it is
    // read, naming the file, the byte offset and the step.
    let loader = call_object("data.TokenLoader", &args![&train, dict! { "batchSize" => s.batch, "seqLen" => s.seq_len, "seed" => opts.seed, "vocabSize" => cfg.vocab }])?;
    // Validation covers a step's global batch per evaluation batch, the same windows every time.
    let val_loader = match &val {
        Some(v) => Some(call_object("data.TokenLoader", &args![v, dict! { "batchSize" => s.batch * s.accum, "seqLen" => s.seq_len, "shuffle" => false, "vocabSize" => cfg.vocab }])?),
        None => None,
    };

    // ---- model, optimizer, schedule
    let fns = Rc::new(Functions { linear: lookup("nn.functional.linear")?, arange: lookup("tensor.arange")? });
    // Under stage 3 the model is built sharded (zero.init): no rank ever holds it whole.
    let opts = Rc::new(opts);
    let (gpt, blocks) = if s.zero == 3 {
        let built: Rc<RefCell<Option<Vec<Rc<Object>>>>> = Rc::new(RefCell::new(None));
        let (b, o, p, f) = (built.clone(), opts.clone(), prog.to_string(), fns.clone());
        let builder = Function::new(move |_| {
            let (gpt, blocks) = build(cfg, &o, &p, &f)?;
            *b.borrow_mut() = Some(blocks);
            Ok(gpt.into())
        })?;
        let gpt = call_object("zero.init", &args![&builder])?;
        let blocks = built.borrow_mut().take().ok_or_else(|| Error::new("zero.init did not run the builder"))?;
        (gpt, blocks)
    } else {
        build(cfg, &opts, prog, &fns)?
    };
    // Weight decay on the matrices (embeddings, linear weights), none on biases and LayerNorm
    // parameters.
    let params = gpt.method("parameters", &[])?.into_tensors()?;
    let (mut decay, mut no_decay) = (Vec::new(), Vec::new());
    for p in &params {
        if p.shape()?.len() >= 2 {
            decay.push(Value::from(p));
        } else {
            no_decay.push(Value::from(p));
        }
    }
    let groups = vec![dict! { "params" => decay, "weightDecay" => opts.weight_decay }, dict! { "params" => no_decay, "weightDecay" => 0 }];
    let betas = || vec![Value::from(0.9), Value::from(0.95)];
    // Activation checkpointing wraps each block's forward (before zero.fullyShard, so that the
    // recomputation runs inside the block's gather under stage 3).
    if opts.checkpoint_activations {
        for block in &blocks {
            call("nn.utils.checkpointWrapper", &args![&**block])?;
        }
    }
    let mut ddp = None;
    let opt = if s.zero == 0 {
        if world > 1.0 {
            ddp = Some(call_object("nn.parallel.DistributedDataParallel", &args![&gpt, dict! { "gradientAsBucketView" => true }])?);
        }
        call_object("optim.AdamW", &args![groups, dict! { "lr" => s.lr, "betas" => betas(), "eps" => 1e-8 }])?
    } else {
        // Stage 1 shards AdamW's state under DDP; stage 2 also the gradients, which the
        // optimizer reduce-scatters itself, without DDP; stage 3 the parameters too: each block
        // is a unit gathered just before its forward and backward and freed after, the
        // embeddings and the last LayerNorm are the model's own unit, kept from forward to
        // backward.
        if s.zero == 1 && world > 1.0 {
            ddp = Some(call_object("nn.parallel.DistributedDataParallel", &args![&gpt, dict! { "gradientAsBucketView" => true }])?);
        }
        if s.zero == 3 {
            for block in &blocks {
                call("zero.fullyShard", &args![&**block])?;
            }
            call("zero.fullyShard", &args![&gpt, dict! { "reshardAfterForward" => false }])?;
        }
        let mut zopts = vec![
            ("optimizer".to_string(), Value::from("adamw")),
            ("lr".to_string(), Value::from(s.lr)),
            ("betas".to_string(), Value::from(betas())),
            ("eps".to_string(), Value::from(1e-8)),
            ("stage".to_string(), Value::from(s.zero)),
            ("partition".to_string(), Value::from("flat")),
        ];
        if s.zero == 3 {
            zopts.push(("limitAllGathers".to_string(), Value::from(opts.limit_all_gathers)));
        }
        if s.zero >= 2 {
            zopts.push(("offload".to_string(), Value::from(&opts.offload)));
        }
        call_object("zero.ZeroRedundancyOptimizer", &args![groups, Value::Dict(zopts)])?
    };
    let model = ddp.as_ref().map_or_else(|| gpt.borrowed(), Object::borrowed);
    let sched = call_object("optim.lrScheduler.WarmupCosine", &args![&opt, dict! { "warmup" => s.warmup, "total" => s.steps, "minRatio" => opts.min_lr_ratio }])?;
    // float16 autocast scales the loss so that small gradients survive float16's range; a step
    // whose gradients overflowed is skipped. Disabled, the scaler passes everything through.
    let mut scaler_opts = vec![("enabled".to_string(), Value::from(opts.autocast.as_deref() == Some("float16")))];
    if let Some(scale) = opts.loss_scale.filter(|&x| x != 0.0) {
        scaler_opts.push(("initScale".to_string(), Value::from(scale)));
    }
    let scaler = call_object("amp.GradScaler", &args![Value::Dict(scaler_opts)])?;
    let scaler_enabled = || -> Result<bool> { Ok(scaler.method("isEnabled", &[])?.as_bool() == Some(true)) };
    // Everything a resumed run needs to continue exactly: the weights, AdamW's state (sharded
    // under ZeRO), the schedule, where the data stands, and (saved by the checkpoint itself)
    // every rank's generator.
    let ckpt = match &opts.checkpoint {
        Some(dir) => {
            let mut state = vec![
                ("model".to_string(), Value::from(&gpt)),
                ("optimizer".to_string(), Value::from(&opt)),
                ("scheduler".to_string(), Value::from(&sched)),
                ("loader".to_string(), Value::from(&loader)),
            ];
            if scaler_enabled()? {
                state.push(("scaler".to_string(), Value::from(&scaler)));
            }
            Some(call_object("checkpoint.Manager", &args![dir, dict! { "state" => Value::Dict(state), "every" => opts.checkpoint_every, "keep" => opts.keep }])?)
        }
        None => None,
    };
    let resumed = match &ckpt {
        Some(c) => c.method("load", &[])?,
        None => Value::Null,
    };
    let resumed_step = field(&resumed, "step").as_f64();
    if let Some(step) = resumed_step {
        let ranks = field(&resumed, "worldSize").as_f64().unwrap_or(f64::NAN);
        println!(
            "gpt: resumed from {} (step {}, {} rank{})",
            field(&resumed, "path").as_str().unwrap_or(""),
            number_string(step),
            number_string(ranks),
            if ranks == 1.0 { "" } else { "s" }
        );
    }
    let first_step = resumed_step.map_or(1, |s| s as i64 + 1);
    if first_step > s.steps {
        println!("gpt: the checkpoint is at step {} of {}: nothing left to train", number_string(resumed_step.unwrap_or(0.0)), s.steps);
        exit(0);
    }

    let trainer = Rc::new(Trainer {
        model,
        gpt: gpt.borrowed(),
        scaler: scaler.borrowed(),
        autocast: opts.autocast.clone(),
        accum: s.accum as f64,
        pending: RefCell::new(None),
        batch: RefCell::new(None),
        sum: Cell::new(0.0),
        cross_entropy: lookup("nn.functional.crossEntropy")?,
        autocast_body: RefCell::new(None),
    });
    if trainer.autocast.is_some() {
        let t = trainer.clone();
        *trainer.autocast_body.borrow_mut() = Some(Function::new(move |_| {
            let (m, x, y) = t.pending.borrow_mut().take().ok_or_else(|| Error::new("autocast's body has no batch"))?;
            Ok(t.loss_inner(&m, &x, &y)?.into())
        })?);
    }
    // noSync skips the gradient reduction of all but the last micro-batch of a step.
    let t = trainer.clone();
    let micro = Function::new(move |_| {
        t.run()?;
        Ok(Value::Null)
    })?;
    let no_sync = |run: &Function| -> Result<()> {
        if let Some(ddp) = &ddp {
            ddp.method("noSync", &args![run])?;
        } else if s.zero >= 2 {
            opt.method("noSync", &args![run])?;
        } else {
            trainer.run()?;
        }
        Ok(())
    };
    // clip scales the gradients to a total norm of at most --clip (0: no clipping) and returns
    // their norm before clipping; under ZeRO stages 2 and 3 that is a collective over each
    // rank's gradient slices.
    let clip = || -> Result<Value> {
        if opts.clip == 0.0 {
            return Ok(Value::Null);
        }
        if scaler_enabled()? {
            scaler.method("unscale_", &args![&opt])?; // clip the real gradients
        }
        if s.zero == 0 {
            call("nn.utils.clipGradNorm_", &args![&params, opts.clip])
        } else {
            opt.method("clipGradNorm_", &args![opts.clip])
        }
    };

    let evaluate = |vl: &Object| -> Result<f64> {
        vl.set("position", &dict! { "epoch" => 0, "windows" => 0 })?;
        let mut sum = 0.0;
        no_grad(|| {
            for _ in 0..opts.eval_batches as i64 {
                scope(|| {
                    let mut xy = vl.method("next", &[])?.into_tensors()?.into_iter();
                    let (x, y) = (xy.next(), xy.next());
                    let (x, y) = x.zip(y).ok_or_else(|| Error::new("the loader's next() is not [x, y]"))?;
                    sum += trainer.loss_of(&trainer.gpt, &x, &y)?.item()?;
                    Ok(())
                })?;
            }
            Ok(())
        })?;
        let local = call_tensor("tensor.fromArray", &args![vec![Value::from(sum / opts.eval_batches)], dict! { "dtype" => "float64" }])?;
        // wait() returns the tensor itself: a second handle on it, kept until it is read.
        let _reduced = if world > 1.0 { Some(call_object("dist.allReduce", &args![&local, "avg"])?.method("wait", &[])?) } else { None };
        local.item()
    };

    let num_params = gpt.method_f64("numParameters", &[])?;
    let tokens_per_step = s.batch as f64 * s.seq_len as f64 * s.accum as f64 * world;
    let data_words = if opts.bench {
        "random tokens".to_string()
    } else {
        format!("{} training tokens from {}", number_string(train.get("length")?.to_f64()?), train.get("source")?.as_str().unwrap_or(""))
    };
    println!(
        "gpt: {} ({} layers, d={}, {} heads, {}M parameters, {}), {}; {} steps of {} tokens (B={} T={} accum={} ranks={}{}); seed {} ({})",
        cfg.name,
        cfg.n_layer,
        cfg.n_embd,
        cfg.n_head,
        to_fixed(num_params / 1e6, 2),
        opts.dtype,
        data_words,
        s.steps,
        number_string(tokens_per_step),
        s.batch,
        s.seq_len,
        s.accum,
        number_string(world),
        if s.zero != 0 { format!(" ZeRO {}", s.zero) } else { String::new() },
        number_string(opts.seed),
        if opts.seed_given { "--seed" } else { "zeroeng run --seed" }
    );

    // ---- per-step measurements: model FLOP utilisation, memory, communication (the script's
    // observeStep: nanoGPT's estimate_mfu of the FLOPs per token, memory on this rank, the time
    // the rank's communication queue was busy).
    let flops_per_token = 6.0 * (num_params - (cfg.seq_len * cfg.n_embd) as f64)
        + 12.0 * cfg.n_layer as f64 * cfg.n_head as f64 * (cfg.n_embd as f64 / cfg.n_head as f64) * s.seq_len as f64;
    let peak_flops = call_f64("device.peakFlops", &args![&opts.dtype])?;
    let metrics = call("metrics.enabled", &[])?.as_bool() == Some(true);

    let bar = call_object("progress.bar", &args![dict! { "total" => s.steps, "label" => "gpt" }])?;
    let mut step_ms: Vec<f64> = Vec::new();
    let (mut loss, mut val_loss) = (f64::NAN, None::<f64>);
    let mut nonfinite = 0i64; // the steps in a row whose loss was not finite
    for step in first_step..=s.steps {
        let start = now_ms();
        opt.method("zeroGrad", &args![true])?;
        let comm0 = call("dist.commTime", &[])?.as_f64();
        call("device.resetPeakMemoryStats", &[])?;
        let lr = field(&opt.get("paramGroups")?.into_array()?.into_iter().next().unwrap_or(Value::Null), "lr");
        trainer.sum.set(0.0);
        // The step runs in a scope: what it makes (batches, activations, temporaries) goes back
        // when it ends, so that every step starts from the same memory.
        let grad_norm = scope(|| {
            for m in 1..=s.accum {
                let mut xy = loader.method("next", &[])?.into_tensors()?.into_iter();
                let batch = xy.next().zip(xy.next()).ok_or_else(|| Error::new("the loader's next() is not [x, y]"))?;
                *trainer.batch.borrow_mut() = Some(batch);
                if m < s.accum {
                    no_sync(&micro)?;
                } else {
                    trainer.run()?;
                }
            }
            let grad_norm = clip()?;
            scaler.method("step", &args![&opt])?; // opt.step(), unless float16 gradients overflowed
            scaler.method("update", &[])?;
            Ok(grad_norm)
        })?;
        sched.method("step", &[])?;
        loss = trainer.sum.get() / s.accum as f64;
        if world > 1.0 {
            // Every rank reports the loss of the whole global batch.
            let t = call_tensor("tensor.fromArray", &args![vec![Value::from(loss)], dict! { "dtype" => "float64" }])?;
            let _reduced = call_object("dist.allReduce", &args![&t, "avg"])?.method("wait", &[])?; // t itself
            loss = t.item()?;
        }
        let ms = now_ms() - start;
        let m = opt.method("memory", &[])?;
        let peak = call_f64("device.maxMemoryAllocated", &[])?;
        let comm1 = call("dist.commTime", &[])?.as_f64();
        let mfu = if peak_flops > 0.0 && ms > 0.0 { Some(flops_per_token * (tokens_per_step / world) / (ms / 1e3) / peak_flops) } else { None };
        let mem_activations = (peak - call_f64("device.memoryAllocated", &[])?).max(0.0);
        step_ms.push(ms);
        if let Some(vl) = &val_loader {
            if step % opts.eval_every as i64 == 0 || step == s.steps {
                let v = evaluate(vl)?;
                val_loss = Some(v);
                println!("step {}  loss {}  val loss {}", step, to_fixed(loss, 4), to_fixed(v, 4));
            }
        }
        if metrics {
            let mut fields = vec![
                ("step".to_string(), Value::from(step)),
                ("loss".to_string(), Value::from(loss)),
                ("lr".to_string(), lr),
                ("grad_norm".to_string(), grad_norm.borrowed()),
                ("tokens_per_s".to_string(), Value::from(tokens_per_step / (ms / 1e3))),
            ];
            if let Some(mfu) = mfu {
                fields.push(("mfu".to_string(), Value::from(mfu)));
            }
            fields.push(("mem_params".to_string(), field(&m, "parameters")));
            fields.push(("mem_grads".to_string(), field(&m, "gradients")));
            fields.push(("mem_optim_state".to_string(), field(&m, "optimizerState")));
            fields.push(("mem_activations".to_string(), Value::from(mem_activations)));
            fields.push(("mem_peak".to_string(), Value::from(peak)));
            if let (Some(c0), Some(c1)) = (comm0, comm1) {
                fields.push(("comm_ms".to_string(), Value::from((c1 - c0) * 1e3)));
            }
            if scaler_enabled()? {
                fields.push(("loss_scale".to_string(), scaler.method("getScale", &[])?));
            }
            if let Some(v) = val_loss.filter(|_| step % opts.eval_every as i64 == 0) {
                fields.push(("val_loss".to_string(), Value::from(v)));
            }
            call("metrics.log", &args![Value::Dict(fields)])?;
        }
        let mut shown = vec![("loss".to_string(), Value::from(loss)), ("samples".to_string(), Value::from(step as f64 * s.batch as f64 * s.accum as f64 * world))];
        if let Some(mfu) = mfu {
            shown.push(("mfu".to_string(), Value::from(format!("{}%", to_fixed(100.0 * mfu, 1)))));
        }
        bar.method("update", &args![step, Value::Dict(shown)])?;
        // A loss that stays NaN or infinite means the parameters are no longer finite: stop
        // before this state is saved (the script's check, at the same point of the step).
        nonfinite = if loss.is_finite() { 0 } else { nonfinite + 1 };
        if opts.max_nonfinite > 0.0 && nonfinite as f64 >= opts.max_nonfinite {
            bar.method("done", &[])?;
            eprintln!(
                "{}: the loss is {} at step {}, and has not been finite since step {} ({} steps in a row, --max-nonfinite {}): stopping without saving step {}",
                prog,
                number_string(loss),
                step,
                step - nonfinite + 1,
                nonfinite,
                number_string(opts.max_nonfinite),
                step
            );
            exit(1);
        }
        // Every --checkpoint-every steps, at the end, and after SIGTERM (then the run exits
        // here, status 0).
        if let Some(c) = &ckpt {
            c.method("save", &args![step, dict! { "force" => step == s.steps }])?;
        }
    }
    bar.method("done", &[])?;

    let mut timed: Vec<f64> = step_ms[(step_ms.len() - 1).min(3)..].to_vec();
    timed.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let median = timed[timed.len() / 2];
    let mut result = vec![
        ("workload".to_string(), Value::from(if opts.bench { "gpt" } else { "gpt_train" })),
        ("config".to_string(), Value::from(cfg.name)),
        ("dtype".to_string(), Value::from(&opts.dtype)),
        ("steps".to_string(), Value::from(s.steps)),
        ("loss".to_string(), Value::from(js_number(&to_fixed(loss, 4)))),
    ];
    if let Some(v) = val_loss {
        result.push(("val_loss".to_string(), Value::from(js_number(&to_fixed(v, 4)))));
    }
    result.push(("step_ms_median".to_string(), Value::from(median)));
    result.push(("tokens_per_s".to_string(), Value::from((tokens_per_step / (median / 1e3) + 0.5).floor())));
    let result = Value::Dict(result);
    call("metrics.log", &args![&result])?;
    println!("{}", result.stringify());
    Ok(())
}

fn main() {
    let prog = std::env::args().next().unwrap_or_else(|| "gpt.rs".to_string());
    if let Err(e) = train(&prog) {
        eprintln!("{}: {}", prog, e);
        exit(1);
    }
}
