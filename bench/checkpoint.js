// The checkpoint benchmark, zeroeng's side (bench/torch_checkpoint.py is PyTorch's): the parameters of
// GPT-2 124M (148 tensors, 124.4M float32 values, the output tied to wte) with AdamW's state after one
// step, saved and loaded three times each; prints the medians as one JSON line, with the bandwidths
// (GB/s of the 1.49 GB of tensors). Each load comes right after a save, so it reads mostly from the
// page cache. With --load, it only loads the checkpoint under DIR once into a new model and AdamW
// (a resume), for a load from a cold cache: drop the files from the page cache first (docs/benchmarks.md).
//
//   zeroeng run --quiet bench/checkpoint.js -- DIR [--load]
const { tensor, nn, optim, checkpoint } = require("zeroeng");
const dir = process.argv[2], loadOnly = process.argv[3] === "--load";
if (!dir || (process.argv.length > 3 && !loadOnly)) { console.error("usage: zeroeng run bench/checkpoint.js -- DIR [--load]"); process.exit(2); }

const d = 768, layers = 12;
class Block extends nn.Module {
  constructor() {
    super();
    this.ln_1 = nn.LayerNorm(d);
    this.attn = new (class extends nn.Module { constructor() { super(); this.c_attn = nn.Linear(d, 3 * d); this.c_proj = nn.Linear(d, d); } })();
    this.ln_2 = nn.LayerNorm(d);
    this.mlp = new (class extends nn.Module { constructor() { super(); this.c_fc = nn.Linear(d, 4 * d); this.c_proj = nn.Linear(4 * d, d); } })();
  }
}
class GPT extends nn.Module {
  constructor() {
    super();
    this.transformer = new (class extends nn.Module {
      constructor() {
        super();
        this.wte = nn.Embedding(50257, d);
        this.wpe = nn.Embedding(1024, d);
        this.h = nn.ModuleList(Array.from({ length: layers }, () => new Block()));
        this.ln_f = nn.LayerNorm(d);
      }
    })();
  }
}
const model = new GPT();
const opt = optim.AdamW(model.parameters(), { lr: 6e-4 });
const bytes = model.numParameters() * 4 * 3;
if (loadOnly) {
  const t = Date.now();
  if (!checkpoint.load(dir, { model, optimizer: opt, step: 0 })) { console.error(`no checkpoint under ${dir}`); process.exit(1); }
  const ms = Date.now() - t;
  console.log(JSON.stringify({ workload: "checkpoint-load", params: model.numParameters(), load_ms: ms, load_gbs: Number((bytes / ms / 1e6).toFixed(2)) }));
  process.exit(0);
}
// One step with every gradient 1, so that AdamW holds its state.
let total = null;
for (const p of model.parameters()) total = total ? total.add(p.sum()) : p.sum();
total.backward();
opt.step();

const state = { model, optimizer: opt, step: 1 };
const median = xs => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const save = [], load = [];
for (let i = 0; i < 3; i++) {
  let t = Date.now();
  checkpoint.save(dir, i, state, { keep: 1 });
  save.push(Date.now() - t);
  t = Date.now();
  checkpoint.load(dir, state);
  load.push(Date.now() - t);
}
console.log(JSON.stringify({ workload: "checkpoint", params: model.numParameters(), save_ms_median: median(save), load_ms_median: median(load),
  save_gbs: Number((bytes / median(save) / 1e6).toFixed(2)), load_gbs: Number((bytes / median(load) / 1e6).toFixed(2)), fsync: true }));
