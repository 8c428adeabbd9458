package script

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// runJob runs src on ranks in-process ranks and returns the job's output
// lines, sorted (ranks print concurrently), and its error.
func runJob(t *testing.T, ranks int, src string, opts dist.Options) ([]string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.js")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := RunJob(context.Background(), path, JobOptions{Ranks: ranks, Dist: opts, Rank: Options{Stdout: &out, Stderr: &out, AutoRelease: true}})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	slices.Sort(lines)
	return lines, err
}

func TestDistCollectivesFromJS(t *testing.T) {
	src := `const { tensor, dist } = require("zeroeng");
const r = dist.rank, n = dist.worldSize;
const x = tensor.fromArray([r + 1, 10 * (r + 1)], [2], "float32");
dist.allReduce(x).wait();
const avg = dist.allReduce(tensor.fromArray([r], [1], "float32"), "avg").wait();
const parts = [0, 1, 2].map(() => tensor.zeros([1]));
dist.allGather(parts, tensor.fromArray([r * r], [1], "float32")).wait();
const flat = tensor.zeros([n]);
dist.allGather(flat, tensor.fromArray([r], [1], "float32")).wait();
const chained = dist.allReduce(tensor.ones([1])).then(t => t.mul(2)).wait();
const meta = dist.broadcastObject(r === 2 ? { lr: 0.1, steps: [1, 2] } : null, 2);
const gathered = dist.gatherObject("rank" + r, 0);
const odd = dist.newGroup([1, 2]);
let sub = "none";
if (odd) { const y = tensor.ones([1]); odd.allReduce(y).wait(); sub = odd.rank + "/" + odd.size + ":" + y.item(); }
dist.barrier().wait();
console.log(JSON.stringify({ r, x: x.toArray(), avg: avg.item(), parts: parts.map(p => p.item()), flat: flat.toArray(),
  chained: chained.item(), meta, gathered, sub }));
`
	lines, err := runJob(t, 3, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`[0] {"r":0,"x":[6,60],"avg":1,"parts":[0,1,4],"flat":[0,1,2],"chained":6,"meta":{"lr":0.1,"steps":[1,2]},"gathered":["rank0","rank1","rank2"],"sub":"none"}`,
		`[1] {"r":1,"x":[6,60],"avg":1,"parts":[0,1,4],"flat":[0,1,2],"chained":6,"meta":{"lr":0.1,"steps":[1,2]},"gathered":null,"sub":"0/2:2"}`,
		`[2] {"r":2,"x":[6,60],"avg":1,"parts":[0,1,4],"flat":[0,1,2],"chained":6,"meta":{"lr":0.1,"steps":[1,2]},"gathered":null,"sub":"1/2:2"}`,
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("printed\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestDistUnwaitedCollectives holds what a script ported from PyTorch,
// whose collectives block by default, reads and writes after a collective
// it never waits for: the collective's result, and the others receive
// what it held when it was issued. The tensors are large enough that the
// collectives are still running when the script reads them.
func TestDistUnwaitedCollectives(t *testing.T) {
	src := `const { tensor, dist } = require("zeroeng");
const r = dist.rank, n = 1 << 20;
const x = tensor.ones([n]).mul(r + 1);
dist.allReduce(x);
const sum = x.sum().item();
const b = tensor.ones([n]).mul(r === 0 ? 7 : 0);
dist.broadcast(b, 0);
b.mul_(2); // after the broadcast: rank 1 receives 7s, and every rank ends with 14s
const parts = [tensor.zeros([n]), tensor.zeros([n])];
dist.allGather(parts, tensor.ones([n]).mul(r + 3));
const got = parts.map(p => p.sum().item());
const m = tensor.ones([n]).mul(5);
if (r === 0) { dist.send(m, 1); m.fill_(0); } else { dist.recv(m, 0); }
console.log(JSON.stringify({ r, sum, b: b.sum().item(), got, m: m.sum().item() }));
`
	lines, err := runJob(t, 2, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1 << 20
	want := []string{
		fmt.Sprintf(`[0] {"r":0,"sum":%d,"b":%d,"got":[%d,%d],"m":0}`, 3*n, 14*n, 3*n, 4*n),
		fmt.Sprintf(`[1] {"r":1,"sum":%d,"b":%d,"got":[%d,%d],"m":%d}`, 3*n, 14*n, 3*n, 4*n, 5*n),
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("printed\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestDistFailuresNeverHang(t *testing.T) {
	for _, c := range []struct {
		name, src string
		opts      dist.Options
		want      []string
	}{
		{"a rank throws while the others wait in a collective", `const { tensor, dist } = require("zeroeng");
if (dist.rank === 1) throw new Error("rank one gives up");
dist.allReduce(tensor.ones([4])).wait();`, dist.Options{}, []string{"rank one gives up", "job.js:2"}},
		{"a rank ends without calling the collective", `const { tensor, dist } = require("zeroeng");
if (dist.rank !== 0) dist.allReduce(tensor.ones([4])).wait();`, dist.Options{}, []string{"rank 0 ended its program without calling allReduce #0"}},
		{"mismatched collectives", `const { tensor, dist } = require("zeroeng");
if (dist.rank === 0) dist.allReduce(tensor.ones([4])).wait(); else dist.broadcast(tensor.ones([4]), 0).wait();`,
			dist.Options{}, []string{"does not match across ranks", "job.js:2"}},
		{"mismatched shapes in debug mode", `const { tensor, dist } = require("zeroeng");
dist.allReduce(dist.rank === 0 ? tensor.ones([2, 3]) : tensor.ones([3, 2])).wait();`,
			dist.Options{Debug: true}, []string{"shape [2 3]", "shape [3 2]"}},
		{"timeout", `const { tensor, dist } = require("zeroeng");
if (dist.rank === 0) dist.allReduce(tensor.ones([4])).wait(); else { const t = Date.now(); while (Date.now() - t < 3000) {} }`,
			dist.Options{Timeout: 300 * time.Millisecond}, []string{"allReduce #0 of group 0 timed out after 300ms: rank 1 did not call it"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			_, err := runJob(t, 2, c.src, c.opts)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the job took %v to stop", d)
			}
			var re *RankError
			if !errors.As(err, &re) {
				t.Fatalf("error %v, want a rank's error", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// ddpScript trains an MLP for three steps on its rank's share of a fixed
// batch of 12 and prints the parameters' sum; with one rank it is the
// reference. HOOK is replaced by a registerCommHook call or nothing.
const ddpScript = `const { tensor, nn, optim, dist } = require("zeroeng");
tensor.manualSeed(dist.rank); // different weights: DDP broadcasts rank 0's
const model = nn.DistributedDataParallel(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)), OPTIONS);
HOOK
const opt = optim.SGD(model.parameters(), { lr: 0.5, momentum: 0.9 });
const x = tensor.randn([12, 6], { seed: 5 });
const y = tensor.fromArray([0, 1, 2, 0, 1, 2, 2, 1, 0, 2, 1, 0]);
const per = 12 / dist.worldSize, lo = dist.rank * per;
for (let step = 0; step < 3; step++) {
  opt.zeroGrad();
  if (ACCUMULATE) {
    model.noSync(() => nn.functional.crossEntropy(model.forward(x.narrow(0, lo, per / 2)), y.narrow(0, lo, per / 2)).mul(0.5).backward());
    nn.functional.crossEntropy(model.forward(x.narrow(0, lo + per / 2, per / 2)), y.narrow(0, lo + per / 2, per / 2)).mul(0.5).backward();
  } else {
    nn.functional.crossEntropy(model.forward(x.narrow(0, lo, per)), y.narrow(0, lo, per)).backward();
  }
  opt.step();
}
const names = model.namedParameters().map(([n]) => n).join(",");
console.log(names, model.parameters().map(p => p.sum().item().toFixed(5)).join(" "));
`

func TestDDPFromJS(t *testing.T) {
	// nn.parallel.DistributedDataParallel and dist.DistributedDataParallel are the same.
	script := strings.ReplaceAll(ddpScript, "nn.DistributedDataParallel", "nn.parallel.DistributedDataParallel")
	ref := strings.NewReplacer("OPTIONS", "{}", "HOOK", "", "ACCUMULATE", "false").Replace(script)
	want, err := runJob(t, 1, ref, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(want[0], "module.0.weight,module.0.bias,module.2.weight,module.2.bias ") {
		t.Fatalf("names: %s", want[0])
	}
	for _, c := range []struct{ name, options, hook, accumulate string }{
		{"default", "{}", "", "false"},
		{"views and small buckets", "{ gradientAsBucketView: true, bucketCapMB: 0.0005, firstBucketCapMB: 0.0002 }", "", "false"},
		{"noSync accumulation", "{}", "", "true"},
		{"static graph", "{ staticGraph: true, bucketCapMB: 0.0005 }", "", "false"},
		{"JavaScript hook", "{}", `model.registerCommHook({ calls: 0 }, (state, bucket) => {
  state.calls++;
  return dist.allReduce(bucket.buffer.div(dist.worldSize)).then(t => t);
});`, "false"},
		{"built-in allreduce hook", "{}", "model.registerCommHook(null, dist.commHooks.allreduceHook);", "false"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.NewReplacer("OPTIONS", c.options, "HOOK", c.hook, "ACCUMULATE", c.accumulate, "nn.DistributedDataParallel", "dist.DistributedDataParallel").Replace(ddpScript)
			got, err := runJob(t, 2, src, dist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for rank, line := range got {
				if line != fmt.Sprintf("[%d] %s", rank, want[0]) {
					t.Errorf("rank %d printed %q; one rank on the whole batch %q", rank, line, want[0])
				}
			}
		})
	}
}

// TestDDPBuiltinHooksFromJS: the compressing hooks change the numbers, so
// the check is that they run and that every rank ends with the same
// parameters; PowerSGD before its start iteration is the plain all-reduce.
func TestDDPBuiltinHooksFromJS(t *testing.T) {
	ref := strings.NewReplacer("OPTIONS", "{}", "HOOK", "", "ACCUMULATE", "false", "nn.DistributedDataParallel", "dist.DistributedDataParallel").Replace(ddpScript)
	want, err := runJob(t, 1, ref, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, hook string }{
		{"fp16", "model.registerCommHook(null, dist.commHooks.fp16CompressHook);"},
		{"bf16", "model.registerCommHook(null, dist.commHooks.bf16CompressHook);"},
		{"fp16 wrapper around a JavaScript hook", `model.registerCommHook(null, dist.commHooks.fp16CompressWrapper(
  (state, bucket) => dist.allReduce(bucket.buffer.div(dist.worldSize))));`},
		{"PowerSGD", "model.registerCommHook(dist.commHooks.PowerSGDState({ startPowerSGDIter: 2, matrixApproximationRank: 1 }), dist.commHooks.powerSGDHook);"},
		{"PowerSGD before its start", "model.registerCommHook(dist.commHooks.PowerSGDState({}), dist.commHooks.powerSGDHook);"},
		{"batched PowerSGD", "model.registerCommHook(dist.commHooks.PowerSGDState({ startPowerSGDIter: 2, matrixApproximationRank: 1 }), dist.commHooks.batchedPowerSGDHook);"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.NewReplacer("OPTIONS", "{}", "HOOK", c.hook, "ACCUMULATE", "false", "nn.DistributedDataParallel", "dist.DistributedDataParallel").Replace(ddpScript)
			got, err := runJob(t, 2, src, dist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimPrefix(got[0], "[0] ") != strings.TrimPrefix(got[1], "[1] ") {
				t.Errorf("the ranks differ:\n%s\n%s", got[0], got[1])
			}
			exact := c.name == "PowerSGD before its start"
			if same := got[0] == "[0] "+want[0]; same != exact {
				t.Errorf("rank 0 printed %q; one rank on the whole batch %q (expected equal: %v)", got[0], want[0], exact)
			}
		})
	}
}

func TestDDPJoinFromJS(t *testing.T) {
	// Rank r has r + 2 batches; every rank ends with the same parameters.
	src := `const { tensor, nn, optim, dist } = require("zeroeng");
tensor.manualSeed(0);
const model = dist.DistributedDataParallel(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)));
const opt = optim.SGD(model.parameters(), { lr: 0.1 });
const x = tensor.randn([4, 4], { seed: dist.rank }), y = tensor.fromArray([0, 1, 1, 0]);
let steps = 0;
model.join(() => {
  for (let i = 0; i < dist.rank + 2; i++) {
    opt.zeroGrad();
    nn.functional.crossEntropy(model.forward(x), y).backward();
    opt.step();
    steps++;
  }
});
console.log(steps, model.parameters().map(p => p.sum().item().toFixed(6)).join(" "));
`
	got, err := runJob(t, 3, src, dist.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	params := func(line string) string { f := strings.Fields(line); return strings.Join(f[2:], " ") }
	for rank, line := range got {
		if !strings.HasPrefix(line, fmt.Sprintf("[%d] %d ", rank, rank+2)) || params(line) != params(got[0]) {
			t.Errorf("rank %d printed %q (rank 0: %q)", rank, line, got[0])
		}
	}
}

// TestPowerSGDStateChecks: PowerSGDState's options are checked when it is
// made, as PyTorch's constructor checks them, and a misspelled key is an
// error naming the key meant.
func TestPowerSGDStateChecks(t *testing.T) {
	runCases(t, []evalCase{
		{"defaults", `const s = dist.commHooks.PowerSGDState(); console.log(JSON.stringify(s.powerSGDOptions))`, "{}", ""},
		{"start 2 with error feedback", `dist.commHooks.PowerSGDState({ startPowerSGDIter: 2 }); console.log("ok")`, "ok", ""},
		{"start 0 without error feedback or warm start", `dist.commHooks.PowerSGDState({ startPowerSGDIter: 0, useErrorFeedback: false, warmStart: false }); console.log("ok")`, "ok", ""},
		{"start 1 with error feedback", `dist.commHooks.PowerSGDState({ startPowerSGDIter: 1, warmStart: false })`, "",
			"startPowerSGDIter must be > 1 when useErrorFeedback or warmStart is on (got 1)"},
		{"start 0 with warm start", `dist.commHooks.PowerSGDState({ startPowerSGDIter: 0, useErrorFeedback: false })`, "",
			"startPowerSGDIter must be > 1 when useErrorFeedback or warmStart is on (got 0)"},
		{"snake_case key", `dist.commHooks.PowerSGDState({ start_powerSGD_iter: 2 })`, "",
			`dist.commHooks.PowerSGDState: unknown option "start_powerSGD_iter" (did you mean startPowerSGDIter?)`},
		{"misspelled key", `dist.commHooks.PowerSGDState({ matrixAproximationRank: 2 })`, "",
			`unknown option "matrixAproximationRank" (did you mean matrixApproximationRank?)`},
		{"rank 0", `dist.commHooks.PowerSGDState({ matrixApproximationRank: 0 })`, "", "matrixApproximationRank must be at least 1, got 0"},
		{"not an object", `dist.commHooks.PowerSGDState(2)`, "", "options must be an object, got 2"},
	})
}

// TestDDPBuffers: a module's buffers start as rank 0's; with
// broadcastBuffers (the default) every forward pass takes rank 0's again,
// without it each rank keeps its own.
func TestDDPBuffers(t *testing.T) {
	src := `const { tensor, nn, dist } = require("zeroeng");
class Counted extends nn.Module {
  constructor() { super(); this.lin = nn.Linear(2, 2); this.registerBuffer("seen", tensor.full([1], 10 * (dist.rank + 1))); }
  forward(x) { this.seen.add_(dist.rank + 1); return this.lin.forward(x); }
}
const report = [];
for (const broadcastBuffers of [true, false]) {
  const m = new Counted();
  const model = nn.parallel.DistributedDataParallel(m, { broadcastBuffers });
  report.push(m.seen.item());
  model.forward(tensor.ones([1, 2])); model.forward(tensor.ones([1, 2]));
  report.push(m.seen.item());
}
console.log(dist.rank, report.join(" "));`
	got, err := runJob(t, 2, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Every rank starts from rank 0's 10; each forward adds rank+1. With
	// broadcastBuffers, rank 1's second forward starts from rank 0's 11.
	want := []string{"[0] 0 10 12 10 12", "[1] 1 10 13 10 14"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestDistJoin: PyTorch's Join context over a model and its
// ZeroRedundancyOptimizer, shadowing the uneven ranks, or stopping them
// all with throwOnEarlyTermination; a misspelled option is an error.
func TestDistJoin(t *testing.T) {
	src := `const { tensor, nn, dist, zero } = require("zeroeng");
tensor.manualSeed(0);
const net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2));
const model = dist.DistributedDataParallel(net);
const opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "sgd", lr: 0.1, logMemory: false });
const x = tensor.randn([4, 4]), y = tensor.fromArray([0, 1, 1, 0]);
const loop = () => { let steps = 0; for (let i = 0; i < dist.rank + 2; i++) {
  opt.zeroGrad(); nn.functional.crossEntropy(model.forward(x), y).backward(); opt.step(); steps++;
} return steps; };
const shadowed = dist.join([model, opt], loop);
let thrown = "none";
try { dist.join([model, opt], loop, { throwOnEarlyTermination: true }); } catch (e) { thrown = e.message.includes("exhausted its inputs") ? "early" : e.message; }
let typo = "none";
try { dist.join([model], loop, { throwOnEarlyTerminaton: true }); } catch (e) { typo = e.message.includes("did you mean throwOnEarlyTermination?") ? "typo" : e.message; }
console.log(dist.rank, shadowed, thrown, typo, net[0].weight.sum().item().toFixed(6));`
	got, err := runJob(t, 3, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var weights []string
	for r, line := range got {
		f := strings.Fields(strings.TrimPrefix(line, fmt.Sprintf("[%d] ", r)))
		if len(f) != 5 || f[1] != fmt.Sprint(r+2) || f[2] != "early" || f[3] != "typo" {
			t.Errorf("rank %d: %s", r, line)
			continue
		}
		weights = append(weights, f[4])
	}
	if len(weights) == 3 && (weights[0] != weights[1] || weights[1] != weights[2]) {
		t.Errorf("the ranks' parameters differ after join: %v", weights)
	}
}

// TestPostLocalSGDFromJS: post-local SGD in subgroups of 2 of 4 ranks with
// a periodic averager: after the last averaging every rank holds the same
// parameters, in between the subgroups differ; the arguments are checked.
func TestPostLocalSGDFromJS(t *testing.T) {
	src := `const { tensor, nn, optim, dist } = require("zeroeng");
tensor.manualSeed(0);
const model = dist.DistributedDataParallel(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)));
const [sub, all] = dist.newSubgroups(2);
model.registerCommHook(dist.commHooks.PostLocalSGDState({ startLocalSGDIter: 1, subgroup: sub }), dist.commHooks.postLocalSGDHook);
const averager = dist.PeriodicModelAverager({ period: 3 });
const opt = optim.SGD(model.parameters(), { lr: 0.1 });
const x = tensor.randn([4, 4], { seed: dist.rank }), y = tensor.fromArray([0, 1, 1, 0]);
const sums = [];
for (let i = 0; i < 4; i++) {
  opt.zeroGrad(); nn.functional.crossEntropy(model.forward(x), y).backward(); opt.step();
  averager.averageParameters(model.parameters());
  sums.push(model.module[0].weight.sum().item().toFixed(6));
}
const errs = [];
for (const f of [() => dist.PeriodicModelAverager({ period: 0 }), () => dist.PeriodicModelAverager({ periods: 2 }),
                 () => dist.commHooks.PostLocalSGDState({ subgroup: sub }), () => dist.newSubgroups(3)]) {
  try { f(); errs.push("none"); } catch (e) { errs.push(e.constructor.name); }
}
console.log(dist.rank, all.length, sub.size, averager.step, sums.join(" "), errs.join(" "));`
	got, err := runJob(t, 4, src, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fields := make([][]string, len(got))
	for r, line := range got {
		fields[r] = strings.Fields(strings.TrimPrefix(line, fmt.Sprintf("[%d] ", r)))
		if len(fields[r]) != 12 || fields[r][1] != "2" || fields[r][2] != "2" || fields[r][3] != "4" ||
			strings.Join(fields[r][8:], " ") != "RangeError TypeError TypeError RangeError" {
			t.Fatalf("rank %d: %s", r, line)
		}
	}
	// Steps 1 and 4 (0-based 0 and 3) are averaged over every rank; steps
	// 2 and 3 only within each subgroup.
	for step, averaged := range []bool{true, false, false, true} {
		a, b, c := fields[0][4+step], fields[1][4+step], fields[2][4+step]
		if a != b || (a == c) != averaged {
			t.Errorf("step %d: ranks 0, 1, 2 have %s %s %s (averaged over all: %v)", step+1, a, b, c, averaged)
		}
	}
}

// TestProcessExitOnOneRank: process.exit(0) on one rank ends that rank as
// the end of its script does: a rank that then waits for it in a
// collective fails at once, naming it; when every rank exits so, the job
// ends with status 0. A non-zero exit stops every rank with that status.
func TestProcessExitOnOneRank(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      string // in the error; "" for an exit with status 0
		code      int
	}{
		{"one rank leaves", `if (dist.rank === 1) process.exit(0);
for (let i = 0; i < 3; i++) dist.allReduce(tensor.ones([2])).wait();`, "rank 1 ended its program without calling allReduce", -1},
		{"every rank leaves", `dist.allReduce(tensor.ones([2])).wait(); process.exit(0);`, "", 0},
		{"one rank fails", `if (dist.rank === 1) process.exit(3);
for (;;) dist.allReduce(tensor.ones([2])).wait();`, "", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := runJob(t, 2, `const { tensor, dist } = require("zeroeng");
`+c.src, dist.Options{})
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the job did not end")
			}
			var se *Error
			switch {
			case c.want != "":
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("err = %v, want %q", err, c.want)
				}
			case !errors.As(err, &se) || se.Exit == nil || se.Exit.Code != c.code:
				t.Errorf("err = %v, want process.exit(%d)", err, c.code)
			}
		})
	}
}

// TestHookFailureInTheLastBackward: a comm hook that fails in the last
// backward pass of a script, whose gradients nothing reads afterwards,
// fails the job at the script's end instead of being lost.
func TestHookFailureInTheLastBackward(t *testing.T) {
	src := `const { tensor, nn, dist } = require("zeroeng");
const model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2));
model.registerCommHook(null, (state, bucket) => { throw new Error("the hook gives up"); });
model.forward(tensor.ones([2, 4])).sum().backward();`
	_, err := runJob(t, 2, src, dist.Options{})
	if err == nil || !strings.Contains(err.Error(), "after the script's end") || !strings.Contains(err.Error(), "the hook gives up") {
		t.Fatalf("err = %v", err)
	}
}
