// Per-call overhead of the JavaScript module system: zeroeng run --quiet bench/js_overhead.js
// (docs/benchmarks-scripting.md). A 2-2-2-2 model keeps the arithmetic negligible.
const { tensor, nn } = require("zeroeng");
const model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2));
const x = tensor.randn([4, 2]);
function time(name, f, n = 20000) {
  for (let i = 0; i < 200; i++) f();
  const t0 = Date.now();
  for (let i = 0; i < n; i++) f();
  console.log(name, ((Date.now() - t0) * 1000 / n).toFixed(1), "us");
}
tensor.noGrad(() => {
time("forward", () => tensor.scope(() => { model.forward(x); }));
time("children", () => model.children());
time("direct", () => tensor.scope(() => { let y = x; y = model[0].forward(y); y = model[1].forward(y); y = model[2].forward(y); y = model[3].forward(y); model[4].forward(y); }));
});
