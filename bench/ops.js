// Elementwise ops, reductions, conversions, sorting and selection one at a time, each the median of
// groups of 20 calls (ms a call), at the shapes of a CNN activation (64×16×28×28) and of rows
// (4096×196, 8 rows of a 50,257-token vocabulary). With the argument "grad", the differentiable
// ones forward and backward instead: op(x).sum().backward() with the inputs requiring gradients.
// bench/torch_ops.py is PyTorch's twin with the same names; bench/ops.sh runs both and prints the
// ratios.
//
//   zeroeng run --quiet --threads 1 bench/ops.js [-- grad]
const { tensor, nn } = require("zeroeng");
const F = nn.functional;
const grad = process.argv[2] === "grad";
tensor.manualSeed(0);
const x = tensor.randn([64, 16, 28, 28]).requiresGrad_(grad).keep();
const z = tensor.randn([64, 16, 28, 28]).keep();
const p = tensor.rand([64, 16, 28, 28]).add(0.5).requiresGrad_(grad).keep();
const rows = tensor.randn([4096, 196]).requiresGrad_(grad).keep();
const vocab = tensor.randn([8, 50257]).keep();
const mask = x.gt(0).keep();
const idx = tensor.randint(0, 4096, [2048]).keep();

const forward = {
  relu: () => x.relu(), neg: () => x.neg(), abs: () => x.abs(), exp: () => x.exp(), log: () => p.log(),
  sqrt: () => p.sqrt(), rsqrt: () => p.rsqrt(), reciprocal: () => p.reciprocal(), sign: () => x.sign(),
  tanh: () => x.tanh(), sigmoid: () => x.sigmoid(), erf: () => x.erf(), gelu: () => F.gelu(x), silu: () => F.silu(x),
  sin: () => x.sin(), cos: () => x.cos(),
  square: () => x.square(), pow2: () => x.pow(2), pow3: () => x.pow(3), pow_half: () => p.pow(0.5), pow_1_7: () => p.pow(1.7),
  add: () => x.add(z), mul: () => x.mul(z), div: () => x.div(p), add_scalar: () => x.add(1.5), maximum: () => tensor.maximum(x, z),
  clamp: () => x.clamp(-1, 1), gt: () => x.gt(0), where: () => tensor.where(mask, x, z), masked_fill: () => x.maskedFill(mask, 0),
  clone: () => x.clone(), to_float64: () => x.to("float64"), to_bfloat16: () => x.to("bfloat16"),
  sum: () => x.sum(), mean: () => x.mean(), max: () => x.max(), norm: () => x.norm(),
  sum_rows: () => rows.sum({ dim: 1 }), sum_cols: () => rows.sum({ dim: 0 }), amax_rows: () => rows.amax(-1),
  argmax_rows: () => rows.argmax(-1), var_rows: () => rows.var({ dim: -1 }), cumsum_rows: () => rows.cumsum(-1),
  softmax: () => rows.softmax(-1), log_softmax: () => F.logSoftmax(rows, -1), layer_norm: () => F.layerNorm(rows, [196]),
  transpose_copy: () => rows.t().contiguous(), cat: () => tensor.cat([x, z], 1), index_select: () => rows.indexSelect(0, idx),
  mse_loss: () => F.mseLoss(x, z), sort_rows: () => rows.sort(-1), topk5_rows: () => rows.topk(5, -1),
  topk50_vocab: () => vocab.topk(50, -1),
};

// Forward and backward: the gradient of the output's sum, the leaves' gradients dropped after each.
const backward = Object.fromEntries(["relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs",
  "neg", "square", "pow2", "add", "mul", "div", "add_scalar", "maximum", "clamp", "where", "softmax", "log_softmax",
  "layer_norm", "sum_rows", "sum_cols", "amax_rows", "mse_loss", "transpose_copy"].map(name => [name, () => {
  forward[name]().sum().backward();
  x.grad = null; p.grad = null; rows.grad = null;
}]));
const ops = grad ? backward : forward;

const ms = {};
for (const [name, f] of Object.entries(ops)) {
  const groups = [];
  for (let g = 0; g < 8; g++) {
    const t0 = performance.now();
    for (let r = 0; r < 20; r++) tensor.scope(() => { f(); });
    if (g > 0) groups.push((performance.now() - t0) / 20);
  }
  groups.sort((a, b) => a - b);
  ms[name] = Number(groups[groups.length >> 1].toFixed(4));
}
console.log(JSON.stringify({ workload: grad ? "ops-grad" : "ops", ms }));
