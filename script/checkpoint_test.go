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
)

// checkpointJS trains a small model under ZeRO (or AdamW on one rank) with
// a scheduler and a token loader, saving through a Manager every 3 steps.
// Given RESUME, it first restores and prints what it found. Every step
// prints the loss as exact bits.
const checkpointJS = `const { tensor, nn, optim, data, dist, zero, checkpoint } = require("zeroeng");
const [dir, steps, resume] = [process.argv[2], Number(process.argv[3]), process.argv[4] === "resume"];
tensor.manualSeed(3);
const model = nn.Sequential(nn.Embedding(32, 16), nn.Linear(16, 32));
const params = model.parameters();
const opt = dist.worldSize > 1
  ? zero.ZeroRedundancyOptimizer(params, { optimizer: "adamw", lr: 0.01, partition: "flat" })
  : optim.AdamW(params, { lr: 0.01 });
const sched = optim.lrScheduler.StepLR(opt, { stepSize: 2, gamma: 0.5 });
const loader = data.TokenLoader(data.fromTensor(tensor.randint(0, 32, [4000])), { batchSize: 4, seqLen: 8, seed: 5 });
const state = { model, optimizer: opt, scheduler: sched, loader, best: { loss: 99 } };
const ckpt = checkpoint.Manager(dir, { state, every: 3, keep: 2 });
let first = 1;
if (resume) {
  const r = ckpt.load();
  console.log("resumed", r.step, r.worldSize, JSON.stringify(state.best), sched.lastEpoch, JSON.stringify(loader.position));
  first = r.step + 1;
}
for (let step = first; step <= steps; step++) {
  opt.zeroGrad();
  const [x, y] = loader.next();
  const noise = tensor.randn([1]).item(); // the generators must resume too
  const loss = nn.functional.crossEntropy(model.forward(x).view(-1, 32), y.view(-1)).mul(1 + 0.01 * noise);
  loss.backward();
  opt.step();
  sched.step();
  const l = loss.item();
  if (l < state.best.loss) state.best = { loss: l, step };
  console.log("step", step, new Float64Array([l]).join(), opt.paramGroups[0].lr);
  ckpt.save(step);
}
`

// runCheckpointJob runs checkpointJS and returns rank 0's output lines.
func runCheckpointJob(t *testing.T, ranks int, stop *StopRequest, args ...string) ([]string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ckpt.js")
	if err := os.WriteFile(path, []byte(checkpointJS), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := RunJob(context.Background(), path, JobOptions{Ranks: ranks, Rank: Options{Stdout: &out, Stderr: &errOut, AutoRelease: true, Args: args, Stop: stop}})
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if ranks == 1 || strings.HasPrefix(l, "[0] ") {
			lines = append(lines, strings.TrimPrefix(l, "[0] "))
		}
	}
	if err != nil {
		err = errors.Join(err, errors.New(errOut.String()))
	}
	return lines, err
}

// TestCheckpointFromJS: a run resumed from the checkpoint of step 6
// prints the same steps 7-10 as the uninterrupted run (losses to the bit,
// learning rates), with its scheduler, loader position and plain values
// restored; keep leaves the newest two checkpoints.
func TestCheckpointFromJS(t *testing.T) {
	for _, ranks := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d ranks", ranks), func(t *testing.T) {
			full := t.TempDir()
			want, err := runCheckpointJob(t, ranks, nil, full, "10")
			if err != nil {
				t.Fatal(err)
			}
			if got := dirNames(t, full); !slices.Equal(got, []string{"latest", "step-00000006", "step-00000009"}) {
				t.Fatalf("checkpoints kept: %v", got)
			}
			// Resume from step 6: a directory holding only that one.
			part := t.TempDir()
			if err := os.Rename(filepath.Join(full, "step-00000006"), filepath.Join(part, "step-00000006")); err != nil {
				t.Fatal(err)
			}
			got, err := runCheckpointJob(t, ranks, nil, part, "10", "resume")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got[0], "resumed 6 ") || !strings.Contains(got[0], ` 6 {"epoch":0,"windows":`) {
				t.Fatalf("resume printed %q", got[0])
			}
			if !slices.Equal(got[1:], want[6:]) {
				t.Fatalf("resumed run:\n%s\nuninterrupted run:\n%s", strings.Join(got[1:], "\n"), strings.Join(want[6:], "\n"))
			}
		})
	}
}

// TestCheckpointStopRequest: with a stop requested (SIGTERM), the next
// Manager.save on every rank saves a checkpoint and ends the script with
// process.exit(0).
func TestCheckpointStopRequest(t *testing.T) {
	stop := &StopRequest{}
	stop.requested.Store(true) // as if SIGTERM arrived before step 1 ended
	dir := t.TempDir()
	lines, err := runCheckpointJob(t, 2, stop, dir, "10")
	var se *Error
	if !errors.As(err, &se) || se.Exit == nil || se.Exit.Code != 0 {
		t.Fatalf("the job ended with %v, want process.exit(0)", err)
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "step 1 ") {
		t.Fatalf("the job printed %q, want step 1 only", lines)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"latest", "step-00000001"}) {
		t.Fatalf("checkpoints: %v", got)
	}
	if stop.handlers.Load() != 0 {
		t.Fatalf("%d managers still registered after the job", stop.handlers.Load())
	}
}

func TestCheckpointErrorsFromJS(t *testing.T) {
	cases := []struct{ src, want string }{
		{`checkpoint.save(dir, 1, 5)`, "expects the object of what to save"},
		{`checkpoint.save(dir, -1, {})`, "step must not be negative"},
		{`checkpoint.save(dir, 1, { w: tensor.ones([2]) })`, `"w" is a tensor`},
		{`checkpoint.save(dir, 1, { f: () => 1 })`, `"f" cannot be saved: it is not JSON`},
		{`checkpoint.save(dir, 1, { "../x": 1 })`, `"../x" cannot name a part of a checkpoint`},
		{`checkpoint.Manager(dir, {})`, "options.state must be the object"},
		{`const m = nn.Linear(2, 2); checkpoint.save(dir, 1, { model: m }); checkpoint.load(dir, { model: nn.Linear(3, 2) })`,
			"size mismatch for weight: copying a param with shape [2 2] from checkpoint, the shape in current model is [2 3]"},
		{`const m = nn.Linear(2, 2); checkpoint.save(dir, 1, { model: m }); checkpoint.load(dir, { model: m, sched: optim.lrScheduler.StepLR(optim.SGD(m.parameters(), { lr: 1 }), { stepSize: 1 }) })`,
			`holds no state for "sched"`},
		{`console.log(checkpoint.load(dir + "/none", {}), checkpoint.latest(dir)); throw new Error("done")`, "done"},
	}
	for _, c := range cases {
		src := `const { tensor, nn, optim, checkpoint } = require("zeroeng"); const dir = process.argv[2];` + "\n" + c.src
		path := filepath.Join(t.TempDir(), "bad.js")
		os.WriteFile(path, []byte(src), 0o644)
		var out bytes.Buffer
		err := RunJob(context.Background(), path, JobOptions{Ranks: 1, Rank: Options{Stdout: &out, Stderr: &out, Args: []string{t.TempDir()}}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant an error containing %q", c.src, err, c.want)
		}
		if strings.Contains(c.src, "latest") && strings.TrimSpace(out.String()) != "null null" {
			t.Errorf("load and latest of an empty directory printed %q, want null null", out.String())
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") { // retired checkpoints being deleted
			names = append(names, e.Name())
		}
	}
	return names
}
