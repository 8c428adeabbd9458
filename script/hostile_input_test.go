package script

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/internal/hostmem"
)

// TestOptionTypes: an integer option must be a number and a boolean one
// true or false; JavaScript's conversions ("3" → 3, "no" → true) would
// run a mistaken script on silently. Every reader of each kind checks,
// the free ones (optBool, boolArg, optFloat) through native.
func TestOptionTypes(t *testing.T) {
	const prelude = "const { data, amp } = require('zeroeng');\nconst ds = data.TensorDataset(tensor.arange(6));\n"
	runCases(t, []evalCase{
		{name: "integer option as a string", src: prelude + `data.DataLoader(ds, { batchSize: "3" });`,
			err: `data.DataLoader: option batchSize must be an integer, got a string ("3")`},
		{name: "integer option as a boolean", src: prelude + `data.DataLoader(ds, { batchSize: true });`,
			err: `data.DataLoader: option batchSize must be an integer, got a boolean (true)`},
		{name: "integer option as an array", src: prelude + `data.DataLoader(ds, { batchSize: [3] });`,
			err: `data.DataLoader: option batchSize must be an integer, got an array`},
		{name: "integer argument as a string", src: `tensor.ones([2, 3]).sum("1");`,
			err: `tensor.sum: dim must be an integer, got a string ("1")`},
		{name: "integer option as a number", src: prelude + `console.log(data.DataLoader(ds, { batchSize: 3 }).length);`, want: "2"},
		{name: "integer option as a BigInt", src: prelude + `console.log(data.DataLoader(ds, { batchSize: 3n }).length);`, want: "2"},
		{name: "boolean option as a string", src: prelude + `amp.autocast({ enabled: "no" }, () => 1);`,
			err: `autocast: option enabled must be a boolean (true or false), got a string ("no")`},
		{name: "boolean option as a number", src: prelude + `data.DataLoader(ds, { shuffle: 1 });`,
			err: `DataLoader: option shuffle must be a boolean (true or false), got a number (1)`},
		{name: "boolean option false", src: prelude + `console.log(amp.autocast({ enabled: false }, () => 1));`, want: "1"},
		{name: "boolean argument as a string", src: `tensor.ones([2, 3]).sum(0, "yes");`,
			err: `tensor.sum: argument 2 must be a boolean (true or false), got a string ("yes")`},
		{name: "boolean method option", src: `tensor.ones([2, 3]).sum({ dim: 0, keepdim: 1 });`,
			err: `tensor.sum: option keepdim must be a boolean (true or false), got a number (1)`},
		{name: "boolean property", src: `tensor.ones([2]).requiresGrad = "false";`,
			err: `tensor.requiresGrad: the value must be a boolean (true or false), got a string ("false")`},
		{name: "optimizer flag", src: `optim.Adam(nn.Linear(2, 2).parameters(), { amsgrad: "true" });`,
			err: `optim.Adam: amsgrad must be a boolean (true or false), got a string ("true")`},
		{name: "positional flag", src: `F.maxPool2d(tensor.ones([1, 1, 4, 4]), 2, 2, 0, 1, "yes");`,
			err: `nn.functional.maxPool2d: ceilMode must be a boolean`},
		{name: "number option as a string", src: `nn.parallel.DistributedDataParallel(nn.Linear(2, 2), { bucketCapMB: "25" });`,
			err: `option bucketCapMB must be a number, got a string ("25")`},
		{name: "caught as a TypeError", src: prelude + `try { data.DataLoader(ds, { dropLast: "yes" }) } catch (e) { console.log(e instanceof TypeError) }`,
			want: "true"},
	})
}

// TestAllocationSizes: a number that sizes a list on the host (a batch
// size, a dataset's length, an element count, an array's length) is
// refused with a message when the list cannot be made, never the Go
// runtime's fatal "out of memory" or "makeslice: len out of range"; a
// batch size past the dataset makes one batch of it, as PyTorch's.
func TestAllocationSizes(t *testing.T) {
	const prelude = "const { data } = require('zeroeng');\nconst ds = data.TensorDataset(tensor.arange(10));\n" +
		"const huge = { length: 1e15, get(i) { return i; } };\n"
	cases := []evalCase{
		{name: "batch past the dataset", src: prelude + `const l = data.DataLoader(ds, { batchSize: 1e12 });
console.log(l.length); for (const [x] of l) console.log(x.shape.join());`, want: "1\n10"},
		{name: "batch past the dataset, dropLast", src: prelude + `const l = data.DataLoader(ds, { batchSize: 1e12, dropLast: true });
console.log(l.length); for (const b of l) console.log("batch");`, want: "0"},
		{name: "batch past the dataset, shuffled", src: prelude + `for (const [x] of data.DataLoader(ds, { batchSize: 1e12, shuffle: true, seed: 1 })) console.log(x.sort()[0].tolist().join());`,
			want: "0,1,2,3,4,5,6,7,8,9"},
		{name: "batch past the dataset, workers", src: prelude + `for (const [x] of data.DataLoader(ds, { batchSize: 1e12, numWorkers: 2 })) console.log(x.shape.join());`,
			want: "10"},
		{name: "batch past a script's dataset", src: prelude + `for (const x of data.DataLoader([1, 2, 3], { batchSize: 2 ** 52 })) console.log(x.tolist().join());`,
			want: "1,2,3"},
		{name: "a huge dataset in order", src: prelude + `for (const x of data.DataLoader(huge, { batchSize: 3 })) { console.log(x.tolist().join()); break; }`,
			want: "0,1,2"},
		{name: "a huge dataset shuffled", src: prelude + `data.DataLoader(huge, { batchSize: 3, shuffle: true });`,
			err: "data.DataLoader: shuffle: the permutation of a dataset of 1000000000000000 samples needs 7.1 PiB, more than"},
		{name: "a huge batch of a huge dataset", src: prelude + `for (const x of data.DataLoader(huge, { batchSize: 1e12 })) break;`,
			err: "DataLoader: a batch of 1000000000000 samples (batchSize 1000000000000) needs"},
		{name: "a huge dataset's distributed sampler", src: prelude + `for (const i of data.DistributedSampler(huge, { numReplicas: 2, rank: 0 })) break;`,
			err: "DistributedSampler: shuffle: the permutation of a dataset of 1000000000000000 samples needs"},
		{name: "a huge dataset's distributed sampler in order", src: prelude + `for (const i of data.DistributedSampler(huge, { numReplicas: 2, rank: 1, shuffle: false })) break;`,
			err: "DistributedSampler: the indices of rank 1's 500000000000000 samples needs"},
		{name: "a distributed sampler in order", src: prelude + `console.log([...data.DistributedSampler(ds, { numReplicas: 3, rank: 1, shuffle: false })].join());`,
			want: "1,4,7,0"},
		{name: "a nesting too large", src: `const a = [[]]; a[0].length = 2 ** 32 - 1; a.length = 2 ** 20; tensor.tensor(a);`,
			err: "tensor.fromArray: data of 4503599626321920 numbers: needs 96 PiB"},
		{name: "a nesting past 2^53", src: `const a = [[]]; a[0].length = 2 ** 32 - 1; a.length = 2 ** 32 - 1; tensor.tensor(a);`,
			err: "tensor.fromArray: data of more than 2^53 numbers"},
		// A negative extent is refused by the call that was made, named.
		{name: "randint of a negative extent", src: `tensor.randint(0, 5, [-2]);`, err: "tensor.randint: negative extent in shape [-2]"},
		{name: "zeros of a negative extent", src: `tensor.zeros([-1, 2]);`, err: "tensor: zeros: negative extent in shape [-1 2]"},
		{name: "ones of a negative extent", src: `tensor.ones(3, -1);`, err: "tensor: ones: negative extent in shape [3 -1]"},
		{name: "full of a negative extent", src: `tensor.full([-2], 7);`, err: "tensor: full: negative extent in shape [-2]"},
		{name: "full of -0 keeps -0", src: `console.log(Object.is(tensor.full([3], -0).toArray()[2], -0), tensor.full([1], 0).toArray()[0], tensor.zeros(2).sum().item());`,
			want: "true 0 0"},
	}
	// Lists of 1e11 numbers pass the engine's bound on a tensor (1 TiB):
	// only the memory available refuses them.
	if avail, ok := hostmem.Available(); ok && avail < 8e11 {
		cases = append(cases, []evalCase{
			{name: "randint", src: `tensor.randint(5, [1e11]);`, err: "tensor.randint: a tensor of 100000000000 values needs 745.1 GiB, more than the"},
			{name: "randperm", src: `tensor.randperm(1e11);`, err: "tensor.randperm: a permutation of 100000000000 values needs 745.1 GiB, more than the"},
			{name: "arange", src: `tensor.arange(0, 1e11);`, err: "tensor.arange: a range of 100000000000 values needs 745.1 GiB, more than the"},
			{name: "linspace", src: `tensor.linspace(0, 1, 1e11);`, err: "tensor.linspace: a range of 100000000000 steps needs 745.1 GiB, more than the"},
		}...)
	}
	runCases(t, cases)
}

// TestSparseArrays: an array's length says nothing of its memory
// (a.length = 2 ** 32 - 1 holds nothing), and goja's export of one copies
// the whole length: the host API's type checks never export a value to
// learn its type, and a list made from one is checked first.
func TestSparseArrays(t *testing.T) {
	const need = (1<<32 - 1) * 24 // tensor.tensor's data, as exported and copied
	if avail, ok := hostmem.Available(); !ok || avail > need {
		t.Skip("the memory available is unknown here, or enough for the list")
	}
	const prelude = "const a = []; a.length = 2 ** 32 - 1;\n"
	runCases(t, []evalCase{
		{name: "as an operand", src: prelude + `tensor.ones([2]).add(a);`, err: "tensor.add: argument must be a number, got an array"},
		{name: "as a tensor's data", src: prelude + `tensor.tensor(a);`, err: "tensor.fromArray: data of 4294967295 numbers: needs"},
		{name: "as a method's this", src: prelude + `tensor.ones([2]).sum.call(a);`, err: "tensor.sum: called on an array, not a tensor"},
		{name: "as a list of outputs", src: prelude + `require('zeroeng').amp.GradScaler().scale(a);`,
			err: "GradScaler.scale: the outputs of length 4294967295: needs"},
		{name: "as a list of tensors", src: prelude + `tensor.cat(a);`, err: "tensor.cat: the array of tensors of length 4294967295: needs"},
		{name: "as a dataset's tensor", src: prelude + `require('zeroeng').data.TensorDataset(a);`,
			err: "data.TensorDataset: argument 1 must be a tensor, got an array"},
		{name: "as a parameter", src: prelude + `nn.Parameter(a);`, err: "nn.Parameter: expects a tensor, got an array"},
	})
	// Printed, it shows its first elements (as Node's console.log does).
	out, err := runScript(t, t.TempDir(), "case.js", prelude+`console.log(a); console.log("%s", a);`, Options{})
	if err != nil || strings.Count(out, "... 4294967195 more items") != 2 {
		t.Fatalf("console.log: %v\n%.300s", err, out)
	}
}

// TestOutOfMemoryHint: running out of memory while many tensors made
// before the first backward pass outside any tensor.scope are alive (a
// loop that makes them and never runs backward) says so, and what the
// lifetime rule is; other out-of-memory errors (one tensor too large, a
// setup of a few large ones) do not.
func TestOutOfMemoryHint(t *testing.T) {
	const hint = `tensors made outside any tensor.scope before the first backward() are alive`
	for _, c := range []struct {
		name, src string
		hint      bool // the error has the hint
		ok        bool // the script succeeds
		repl      bool // without AutoRelease, as the REPL runs
	}{
		{name: "a loop without backward", hint: true, src: `const model = nn.Linear(64, 64);
for (let i = 0; i < 100000; i++) tensor.noGrad(() => model.forward(tensor.randn([256, 64])));`},
		{name: "a loop in tensor.scope", ok: true, src: `const model = nn.Linear(64, 64);
for (let i = 0; i < 500; i++) tensor.scope(() => { tensor.noGrad(() => model.forward(tensor.randn([256, 64]))); });`},
		{name: "a training loop", ok: true, src: `const model = nn.Linear(64, 64);
const opt = optim.SGD(model.parameters(), { lr: 0.01 });
for (let i = 0; i < 300; i++) {
  const loss = model.forward(tensor.randn([256, 64])).square().mean();
  opt.zeroGrad(); loss.backward(); opt.step();
}`},
		{name: "a loop in the REPL", hint: true, repl: true, src: `const model = nn.Linear(64, 64);
for (let i = 0; i < 100000; i++) tensor.noGrad(() => model.forward(tensor.randn([256, 64])));`},
		{name: "one tensor too large", src: `tensor.zeros([8 << 20]);`},
		{name: "a few large tensors", src: `const keep = [];
for (let i = 0; i < 10; i++) keep.push(tensor.zeros([1 << 20]));`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := tensor.NewRuntime(cpu.New(cpu.Options{MaxMemory: 16 << 20}), 0)
			src := "const { tensor, nn, optim } = require('zeroeng');\n" + c.src
			_, err := runScript(t, t.TempDir(), "case.js", src, Options{AutoRelease: !c.repl, Runtime: rt})
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "out of memory") {
				t.Fatalf("err = %v, want out of memory", err)
			}
			msg := strings.SplitN(err.Error(), "\n", 2)[0]
			want := hint
			if c.repl {
				want = "none is given back automatically here; if a loop makes them"
			}
			if got := strings.Contains(msg, want); got != c.hint {
				t.Fatalf("hint given: %v, want %v\n%s", got, c.hint, msg)
			}
			if c.hint && !strings.Contains(msg, `run its body in tensor.scope(() => ...) or give them back with t.release(): see "Tensor lifetimes" in the README)`) {
				t.Fatalf("the hint does not say what to do:\n%s", msg)
			}
		})
	}
}

// TestHostRoom: the bound on a list sized by a script, with the memory
// available or without.
func TestHostRoom(t *testing.T) {
	for _, c := range []struct {
		n, size int
		err     string
	}{
		{0, 8, ""},
		{1 << 20, 8, ""},
		{1<<37 + 1, 8, "needs 1 TiB"},
		{1 << 53, 8, "needs 64 PiB"},
		{1 << 53, 0, ""},
	} {
		err := hostRoom(c.n, c.size)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("hostRoom(%d, %d) = %v, want %q", c.n, c.size, err, c.err)
		}
	}
}
