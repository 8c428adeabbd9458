package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// workersJS runs one loader configuration (cases[name]) with the worker
// options of argument 2 (JSON), through every way a script goes over a
// loader, and prints every batch (dtype, shape, values) and, between
// them, draws from the default generator: full epochs; an epoch left by
// break and a whole one after it; an iterator taken up again after a
// break, interleaved with a second iteration; a stateDict taken mid-epoch
// and loaded into a fresh loader, which goes on from there while the first
// iteration goes on too; a state loaded into the loader while one of its
// iterations is fetched for; and the final stateDict.
const workersJS = `const { tensor, data } = require("zeroeng");
const n = 23;
tensor.manualSeed(5);
const ds = data.TensorDataset(tensor.randn([n, 3]), tensor.arange(n), tensor.arange(2 * n).reshape(n, 2).to("uint8"),
  tensor.rand([n]).gt(0.5), tensor.randn([n, 2, 2], { dtype: "float64" }), tensor.randn([n + 3]).narrow(0, 2, n));
const cases = {
  sequential: () => ({ batchSize: 5 }),
  shuffled: () => ({ batchSize: 4, shuffle: true }),
  seededDropLast: () => ({ batchSize: 4, shuffle: true, seed: 7, dropLast: true }),
  distributed: () => ({ batchSize: 3, sampler: data.DistributedSampler(ds, { numReplicas: 3, rank: 1, seed: 2 }) }),
  distributedDropLast: () => ({ batchSize: 2, dropLast: true, sampler: data.DistributedSampler(ds, { numReplicas: 2, rank: 0, dropLast: true }) }),
  customArray: () => ({ batchSize: 3, sampler: [5, -1, 0, 22, 7, 7, 3] }),
  customDrawing: () => ({ batchSize: 4, sampler: { length: n, *[Symbol.iterator]() { yield* tensor.randperm(n).toArray(); } } }),
};
const [name, workers] = [process.argv[2], JSON.parse(process.argv[3])];
const mk = () => data.DataLoader(ds, Object.assign(cases[name](), workers));
const rows = b => b.map(t => [t.dtype, t.shape, t.toArray()]);
tensor.manualSeed(1);
const l = mk(), out = [];
const draw = () => out.push(tensor.randint(0, 1 << 30, [2]).toArray());
for (let ep = 0; ep < 3; ep++) {
  if (l.sampler && l.sampler.setEpoch) l.sampler.setEpoch(ep);
  for (const b of l) { out.push(rows(b)); draw(); }
  draw();
}
let k = 0;
for (const b of l) { out.push(rows(b)); if (++k === 2) break; }
draw();
for (const b of l) out.push(rows(b));
draw();
const it = l[Symbol.iterator]();
for (const b of it) { out.push(rows(b)); break; }
const it2 = l[Symbol.iterator]();
out.push(rows(it2.next().value));
draw();
for (const b of it) out.push(rows(b));
for (const b of it2) out.push(rows(b));
draw();
const it3 = l[Symbol.iterator]();
it3.next();
out.push(rows(it3.next().value));
const sd = JSON.parse(JSON.stringify(l.stateDict()));
out.push(sd);
const l2 = mk();
l2.loadStateDict(sd);
for (const b of l2) out.push(rows(b));
draw();
for (const b of it3) out.push(rows(b));
const it4 = l[Symbol.iterator]();
it4.next();
l.loadStateDict(sd);
for (const b of l) out.push(rows(b));
draw();
for (const b of it4) out.push(rows(b));
out.push(l.stateDict());
draw();
console.log(JSON.stringify(out));
`

// workerConfigs are the worker options the tests compare with none.
var workerConfigs = []string{
	`{"numWorkers":1,"prefetchFactor":1}`, `{"numWorkers":1}`, `{"numWorkers":1,"prefetchFactor":4}`,
	`{"numWorkers":3,"prefetchFactor":1}`, `{"numWorkers":3}`, `{"numWorkers":3,"prefetchFactor":4}`,
	`{"numWorkers":2,"persistentWorkers":true}`, `{"numWorkers":3,"prefetchFactor":1,"persistentWorkers":true}`,
}

// runLines runs the script at path on one rank with args and returns its
// output lines.
func runLines(t *testing.T, path string, args ...string) []string {
	t.Helper()
	var out, errOut strings.Builder
	err := RunJob(context.Background(), path, JobOptions{Ranks: 1, Rank: Options{Stdout: &out, Stderr: &errOut, AutoRelease: true, Args: args}})
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return strings.Split(strings.TrimSpace(out.String()), "\n")
}

// TestDataLoaderWorkersSameBatches: with numWorkers 1 or 3 and
// prefetchFactor 1, 2 or 4, with persistentWorkers or not, a loader yields
// bit for bit the batches it yields without workers, over several epochs,
// sequential, shuffled (with the default generator and with the seed
// option and dropLast), with a DistributedSampler (and dropLast) and with
// custom samplers (one of them drawing its order from the default
// generator); and everything the script draws between the batches, the
// loaders' stateDicts and the iterations resumed from them are the same.
func TestDataLoaderWorkersSameBatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workers.js")
	if err := os.WriteFile(path, []byte(workersJS), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sequential", "shuffled", "seededDropLast", "distributed", "distributedDropLast", "customArray", "customDrawing"} {
		t.Run(name, func(t *testing.T) {
			want := runLines(t, path, name, "{}")
			for _, w := range workerConfigs {
				if got := runLines(t, path, name, w); !slices.Equal(got, want) {
					t.Errorf("with %s:\n got %s\nwant %s", w, firstDifference(got, want), firstDifference(want, got))
				}
			}
		})
	}
}

// firstDifference is a's text from a little before where it departs from b.
func firstDifference(a, b []string) string {
	x, y := strings.Join(a, "\n"), strings.Join(b, "\n")
	i := 0
	for i < len(x) && i < len(y) && x[i] == y[i] {
		i++
	}
	from := max(0, i-80)
	return "…" + x[from:min(len(x), i+80)]
}

// TestDataLoaderWorkersResume: a run with workers stopped after a
// checkpoint and resumed from it prints the steps of the uninterrupted run
// without workers (resumeJS: four loaders, a shuffled one, a seeded one
// with dropLast, one over a DistributedSampler, one over a custom sampler).
func TestDataLoaderWorkersResume(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.js")
	withWorkers := filepath.Join(dir, "workers.js")
	src := strings.ReplaceAll(resumeJS, "data.DataLoader(ds, {", "data.DataLoader(ds, { numWorkers: 2, prefetchFactor: 3,")
	if src == resumeJS {
		t.Fatal("resumeJS makes no loader to give workers")
	}
	if err := errors.Join(os.WriteFile(plain, []byte(resumeJS), 0o644), os.WriteFile(withWorkers, []byte(src), 0o644)); err != nil {
		t.Fatal(err)
	}
	const steps = 14
	full := runLines(t, plain, t.TempDir(), fmt.Sprint(steps), "0")
	for _, k := range []int{2, 6} {
		ckpt := t.TempDir()
		if first := runLines(t, withWorkers, ckpt, fmt.Sprint(steps), fmt.Sprint(k)); !slices.Equal(first, full[:k]) {
			t.Fatalf("stop at %d: the first part differs from the run without workers:\n%s", k, strings.Join(first, "\n"))
		}
		if rest := runLines(t, withWorkers, ckpt, fmt.Sprint(steps), "0", "resume"); !slices.Equal(rest, full[k:]) {
			t.Errorf("resumed after step %d:\n got %s\nwant %s", k, strings.Join(rest, "\n     "), strings.Join(full[k:], "\n     "))
		}
	}
}

// TestDataLoaderWorkersErrors: the worker options' misuse is an error
// naming the option and why; a failure in a worker or in drawing a batch
// ahead surfaces at the next() of the batch it belongs to (the batches
// before it are handed over), with the message it has without workers.
func TestDataLoaderWorkersErrors(t *testing.T) {
	const setup = `const { tensor, data } = require("zeroeng");
const ds = data.TensorDataset(tensor.arange(6), tensor.zeros([6, 2]));
const take = (l, k) => { const it = l[Symbol.iterator](); for (let i = 0; i < k; i++) console.log(JSON.stringify(it.next().value[0].toArray())); return it; };
`
	cases := []struct{ name, src, want, out string }{
		{"script dataset", `data.DataLoader([1, 2, 3], { numWorkers: 2 })`,
			"data.DataLoader: numWorkers needs a data.TensorDataset with the default collate: a script dataset's get(i) runs on the script's thread", ""},
		{"script object dataset", `data.DataLoader({ length: 2, get(i) { return i; } }, { numWorkers: 1 })`,
			"data.DataLoader: numWorkers needs a data.TensorDataset with the default collate: a script dataset's get(i)", ""},
		{"collateFn", `data.DataLoader(ds, { numWorkers: 2, collateFn: s => s })`,
			"data.DataLoader: numWorkers needs a data.TensorDataset with the default collate: collateFn runs on the script's thread", ""},
		{"prefetchFactor without workers", `data.DataLoader(ds, { prefetchFactor: 2 })`,
			"data.DataLoader: prefetchFactor needs numWorkers > 0", ""},
		{"prefetchFactor with numWorkers 0", `data.DataLoader(ds, { numWorkers: 0, prefetchFactor: 4 })`,
			"data.DataLoader: prefetchFactor needs numWorkers > 0", ""},
		{"prefetchFactor 0", `data.DataLoader(ds, { numWorkers: 1, prefetchFactor: 0 })`,
			"data.DataLoader: prefetchFactor should be a positive integer, got 0", ""},
		{"prefetchFactor not an integer", `data.DataLoader(ds, { numWorkers: 1, prefetchFactor: 1.5 })`,
			"data.DataLoader: option prefetchFactor must be an integer", ""},
		{"persistentWorkers without workers", `data.DataLoader(ds, { persistentWorkers: true })`,
			"data.DataLoader: persistentWorkers needs numWorkers > 0", ""},
		{"negative numWorkers", `data.DataLoader(ds, { numWorkers: -1 })`,
			"data.DataLoader: numWorkers should be non-negative, got -1", ""},
		{"numWorkers not an integer", `data.DataLoader(ds, { numWorkers: 1.5 })`,
			"data.DataLoader: option numWorkers must be an integer, got 1.5", ""},
		{"too many workers", `data.DataLoader(ds, { numWorkers: 5000 })`,
			"data.DataLoader: numWorkers 5000 is more than 1024", ""},
		{"misspelled numWorkers", `data.DataLoader(ds, { numworkers: 2 })`,
			`data.DataLoader: unknown option "numworkers" (did you mean numWorkers?)`, ""},
		{"misspelled prefetchFactor", `data.DataLoader(ds, { numWorkers: 2, prefetch_factor: 2 })`,
			`data.DataLoader: unknown option "prefetch_factor" (did you mean prefetchFactor?)`, ""},
		{"strided dataset", `data.DataLoader(data.TensorDataset(tensor.zeros([2, 6]).t()), { numWorkers: 1 })`,
			"data.DataLoader: numWorkers needs contiguous tensors: tensor 1 of the TensorDataset has shape [6 2] and strides [1 6]; make it with .contiguous()", ""},
		{"dataset requiring grad", `take(data.DataLoader(data.TensorDataset(tensor.ones([4, 2], { requiresGrad: true })), { numWorkers: 1 }), 1)`,
			"DataLoader: numWorkers: tensor 1 of the TensorDataset requires grad", ""},
		{"dataset released", `const x = tensor.arange(6); const it = take(data.DataLoader(data.TensorDataset(x), { numWorkers: 2 }), 1); x.release(); it.next()`,
			"DataLoader: the tensor was released by tensor.release()", "[0]"},
		{"index out of range in a worker", `const it = take(data.DataLoader(ds, { batchSize: 2, numWorkers: 2, prefetchFactor: 4, sampler: [0, 1, 2, 3, 4, 9, 5] }), 2); it.next()`,
			"DataLoader: the sampler gave index 9, out of range for a dataset of 6 samples", "[0,1]\n[2,3]"},
		{"sampler throws ahead", `const it = take(data.DataLoader(ds, { numWorkers: 1, prefetchFactor: 4, sampler: { *[Symbol.iterator]() { yield 0; yield 1; yield 2; throw new Error("the sampler broke"); } } }), 3); it.next()`,
			"Error: the sampler broke", "[0]\n[1]\n[2]"},
		{"sampler index not an integer ahead", `const it = take(data.DataLoader(ds, { numWorkers: 1, sampler: [0, 1, "a"] }), 2); it.next()`,
			"DataLoader: the sampler's index must be an integer", "[0]\n[1]"},
		{"next from the sampler", `let it; const l = data.DataLoader(ds, { numWorkers: 1, sampler: { *[Symbol.iterator]() { yield 0; yield 1; it.next(); } } });
it = l[Symbol.iterator](); for (let i = 0; i < 3; i++) console.log(JSON.stringify(it.next().value[0].toArray()))`,
			"DataLoader: next() was called while this iteration's next() was running (from its sampler)", "[0]\n[1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runScript(t, t.TempDir(), "bad.js", setup+c.src+";\n", Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
			if got := strings.TrimSpace(out); got != c.out {
				t.Errorf("printed %q before the error, want %q", got, c.out)
			}
		})
	}
}

// TestDataLoaderWorkersErrorsAsWithout: after a failed batch the iteration
// goes on as without workers: the same batches, the same errors.
func TestDataLoaderWorkersErrorsAsWithout(t *testing.T) {
	const src = `const { tensor, data } = require("zeroeng");
const ds = data.TensorDataset(tensor.arange(6));
const sampler = { *[Symbol.iterator]() { yield 0; yield 1; yield 7; yield 2; yield* [3, "x", 4, 5]; } };
const l = data.DataLoader(ds, Object.assign({ batchSize: 2, sampler }, JSON.parse(process.argv[2])));
const it = l[Symbol.iterator](), out = [];
for (let i = 0; i < 6; i++) {
  try { const r = it.next(); out.push(r.done ? "done" : r.value[0].toArray()); } catch (e) { out.push(e.message); }
}
console.log(JSON.stringify(out), JSON.stringify(l.stateDict()));
`
	path := filepath.Join(t.TempDir(), "errors.js")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	want := runLines(t, path, "{}")
	if !strings.Contains(want[0], "out of range") || !strings.Contains(want[0], "must be an integer") {
		t.Fatalf("without workers: %s; want both failures", want[0])
	}
	for _, w := range workerConfigs {
		if got := runLines(t, path, w); !slices.Equal(got, want) {
			t.Errorf("with %s:\n got %s\nwant %s", w, got, want)
		}
	}
}

// workerGoroutines lists the goroutines running workerPool.work, by id.
func workerGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var ids []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*workerPool).work(") {
			ids = append(ids, regexp.MustCompile(`^goroutine (\d+)`).FindStringSubmatch(g)[1])
		}
	}
	slices.Sort(ids)
	return ids
}

// settle waits up to two seconds for ok, polling.
func settle(ok func() bool) bool {
	for deadline := time.Now().Add(2 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// TestDataLoaderWorkersGoroutines: persistentWorkers keeps the same worker
// goroutines across epochs; without it they end with each epoch, when the
// script leaves an epoch (break), when another iteration is fetched for,
// and when a state is loaded; and none is left once the runtime closes.
func TestDataLoaderWorkersGoroutines(t *testing.T) {
	// A first runtime starts what the process keeps (the CPU's thread pool).
	if _, err := runScript(t, t.TempDir(), "warm.js", `const { tensor, data } = require("zeroeng");
for (const b of data.DataLoader(data.TensorDataset(tensor.randn([8, 3])), { batchSize: 2, numWorkers: 1 })) b[0].sum();`, Options{}); err != nil {
		t.Fatal(err)
	}
	if !settle(func() bool { return len(workerGoroutines()) == 0 }) {
		t.Fatalf("workers left by the first runtime: %v", workerGoroutines())
	}
	base := runtime.NumGoroutine()
	r, err := New(Options{Stdout: &strings.Builder{}, Stderr: &strings.Builder{}, AutoRelease: true})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			r.Close()
		}
	}()
	run := func(src string) {
		t.Helper()
		if _, err := r.RunString("step.js", src); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, n int) []string {
		t.Helper()
		if !settle(func() bool { return len(workerGoroutines()) == n }) {
			t.Fatalf("%s: %d worker goroutines, want %d", what, len(workerGoroutines()), n)
		}
		return workerGoroutines()
	}
	run(`const { tensor, data } = require("zeroeng");
const ds = data.TensorDataset(tensor.randn([40, 3]), tensor.arange(40));
var kept = data.DataLoader(ds, { batchSize: 4, shuffle: true, numWorkers: 3, persistentWorkers: true });
var plain = data.DataLoader(ds, { batchSize: 4, numWorkers: 2 });
for (const b of kept) b[0].sum();`)
	first := expect("after a persistent epoch", 3)
	run(`for (const b of kept) b[0].sum();`)
	if again := expect("after a second persistent epoch", 3); !slices.Equal(again, first) {
		t.Errorf("the persistent workers changed across epochs: %v, then %v", first, again)
	}
	run(`var it = plain[Symbol.iterator](); it.next();`)
	expect("an epoch in progress", 5)
	run(`for (const b of plain) b[0].sum();`)
	expect("after an epoch that took the workers from another", 3)
	run(`it.next(); for (const b of it) break;`)
	expect("after break", 3)
	run(`it.next(); plain.loadStateDict(plain.stateDict());`)
	expect("after loadStateDict", 3)
	run(`it.next(); kept[Symbol.iterator]().next();`)
	expect("two iterations left in progress", 5)
	r.Close()
	closed = true
	expect("after Close", 0)
	if !settle(func() bool { return runtime.NumGoroutine() <= base }) {
		t.Errorf("%d goroutines after Close, %d before the runtime", runtime.NumGoroutine(), base)
	}
}

// TestDataLoaderWorkersInterrupt: a rank interrupted (Ctrl-C, another
// rank failed) while it trains over a loader with workers stops, and
// leaves no goroutine once its runtime closes.
func TestDataLoaderWorkersInterrupt(t *testing.T) {
	if !settle(func() bool { return len(workerGoroutines()) == 0 }) {
		t.Fatalf("workers left by another test: %v", workerGoroutines())
	}
	base := runtime.NumGoroutine()
	r, err := New(Options{Stdout: &strings.Builder{}, Stderr: &strings.Builder{}, AutoRelease: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		defer r.Close()
		_, err := r.RunString("loop.js", `const { tensor, data } = require("zeroeng");
const l = data.DataLoader(data.TensorDataset(tensor.randn([64, 8])), { batchSize: 4, shuffle: true, numWorkers: 3, prefetchFactor: 4 });
for (;;) for (const [x] of l) x.sum();`)
		done <- err
	}()
	if !settle(func() bool { return len(workerGoroutines()) == 3 }) {
		t.Fatalf("%d worker goroutines while the loop runs, want 3", len(workerGoroutines()))
	}
	r.Interrupt("interrupted")
	select {
	case err := <-done:
		var se *Error
		if !errors.As(err, &se) || !se.Interrupted {
			t.Fatalf("the run returned %v, want an interrupt", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the interrupted run did not return")
	}
	if !settle(func() bool { return len(workerGoroutines()) == 0 && runtime.NumGoroutine() <= base }) {
		t.Errorf("after the interrupted runtime closed: workers %v, %d goroutines, %d before", workerGoroutines(), runtime.NumGoroutine(), base)
	}
}

// TestDataLoaderWorkersProperties: the loader shows its worker options as
// PyTorch's does (prefetch_factor None without workers).
func TestDataLoaderWorkersProperties(t *testing.T) {
	out, err := runScript(t, t.TempDir(), "props.js", `const { tensor, data } = require("zeroeng");
const ds = data.TensorDataset(tensor.arange(4));
const show = l => [l.numWorkers, l.prefetchFactor, l.persistentWorkers];
console.log(JSON.stringify([show(data.DataLoader(ds)), show(data.DataLoader(ds, { numWorkers: 2 })), show(data.DataLoader(ds, { numWorkers: 1, prefetchFactor: 3, persistentWorkers: true }))]));
`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if want := `[[0,null,false],[2,2,false],[1,3,true]]`; jsText(got) != want {
		t.Errorf("got %s, want %s", jsText(got), want)
	}
}

// TestDataLoaderWorkersMemory: the batches the workers gather are the
// rank's device memory from the start, counted and held to its limit
// (--max-memory), not buffers outside the accounting: an epoch's 16
// batches, kept, add 16 batches to the device's live bytes, and under a
// limit that leaves room for fewer, next() fails naming the limit.
func TestDataLoaderWorkersMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "job.js")
	src := `const { tensor, data } = require("zeroeng");
const ds = data.TensorDataset(tensor.zeros([64, 16384]));
const loader = data.DataLoader(ds, { batchSize: 4, numWorkers: 2, prefetchFactor: 2 });
const before = tensor.stats().liveBytes;
const kept = [];
for (const [x] of loader) kept.push(x);
console.log(JSON.stringify({ held: tensor.stats().liveBytes - before, batches: kept.length, batch: kept[0].numel() * 4 }));
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := runLines(t, path)
	var got struct{ Held, Batches, Batch int64 }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("%v: %q", err, lines)
	}
	if got.Batches != 16 || got.Batch != 4*16384*4 || got.Held < 16*got.Batch {
		t.Errorf("%d batches of %d bytes kept, the device holds %d bytes more: want %d", got.Batches, got.Batch, got.Held, 16*got.Batch)
	}

	var out, errOut strings.Builder
	err := RunJob(context.Background(), path, JobOptions{Ranks: 1, MaxMemory: 64*16384*4 + 4*4*16384*4 + 64<<10,
		Rank: Options{Stdout: &out, Stderr: &errOut, AutoRelease: true}})
	if err == nil || !strings.Contains(err.Error(), "a worker failed to gather the batch") || !strings.Contains(err.Error(), "limit") {
		t.Errorf("under a limit with room for 4 batches: %v", err)
	}
}
