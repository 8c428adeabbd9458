// What a training step waits for its token batch, with and without reading ahead (docs/benchmarks-io.md):
// a TokenLoader over an llm.c shard at GPT-2's batch geometry (8 windows of 1024 tokens), each batch
// followed by a stand-in for the step (matrix products for about 50 ms), under --trace, whose user lane
// records every loader.next() as "token batch".
//
//   zeroeng run --trace t.json bench/token_batches.js -- SHARD PREFETCH [STEPS]
const { tensor, data } = require("zeroeng");
const [path, prefetch, steps = "40"] = process.argv.slice(2);
if (!path || prefetch === undefined) throw new Error("usage: bench/token_batches.js -- SHARD PREFETCH [STEPS]");
const loader = data.TokenLoader(data.loadTokens(path), { batchSize: 8, seqLen: 1024, prefetch: Number(prefetch) });
const a = tensor.randn([512, 512]).keep();
for (let s = 0; s < Number(steps); s++) {
  const [x] = loader.next();
  tensor.scope(() => { let m = a; for (let k = 0; k < 12; k++) m = m.matmul(a).div(20); return m.sum().item() + x.shape[0]; });
}
