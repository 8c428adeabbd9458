package script

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// hookJS is the script twin of the callbacks program's "hook" mode.
const hookJS = `const { tensor, nn, dist } = require("zeroeng");
tensor.manualSeed(0);
const l1 = nn.Linear(4, 8), l2 = nn.Linear(8, 1);
const x = tensor.randn([3, 4]);
const ddp = nn.parallel.DistributedDataParallel(nn.Sequential(l1, l2));
let calls = 0;
ddp.registerCommHook(null, (state, bucket) => { calls++; return dist.allReduce(bucket.buffer.div(dist.worldSize)); });
ddp.forward(x.add(dist.rank)).sum().backward();
const hex = Array.from(new Uint8Array(new Float32Array(l1.weight.grad.toArray().flat()).buffer)).map(v => v.toString(16).padStart(2, "0")).join("");
console.log("grad " + hex + " calls " + calls);
`

// scheduleJS is the script twin of the callbacks program's "schedule"
// mode, with the built-in interleaved schedule.
const scheduleJS = `const { tensor, nn, dist, zero } = require("zeroeng");
tensor.manualSeed(0);
const l1 = nn.Linear(4, 8), l2 = nn.Linear(8, 1);
const x = tensor.randn([3, 4]);
const ddp = nn.parallel.DistributedDataParallel(nn.Sequential(l1, l2), { bucketCapMB: 0.0001, firstBucketCapMB: 0.00005 });
const zopt = zero.ZeroRedundancyOptimizer(ddp.parameters(), { optimizer: "adamw", lr: 0.01, overlapWithDDP: true, logMemory: false });
ddp.registerCommHook(null, zero.hookWithZeroStepInterleaved(dist.commHooks.allreduceHook, ddp, zopt));
for (let s = 0; s < 3; s++) {
  zopt.zeroGrad();
  ddp.forward(x.add(dist.rank)).sum().backward();
  zopt.step();
}
const hex = t => Array.from(new Uint8Array(new Float32Array(t.toArray().flat()).buffer)).map(v => v.toString(16).padStart(2, "0")).join("");
console.log("weights " + hex(l1.weight) + hex(l2.weight) + " scheduled true");
`

// TestProgramFunctions: the program's own functions are values of the API
// (ABI 1.1) wherever the API takes a function — nn.utils.checkpoint (the
// same gradients as without, the function run again in backward), a
// module's forward under checkpointWrapper, DDP's comm hook (the script
// hook's gradients bit for bit on 2 ranks), nested — and their failures
// are the calls' failures: an error the function returns, a host call in
// it that failed, proc_exit inside it.
func TestProgramFunctions(t *testing.T) {
	skipShortPrograms(t)
	prog := hookbuild.Program(t, "./internal/testprograms/callbacks")
	for _, c := range []struct {
		mode  string
		ranks int
		out   []string
		err   string
		exit  int
	}{
		{mode: "checkpoint", ranks: 1, out: []string{"same gradients: true calls: 3"}},
		{mode: "forward", ranks: 1, out: []string{"calls: 2 parameters: 4"}},
		{mode: "nested", ranks: 1, out: []string{"nested calls: 3"}},
		{mode: "error", ranks: 1, out: []string{"error: ", "the program's function 0 failed: the block refuses", "then: <nil>"}},
		{mode: "host-error", ranks: 1, out: []string{"error: ", "the program's function 0 failed: host call call failed (ERR_INVALID): \"tensor.nonesuch\" is not in the API"}},
		{mode: "exit", ranks: 2, exit: 3},
	} {
		t.Run(c.mode, func(t *testing.T) {
			out, stderr, err := runProgram(t, context.Background(), prog, c.ranks, wasm.Config{}, c.mode)
			if c.exit != 0 {
				var se *Error
				if !errors.As(err, &se) || se.Exit == nil || se.Exit.Code != c.exit || strings.Contains(out, "still running") {
					t.Fatalf("error %v, output %q: want exit status %d, there", err, out, c.exit)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s%s", err, out, stderr)
			}
			for _, want := range c.out {
				if !strings.Contains(out, want) {
					t.Fatalf("output %q, want %q", out, want)
				}
			}
		})
	}
	for _, c := range []struct{ mode, js, must string }{
		// A ZeRO step schedule written in the program (zero.schedule with
		// its functions) trains bit for bit as the built-in it copies.
		{"schedule", scheduleJS, "scheduled true"},
		// DDP's comm hook written in the program.
		{"hook", hookJS, "calls 1"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			got, stderr, err := runProgram(t, context.Background(), prog, 2, wasm.Config{}, c.mode)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			js := filepath.Join(t.TempDir(), c.mode+".js")
			if err := os.WriteFile(js, []byte(c.js), 0o644); err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := RunJob(context.Background(), js, JobOptions{Ranks: 2, Rank: Options{Stdout: &want, AutoRelease: true}}); err != nil {
				t.Fatalf("the script: %v\n%s", err, want.String())
			}
			if g, w := sortedLines(got), sortedLines(want.String()); g != w || !strings.Contains(g, c.must) {
				t.Fatalf("the program printed\n%s\nthe script\n%s", g, w)
			}
		})
	}
}

// TestProgramStopRequest: SIGTERM under a program as under a script — the
// next checkpoint Manager save on every rank saves and the program ends
// there with status 0 (the API exits: the program does not see a failure
// and go on).
func TestProgramStopRequest(t *testing.T) {
	skipShortPrograms(t)
	prog := hookbuild.ProgramSource(t, `package main

import (
	"fmt"
	"os"

	ze "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

func main() {
	lin := ze.Must(ze.O("nn.Linear", 2, 2))
	opt := ze.Must(ze.O("optim.SGD", ze.Must(lin.Method("parameters")), map[string]any{"lr": 0.1}))
	ck := ze.Must(ze.O("checkpoint.Manager", os.Args[1], map[string]any{"state": map[string]any{"model": lin, "optimizer": opt}}))
	for step := 1; step <= 10; step++ {
		fmt.Println("step", step)
		if _, err := ck.Method("save", step); err != nil {
			fmt.Println("save failed:", err)
			os.Exit(1)
		}
	}
	fmt.Println("all steps")
}
`)
	stop := &StopRequest{}
	stop.requested.Store(true) // as if SIGTERM arrived before step 1 ended
	dir := t.TempDir()
	path := filepath.Join(t.TempDir(), "prog.wasm")
	if err := os.WriteFile(path, prog, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := RunJob(context.Background(), path, JobOptions{Ranks: 2, Rank: Options{Stdout: &out, Stderr: &out, AutoRelease: true, Args: []string{dir}, Stop: stop}})
	var se *Error
	if !errors.As(err, &se) || se.Exit == nil || se.Exit.Code != 0 {
		t.Fatalf("the job ended with %v, want exit status 0\n%s", err, out.String())
	}
	if s := out.String(); strings.Count(s, "] step 1\n") != 2 || strings.Contains(s, "step 2") || strings.Contains(s, "save failed") || strings.Contains(s, "all steps") {
		t.Fatalf("output %q, want step 1 on both ranks and nothing after the save", s)
	}
	if _, err := os.Stat(filepath.Join(dir, "step-00000001")); err != nil {
		t.Fatalf("no checkpoint of step 1: %v", err)
	}
}
