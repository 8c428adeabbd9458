package script

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// interleavedScheduleWAT is PyTorch's interleaved schedule as a Wasm step
// schedule (docs/wasm-schedule-abi.md).
const interleavedScheduleWAT = `(module
  (import "zeroeng" "sched_info" (func $info (param i32) (result i32)))
  (import "zeroeng" "sched_step_and_broadcast" (func $sab (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "zeroeng_sched_abi_v1"))
  (func (export "on_bucket_ready") (param $b i32) (result i32)
    (if (i32.gt_s (local.get $b) (i32.const 0)) (then (return (call $sab (i32.sub (local.get $b) (i32.const 1))))))
    (i32.const 0))
  (func (export "on_backward_end") (result i32)
    (if (call $info (i32.const 0)) (then unreachable))
    (call $sab (i32.sub (i32.load (i32.const 0)) (i32.const 1)))))`

// lagKJS is samples/schedules/lag_k.c in JavaScript.
const lagKJS = `zero.schedule({ name: "lag-K",
  iterationBegin(ctx) { this.next = 0; },
  bucketReady(ctx, i) { for (; i - this.next >= K; this.next++) ctx.stepAndBroadcast(this.next); },
  backwardEnd(ctx) { for (; this.next < ctx.numBuckets; this.next++) ctx.stepAndBroadcast(this.next); } })`

// TestZeroWasmScheduleFromJS: a Wasm step schedule given to
// zero.hookWithZeroSchedule by hooks.wasmSchedule trains bit for bit as
// the same schedule in JavaScript, on 2 ranks: interleaved in WAT, and the
// C sample lag_k with its configuration from the script's options; and
// what goes wrong (the schedule's misuse, a hook given as a schedule, an
// unknown option, onError, a missing file) is an error that says so.
func TestZeroWasmScheduleFromJS(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, wasm []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, wasm, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	interleaved := write("interleaved.wasm", hookbuild.WAT(t, interleavedScheduleWAT))
	early := write("early.wasm", hookbuild.WAT(t, `(module
  (import "zeroeng" "sched_step" (func $step (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "zeroeng_sched_abi_v1"))
  (func (export "on_bucket_ready") (param $b i32) (result i32) (call $step (i32.add (local.get $b) (i32.const 1)))))`))
	hook := write("hook.wasm", hookbuild.WAT(t, `(module
  (memory (export "memory") 1)
  (func (export "zeroeng_hook_abi_v1"))
  (func (export "on_bucket") (param i32) (result i32) (i32.const 0)))`))

	ddpWrap := "model = nn.parallel.DistributedDataParallel(net, { bucketCapMB: 0.0002, firstBucketCapMB: 0.0001 })"
	zopt := `opt = zero.ZeroRedundancyOptimizer(net.parameters(), { optimizer: "adamw", lr: 0.01, logMemory: false, overlapWithDDP: true })`
	run := func(t *testing.T, schedule string) ([]string, error) {
		t.Helper()
		setup := "const { hooks } = require(\"zeroeng\");\nmodel.registerCommHook(null, zero.hookWithZeroSchedule(dist.commHooks.allreduceHook, model, opt, " + schedule + "));"
		src := strings.NewReplacer("WRAP", ddpWrap, "OPT", zopt, "SETUP", setup, "CHECK", "", "STEP", plainStep).Replace(zeroScript)
		return runJob(t, 2, src, dist.Options{})
	}
	same := func(t *testing.T, wasm, js string) {
		t.Helper()
		want, err := run(t, js)
		if err != nil {
			t.Fatal(err)
		}
		out, err := run(t, wasm)
		if err != nil {
			t.Fatal(err)
		}
		var got []string // less the module's own lines
		for _, line := range out {
			if !strings.Contains(line, ".wasm: ") {
				got = append(got, line)
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("the Wasm schedule's parameters\n%s\nthe script's\n%s", got, want)
		}
	}
	t.Run("interleaved", func(t *testing.T) {
		same(t, "hooks.wasmSchedule("+strconv.Quote(interleaved)+")",
			`zero.schedule({ bucketReady(ctx, i) { if (i > 0) ctx.stepAndBroadcast(i - 1); }, backwardEnd(ctx) { ctx.stepAndBroadcast(ctx.numBuckets - 1); } })`)
	})
	t.Run("lag_k", func(t *testing.T) {
		lagK := write("lag_k.wasm", hookbuild.ScheduleSample(t, "lag_k"))
		for _, k := range []string{"2", "3"} {
			same(t, "hooks.wasmSchedule("+strconv.Quote(lagK)+", { config: { k: "+k+" }, timeoutMs: 60000, memoryLimitMB: 64 })",
				strings.ReplaceAll(lagKJS, "K", k))
		}
	})
	for _, c := range []struct{ name, schedule, want string }{
		{"misuse", "hooks.wasmSchedule(" + strconv.Quote(early) + ")",
			// RANK: either rank may be the first to fail.
			"zero: schedule early.wasm, bucketReady(0), rank RANK, iteration 1: on_bucket_ready: host call sched_step: ERR_ORDER: bucket 1 is not ready yet"},
		{"a hook", "hooks.wasmSchedule(" + strconv.Quote(hook) + ")",
			"wasm schedule hook.wasm does not follow the zeroeng schedule ABI v1:\n  no schedule ABI marker: it exports zeroeng_hook_abi_v1, the marker of a zeroeng hook"},
		{"onError", "hooks.wasmSchedule(" + strconv.Quote(interleaved) + ", { onError: 'fallback' })",
			`hooks.wasmSchedule: unknown option "onError"`},
		{"a misspelt option", "hooks.wasmSchedule(" + strconv.Quote(interleaved) + ", { timeoutMS: 5 })",
			`hooks.wasmSchedule: unknown option "timeoutMS" (did you mean timeoutMs?)`},
		{"a time limit out of range", "hooks.wasmSchedule(" + strconv.Quote(interleaved) + ", { timeoutMs: -1 })",
			"hooks.wasmSchedule: timeoutMs must be a number of milliseconds from 0"},
		{"a missing file", "hooks.wasmSchedule(" + strconv.Quote(filepath.Join(dir, "none.wasm")) + ")", "wasm schedule: "},
		{"a path that is not a string", "hooks.wasmSchedule(7)", "hooks.wasmSchedule(path, options): path must be the .wasm file's path, got number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := run(t, c.schedule)
			for _, w := range strings.Split(c.want, "RANK") {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("error %v, want one with %q", err, w)
				}
			}
		})
	}
}

// TestWasmInstancesMadeAfterTheStop: an instance made after the job's stop
// (interruptHooks: a rank still setting up when another failed) is
// interrupted as it is made, so that a schedule that never returns fails
// at its first call instead of running forever.
func TestWasmInstancesMadeAfterTheStop(t *testing.T) {
	dir := t.TempDir()
	forever := filepath.Join(dir, "forever.wasm")
	if err := os.WriteFile(forever, hookbuild.WAT(t, `(module
  (memory (export "memory") 1)
  (func (export "zeroeng_sched_abi_v1"))
  (func (export "on_backward_end") (result i32) (loop $forever (br $forever)) (i32.const 0)))`), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "job.js")
	src := `const { tensor, nn, dist, zero, hooks } = require("zeroeng");
const net = nn.Linear(4, 2);
const model = nn.parallel.DistributedDataParallel(net);
const opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "sgd", lr: 0.1, overlapWithDDP: true, logMemory: false });
model.registerCommHook(null, zero.hookWithZeroSchedule(dist.commHooks.allreduceHook, model, opt, hooks.wasmSchedule(process.argv[2])));
model.forward(tensor.ones([2, 4])).sum().backward();
opt.step();
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	r, err := New(Options{AutoRelease: true, Args: []string{forever}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.interruptHooks()
	err = r.RunFile(script)
	if err == nil || !strings.Contains(err.Error(), "on_backward_end: cancelled") {
		t.Fatalf("error %v, want the schedule's call cancelled\n%s", err, out.String())
	}
}
