// calls.js: bench/programs/calls.c's loop as a script: n times t.add(t) on 4 elements and the release of
// the result (bench/programs.sh runs them side by side).
const { tensor } = require("zeroeng");
const n = Number(process.argv[2]);
const t = tensor.ones([4]);
const t0 = Date.now();
for (let i = 0; i < n; i++) {
  const u = t.add(t);
  u.release();
}
console.log(`${n} calls (js): ${(((Date.now() - t0) * 1000) / n).toFixed(2)} us each`);
