package script

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// traceJob runs src on ranks in-process ranks with tracing on and returns
// the trace as written, checked for well-formedness.
func traceJob(t *testing.T, ranks int, src string, opts dist.Options) *trace.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.js")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := trace.New(trace.Options{})
	var out bytes.Buffer
	err := RunJob(context.Background(), path, JobOptions{Ranks: ranks, Dist: opts,
		Rank: Options{Stdout: &out, Stderr: &out, AutoRelease: true, Trace: rec}})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var b bytes.Buffer
	if _, err := rec.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	f, err := trace.Decode(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	return f
}

// overlapUS is how long, in microseconds, the intervals of a and b overlap
// in total.
func overlapUS(a, b []trace.FileEvent) float64 {
	total := 0.0
	for _, x := range a {
		for _, y := range b {
			total += max(0, min(x.End(), y.End())-max(x.TS, y.TS))
		}
	}
	return total
}

// The MLP of samples/zero_overlap.js, smaller, in buckets of about one
// layer, trained for three steps on an emulated 1 Gbit/s link (each
// bucket's all-reduce takes milliseconds). MODE is the variant.
const traceMLP = `const { tensor, nn, optim, dist, zero, trace } = require("zeroeng");
tensor.manualSeed(0);
const net = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 64));
MODE
tensor.manualSeed(10 + dist.rank);
for (let step = 0; step < 3; step++) {
  const x = trace.span("data", () => tensor.randn([16, 64]));
  const loss = nn.functional.mseLoss(model.forward(x), x);
  opt.zeroGrad();
  loss.backward();
  AFTER
  opt.step();
}
`

// THE overlap check: with ZeRO's step overlapped with DDP's backward
// (schedule B), every rank's gradient all-reduces run while its backward
// pass does; without DDP, reducing the gradients after backward, they
// never do. Both read the trace file the job writes.
func TestTraceOverlap(t *testing.T) {
	net := dist.NetModel{Bandwidth: 1e9 / 8, Latency: 50e3}
	overlap := strings.NewReplacer("MODE", `const model = nn.parallel.DistributedDataParallel(net, { bucketCapMB: 0.25, firstBucketCapMB: 0.05 });
const opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "adamw", lr: 1e-3, overlapWithDDP: true, logMemory: false });
model.registerCommHook(null, zero.hookWithZeroStepInterleaved(dist.commHooks.allreduceHook, model, opt, { shardBuckets: true }));`,
		"AFTER", "").Replace(traceMLP)
	f := traceJob(t, 2, overlap, dist.Options{Net: net})
	for rank := range 2 {
		backward := f.Intervals(rank, "compute", "backward")
		forward := f.Intervals(rank, "compute", "forward")
		reduces := f.Intervals(rank, "comm", "all_reduce")
		if len(backward) != 3 || len(forward) != 3 {
			t.Fatalf("rank %d: %d backward and %d forward intervals, want 3 of each", rank, len(backward), len(forward))
		}
		for i := range forward {
			if forward[i].End() > backward[i].TS {
				t.Errorf("rank %d: forward %d ends at %v, after its backward starts at %v", rank, i, forward[i].End(), backward[i].TS)
			}
		}
		if len(reduces) < 3*3 {
			t.Fatalf("rank %d: %d all-reduces, want at least one per bucket per step", rank, len(reduces))
		}
		// Under schedule B every bucket's reduction completes inside
		// backward (the update of bucket k waits for it there).
		inside := 0
		for _, c := range reduces {
			for _, b := range backward {
				if c.TS >= b.TS && c.End() <= b.End() && c.Dur > 0 {
					inside++
				}
			}
		}
		if inside != len(reduces) {
			t.Errorf("rank %d: %d of %d all-reduces lie inside a backward pass, want all", rank, inside, len(reduces))
		}
		if ov := overlapUS(backward, f.Intervals(rank, "comm", "")); ov <= 0 {
			t.Errorf("rank %d: communication does not overlap backward", rank)
		}
		for lane, name := range map[string]string{"hook": "comm hook", "optimizer": "zero update", "user": "data"} {
			if len(f.Intervals(rank, lane, name)) < 3 {
				t.Errorf("rank %d: fewer than 3 %q intervals on lane %s", rank, name, lane)
			}
		}
		// The schedule's events, and its actions inside them.
		for _, name := range []string{"iterationBegin", "bucketReady(1)", "wait(0)", "step(0)", "broadcast(0)", "bucketReduced(0)", "backwardEnd"} {
			if len(f.Intervals(rank, "schedule", name)) != 3 {
				t.Errorf("rank %d: %d %q intervals on the schedule lane, want 3", rank, len(f.Intervals(rank, "schedule", name)), name)
			}
		}
		for _, b := range f.Intervals(rank, "comm", "broadcast") {
			if b.Args["bytes"] == nil || b.Args["bytes"].(float64) <= 0 {
				t.Errorf("rank %d: broadcast without bytes: %+v", rank, b)
			}
		}
	}

	// No DDP: the script reduces every gradient after backward and waits.
	after := strings.NewReplacer("MODE", `const model = net;
const opt = optim.AdamW(net.parameters(), { lr: 1e-3 });`,
		"AFTER", `net.parameters().map(p => dist.allReduce(p.grad, "avg")).forEach(w => w.wait());`).Replace(traceMLP)
	f = traceJob(t, 2, after, dist.Options{Net: net})
	for rank := range 2 {
		backward := f.Intervals(rank, "compute", "backward")
		comm := f.Intervals(rank, "comm", "")
		if len(backward) != 3 || len(comm) != 3*6 {
			t.Fatalf("rank %d: %d backward passes and %d collectives, want 3 and 18", rank, len(backward), len(comm))
		}
		if ov := overlapUS(backward, comm); ov != 0 {
			t.Errorf("rank %d: collectives issued after backward overlap it by %v µs", rank, ov)
		}
		if len(f.Intervals(rank, "optimizer", "optimizer step")) != 3 {
			t.Errorf("rank %d: optimizer steps missing", rank)
		}
	}
}

// Without a trace the API is there and does nothing; the device and memory
// helpers work either way.
func TestTraceAndDeviceFromJS(t *testing.T) {
	src := `const { tensor, nn, optim, trace, device, dist } = require("zeroeng");
const v = trace.span("outer", () => trace.span("inner", () => 41) + 1);
if (v !== 42) throw new Error("span returned " + v);
let threw = false;
try { trace.span("fails", () => { throw new Error("inside"); }); } catch (e) { threw = e.message === "inside"; }
if (!threw) throw new Error("span swallowed the exception");
const base = device.memoryAllocated();
device.resetPeakMemoryStats();
if (device.maxMemoryAllocated() !== base) throw new Error("reset: peak " + device.maxMemoryAllocated() + " live " + base);
let big = tensor.zeros([1000, 250]).keep();
const withBig = device.memoryAllocated();
big.release();
if (withBig - base !== 1e6) throw new Error("a 1 MB tensor adds " + (withBig - base));
if (device.maxMemoryAllocated() < base + 1e6 || device.memoryAllocated() !== base) throw new Error("peak " + device.maxMemoryAllocated());
const net = nn.Linear(10, 4);
const opt = optim.AdamW(net.parameters(), { lr: 0.1 });
let m = opt.memory();
if (m.parameters !== 4 * 44 || m.gradients !== 0 || m.optimizerState !== 0) throw new Error("before: " + JSON.stringify(m));
net.forward(tensor.ones([2, 10])).sum().backward();
opt.step();
m = opt.memory();
if (m.gradients !== 4 * 44 || m.optimizerState < 2 * 4 * 44 || m.total !== m.parameters + m.gradients + m.optimizerState) throw new Error("after: " + JSON.stringify(m));
const p = device.properties();
if (device.type !== "cpu" || p.type !== "cpu" || p.sharedBy !== dist.worldSize) throw new Error(JSON.stringify(p));
if (!(device.peakFlops() > 0 && device.peakFlops("float64") === device.peakFlops() / 2 && device.peakFlops("int64") === 0)) throw new Error("peak " + device.peakFlops());
if (device.peakFlops() !== p.peakFlops || !p.peakFlopsNote.includes("estimate")) throw new Error(JSON.stringify(p));
const before = dist.commTime();
dist.allReduce(tensor.ones([4])).wait();
if (!(dist.commTime() > before)) throw new Error("commTime " + before + " → " + dist.commTime());
console.log(trace.enabled, p.peakFlops);
`
	for _, traced := range []bool{false, true} {
		var rec *trace.Recorder
		if traced {
			rec = trace.New(trace.Options{})
		}
		path := filepath.Join(t.TempDir(), "job.js")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := RunJob(context.Background(), path, JobOptions{Ranks: 2, Rank: Options{AutoRelease: true, Trace: rec, Stdout: &out, Stderr: &out}})
		if err != nil {
			t.Fatalf("traced=%v: %v\n%s", traced, err, out.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		slices.Sort(lines)
		peak := strings.Fields(lines[0])[2]
		if want := fmt.Sprintf("[0] %v %s\n[1] %v %s", traced, peak, traced, peak); strings.Join(lines, "\n") != want {
			t.Errorf("output %q, want %q (trace.enabled and the same peak on both ranks)", lines, want)
		}
		kept, _ := rec.Len()
		if !traced {
			continue
		}
		if kept == 0 {
			t.Fatal("nothing recorded")
		}
		var b bytes.Buffer
		rec.WriteTo(&b)
		f, err := trace.Decode(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Check(); err != nil {
			t.Error(err)
		}
		for rank := range 2 {
			outer, inner, fails := f.Intervals(rank, "user", "outer"), f.Intervals(rank, "user", "inner"), f.Intervals(rank, "user", "fails")
			if len(outer) != 1 || len(inner) != 1 || len(fails) != 1 || inner[0].TS < outer[0].TS || inner[0].End() > outer[0].End() {
				t.Errorf("rank %d: user spans outer %v inner %v fails %v", rank, outer, inner, fails)
			}
			if len(f.Intervals(rank, "optimizer", "optimizer step")) != 1 || len(f.Intervals(rank, "compute", "backward")) != 1 {
				t.Errorf("rank %d: no optimizer step or backward", rank)
			}
			if ar := f.Intervals(rank, "comm", "all_reduce"); len(ar) != 1 || ar[0].Args["bytes"] != 16.0 {
				t.Errorf("rank %d: all-reduces %+v", rank, ar)
			}
		}
	}
}

// Progress lines show the fields beyond loss and samples.
func TestProgressExtraFields(t *testing.T) {
	out, err := runScript(t, t.TempDir(), "bar.js", `const { progress, tensor } = require("zeroeng");
const bar = progress.bar({ total: 2 });
bar.update(1, { loss: 0.5, mfu: "31.2%", comm_ms: 12.3456, gnorm: tensor.fromArray([2]).sum(), skipped: undefined, flag: {} });
bar.done();
`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "1/2  50%  loss 0.5  mfu 31.2%  comm_ms 12.35  gnorm 2  ") {
		t.Errorf("line %q", out)
	}
}
