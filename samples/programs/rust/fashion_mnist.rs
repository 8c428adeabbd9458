//! fashion_mnist.rs: samples/fashion_mnist.js as a WebAssembly training program in Rust, over
//! the Rust SDK (sdk/rust): an MLP 784-256-128-10 (ReLU) trained with Adam (lr 1e-3), batch 128,
//! on Debian's dataset-fashion-mnist. It makes the script's calls in the script's order (those
//! of the C and Go twins, samples/programs/c and go), so that it draws the same random numbers
//! and trains the same model bit for bit: on one rank, and on several with each rank's share of
//! every batch under DistributedDataParallel (or ZeRO).
//!
//!   make programs      # samples/programs/build/fashion_mnist_rust.wasm
//!   zeroeng run samples/programs/build/fashion_mnist_rust.wasm                    # 5 epochs
//!   zeroeng run samples/programs/build/fashion_mnist_rust.wasm -- --data DIR --epochs 1
//!   zeroeng run --nproc 2 samples/programs/build/fashion_mnist_rust.wasm          # DDP over 2 ranks
//!   zeroeng run --nproc 4 samples/programs/build/fashion_mnist_rust.wasm -- --zero 2
//!
//! The flags are the script's: --data DIR (a program has no environment: the default is
//! /usr/share/datasets/fashion-mnist, not ZEROENG_FMNIST_DIR), --epochs N, --steps N (at most N
//! steps an epoch), --zero 1|2|overlap, --bf16. Every epoch prints the test accuracy; the last
//! line is the result as JSON; with zeroeng run --metrics FILE every step's loss goes to FILE.
//!
//! The setup calls go by name with JSON arguments (call, method); the calls of each step are
//! handle-only (op, invoke: ABI 1.1), no JSON on either side.
//!
//! Build (Debian's rustc 1.63 with libstd-rust-dev-wasm32; no crate beyond the SDK):
//!   rustc --edition 2021 --crate-type rlib --crate-name zeroeng --target wasm32-wasi -O \
//!       -o build/libzeroeng.rlib sdk/rust/src/lib.rs
//!   rustc --edition 2021 --target wasm32-wasi -O --extern zeroeng=build/libzeroeng.rlib \
//!       -o fashion_mnist_rust.wasm samples/programs/rust/fashion_mnist.rs

use std::process::exit;
use std::time::{SystemTime, UNIX_EPOCH};

use zeroeng::{args, call, call_f64, call_object, call_tensor, dict, lookup, no_grad, scope, to_fixed, Arg, Object, Result, Tensor, Value};

const USAGE_ARGS: &str = "[-- --data DIR] [--epochs N] [--steps N] [--zero 1|2|overlap] [--bf16]";

/// The script's flags, with its defaults.
struct Options {
    data: String,
    epochs: i64,
    /// At most this many steps an epoch (None: every step).
    steps: Option<i64>,
    /// None, "1", "2" or "overlap".
    zero: Option<String>,
    bf16: bool,
}

fn usage_error(prog: &str, what: &str) -> ! {
    eprintln!("{}: {}\nusage: zeroeng run {} {}", prog, what, prog, USAGE_ARGS);
    exit(2);
}

/// count parses a positive integer as the script's Number(value) does for one (0 for
/// anything else).
fn count(s: Option<&str>) -> i64 {
    match s.map(str::trim).and_then(|s| s.parse::<f64>().ok()) {
        Some(x) if x == x.trunc() && x > 0.0 && x <= 1e9 => x as i64,
        _ => 0,
    }
}

fn parse_args(prog: &str, argv: &[String]) -> Options {
    let mut o = Options { data: "/usr/share/datasets/fashion-mnist".to_string(), epochs: 5, steps: None, zero: None, bf16: false };
    let mut bad = false;
    let mut i = 0;
    while i < argv.len() {
        let (name, inline) = match argv[i].split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (argv[i].as_str(), None),
        };
        let mut value = || {
            if inline.is_some() {
                inline.clone()
            } else if i + 1 < argv.len() {
                i += 1;
                Some(argv[i].clone())
            } else {
                None
            }
        };
        match name {
            "--data" => match value() {
                Some(v) if !v.is_empty() => o.data = v,
                _ => bad = true,
            },
            "--epochs" => {
                o.epochs = count(value().as_deref());
                bad |= o.epochs == 0;
            }
            "--steps" => {
                let n = count(value().as_deref());
                bad |= n == 0;
                o.steps = Some(n);
            }
            "--zero" => {
                let z = value().unwrap_or_default();
                if z != "1" && z != "2" && z != "overlap" {
                    usage_error(prog, "--zero takes 1 (sharded optimizer state), 2 (sharded gradients too) or overlap (stage 1, step overlapped with backward)");
                }
                o.zero = Some(z);
            }
            "--bf16" => o.bf16 = true,
            "-h" | "--help" => {
                println!("usage: zeroeng run {} {}", prog, USAGE_ARGS);
                exit(0);
            }
            _ => usage_error(prog, &format!("unknown argument {}", argv[i])),
        }
        i += 1;
    }
    if bad {
        usage_error(prog, "--data needs a directory, --epochs and --steps a positive integer");
    }
    o
}

/// load reads one split: images as float32 in [0, 1], [N, 784], and int64 labels. The scope
/// gives back the uint8 images and the unscaled copy as it closes: only the two results stay.
fn load(prog: &str, data: &str, prefix: &str) -> (Tensor, Tensor) {
    let loaded = scope(|| {
        let images = call_tensor("io.loadIdx", &args![format!("{}/{}-images-idx3-ubyte.gz", data, prefix)])?;
        let labels = call_tensor("io.loadIdx", &args![format!("{}/{}-labels-idx1-ubyte.gz", data, prefix)])?;
        let x = images.op("reshape", &[Arg::N(-1.0), Arg::N(784.0)])?.op("float", &[])?.op("div", &[Arg::N(255.0)])?;
        Ok((x, labels.op("long", &[])?))
    });
    loaded.unwrap_or_else(|e| {
        eprintln!(
            "{}: cannot read the Fashion-MNIST data in {}:\n  {}\n\
             Install it with `sudo apt-get install dataset-fashion-mnist` (Debian, Ubuntu), or point --data DIR\n\
             at a directory holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,\n\
             t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz.",
            prog, data, e
        );
        exit(1);
    })
}

/// rows is a tensor's first dimension.
fn rows(t: &Tensor) -> Result<i64> {
    Ok(t.shape()?.first().copied().unwrap_or(0))
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The model, its optimizer and the data, once set up.
struct Run {
    opts: Options,
    model: Object,
    opt: Object,
    x_train: Tensor,
    y_train: Tensor,
    x_test: Tensor,
    y_test: Tensor,
}

impl Run {
    /// input is x as the model takes it: a bfloat16 copy under --bf16 (None: x itself).
    fn input(&self, x: &Tensor) -> Result<Option<Tensor>> {
        if self.opts.bf16 {
            Ok(Some(x.op("bfloat16", &[])?))
        } else {
            Ok(None)
        }
    }

    /// accuracy is the model's accuracy on the test set, without autograd, its tensors given
    /// back.
    fn accuracy(&self) -> Result<f64> {
        no_grad(|| {
            scope(|| {
                let input = self.input(&self.x_test)?;
                let out = self.model.op("forward", &[input.as_ref().unwrap_or(&self.x_test).into()])?;
                let pred = out.op("argmax", &[Arg::N(1.0)])?;
                let mean = pred.op("eq", &[(&self.y_test).into()])?.op("float", &[])?.op("mean", &[])?;
                mean.item()
            })
        })
    }
}

/// registerOverlap runs ZeRO's step inside DDP's backward (schedule B):
/// model.registerCommHook(null, zero.hookWithZeroStepInterleaved(dist.commHooks.allreduceHook,
/// model, opt, { shardBuckets: true })).
fn register_overlap(model: &Object, opt: &Object) -> Result<()> {
    let hooks = call_object("dist.commHooks", &[])?;
    let allreduce = hooks.get("allreduceHook")?;
    let hook = call_object("zero.hookWithZeroStepInterleaved", &args![allreduce, model, opt, dict! { "shardBuckets" => true }])?;
    model.method("registerCommHook", &args![Value::Null, &hook])?;
    Ok(())
}

fn train(prog: &str, opts: Options) -> Result<()> {
    let (x_train, y_train) = load(prog, &opts.data, "train");
    let (x_test, y_test) = load(prog, &opts.data, "t10k");
    let n = rows(&x_train)?;
    let batch: i64 = 128;
    let mut steps = (n + batch - 1) / batch;
    if let Some(s) = opts.steps {
        steps = steps.min(s);
    }

    // With --nproc N the ranks share each batch of 128 (data parallel): every rank draws the
    // same permutation, takes its N-th of each batch, and DistributedDataParallel averages the
    // gradients.
    let world = call_f64("dist.worldSize", &[])? as i64;
    let rank = call_f64("dist.rank", &[])? as i64;
    let layers = [
        call_object("nn.Linear", &args![784, 256])?,
        call_object("nn.ReLU", &[])?,
        call_object("nn.Linear", &args![256, 128])?,
        call_object("nn.ReLU", &[])?,
        call_object("nn.Linear", &args![128, 10])?,
    ];
    let seq = call_object("nn.Sequential", &layers.iter().map(Value::from).collect::<Vec<_>>())?;
    drop(layers);
    if opts.bf16 {
        seq.op_object("bfloat16", &[])?; // the module itself: a second handle, released
    }
    // --zero shards Adam's state over the ranks (ZeroRedundancyOptimizer): stage 1 under DDP;
    // stage 2 without DDP; overlap runs the sharded step inside DDP's backward.
    let zero = opts.zero.as_deref();
    let model = if (zero.is_none() && world > 1) || (zero.is_some() && zero != Some("2")) {
        call_object("nn.parallel.DistributedDataParallel", &args![&seq])?
    } else {
        seq
    };
    let params = model.method("parameters", &[])?;
    let opt = match zero {
        None => call_object("optim.Adam", &args![&params, dict! { "lr" => 1e-3 }])?,
        Some(z) => {
            let opt = call_object(
                "zero.ZeroRedundancyOptimizer",
                &args![&params, dict! { "optimizer" => "adam", "lr" => 1e-3, "stage" => if z == "2" { 2 } else { 1 }, "overlapWithDDP" => z == "overlap" }],
            )?;
            if z == "overlap" {
                register_overlap(&model, &opt)?;
            }
            opt
        }
    };
    drop(params);
    let metrics = call("metrics.enabled", &[])?.as_bool() == Some(true);

    println!(
        "fashion-mnist: {} training and {} test images ({}), MLP 784-256-128-10{}, Adam lr 1e-3{}, batch {}{}, {} epoch{}",
        n,
        rows(&x_test)?,
        opts.data,
        if opts.bf16 { " in bfloat16" } else { "" },
        zero.map_or(String::new(), |z| format!(" (ZeRO {})", z)),
        batch,
        if world > 1 { format!(" over {} ranks", world) } else { String::new() },
        opts.epochs,
        if opts.epochs == 1 { "" } else { "s" }
    );

    let cross_entropy = lookup("nn.functional.crossEntropy")?;
    let run = Run { opts, model, opt, x_train, y_train, x_test, y_test };
    let epochs = run.opts.epochs;
    let (mut train_ms, mut acc, mut step) = (0i64, 0f64, 0i64);
    for epoch in 1..=epochs {
        let bar = call_object("progress.bar", &args![dict! { "total" => steps, "label" => format!("epoch {}/{}", epoch, epochs) }])?;
        let start = now_ms();
        // The permutation outlives the automatic release of each step's tensors: keep it for
        // the epoch.
        let perm = call_tensor("tensor.randperm", &args![n])?;
        let kept = perm.op("keep", &[])?;
        let mut sum = 0.0;
        let (mut i, mut s) = (0i64, 1i64);
        while i < n && s <= steps {
            let size = batch.min(n - i);
            let (lo, hi) = (size * rank / world, size * (rank + 1) / world);
            let idx = perm.op("narrow", &[Arg::N(0.0), Arg::from(i + lo), Arg::from(hi - lo)])?;
            run.opt.op_unit("zeroGrad", &[])?;
            let images = run.x_train.op("indexSelect", &[Arg::N(0.0), (&idx).into()])?;
            let input = run.input(&images)?;
            let out = run.model.op("forward", &[input.as_ref().unwrap_or(&images).into()])?;
            let labels = run.y_train.op("indexSelect", &[Arg::N(0.0), (&idx).into()])?;
            let loss = cross_entropy.invoke(&[(&out).into(), (&labels).into()])?;
            loss.op_unit("backward", &[])?;
            run.opt.op_unit("step", &[])?;
            let l = loss.item()?;
            sum += l;
            step += 1;
            if metrics {
                call("metrics.log", &args![dict! { "step" => step, "epoch" => epoch, "loss" => l }])?;
            }
            bar.method("update", &args![s, dict! { "loss" => l, "samples" => (i + batch).min(n) }])?;
            i += batch;
            s += 1;
        }
        drop((kept, perm));
        train_ms += now_ms() - start;
        bar.method("done", &[])?;
        drop(bar);
        acc = run.accuracy()?;
        call("metrics.log", &args![dict! { "epoch" => epoch, "test_acc" => acc, "train_s" => train_ms as f64 / 1e3 }])?;
        println!(
            "epoch {}  loss {}  test accuracy {}  (training {}s)",
            epoch,
            to_fixed(sum / steps as f64, 4),
            to_fixed(acc, 4),
            to_fixed(train_ms as f64 / 1e3, 1)
        );
    }

    // The result in bench/torch_fmnist.py's form; train_s counts the training steps only.
    let result = dict! {
        "workload" => "fashion_mnist_mlp",
        "dtype" => if run.opts.bf16 { "bfloat16" } else { "float32" },
        "epochs" => epochs,
        "test_acc" => to_fixed(acc, 4).parse::<f64>().unwrap_or(f64::NAN),
        "train_s" => train_ms as f64 / 1e3,
    };
    call("metrics.log", &args![&result])?;
    println!("{}", result.to_json());
    Ok(())
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let prog = argv.first().cloned().unwrap_or_else(|| "fashion_mnist.rs".to_string());
    let opts = parse_args(&prog, &argv[1.min(argv.len())..]);
    if let Err(e) = train(&prog, opts) {
        eprintln!("{}: {}", prog, e);
        exit(1);
    }
}
