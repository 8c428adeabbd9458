package script

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// dataloaderFixtures is testdata/dataloader/dataloader.json, written by
// gen.py from PyTorch 1.13.
type dataloaderFixtures struct {
	Loaders []struct {
		Name       string
		ManualSeed int
		Tensors    []struct {
			Values any    `json:"values"`
			Dtype  string `json:"dtype"`
		}
		Options map[string]any
		Sampler map[string]any
		Epochs  []struct {
			Take     *int `json:"take"`
			SetEpoch *int `json:"setEpoch"`
			Batches  any
		}
		Length int
		After  []int64
	}
	Samplers []struct {
		N                             int
		Options                       map[string]any
		Length, NumSamples, TotalSize int
		Epochs                        []struct {
			Epoch   int   `json:"epoch"`
			Indices []int `json:"indices"`
		}
	}
	Collate  any
	Randperm struct {
		N, Seed     int
		Head, Tail  []int
		WeightedSum int64
	}
}

func readDataloaderFixtures(t *testing.T) dataloaderFixtures {
	t.Helper()
	raw, err := os.ReadFile("testdata/dataloader/dataloader.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx dataloaderFixtures
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	return fx
}

// jsText is v as JavaScript source.
func jsText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// outputByName runs src on one rank and indexes its JSON output lines by
// their "name".
func outputByName(t *testing.T, src string) map[string]map[string]any {
	t.Helper()
	lines, err := runJob(t, 1, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]any{}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		got[m["name"].(string)] = m
	}
	return got
}

// sameJSON compares two values as JSON sees them.
func sameJSON(got, want any) bool {
	var g, w any
	must(json.Unmarshal([]byte(jsText(got)), &g))
	must(json.Unmarshal([]byte(jsText(want)), &w))
	return reflect.DeepEqual(g, w)
}

// TestDataLoaderMatchesPyTorch: for every case of gen.py (shuffled with
// the default generator for several seeds, sizes, batch sizes and
// dropLast; with the seed option; sequential; with a DistributedSampler;
// epochs abandoned after some batches or before the first) the loader
// yields PyTorch's batches in PyTorch's order, with the tensors' dtypes,
// has its length, and leaves the default generator where PyTorch leaves
// it (the draws after the last epoch match).
func TestDataLoaderMatchesPyTorch(t *testing.T) {
	fx := readDataloaderFixtures(t)
	var src strings.Builder
	src.WriteString(`const { tensor, data } = require("zeroeng");
function run(name, manualSeed, tensors, options, samplerOptions, epochs) {
  tensor.manualSeed(manualSeed);
  const ds = data.TensorDataset(...tensors.map(t => tensor.tensor(t.values, { dtype: t.dtype })));
  if (samplerOptions) options.sampler = data.DistributedSampler(ds, samplerOptions);
  const loader = data.DataLoader(ds, options);
  const out = [], dtypes = new Set();
  for (const ep of epochs) {
    if (ep.setEpoch !== undefined) options.sampler.setEpoch(ep.setEpoch);
    const batches = [];
    const keep = b => { batches.push(b.map(t => t.toArray())); b.forEach((t, i) => dtypes.add(i + ":" + t.dtype)); };
    if (ep.take === undefined) {
      for (const b of loader) keep(b);
    } else {
      const it = loader[Symbol.iterator]();
      while (batches.length < ep.take) { const r = it.next(); if (r.done) break; keep(r.value); }
    }
    out.push(batches);
  }
  console.log(JSON.stringify({ name, epochs: out, length: loader.length, dtypes: [...dtypes].sort(),
    after: tensor.randint(0, 2 ** 31, [4]).toArray() }));
}
`)
	for _, c := range fx.Loaders {
		epochs := make([]map[string]any, len(c.Epochs))
		for i, e := range c.Epochs {
			epochs[i] = map[string]any{}
			if e.Take != nil {
				epochs[i]["take"] = *e.Take
			}
			if e.SetEpoch != nil {
				epochs[i]["setEpoch"] = *e.SetEpoch
			}
		}
		fmt.Fprintf(&src, "run(%q, %d, %s, %s, %s, %s);\n", c.Name, c.ManualSeed, jsText(c.Tensors), jsText(c.Options), jsText(c.Sampler), jsText(epochs))
	}
	got := outputByName(t, src.String())
	for _, c := range fx.Loaders {
		g := got[c.Name]
		if g == nil {
			t.Errorf("%s: no output", c.Name)
			continue
		}
		want := make([]any, len(c.Epochs))
		for i, e := range c.Epochs {
			want[i] = e.Batches
		}
		if !sameJSON(g["epochs"], want) {
			t.Errorf("%s: batches\n got %s\nwant %s", c.Name, jsText(g["epochs"]), jsText(want))
		}
		dtypes := []string{} // of the batches' tensors, when there are batches
		for i, tt := range c.Tensors {
			if len(c.Epochs[0].Batches.([]any)) > 0 {
				dtypes = append(dtypes, fmt.Sprintf("%d:%s", i, tt.Dtype))
			}
		}
		if !sameJSON(g["dtypes"], dtypes) {
			t.Errorf("%s: dtypes %v, want %v", c.Name, g["dtypes"], dtypes)
		}
		if !sameJSON(g["length"], c.Length) {
			t.Errorf("%s: length %v, want %d", c.Name, g["length"], c.Length)
		}
		if !sameJSON(g["after"], c.After) {
			t.Errorf("%s: the default generator is not where PyTorch leaves it: draws %v after the epochs, want %v", c.Name, g["after"], c.After)
		}
	}
}

// TestDistributedSamplerMatchesPyTorch: DistributedSampler's indices
// (padded or dropped, for every rank, shuffled or not, several epochs)
// and sizes are PyTorch's, over an array dataset.
func TestDistributedSamplerMatchesPyTorch(t *testing.T) {
	fx := readDataloaderFixtures(t)
	var src strings.Builder
	src.WriteString(`const { data } = require("zeroeng");
function run(name, n, options, epochs) {
  const s = data.DistributedSampler(Array.from({ length: n }, (_, i) => i), options);
  const out = epochs.map(e => { s.setEpoch(e); return { epoch: s.epoch, indices: [...s] }; });
  console.log(JSON.stringify({ name, epochs: out, length: s.length, numSamples: s.numSamples, totalSize: s.totalSize }));
}
`)
	names := make([]string, len(fx.Samplers))
	for i, c := range fx.Samplers {
		names[i] = fmt.Sprintf("n %d %s", c.N, jsText(c.Options))
		epochs := make([]int, len(c.Epochs))
		for j, e := range c.Epochs {
			epochs[j] = e.Epoch
		}
		fmt.Fprintf(&src, "run(%q, %d, %s, %s);\n", names[i], c.N, jsText(c.Options), jsText(epochs))
	}
	got := outputByName(t, src.String())
	for i, c := range fx.Samplers {
		g := got[names[i]]
		if g == nil {
			t.Errorf("%s: no output", names[i])
			continue
		}
		if !sameJSON(g["epochs"], c.Epochs) {
			t.Errorf("%s: indices\n got %s\nwant %s", names[i], jsText(g["epochs"]), jsText(c.Epochs))
		}
		if !sameJSON([]any{g["length"], g["numSamples"], g["totalSize"]}, []int{c.Length, c.NumSamples, c.TotalSize}) {
			t.Errorf("%s: length, numSamples, totalSize %v %v %v, want %d %d %d", names[i], g["length"], g["numSamples"], g["totalSize"], c.Length, c.NumSamples, c.TotalSize)
		}
	}
}

// TestDataLoaderCollateMatchesPyTorch: a script dataset's items (a
// tensor, an integer as a BigInt, a number, an object of a boolean and a
// string) are batched as default_collate batches PyTorch's, values and
// dtypes; and tensor.randperm is torch.randperm for a large n.
func TestDataLoaderCollateMatchesPyTorch(t *testing.T) {
	fx := readDataloaderFixtures(t)
	src := fmt.Sprintf(`const { tensor, data } = require("zeroeng");
const items = { length: 7, get(i) { return [tensor.tensor([i, -i], { dtype: "float32" }), BigInt(i), i / 4, { flag: i %% 2 === 0, name: "s" + i }]; } };
const describe = v => tensor.isTensor(v) ? { values: v.toArray(), dtype: v.dtype }
  : Array.isArray(v) ? (typeof v[0] === "string" ? v : v.map(describe))
  : Object.fromEntries(Object.entries(v).map(([k, x]) => [k, describe(x)]));
tensor.manualSeed(4);
const batches = [];
for (const b of data.DataLoader(items, { batchSize: 3, shuffle: true })) batches.push(describe(b));
console.log(JSON.stringify({ name: "collate", batches }));
const p = tensor.randperm(%d, { seed: %d }).toArray();
let sum = 0;
p.forEach((v, i) => { sum += v * i; });
console.log(JSON.stringify({ name: "randperm", head: p.slice(0, 20), tail: p.slice(-20), sum }));
`, fx.Randperm.N, fx.Randperm.Seed)
	got := outputByName(t, src)
	if !sameJSON(got["collate"]["batches"], fx.Collate) {
		t.Errorf("collated batches\n got %s\nwant %s", jsText(got["collate"]["batches"]), jsText(fx.Collate))
	}
	rp := got["randperm"]
	if !sameJSON([]any{rp["head"], rp["tail"], rp["sum"]}, []any{fx.Randperm.Head, fx.Randperm.Tail, fx.Randperm.WeightedSum}) {
		t.Errorf("randperm(%d) head %v tail %v weighted sum %v, want %v %v %d", fx.Randperm.N, rp["head"], rp["tail"], rp["sum"], fx.Randperm.Head, fx.Randperm.Tail, fx.Randperm.WeightedSum)
	}
}

// resumeJS iterates four loaders (shuffled with the default generator,
// with the seed option and dropLast, with a DistributedSampler, over a
// custom sampler) one batch each per step, drawing from the default
// generator between steps, and saves them with a checkpoint.Manager at
// the step given as the third argument, then stops. Given "resume" it
// loads the checkpoint into fresh loaders first. Every step prints the
// batches and the draw.
const resumeJS = `const { tensor, data, checkpoint } = require("zeroeng");
const [dir, steps, stopAt, resume] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4]), process.argv[5] === "resume"];
tensor.manualSeed(11);
const ds = data.TensorDataset(tensor.arange(10), tensor.arange(10).mul(10).to("float32"));
const sampler = data.DistributedSampler(ds, { numReplicas: 3, rank: 1, seed: 4 });
const state = {
  a: data.DataLoader(ds, { batchSize: 3, shuffle: true }),
  b: data.DataLoader(ds, { batchSize: 4, shuffle: true, seed: 5, dropLast: true }),
  c: data.DataLoader(ds, { batchSize: 2, sampler }),
  d: data.DataLoader(ds, { batchSize: 2, sampler: [9, 0, 8, 1, 7] }),
  epochs: { a: 0, b: 0, c: 0, d: 0 },
};
const ckpt = checkpoint.Manager(dir, { state });
let first = 1;
if (resume) first = ckpt.load().step + 1;
const its = {};
function next(name) {
  for (;;) {
    if (!its[name]) {
      if (name === "c") sampler.setEpoch(state.epochs.c);
      its[name] = state[name][Symbol.iterator]();
    }
    const r = its[name].next();
    if (!r.done) return r.value.map(t => t.toArray());
    its[name] = null;
    state.epochs[name]++;
  }
}
for (let step = first; step <= steps; step++) {
  const batches = ["a", "b", "c", "d"].map(next);
  console.log("step", step, JSON.stringify(batches), tensor.randn([1]).item());
  if (step === stopAt) { ckpt.save(step, { force: true }); break; }
}
`

// TestDataLoaderResume: a run stopped after a checkpoint at step k and
// resumed from it prints the same steps after k as the uninterrupted run:
// the loaders continue with the very next batch, mid-epoch or at an
// epoch's end, and later epochs are the same.
func TestDataLoaderResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resume.js")
	if err := os.WriteFile(path, []byte(resumeJS), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []string {
		t.Helper()
		var out, errOut strings.Builder
		err := RunJob(context.Background(), path, JobOptions{Ranks: 1, Rank: Options{Stdout: &out, Stderr: &errOut, AutoRelease: true, Args: args}})
		if err != nil {
			t.Fatalf("%v\n%s", err, errOut.String())
		}
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	const steps = 14
	full := run(t.TempDir(), fmt.Sprint(steps), "0")
	if len(full) != steps {
		t.Fatalf("the full run printed %d steps, want %d", len(full), steps)
	}
	// Loader a has 4 batches an epoch, b 2, c 2, d 3: these stops fall in
	// epochs, on their last batches and on their ends.
	for _, k := range []int{1, 2, 3, 4, 6, 9} {
		dir := t.TempDir()
		if first := run(dir, fmt.Sprint(steps), fmt.Sprint(k)); !sameLines(first, full[:k]) {
			t.Fatalf("stop at %d: the first part differs from the full run:\n%s", k, strings.Join(first, "\n"))
		}
		rest := run(dir, fmt.Sprint(steps), "0", "resume")
		if !sameLines(rest, full[k:]) {
			t.Errorf("resumed after step %d:\n got %s\nwant %s", k, strings.Join(rest, "\n     "), strings.Join(full[k:], "\n     "))
		}
	}
}

func sameLines(a, b []string) bool { return reflect.DeepEqual(a, b) }

// TestDataLoaderErrors: misuse is an error naming the function and what
// is wrong, never a silent default.
func TestDataLoaderErrors(t *testing.T) {
	const setup = `const { tensor, data } = require("zeroeng");
const ds = data.TensorDataset(tensor.arange(6), tensor.zeros([6, 2]));
const seeded = data.DataLoader(ds, { batchSize: 2, shuffle: true, seed: 1 });
const plain = data.DataLoader(ds, { batchSize: 2, shuffle: true });
const drain = l => { const out = []; for (const b of l) out.push(b); return out; };
`
	cases := []struct{ name, src, want string }{
		{"no tensors", `data.TensorDataset()`, "data.TensorDataset: expects at least one tensor"},
		{"rows differ", `data.TensorDataset(tensor.zeros([3]), tensor.zeros([4, 2]))`, "data.TensorDataset: size mismatch between tensors: argument 2 has 4 rows"},
		{"0-d tensor", `data.TensorDataset(tensor.tensor(1))`, "data.TensorDataset: argument 1 is a 0-d tensor"},
		{"not a tensor", `data.TensorDataset(tensor.zeros([2]), [1, 2])`, "data.TensorDataset: argument 2 must be a tensor"},
		{"get out of range", `ds.get(6)`, "dataset.get: index 6 is out of range for a dataset of 6 samples"},
		{"get not an integer", `ds.get(0.5)`, "dataset.get: index must be an integer"},
		{"not a dataset", `data.DataLoader(tensor.zeros([3]))`, "data.DataLoader: expects a map-style dataset"},
		{"unknown option", `data.DataLoader(ds, { batch_size: 2 })`, `data.DataLoader: unknown option "batch_size" (did you mean batchSize?)`},
		{"batch size 0", `data.DataLoader(ds, { batchSize: 0 })`, "data.DataLoader: batchSize should be a positive integer value, but got batchSize=0"},
		{"batch size not an integer", `data.DataLoader(ds, { batchSize: 1.5 })`, "data.DataLoader: option batchSize must be an integer"},
		{"sampler and shuffle", `data.DataLoader(ds, { shuffle: true, sampler: [0, 1] })`, "data.DataLoader: the sampler option is mutually exclusive with shuffle"},
		{"sampler not iterable", `data.DataLoader(ds, { sampler: 3 })`, "data.DataLoader: option sampler must be a data.DistributedSampler or an iterable of indices"},
		{"shuffle nothing", `data.DataLoader([], { shuffle: true })`, "num_samples should be a positive integer value, but got num_samples=0"},
		{"sampler index out of range", `drain(data.DataLoader(ds, { sampler: [0, 6] }))`, "DataLoader: the sampler gave index 6, out of range for a dataset of 6 samples"},
		{"sampler index not an integer", `drain(data.DataLoader(ds, { sampler: ["a"] }))`, "DataLoader: the sampler's index must be an integer"},
		{"collateFn not a function", `data.DataLoader(ds, { collateFn: 1 })`, "data.DataLoader: option collateFn must be a function"},
		{"collate null", `drain(data.DataLoader([null]))`, "DataLoader: default collate: batch must contain tensors, numbers, BigInts, booleans, strings, arrays or objects; found null"},
		{"collate mixed", `drain(data.DataLoader([1, "a"], { batchSize: 2 }))`, "DataLoader: default collate: sample 1 is a string where sample 0 is a number"},
		{"collate ragged", `drain(data.DataLoader([[1, 2], [3]], { batchSize: 2 }))`, "DataLoader: default collate: each element in list of batch should be of equal size"},
		{"collate missing key", `drain(data.DataLoader([{ a: 1 }, { b: 1 }], { batchSize: 2 }))`, `DataLoader: default collate: sample 1 has no key "a"`},
		{"collate BigInt overflow", `drain(data.DataLoader([2n ** 70n]))`, "does not fit in int64"},
		{"length of an unsized sampler", `data.DataLoader(ds, { sampler: { *[Symbol.iterator]() { yield 0; } } }).length`, "DataLoader.length: the sampler has no length"},
		{"rank out of range", `data.DistributedSampler(ds, { numReplicas: 2, rank: 2 })`, "data.DistributedSampler: invalid rank 2, rank should be in the interval [0, 1]"},
		{"no replicas", `data.DistributedSampler(ds, { numReplicas: 0, rank: 0 })`, "data.DistributedSampler: numReplicas must be positive"},
		{"sampler unknown option", `data.DistributedSampler(ds, { drop_last: true })`, `data.DistributedSampler: unknown option "drop_last" (did you mean dropLast?)`},
		{"dataset grew", `const a = [1, 2, 3]; const s = data.DistributedSampler(a, { numReplicas: 2, rank: 0 }); a.push(4); [...s]`, "DistributedSampler: the dataset had 3 samples when the DistributedSampler was made and has 4 now"},
		{"setEpoch not an integer", `data.DistributedSampler(ds, { numReplicas: 1, rank: 0 }).setEpoch("x")`, "DistributedSampler.setEpoch: epoch must be an integer"},
		{"sampler state incomplete", `data.DistributedSampler(ds, { numReplicas: 1, rank: 0 }).loadStateDict({ seed: 1 })`, "DistributedSampler.loadStateDict: expects { seed, epoch }"},
		{"sampler state unknown key", `data.DistributedSampler(ds, { numReplicas: 1, rank: 0 }).loadStateDict({ seed: 1, epoch: 0, rank: 1 })`, `DistributedSampler.loadStateDict: not a state stateDict() returns: json: unknown field "rank"`},
		{"state not an object", `plain.loadStateDict(3)`, "DataLoader.loadStateDict: expects the object stateDict() returns, got 3"},
		{"state without epoch", `plain.loadStateDict({})`, "DataLoader.loadStateDict: expects the object stateDict() returns ({ epoch, batchSize, ... })"},
		{"state of another batch size", `plain.loadStateDict(data.DataLoader(ds, { batchSize: 3, shuffle: true }).stateDict())`, "DataLoader.loadStateDict: the state was saved by a loader with batchSize 3; this one has 2"},
		{"state of a seeded loader", `seeded[Symbol.iterator]().next(); plain.loadStateDict(seeded.stateDict())`, "DataLoader.loadStateDict: the state was saved by a loader with the seed option (this one has none)"},
		{"state of a default-generator loader", `plain[Symbol.iterator]().next(); seeded.loadStateDict(plain.stateDict())`, "DataLoader.loadStateDict: the state was saved by a loader that shuffled with the default generator"},
		{"state without the generator", `seeded.loadStateDict({ epoch: 1, batchSize: 2 })`, "DataLoader.loadStateDict: the state of the seed option's generator is missing or invalid"},
		{"state with a broken generator", `seeded.loadStateDict({ epoch: 1, batchSize: 2, generator: "AAAA" })`, "DataLoader.loadStateDict: the state of the seed option's generator is missing or invalid (rand: not a generator state"},
		{"state past the epoch", `seeded.loadStateDict({ epoch: 1, batchSize: 2, current: { batches: 4, generator: seeded.stateDict().generator } })`, "DataLoader.loadStateDict: the state's position (4 batches) is past the end of its epoch (3 batches)"},
		{"state without the permutation seed", `plain.loadStateDict({ epoch: 1, batchSize: 2, current: { batches: 1 } })`, "DataLoader.loadStateDict: current.samplerSeed is missing"},
		{"state of a distributed loader", `plain.loadStateDict({ epoch: 1, batchSize: 2, sampler: { seed: 0, epoch: 0 } })`, "DataLoader.loadStateDict: the state was saved by a loader with another kind of sampler"},
		{"state unknown key", `plain.loadStateDict({ epoch: 1, batchSize: 2, position: 3 })`, `DataLoader.loadStateDict: not a state stateDict() returns: json: unknown field "position"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runScript(t, t.TempDir(), "bad.js", setup+c.src+";\n", Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestDataLoaderBehaviour: what the fixtures do not show — rows by
// negative index, the dataset's tensors, gradients flowing back through
// a batch into the dataset's tensor (as through torch.stack), collateFn,
// a custom sampler's length, iterating a DistributedSampler directly,
// an epoch restored by loadStateDict being taken up by the next
// iteration only, and a stateDict that is plain JSON.
func TestDataLoaderBehaviour(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"get", `const x = tensor.arange(5); const ds = data.TensorDataset(x, x.mul(2)); console.log(ds.length, JSON.stringify(ds.get(-1).map(t => t.item())), JSON.stringify(ds.get(1).map(t => t.item())), ds.tensors[0] === x)`,
			"5 [4,8] [1,2] true"},
		{"gradients reach the dataset", `const x = tensor.ones([4, 2], { requiresGrad: true });
const [b] = data.DataLoader(data.TensorDataset(x), { batchSize: 3, sampler: [3, 1, 3] })[Symbol.iterator]().next().value;
b.mul(tensor.tensor([[1, 1], [2, 2], [3, 3]])).sum().backward(); console.log(JSON.stringify(x.grad.toArray()))`,
			"[[0,0],[2,2],[0,0],[4,4]]"},
		{"collateFn", `const l = data.DataLoader(["a", "b", "c"], { batchSize: 2, collateFn: s => s.join("+") }); console.log([...l].join(" "), l.length)`,
			"a+b c 2"},
		{"collateFn over a TensorDataset", `const l = data.DataLoader(data.TensorDataset(tensor.arange(3)), { batchSize: 2, collateFn: s => s.map(([r]) => r.item()) }); console.log(JSON.stringify([...l]))`,
			"[[0,1],[2]]"},
		{"custom sampler length", `const l = data.DataLoader(data.TensorDataset(tensor.arange(9)), { batchSize: 2, dropLast: true, sampler: [8, 7, 6, 5, 4] }); console.log(l.length, JSON.stringify([...l].map(b => b[0].toArray())))`,
			"2 [[8,7],[6,5]]"},
		{"sampler iterated directly", `const s = data.DistributedSampler([0, 1, 2, 3, 4], { numReplicas: 2, rank: 1, shuffle: false }); console.log(JSON.stringify([...s]), s.length, s.totalSize, s.epoch, s.seed)`,
			"[1,3,0] 3 6 0 0"},
		{"sampler defaults to the job's rank and world size", `const s = data.DistributedSampler([0, 1, 2], { shuffle: false }); console.log(s.numReplicas, s.rank, JSON.stringify([...s]))`,
			"1 0 [0,1,2]"},
		{"sampler state", `const s = data.DistributedSampler([0, 1, 2], { seed: 3 }); s.setEpoch(2); const sd = s.stateDict(); const t = data.DistributedSampler([0, 1, 2]); t.loadStateDict(sd); console.log(JSON.stringify(sd), t.seed, t.epoch, JSON.stringify([...t]) === JSON.stringify([...s]))`,
			`{"seed":3,"epoch":2} 3 2 true`},
		{"restored epoch is taken up once", `tensor.manualSeed(0);
const mk = () => data.DataLoader(data.TensorDataset(tensor.arange(7)), { batchSize: 2, shuffle: true });
const a = mk(), it = a[Symbol.iterator](); it.next();
const sd = JSON.parse(JSON.stringify(a.stateDict())), b = mk(); b.loadStateDict(sd);
const rest = [...it].map(x => x[0].toArray()), resumed = [...b].map(x => x[0].toArray());
console.log(JSON.stringify(rest) === JSON.stringify(resumed), resumed.length, [...b].length, sd.epoch, sd.current.batches, typeof sd.current.samplerSeed)`,
			"true 3 4 1 1 string"},
		{"idle state", `const l = data.DataLoader([1, 2, 3]); console.log(JSON.stringify(l.stateDict())); [...l]; console.log(JSON.stringify(l.stateDict()))`,
			"{\"epoch\":0,\"batchSize\":1}\n{\"epoch\":1,\"batchSize\":1}"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runScript(t, t.TempDir(), "ok.js", `const { tensor, data } = require("zeroeng");`+"\n"+c.src+";\n", Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// TestDistributedSamplerDefaultsToTheJob: without numReplicas and rank a
// DistributedSampler takes the job's, so that the ranks' loaders share
// out one permutation, padded to a multiple of the ranks.
func TestDistributedSamplerDefaultsToTheJob(t *testing.T) {
	lines, err := runJob(t, 3, `const { tensor, data, dist } = require("zeroeng");
const ds = data.TensorDataset(tensor.arange(10));
const sampler = data.DistributedSampler(ds, { seed: 2 });
sampler.setEpoch(1);
const got = [];
for (const [x] of data.DataLoader(ds, { batchSize: 3, sampler })) got.push(...x.toArray());
console.log(JSON.stringify({ rank: dist.rank, numReplicas: sampler.numReplicas, got }));
`, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// torch.randperm(10, generator=torch.Generator().manual_seed(3)),
	// padded with its first two indices to 12 and dealt out to 3 ranks.
	perm := []int{6, 0, 3, 7, 8, 5, 1, 9, 2, 4}
	padded := append(slices.Clone(perm), perm[:2]...)
	for rank, l := range lines {
		var want []int
		for j := rank; j < len(padded); j += 3 {
			want = append(want, padded[j])
		}
		if w := fmt.Sprintf(`[%d] {"rank":%d,"numReplicas":3,"got":%s}`, rank, rank, jsText(want)); l != w {
			t.Errorf("rank %d: %s, want %s", rank, l, w)
		}
	}
}
