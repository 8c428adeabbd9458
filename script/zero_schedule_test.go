package script

import (
	"fmt"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// TestZeroScheduleFromJS: ZeRO step schedules written in JavaScript
// (zero.schedule, zero.hookWithZeroSchedule): one that does what the
// built-in interleaved schedule does trains bit for bit as it; one that
// does nothing leaves every bucket to the end of backward, bit for bit the
// after-backward schedule; another order (the buckets stepped last first)
// trains as one rank on the whole batch; and a schedule's mistakes are
// errors naming the schedule, the event and the bucket.
func TestZeroScheduleFromJS(t *testing.T) {
	ddpWrap := "model = nn.parallel.DistributedDataParallel(net, { bucketCapMB: 0.0002, firstBucketCapMB: 0.0001 })"
	zopt := `opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", lr: 0.01, logMemory: false, overlapWithDDP: true })`
	run := func(t *testing.T, n int, setup string) ([]string, error) {
		t.Helper()
		src := strings.NewReplacer("WRAP", ddpWrap, "OPT", zopt, "SETUP", setup, "CHECK", "", "STEP", plainStep).Replace(zeroScript)
		return runJob(t, n, src, dist.Options{})
	}
	plain := strings.NewReplacer("WRAP", "model = net", "OPT", `opt = optim.AdamW(net.parameters(), { lr: 0.01 })`, "SETUP", "", "CHECK", "", "STEP", plainStep).Replace(zeroScript)
	one, err := runJob(t, 1, plain, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hook := func(s string) string {
		return "model.registerCommHook(null, zero.hookWithZeroSchedule(dist.commHooks.allreduceHook, model, opt, " + s + "));"
	}
	for _, n := range []int{2, 4} {
		for _, c := range []struct{ name, builtin, mine string }{
			{"interleaved", "model.registerCommHook(null, zero.hookWithZeroStepInterleaved(dist.commHooks.allreduceHook, model, opt));",
				hook(`zero.schedule({ name: "mine", bucketReady(ctx, i) { if (i > 0) ctx.stepAndBroadcast(i - 1); }, backwardEnd(ctx) { ctx.stepAndBroadcast(ctx.numBuckets - 1); } })`)},
			{"nothing is after backward", "model.registerCommHook(null, zero.hookWithZeroStep(dist.commHooks.allreduceHook, model, opt));",
				hook(`zero.schedule({})`)},
			{"the built-ins by name", "model.registerCommHook(null, zero.hookWithZeroStep(dist.commHooks.allreduceHook, model, opt));",
				hook(`zero.schedules.afterBackward`)},
			{"interleaved by wait and bucketReduced", "model.registerCommHook(null, zero.hookWithZeroStepInterleaved(dist.commHooks.allreduceHook, model, opt));",
				hook(`zero.schedule({ name: "by events", bucketReady(ctx, i) { if (i > 0) ctx.wait(i - 1); }, bucketReduced(ctx, i) { if (!ctx.reduced(i)) throw new Error("not reduced"); ctx.step(i); ctx.broadcast(i); } })`)},
			{"steps as reduced, sends left to the end", "model.registerCommHook(null, zero.hookWithZeroStep(dist.commHooks.allreduceHook, model, opt));",
				hook(`zero.schedule({ name: "sends later", bucketReduced(ctx, i) { ctx.step(i); } })`)},
			{"owners assigned by the schedule", "model.registerCommHook(null, zero.hookWithZeroStepInterleaved(dist.commHooks.allreduceHook, model, opt));",
				hook(`zero.schedule({ name: "assigned",
  assign(buckets, world) { return buckets.map((b, i) => b.names.map((_, k) => (i + k + 1) % world)); },
  bucketReady(ctx, i) {
    const owners = ctx.bucket(i).owners;
    owners.forEach((r, k) => { if (r !== (i + k + 1) % ctx.worldSize) throw new Error("bucket " + i + " owners " + owners); });
    if (i > 0) ctx.stepAndBroadcast(i - 1);
  },
  backwardEnd(ctx) { ctx.stepAndBroadcast(ctx.numBuckets - 1); } })`)},
		} {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				want, err := run(t, n, c.builtin)
				if err != nil {
					t.Fatal(err)
				}
				got, err := run(t, n, c.mine)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("the schedule's parameters\n%s\nthe built-in's\n%s", got, want)
				}
			})
		}
		t.Run(fmt.Sprintf("last first/n=%d", n), func(t *testing.T) {
			got, err := run(t, n, hook(`zero.schedule({ name: "last first",
  iterationBegin(ctx) { this.began = (this.began || 0) + 1; if (ctx.iteration !== this.began) throw new Error("iteration " + ctx.iteration); this.ready = 0; },
  bucketReady(ctx, i) { if (i !== this.ready++) throw new Error("bucket " + i + " before " + (this.ready - 1)); },
  backwardEnd(ctx) {
    if (ctx.worldSize !== dist.worldSize || ctx.bucket(0).names.length === 0 || this.ready !== ctx.numBuckets) throw new Error("ctx");
    for (let i = ctx.numBuckets - 1; i >= 0; i--) ctx.stepAndBroadcast(i);
  } })`))
			if err != nil {
				t.Fatal(err)
			}
			for rank, line := range got {
				if err := closeJSON(strings.TrimPrefix(line, fmt.Sprintf("[%d] ", rank)), one[0]); err != nil {
					t.Errorf("rank %d: %v", rank, err)
				}
			}
		})
	}
	for _, c := range []struct{ schedule, want string }{
		{`zero.schedule({ name: "boom", bucketReady(ctx, i) { throw new Error("no step today"); } })`, "schedule boom, bucketReady(0), rank "},
		{`zero.schedule({ name: "boom", bucketReduced(ctx, i) { if (i === 1) throw new Error("no step today"); } })`, "schedule boom, bucketReduced(1), rank "},
		{`zero.schedule({ name: "unsent", backwardEnd(ctx) { ctx.broadcast(0); } })`, "ctx.broadcast: bucket 0 is broadcast before its step"},
		{`zero.schedule({ name: "sent twice", bucketReduced(ctx, i) { ctx.stepAndBroadcast(i); if (i === 0) ctx.broadcast(0); } })`, "bucket 0 was broadcast already"},
		{`zero.schedule({ name: "gather", bucketReduced(ctx, i) { ctx.step(i); ctx.allGather(i); } })`, "under stage 1 each parameter is broadcast from its owner"},
		{`zero.schedule({ name: "wait early", iterationBegin(ctx) { ctx.wait(1); } })`, "schedule wait early, iterationBegin, rank"},
		{`zero.schedule({ name: "lazy" }), { strict: true }`, "schedule lazy (strict), rank"},
		{`zero.schedule({ name: "by rank", backwardEnd(ctx) { for (let k = 0; k < ctx.numBuckets; k++) ctx.stepAndBroadcast(ctx.rank === 0 ? k : ctx.numBuckets - 1 - k); } })`,
			"broadcast the buckets in the order ["},
		{`zero.schedule({}), { strikt: true }`, "strikt"},
		{`zero.schedule({ name: "few", assign(buckets) { return [[0]]; } })`, "zero: schedule few, assign, rank "},
		{`zero.schedule({ name: "short", assign(buckets) { return buckets.map(b => [0]); } })`, "bucket 0 has 2 parameters, got 1 owners"},
		{`zero.schedule({ name: "far", assign(buckets, world) { return buckets.map(b => b.names.map(() => world)); } })`, "owner 2 is not a rank (0 to 1)"},
		{`zero.schedule({ name: "half", assign(buckets) { return buckets.map(b => b.names.map(() => 0.5)); } })`, "assign: bucket 0's owner 0 must be a rank (an integer), got"},
		{`zero.schedule({ name: "text", assign() { return "all mine"; } })`, "assign must return an array"},
		{`zero.schedule({ name: "selfish", assign(buckets) { return buckets.map(b => b.names.map(() => dist.rank)); } })`, "is owned by rank 0 on rank 0 but by rank 1 on rank 1 (every rank must return the same assignment)"},
		{`zero.schedule({ name: "moody", assign(buckets) { return dist.rank === 0 ? buckets.map(b => b.names.map(() => 0)) : undefined; } })`, "disagree on whether to assign"},
		{`zero.schedule({ name: "throws", assign() { throw new Error("no owners today"); } })`, "no owners today"},
		{`zero.schedule({ name: "twice", backwardEnd(ctx) { ctx.stepAndBroadcast(0); ctx.stepAndBroadcast(0); } })`, "bucket 0 was stepped already in this iteration"},
		{`zero.schedule({ name: "early", bucketReady(ctx, i) { if (i === 0) ctx.stepAndBroadcast(1); } })`, "bucket 1 is not ready yet"},
		{`zero.schedule({ name: "far", backwardEnd(ctx) { ctx.stepAndBroadcast(99); } })`, "bucket 99: there are"},
		{`zero.schedule({ bucketReady: 3 })`, "zero.schedule: bucketReady must be a function"},
		{`zero.schedule({ bucketReddy() {} })`, "bucketReddy"},
		{`{ bucketReady() {} }`, "the schedule must be made by zero.schedule"},
	} {
		t.Run(c.want, func(t *testing.T) {
			_, err := run(t, 2, hook(c.schedule))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}

// TestSteppedInBackwardRefusals: what needs the whole gradient before the
// step is refused when a ZeRO overlap hook steps inside backward, whatever
// the schedule: the parameters are updated before backward returns.
func TestSteppedInBackwardRefusals(t *testing.T) {
	hook := `model.registerCommHook(null, zero.hookWithZeroStep(dist.commHooks.allreduceHook, model, opt));
const amp = require("zeroeng").amp, scaler = amp.GradScaler({ initScale: 1024 });`
	for _, c := range []struct{ step, want string }{
		{`opt.zeroGrad();
  nn.functional.crossEntropy(model.forward(x), y).backward();
  nn.utils.clipGradNorm_(model.parameters(), 1.0);
  opt.step();`, "nn.utils.clipGradNorm_: clipping needs the norm of the whole gradient before the step, but this model's ZeroRedundancyOptimizer steps inside backward (overlapWithDDP, schedule afterBackward)"},
		{`opt.zeroGrad();
  scaler.scale(nn.functional.crossEntropy(model.forward(x), y)).backward();
  scaler.step(opt);
  scaler.update();`, "GradScaler.step: a GradScaler checks the whole gradient for inf and NaN before the step"},
		{`opt.zeroGrad();
  nn.functional.crossEntropy(model.forward(x), y).backward();
  opt.clipGradNorm_(1.0);`, "clipGradNorm with overlapWithDDP"},
	} {
		src := strings.NewReplacer("WRAP", "model = nn.parallel.DistributedDataParallel(net, { bucketCapMB: 0.0002, firstBucketCapMB: 0.0001 })",
			"OPT", `opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", lr: 0.01, logMemory: false, overlapWithDDP: true })`,
			"SETUP", hook, "CHECK", "", "STEP", c.step).Replace(zeroScript)
		_, err := runJob(t, 2, src, dist.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one with %q", err, c.want)
		}
	}
}
