package script

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// sampleFile writes a sample hook where a script can load it.
func sampleFile(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".wasm")
	if err := os.WriteFile(path, hookbuild.Sample(t, name), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// averaging is the sample hook that averages the gradients: the Go one,
// or under -short the WAT one (no Go build for wasip1, see
// hookbuild.SkipGoUnderShort).
func averaging() string {
	if testing.Short() {
		return "allreduce_wat"
	}
	return "allreduce"
}

func ddpWith(hook string) string {
	return strings.NewReplacer("OPTIONS", "{}", "HOOK", hook, "ACCUMULATE", "false", "nn.DistributedDataParallel", "dist.DistributedDataParallel").Replace(ddpScript)
}

// TestWasmHookFromJS: hooks.wasm(path) works wherever a comm hook does,
// from registerCommHook with or without a state, inside the bf16 wrapper
// and inside ZeRO's overlap, and gives the numbers of the hook it
// reimplements.
func TestWasmHookFromJS(t *testing.T) {
	allreduce := sampleFile(t, averaging())
	one, err := runJob(t, 1, ddpWith(""), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bf16, err := runJob(t, 2, ddpWith("model.registerCommHook(null, dist.commHooks.bf16CompressHook);"), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, hook string
		want       []string
	}{
		{"alone", `model.registerCommHook(require("zeroeng").hooks.wasm(` + quote(allreduce) + `));`, nil},
		{"with a state", `model.registerCommHook(null, require("zeroeng").hooks.wasm(` + quote(allreduce) + `, { memoryLimitMB: 64 }));`, nil},
		{"WAT", `model.registerCommHook(require("zeroeng").hooks.wasm(` + quote(sampleFile(t, "allreduce_wat")) + `));`, nil},
		{"C codec", `model.registerCommHook(require("zeroeng").hooks.wasm(` + quote(sampleFile(t, "codec_c")) + `));`, bf16},
		{"bf16 wrapper around a Wasm hook", `model.registerCommHook(null, dist.commHooks.bf16CompressWrapper(require("zeroeng").hooks.wasm(` + quote(allreduce) + `)));`, bf16},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := runJob(t, 2, ddpWith(c.hook), dist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for rank, line := range got {
				want := one[0]
				if c.want != nil {
					want = strings.TrimPrefix(c.want[rank], "[0] ")
					want = strings.TrimPrefix(want, "[1] ")
				}
				if strings.TrimPrefix(strings.TrimPrefix(line, "[0] "), "[1] ") != want {
					t.Errorf("rank %d printed %q, want %q", rank, line, want)
				}
			}
		})
	}
}

// TestWasmHookUnderZeroOverlap: a Wasm hook composes with ZeRO's overlap
// schedules like any hook: the same parameters as the built-in hook.
func TestWasmHookUnderZeroOverlap(t *testing.T) {
	path := sampleFile(t, averaging())
	const src = `const { tensor, nn, dist, zero, hooks } = require("zeroeng");
tensor.manualSeed(0);
const model = dist.DistributedDataParallel(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)), { bucketCapMB: 0.0002, firstBucketCapMB: 0.0002 });
const zopt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "AdamW", lr: 0.01, overlapWithDDP: true });
model.registerCommHook(null, zero.SCHEDULE(HOOK, model, zopt));
const x = tensor.randn([12, 6], { seed: 5 });
const y = tensor.fromArray([0, 1, 2, 0, 1, 2, 2, 1, 0, 2, 1, 0]);
const per = 12 / dist.worldSize, lo = dist.rank * per;
for (let step = 0; step < 4; step++) {
  nn.functional.crossEntropy(model.forward(x.narrow(0, lo, per)), y.narrow(0, lo, per)).backward();
  zopt.step();
  zopt.zeroGrad();
}
model.forward(x);
console.log(model.parameters().map(p => p.sum().item().toFixed(6)).join(" "));
`
	for _, schedule := range []string{"hookWithZeroStep", "hookWithZeroStepInterleaved"} {
		run := func(hook string) []string {
			got, err := runJob(t, 2, strings.NewReplacer("SCHEDULE", schedule, "HOOK", hook).Replace(src), dist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		want := run("dist.commHooks.allreduceHook")
		if got := run("hooks.wasm(" + quote(path) + ")"); !slices.Equal(got, want) {
			t.Errorf("%s: the Wasm hook gives\n%q\nthe built-in one\n%q", schedule, got, want)
		}
	}
}

// TestRunHookOption: zeroeng run --hook gives every DDP the hook; a
// script's own registerCommHook still replaces it.
func TestRunHookOption(t *testing.T) {
	hookbuild.SkipGoUnderShort(t, "logstats")
	one, err := runJob(t, 1, ddpWith(""), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "job.js")
	if err := os.WriteFile(path, []byte(ddpWith("")), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = RunJob(context.Background(), path, JobOptions{Ranks: 2, Rank: Options{Stdout: &out, Stderr: &out, AutoRelease: true,
		Hooks: WasmHookOptions{Path: sampleFile(t, "logstats")}}})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, w := range []string{"[0] " + strings.TrimPrefix(one[0], "[0] "), "[1] logstats.wasm: logstats hook ready on rank 1 of 2", "[0] logstats.wasm: step 2 bucket 0"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output does not contain %q:\n%s", w, out.String())
		}
	}
}

// TestWasmHookErrorsFromJS: bad paths, options and modules are script
// errors that say what is wrong, and a failing hook under onError
// "fallback" warns and ends with the built-in hook's parameters.
func TestWasmHookErrorsFromJS(t *testing.T) {
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "notes.wasm")
	os.WriteFile(notWasm, []byte("hello"), 0o644)
	trap := filepath.Join(dir, "trap.wasm")
	os.WriteFile(trap, hookbuild.WAT(t, `(module (memory (export "memory") 1) (func (export "zeroeng_hook_abi_v1"))
		(func (export "on_bucket") (param i32) (result i32) unreachable))`), 0o644)
	for _, c := range []struct{ name, hook, want string }{
		{"missing file", `model.registerCommHook(hooks.wasm("/nonexistent/topk.wasm"));`, "wasm hook: open /nonexistent/topk.wasm: no such file or directory"},
		{"not a path", `model.registerCommHook(hooks.wasm(42));`, "hooks.wasm(path, options): path must be the .wasm file's path, got number"},
		{"not wasm", `model.registerCommHook(hooks.wasm(` + quote(notWasm) + `));`, "wasm hook notes.wasm: not a WebAssembly module"},
		{"bad policy", `model.registerCommHook(hooks.wasm(` + quote(trap) + `, { onError: "retry" }));`, `unknown failure policy "retry" (abort or fallback)`},
		{"config the module cannot take", `model.registerCommHook(hooks.wasm(` + quote(trap) + `, { config: { ratio: 1 } }));`, "the hook was given a configuration, but the module exports no configure"},
		{"trap", `model.registerCommHook(hooks.wasm(` + quote(trap) + `));`, "step 0, bucket 0): trap: wasm error: unreachable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := "const { hooks } = require('zeroeng');\n" + ddpWith(c.hook)
			_, err := runJob(t, 2, src, dist.Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant an error with %q", err, c.want)
			}
		})
	}
	one, err := runJob(t, 1, ddpWith(""), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := runJob(t, 2, "const { hooks } = require('zeroeng');\n"+ddpWith(`model.registerCommHook(hooks.wasm(`+quote(trap)+`, { onError: "fallback" }));`), dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got, "\n")
	if !strings.Contains(joined, "warning: wasm hook trap.wasm failed (wasm hook trap.wasm: on_bucket (rank 0, step 0, bucket 0): trap") ||
		!strings.Contains(joined, "[0] "+strings.TrimPrefix(one[0], "[0] ")) || !strings.Contains(joined, "[1] "+strings.TrimPrefix(one[0], "[0] ")) {
		t.Errorf("fallback:\n%s\nwant a warning and %s", joined, one[0])
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `\`, `\\`) + `"` }
