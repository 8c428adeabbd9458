package script

import (
	"fmt"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// stage2Opt is a stage-2 ZeroRedundancyOptimizer over small buckets (the
// model's four parameters in three of them), with EXTRA options.
const stage2Opt = `opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", lr: 0.01, logMemory: false, stage: 2, bucketCapMB: 0.0001EXTRA })`

// TestZeroStage2ScheduleFromJS: a stage-2 ZeroRedundancyOptimizer with
// the schedule option steps and all-gathers during backward and trains
// bit for bit as plain stage 2, with the built-ins and with a schedule
// written in JavaScript; the parameters read right after backward are
// already the updated ones.
func TestZeroStage2ScheduleFromJS(t *testing.T) {
	run := func(t *testing.T, n int, extra, step string) []string {
		t.Helper()
		src := strings.NewReplacer("WRAP", "model = net", "OPT", strings.Replace(stage2Opt, "EXTRA", extra, 1),
			"SETUP", "", "CHECK", "", "STEP", step).Replace(zeroScript)
		out, err := runJob(t, n, src, dist.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The parameters read after backward, before step, are those step
	// leaves: with a schedule nothing is left for step to do.
	readEarly := `opt.zeroGrad();
  nn.functional.crossEntropy(model.forward(x), y).backward();
  const early = JSON.stringify(net.parameters().map(p => p.toArray()));
  opt.step();
  if (JSON.stringify(net.parameters().map(p => p.toArray())) !== early) throw new Error("step " + step + " changed the parameters after backward");`
	for _, n := range []int{2, 4} {
		want := run(t, n, "", plainStep)
		for _, c := range []struct{ name, schedule string }{
			{"asReduced", "zero.schedules.asReduced"},
			{"afterBackward", "zero.schedules.afterBackward"},
			{"interleaved", "zero.schedules.interleaved"},
			{"a JavaScript schedule", `zero.schedule({ name: "mine",
  iterationBegin(ctx) { if (ctx.numBuckets !== 3 || ctx.worldSize !== dist.worldSize) throw new Error("ctx"); },
  bucketReady(ctx, i) {
    const b = ctx.bucket(i);
    if (b.owners.some(o => o !== -1) || b.slice.end - b.slice.start !== b.numel / ctx.worldSize || b.slice.start !== ctx.rank * (b.slice.end - b.slice.start))
      throw new Error("bucket " + JSON.stringify(b));
    if (i > 0) ctx.wait(i - 1);
  },
  bucketReduced(ctx, i) { if (!ctx.reduced(i)) throw new Error("not reduced"); ctx.step(i); ctx.allGather(i); } })`},
			{"a JavaScript schedule leaving everything to the end", `zero.schedule({ name: "lazy" })`},
		} {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				got := run(t, n, ", schedule: "+c.schedule, readEarly)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("with the schedule\n%s\nplain stage 2\n%s", got, want)
				}
			})
		}
	}
}

// TestZeroStage2ScheduleErrorsFromJS: the schedule option is stage 2's,
// a schedule's mistakes are errors naming it, the event and the bucket,
// and what needs the whole gradient before the step is refused.
func TestZeroStage2ScheduleErrorsFromJS(t *testing.T) {
	scaler := `const amp = require("zeroeng").amp, scaler = amp.GradScaler({ initScale: 1024 });`
	for _, c := range []struct{ opt, setup, step, want string }{
		{", schedule: { bucketReady() {} }", "", plainStep, "schedule must be made by zero.schedule({...}) or be one of zero.schedules, got"},
		{", schedule: zero.schedules.asReduced, stage: 1", "", plainStep, "a schedule under stage 1 runs in the DDP comm hook"},
		{", schedule: zero.schedules.asReduced, stage: 3", "", plainStep, "stage 3 keeps its built-in order"},
		{", schedule: zero.schedules.asReduced, offload: \"cpu\"", "", plainStep, "a schedule with offload"},
		{", strictSchedule: true", "", plainStep, "strictSchedule without a schedule"},
		{", schedule: zero.schedule({ name: \"owners\", assign(buckets) { return null; } })", "", plainStep,
			"zero: schedule owners assigns owners, but under stage 2 every rank steps its slice of every bucket: assign is stage 1's"},
		{", schedule: zero.schedule({ name: \"lazy\" }), strictSchedule: true", "", plainStep,
			"schedule lazy (strict), rank * iteration 1: bucket(s) [0 1 2] were not stepped and all-gathered by the end of backward"},
		{`, schedule: zero.schedule({ name: "sender", bucketReduced(ctx, i) { ctx.step(i); ctx.broadcast(i); } })`, "", plainStep,
			"schedule sender, bucketReduced(0), rank * iteration 1: * ctx.broadcast: broadcast(0): under stage 2 each rank steps a slice of the bucket and the slices are all-gathered: use allGather(0)"},
		{`, schedule: zero.schedule({ name: "boom", bucketReady(ctx, i) { if (i === 2) throw new Error("no step today"); } })`, "", plainStep,
			"schedule boom, bucketReady(2), rank * iteration 1: * no step today"},
		{`, schedule: zero.schedule({ name: "stepper", bucketReady(ctx, i) { opt.step(); } })`, "", plainStep,
			"schedule stepper, bucketReady(0), rank * iteration 1: * zero: step() inside an event of schedule stepper"},
		{", schedule: zero.schedules.asReduced", "", `opt.zeroGrad();
  nn.functional.crossEntropy(model.forward(x), y).backward();
  nn.utils.clipGradNorm_(model.parameters(), 1.0);
  opt.step();`, "nn.utils.clipGradNorm_: clipping needs the norm of the whole gradient before the step, but this model's ZeroRedundancyOptimizer steps inside backward (stage 2, schedule asReduced): its parameters are updated before backward returns. Use it without the schedule option"},
		{", schedule: zero.schedules.asReduced", "", `opt.zeroGrad();
  nn.functional.crossEntropy(model.forward(x), y).backward();
  opt.clipGradNorm_(1.0);`, "zero: clipGradNorm: clipping needs the norm of the whole gradient before the step, but this ZeroRedundancyOptimizer steps inside backward (stage 2, schedule asReduced)"},
		{", schedule: zero.schedules.interleaved", scaler, `opt.zeroGrad();
  scaler.scale(nn.functional.crossEntropy(model.forward(x), y)).backward();
  scaler.step(opt);
  scaler.update();`, "GradScaler.step: a GradScaler checks the whole gradient for inf and NaN before the step (and unscales it), but this model's ZeroRedundancyOptimizer steps inside backward (stage 2, schedule interleaved)"},
	} {
		t.Run(c.want, func(t *testing.T) {
			src := strings.NewReplacer("WRAP", "model = net", "OPT", strings.Replace(stage2Opt, "EXTRA", c.opt, 1),
				"SETUP", c.setup, "CHECK", "", "STEP", c.step).Replace(zeroScript)
			_, err := runJob(t, 2, src, dist.Options{})
			// "*" stands for the rank, or the place in the script.
			for _, part := range strings.Split(c.want, "*") {
				if err == nil || !strings.Contains(err.Error(), part) {
					t.Fatalf("error %v, want one with %q", err, c.want)
				}
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}

// TestTraceStage2Schedule: under stage 2 with asReduced the schedule lane
// shows the events and the actions, and the steps of the first buckets
// run inside backward (the bound on the reduce-scatters in flight retires
// bucket 0 when bucket 2 is launched, before the first layer's backward).
func TestTraceStage2Schedule(t *testing.T) {
	src := strings.NewReplacer("MODE", `const model = net;
const opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", lr: 1e-3, logMemory: false, stage: 2, bucketCapMB: 0.02, schedule: zero.schedules.asReduced });`,
		"AFTER", "").Replace(traceMLP)
	f := traceJob(t, 2, src, dist.Options{})
	for rank := range 2 {
		backward := f.Intervals(rank, "compute", "backward")
		if len(backward) != 3 {
			t.Fatalf("rank %d: %d backward intervals, want 3", rank, len(backward))
		}
		for _, name := range []string{"iterationBegin", "bucketReady(0)", "bucketReduced(0)", "wait(0)", "step(0)", "allGather(0)", "backwardEnd",
			"bucketReady(5)", "bucketReduced(5)", "step(5)", "allGather(5)"} {
			if got := len(f.Intervals(rank, "schedule", name)); got != 3 {
				t.Errorf("rank %d: %d %q intervals on the schedule lane, want 3", rank, got, name)
			}
		}
		if got := len(f.Intervals(rank, "optimizer", "zero update")); got != 3*6 {
			t.Errorf("rank %d: %d zero updates on the optimizer lane, want one per bucket per step (18)", rank, got)
		}
		for i, s := range f.Intervals(rank, "schedule", "step(0)") {
			if s.TS < backward[i].TS || s.End() > backward[i].End() {
				t.Errorf("rank %d: step %d: bucket 0's step [%v, %v] is outside backward [%v, %v]", rank, i, s.TS, s.End(), backward[i].TS, backward[i].End())
			}
		}
	}
}
