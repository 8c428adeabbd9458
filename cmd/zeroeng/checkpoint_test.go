package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/checkpoint"
)

// gptLosses runs samples/gpt.js with --metrics and returns rank 0's loss
// by step.
func gptLosses(t *testing.T, ranks int, args ...string) (map[int]float64, string) {
	t.Helper()
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	all := append([]string{"run", "--quiet", "--metrics", metrics, "--nproc", fmt.Sprint(ranks), "samples/gpt.js", "--"}, args...)
	r := zeroeng(t, "../..", nil, all...)
	if r.code != 0 {
		t.Fatalf("%v: status %d\n%s\n%s", args, r.code, r.stdout, r.stderr)
	}
	return losses(t, metrics), r.stdout
}

// TestGPTResume: samples/gpt.js resumed from the checkpoint of step 6
// reports, for steps 7-12, the very losses of the uninterrupted run on the
// same ranks (model, AdamW or ZeRO state, schedule, data position and
// generators all restored), and nearly the same on another world size
// with the same global batch (ZeRO's state resharded).
func TestGPTResume(t *testing.T) {
	if testing.Short() {
		t.Skip("trains gpt.js 6 times with checkpoints, 13 s (-short skips it; make test-all runs it)")
	}
	common := []string{"--steps", "12", "--eval-every", "100", "--checkpoint-every", "6"}
	for _, c := range []struct {
		name               string
		ranks, resumeRanks int
		args, resumeArgs   []string
		tolerance          float64
	}{
		{"1 rank", 1, 1, []string{"--batch", "8"}, nil, 0},
		{"2 ranks DDP", 2, 2, []string{"--batch", "4"}, nil, 0},
		{"2 ranks ZeRO 2", 2, 2, []string{"--batch", "4", "--zero", "2"}, nil, 0},
		{"2 ranks ZeRO 1 bfloat16", 2, 2, []string{"--batch", "4", "--zero", "1", "--dtype", "bfloat16"}, nil, 0},
		{"2 ranks ZeRO 3", 2, 2, []string{"--batch", "4", "--zero", "3"}, nil, 0},
		{"2 ranks ZeRO 3 offloaded", 2, 2, []string{"--batch", "4", "--zero", "3", "--offload", "cpu"}, nil, 0},
		{"2 ranks ZeRO 3 bfloat16 offloaded", 2, 2, []string{"--batch", "4", "--zero", "3", "--offload", "cpu", "--dtype", "bfloat16"}, nil, 0},
		{"1 rank float16 autocast (the loss scale saved)", 1, 1, []string{"--batch", "8", "--autocast", "float16", "--loss-scale", "1e8"}, nil, 0},
		{"2 ranks ZeRO 2 float16 autocast", 2, 2, []string{"--batch", "4", "--zero", "2", "--autocast", "float16", "--loss-scale", "1e8"}, nil, 0},
		{"ZeRO 3 on 2 ranks to ZeRO 2 on 2", 2, 2, []string{"--batch", "4", "--zero", "3"}, []string{"--batch", "4", "--zero", "2"}, 1e-4},
		{"ZeRO 3 on 2 ranks to ZeRO 3 on 4", 2, 4, []string{"--batch", "4", "--zero", "3"}, []string{"--batch", "2", "--zero", "3"}, 1e-4},
		{"AdamW on 1 rank to ZeRO 3 on 2", 1, 2, []string{"--batch", "8"}, []string{"--batch", "4", "--zero", "3"}, 1e-4},
		{"ZeRO 2 on 2 ranks to AdamW on 1", 2, 1, []string{"--batch", "4", "--zero", "2"}, []string{"--batch", "8", "--zero", "0"}, 1e-4},
		{"AdamW on 1 rank to ZeRO 1 on 2", 1, 2, []string{"--batch", "8"}, []string{"--batch", "4", "--zero", "1"}, 1e-4},
	} {
		t.Run(c.name, func(t *testing.T) {
			full := t.TempDir()
			want, _ := gptLosses(t, c.ranks, append(append(c.args, common...), "--checkpoint", full)...)
			part := t.TempDir()
			if err := os.Rename(filepath.Join(full, "step-00000006"), filepath.Join(part, "step-00000006")); err != nil {
				t.Fatal(err)
			}
			args := c.args
			if c.resumeArgs != nil {
				args = c.resumeArgs
			}
			got, stdout := gptLosses(t, c.resumeRanks, append(append(args, common...), "--checkpoint", part)...)
			if !strings.Contains(stdout, "resumed from "+filepath.Join(part, "step-00000006")+" (step 6") {
				t.Fatalf("the run did not say it resumed:\n%s", stdout)
			}
			if len(got) != 6 || len(want) != 12 {
				t.Fatalf("steps logged: resumed %d, uninterrupted %d", len(got), len(want))
			}
			for step := 7; step <= 12; step++ {
				if d := math.Abs(got[step] - want[step]); d > c.tolerance || math.IsNaN(got[step]) {
					t.Errorf("step %d: loss %v after resuming, %v uninterrupted", step, got[step], want[step])
				}
			}
		})
	}
}

// startGPT starts samples/gpt.js and returns once rank 0 has logged two
// steps.
func startGPT(t *testing.T, ranks int, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	all := append([]string{"run", "--quiet", "--nproc", fmt.Sprint(ranks), "samples/gpt.js", "--"}, args...)
	cmd := exec.Command(binary, all...)
	cmd.Dir = "../.."
	cmd.Env = append(cleanEnv(), "ZEROENG_METRICS=/dev/stdout")
	var stdout, stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A run that has not logged two steps in a minute is stuck: kill it,
	// so that the scan below ends, and report what it printed.
	started := make(chan struct{})
	defer close(started)
	go func() {
		select {
		case <-started:
		case <-time.After(time.Minute):
			cmd.Process.Signal(syscall.SIGQUIT) // Go's goroutine dump, then exit
		}
	}()
	lines := bufio.NewScanner(pipe)
	steps := 0
	for lines.Scan() {
		stdout.WriteString(lines.Text() + "\n")
		if strings.HasPrefix(lines.Text(), `{"rank":0,`) && strings.Contains(lines.Text(), `"step":`) {
			steps++ // rank 0's metrics line of a step
		}
		if steps == 2 {
			go func() {
				for lines.Scan() {
					stdout.WriteString(lines.Text() + "\n")
				}
			}()
			return cmd, &stdout, &stderr
		}
	}
	cmd.Wait()
	t.Fatalf("gpt.js ended before two steps:\n%s\n%s", stdout.String(), stderr.String())
	return nil, nil, nil
}

// TestSIGTERMSavesAndExits: SIGTERM during training finishes the step on
// every rank, saves a checkpoint and exits 0; the run resumes from it.
func TestSIGTERMSavesAndExits(t *testing.T) {
	dir := t.TempDir()
	cmd, _, stderr := startGPT(t, 2, "--steps", "100000", "--zero", "2", "--batch", "4", "--eval-every", "100000", "--checkpoint", dir)
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit %v after SIGTERM, want 0\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("still running 30s after SIGTERM\n%s", stderr.String())
	}
	path, err := checkpoint.Latest(dir)
	if err != nil || path == "" {
		t.Fatalf("no checkpoint after SIGTERM (%v)\n%s", err, stderr.String())
	}
	m, err := checkpoint.Verify(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Step < 2 || !strings.Contains(stderr.String(), fmt.Sprintf("saved %s after step %d; exiting", path, m.Step)) {
		t.Fatalf("checkpoint of step %d; stderr:\n%s", m.Step, stderr.String())
	}
	// Two more steps from there.
	_, stdout := gptLosses(t, 2, "--steps", fmt.Sprint(m.Step+2), "--zero", "2", "--batch", "4", "--eval-every", "100000", "--checkpoint", dir)
	if !strings.Contains(stdout, fmt.Sprintf("(step %d, 2 ranks)", m.Step)) {
		t.Fatalf("did not resume from step %d:\n%s", m.Step, stdout)
	}
}

// TestKillDuringSave kills the training process with SIGKILL at random
// moments while it saves a checkpoint after every step: each time, the
// checkpoint that latest names is complete and intact, and a new run
// resumes from it.
func TestKillDuringSave(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a training process several times")
	}
	dir := t.TempDir()
	args := []string{"--config", "bench", "--bench", "--steps", "100000", "--zero", "2", "--batch", "2", "--checkpoint", dir, "--checkpoint-every", "1", "--keep", "2"}
	midSave := 0
	last := int64(-1)
	for round := range 5 {
		cmd, _, stderr := startGPT(t, 2, args...)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if p, _ := checkpoint.Latest(dir); p != "" || time.Now().After(deadline) {
				break // a checkpoint to protect
			}
		}
		time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				midSave++ // a save in progress, most likely killed in it
				break
			}
		}
		cmd.Process.Kill()
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("round %d: %v\n%s", round, err, stderr.String())
		}
		path, err := checkpoint.Latest(dir)
		if err != nil || path == "" {
			t.Fatalf("round %d: no checkpoint after kill -9 (%v)", round, err)
		}
		m, err := checkpoint.Verify(path)
		if err != nil {
			t.Fatalf("round %d: the checkpoint latest names is damaged: %v", round, err)
		}
		if m.Step < last {
			t.Fatalf("round %d: latest went back from step %d to %d", round, last, m.Step)
		}
		last = m.Step
	}
	t.Logf("5 kills, %d of them with a save in progress; last checkpoint: step %d", midSave, last)
}

// TestCheckpointVerify: zeroeng checkpoint verify prints what a checkpoint
// holds and exits 0; with a damaged shard it exits 1 naming the file.
func TestCheckpointVerify(t *testing.T) {
	dir := t.TempDir()
	gptLosses(t, 2, "--steps", "4", "--zero", "2", "--batch", "4", "--eval-every", "100", "--checkpoint", dir, "--checkpoint-every", "2")
	r := zeroeng(t, ".", nil, "checkpoint", "verify", dir)
	for _, want := range []string{"step-00000004: step 4, 2 ranks", "optimizer.rank-00001-of-00002.safetensors", `optimizer "optimizer": AdamW (ZeRO stage 2, flat partition, 2 shards)`, "state: loader, scheduler", "ok"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("verify: status %d, stdout without %q:\n%s\n%s", r.code, want, r.stdout, r.stderr)
		}
	}
	shard := filepath.Join(dir, "step-00000004", "optimizer.rank-00001-of-00002.safetensors")
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	os.WriteFile(shard, b, 0o644)
	if r := zeroeng(t, ".", nil, "checkpoint", "verify", dir); r.code != 1 || !strings.Contains(r.stderr, shard+" is corrupted") {
		t.Errorf("verify of a damaged shard: status %d\n%s", r.code, r.stderr)
	}
	if r := zeroeng(t, ".", nil, "checkpoint", "verify", t.TempDir()); r.code != 1 || !strings.Contains(r.stderr, "holds no checkpoint") {
		t.Errorf("verify of an empty directory: status %d\n%s", r.code, r.stderr)
	}
}

// TestCheckpointFolderOfOneJob: a second job that makes a Manager on a
// folder another job holds fails at once, naming that job; a run that
// retires old checkpoints leaves none half deleted when it exits.
func TestCheckpointFolderOfOneJob(t *testing.T) {
	dir := scriptDir(t, map[string]string{"hold.js": `
const { tensor, nn, checkpoint } = require("zeroeng");
const model = nn.Linear(2, 2);
const ckpt = checkpoint.Manager("ckpt", { state: { model }, keep: 1 });
for (let step = 1; step <= 5; step++) ckpt.save(step, { force: true });
console.log("holding");
const until = Date.now() + Number(process.argv[2] || 0);
while (Date.now() < until) {}
`})
	s := start(t, dir, nil, "run", "hold.js", "--", "20000")
	if !s.lines.Scan() || s.lines.Text() != "holding" {
		t.Fatalf("first job: %q\n%s", s.lines.Text(), s.stderr)
	}
	s.drain()
	r := zeroeng(t, dir, nil, "run", "hold.js")
	if r.code == 0 || !strings.Contains(r.stderr, "ckpt is being written by pid "+strconv.Itoa(s.cmd.Process.Pid)) {
		t.Errorf("second job: status %d\n%s", r.code, r.stderr)
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()

	// The lock died with its job; a run that prunes ends with nothing
	// retired left behind.
	r = zeroeng(t, dir, nil, "run", "hold.js")
	if r.code != 0 {
		t.Fatalf("after the first job: status %d\n%s", r.code, r.stderr)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != ".lock latest step-00000005" {
		t.Errorf("the folder holds %s", got)
	}
}

// TestResumeSkipsDamaged: a resume whose newest checkpoint is damaged goes
// on from the newest intact one, says which it skipped and why, and then
// reports the losses of the uninterrupted run.
func TestResumeSkipsDamaged(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--steps", "6", "--batch", "4", "--zero", "2", "--eval-every", "100", "--checkpoint-every", "3", "--keep", "0", "--checkpoint", dir}
	want, _ := gptLosses(t, 2, args...)
	shard := filepath.Join(dir, "step-00000006", "optimizer.rank-00000-of-00002.safetensors")
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	r := zeroeng(t, "../..", nil, append([]string{"run", "--quiet", "--metrics", metrics, "--nproc", "2", "samples/gpt.js", "--"}, args...)...)
	if r.code != 0 {
		t.Fatalf("resume: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, w := range []string{"skipped " + filepath.Join(dir, "step-00000006") + ", which is damaged", "optimizer.rank-00000-of-00002.safetensors", "resuming from step-00000003"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	got := losses(t, metrics)
	for step := 4; step <= 6; step++ {
		if got[step] != want[step] {
			t.Errorf("step %d: loss %v after resuming from step 3, %v uninterrupted", step, got[step], want[step])
		}
	}
}

// TestCheckpointExport: zeroeng checkpoint export puts a 2-rank ZeRO
// stage-3 checkpoint's model together from the ranks' slice files into
// the very bytes a stage-0 save of the same model writes, which PyTorch
// loads with the model's values; verify says how the model was saved.
func TestCheckpointExport(t *testing.T) {
	dir := scriptDir(t, map[string]string{"save.js": `
const { tensor, nn, optim, zero, dist, checkpoint } = require("zeroeng");
const [dir, stage] = [process.argv[2], Number(process.argv[3])];
tensor.manualSeed(4);
const model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.BatchNorm1d(5), nn.Linear(5, 3));
let opt;
if (stage === 3) {
  zero.fullyShard(model[0]); zero.fullyShard(model[3]); zero.fullyShard(model);
  opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "adamw", stage: 3, logMemory: false });
} else {
  opt = optim.AdamW(model.parameters());
}
checkpoint.save(dir, 0, { model, optimizer: opt });
const sd = model.stateDict();
if (dist.rank === 0) console.log(JSON.stringify(Object.fromEntries(Object.keys(sd).map(k => [k, sd[k].double().sum().item()]))));
`})
	r := zeroeng(t, dir, nil, "run", "--quiet", "--nproc", "2", "save.js", "--", "sharded", "3")
	if r.code != 0 {
		t.Fatalf("the stage-3 save: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var want map[string]float64
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(r.stdout), "[0] ")), &want); err != nil || len(want) != 9 {
		t.Fatalf("the values printed: %v\n%s", err, r.stdout)
	}
	if r := zeroeng(t, dir, nil, "run", "--quiet", "save.js", "--", "plain", "0"); r.code != 0 {
		t.Fatalf("the stage-0 save: status %d\n%s", r.code, r.stderr)
	}
	r = zeroeng(t, dir, nil, "checkpoint", "verify", "sharded")
	if r.code != 0 || !strings.Contains(r.stdout, `module "model": ZeRO stage 3, 2 slice files`) || !strings.Contains(r.stdout, "model.rank-00001-of-00002.safetensors") {
		t.Fatalf("verify: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = zeroeng(t, dir, nil, "checkpoint", "export", "sharded", "-o", "exported.safetensors")
	if r.code != 0 || !strings.Contains(r.stdout, `module "model" written to exported.safetensors`) {
		t.Fatalf("export: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	got, err := os.ReadFile(filepath.Join(dir, "exported.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := os.ReadFile(filepath.Join(dir, "plain", "step-00000000", "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, plain) {
		t.Fatalf("the exported model (%d bytes) differs from the stage-0 save's (%d bytes)", len(got), len(plain))
	}
	// The default output, and a checkpoint that has model.safetensors.
	if r := zeroeng(t, dir, nil, "checkpoint", "export", "--module", "model", "plain"); r.code != 0 {
		t.Fatalf("export of a stage-0 checkpoint: status %d\n%s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "model.safetensors")); !bytes.Equal(b, plain) {
		t.Fatal("the export of a stage-0 checkpoint differs from its model.safetensors")
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"checkpoint", "export"}, 2, "name one checkpoint directory"},
		{[]string{"checkpoint", "export", "sharded", "-o"}, 2, "-o needs a value"},
		{[]string{"checkpoint", "export", "sharded", "--module", "ema"}, 1, `has no module "ema" (it has "model")`},
		{[]string{"checkpoint", "export", "nothing"}, 1, "holds no checkpoint"},
	} {
		if r := zeroeng(t, dir, nil, c.args...); r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: status %d, want %d with %q\n%s", c.args, r.code, c.code, c.want, r.stderr)
		}
	}
	// Into the same model built in PyTorch, strictly (read_with_torch.py's
	// reader: Debian's python3-torch has no safetensors package).
	const load = `import json, sys
sys.path.insert(0, "../../engine/checkpoint/testdata")
import torch
from read_with_torch import read
meta, tensors = read(sys.argv[1])
assert meta.get("format") == "pt", meta
model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3))
model.load_state_dict(tensors, strict=True)
print(json.dumps({n: [str(t.dtype), list(t.shape), float(t.double().sum())] for n, t in model.state_dict().items()}))
`
	python := "/usr/bin/python3"
	out, err := exec.Command(python, "-c", load, filepath.Join(dir, "exported.safetensors")).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No module named 'torch'") || errors.Is(err, exec.ErrNotFound) {
			t.Skipf("needs %s with PyTorch (Debian's python3-torch): %v", python, err)
		}
		t.Fatalf("PyTorch could not read the exported model: %v\n%s", err, out)
	}
	var torch map[string][]any
	if err := json.Unmarshal(out, &torch); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for name, sum := range want {
		g := torch[name]
		if len(g) != 3 || math.Abs(g[2].(float64)-sum) > 1e-6*math.Max(1, math.Abs(sum)) {
			t.Errorf("%s: PyTorch read %v, the model's sum is %v", name, g, sum)
		}
	}
	if len(torch) != len(want) {
		t.Errorf("PyTorch read %d tensors, the model has %d", len(torch), len(want))
	}
}
