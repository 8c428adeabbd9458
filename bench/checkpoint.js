// The checkpoint benchmark, zeroeng's side (bench/torch_checkpoint.py is PyTorch's): the parameters of
// GPT-2 124M (148 tensors, 124.4M float32 values, the output tied to wte) with AdamW's state after one
// step, saved and loaded three times each; prints the medians as one JSON line.
//
//   zeroeng run --quiet bench/checkpoint.js -- DIR
const { tensor, nn, optim, checkpoint } = require("zeroeng");
const dir = process.argv[2];
if (!dir) { console.error("usage: zeroeng run bench/checkpoint.js -- DIR"); process.exit(2); }

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
const bytes = model.numParameters() * 4 * 3;
console.log(JSON.stringify({ workload: "checkpoint", params: model.numParameters(), save_ms_median: median(save), load_ms_median: median(load),
  save_gbs: Number((bytes / median(save) / 1e6).toFixed(2)), fsync: true }));
