package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
	"github.com/zeroeng/zeroeng/mpi"
)

// Training across processes on the CPU, over Open MPI, as users start it:
// mpirun -np N zeroeng run, and zeroeng launch (which starts mpirun). The
// collectives of package mpi reduce in the in-process backend's order and
// arithmetic, so the losses are the in-process run's bit for bit.

// needMPI skips a test without Open MPI's library and mpirun.
func needMPI(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("jobs of several processes under mpirun run with make test-all")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun is not installed (Debian's openmpi-bin)")
	}
	if _, err := mpi.Load(); err != nil {
		t.Skipf("Open MPI: %v", err)
	}
}

// mpirunArgs starts np ranks of zeroeng on this machine.
func mpirunArgs(np int) []string {
	args := []string{"-np", strconv.Itoa(np), "--oversubscribe", "--bind-to", "none"}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-run-as-root")
	}
	return append(args, binary)
}

// job is a job started in the background from the repository's root,
// its stdout and stderr together.
type job struct {
	cmd *exec.Cmd
	out *lockedBuffer
}

// lockedBuffer is a bytes.Buffer that a test reads while a process writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startJob(t *testing.T, args ...string) job {
	t.Helper()
	j := job{cmd: exec.Command(binary, args...), out: &lockedBuffer{}}
	j.cmd.Dir = "../.."
	j.cmd.Env = cleanEnv()
	j.cmd.Stdout, j.cmd.Stderr = j.out, j.out
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.cmd.Process.Kill() })
	return j
}

// await polls cond until it holds, or fails the test after d naming what.
func (j job) await(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s after %v:\n%s", what, d, j.out)
		}
	}
}

// wait waits for the job to end, or fails the test after d.
func (j job) wait(t *testing.T, d time.Duration, after string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- j.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("the job did not end within %v of %s:\n%s", d, after, j.out)
		return nil
	}
}

// losses reads rank 0's loss by step from a metrics file.
func losses(t *testing.T, metrics string) map[int]float64 {
	t.Helper()
	out := map[int]float64{}
	for _, m := range readJSONLines(t, metrics) {
		step, ok1 := m["step"].(float64)
		loss, ok2 := m["loss"].(float64)
		if ok1 && ok2 && m["rank"] == 0.0 && m["workload"] == nil {
			out[int(step)] = loss
		}
	}
	return out
}

// runGPTWith runs samples/gpt.js with the command line before (run, launch or
// mpirun ... run) and returns rank 0's losses and the output.
func runGPTWith(t *testing.T, name string, before []string, gptArgs ...string) (map[int]float64, string) {
	t.Helper()
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	args := append(append(before, "--quiet", "--metrics", metrics, "samples/gpt.js", "--"), gptArgs...)
	cmd := exec.Command(name, args...)
	cmd.Dir = "../.."
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return losses(t, metrics), string(out)
}

func TestMPIMatchesInProcess(t *testing.T) {
	needMPI(t)
	if testing.Short() {
		t.Skip("trains several small models (-short)")
	}
	allreduce := filepath.Join(t.TempDir(), "allreduce.wasm")
	os.WriteFile(allreduce, hookbuild.Sample(t, "allreduce"), 0o644)
	common := []string{"--steps", "6", "--eval-every", "100", "--batch", "4"}
	for _, c := range []struct {
		name   string
		ranks  int
		flags  []string // of zeroeng run
		args   []string // of gpt.js
		launch bool     // zeroeng launch instead of mpirun
	}{
		{name: "DDP on 2", ranks: 2},
		{name: "ZeRO 2 on 3", ranks: 3, args: []string{"--zero", "2"}},
		{name: "ZeRO 1 bfloat16 on 2", ranks: 2, args: []string{"--zero", "1", "--dtype", "bfloat16"}},
		{name: "DDP with a Wasm hook on 2", ranks: 2, flags: []string{"--hook", allreduce}},
		{name: "zeroeng launch, ZeRO 2 on 2", ranks: 2, args: []string{"--zero", "2"}, launch: true},
		{name: "ZeRO 3 on 3", ranks: 3, args: []string{"--zero", "3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{}, common...), c.args...)
			want, _ := runGPTWith(t, binary, append([]string{"run", "--nproc", strconv.Itoa(c.ranks)}, c.flags...), args...)
			var got map[int]float64
			var out string
			if c.launch {
				got, out = runGPTWith(t, binary, append([]string{"launch", "--nproc-per-node", strconv.Itoa(c.ranks)}, c.flags...), args...)
			} else {
				got, out = runGPTWith(t, "mpirun", append(append(mpirunArgs(c.ranks), "run"), c.flags...), args...)
			}
			if len(want) != 6 || len(got) != 6 {
				t.Fatalf("steps logged: in-process %d, across processes %d\n%s", len(want), len(got), out)
			}
			for step := 1; step <= 6; step++ {
				if got[step] != want[step] {
					t.Errorf("step %d: loss %v across processes, %v in-process", step, got[step], want[step])
				}
			}
		})
	}
}

// TestMPIKilledRankResumes: a rank killed with SIGKILL mid-run ends the
// job with an error naming it; launched again, the job resumes from the
// last complete checkpoint and reports the losses of the run that was
// never killed.
func TestMPIKilledRankResumes(t *testing.T) {
	needMPI(t)
	if testing.Short() {
		t.Skip("trains a small model three times (-short)")
	}
	// 60 steps: the kill lands long before the end (steps take tens of
	// milliseconds), and all runs share the schedule that --steps sets.
	args := []string{"--steps", "60", "--eval-every", "100", "--batch", "4", "--zero", "2", "--checkpoint-every", "3"}
	want, _ := runGPTWith(t, binary, []string{"run", "--nproc", "2"}, append(args, "--checkpoint", t.TempDir())...)

	ckpt := t.TempDir()
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	all := append([]string{"launch", "--nproc-per-node", "2", "--quiet", "--metrics", metrics, "samples/gpt.js", "--"},
		append(args, "--checkpoint", ckpt)...)
	j := startJob(t, all...)
	// Kill rank 1 once the checkpoint of step 6 is complete.
	j.await(t, 2*time.Minute, "no checkpoint of step 6", func() bool {
		_, err := os.Stat(filepath.Join(ckpt, "step-00000006", "manifest.json"))
		return err == nil
	})
	if err := syscall.Kill(rankPID(t, 1), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.wait(t, time.Minute, "rank 1's death")
	if j.cmd.ProcessState.ExitCode() == 0 {
		t.Fatalf("the job succeeded after rank 1 was killed:\n%s", j.out)
	}
	if !strings.Contains(j.out.String(), "signal 9") {
		t.Errorf("mpirun did not say a rank was killed:\n%s", j.out)
	}

	// Launched again on the same folder, it resumes from the newest
	// complete checkpoint (step 6, or a later one if it was saved before
	// the kill landed) and goes on as the run that was never killed.
	got, out := runGPTWith(t, binary, []string{"launch", "--nproc-per-node", "2"}, append(args, "--checkpoint", ckpt)...)
	if !strings.Contains(out, "resumed from "+ckpt) {
		t.Fatalf("the job did not resume:\n%s", out)
	}
	if len(got) == 0 || len(got) > 54 {
		t.Fatalf("%d steps after resuming from step 6 or later:\n%s", len(got), out)
	}
	for step, loss := range got {
		if step <= 6 || loss != want[step] {
			t.Errorf("step %d: loss %v after resuming, %v uninterrupted", step, loss, want[step])
		}
	}
}

// rankPID finds the pid of rank's process of the job mpirun started: the
// zeroeng run process whose environment gives it that rank.
func rankPID(t *testing.T, rank int) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		env, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		vars := strings.Split(string(env), "\x00")
		var isRank, isOurs bool
		for _, v := range vars {
			isRank = isRank || v == fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", rank)
			isOurs = isOurs || strings.HasPrefix(v, "MASTER_PORT=")
		}
		if !isRank || !isOurs {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
		if bytes.HasPrefix(cmdline, []byte(binary+"\x00run")) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	t.Fatalf("no process of rank %d", rank)
	return 0
}

// TestMPIBench: the ddp2 side-by-side workload runs as an MPI job of two
// processes, and rank 0 alone prints its line.
func TestMPIBench(t *testing.T) {
	needMPI(t)
	if testing.Short() {
		t.Skip("times 23 training steps (-short)")
	}
	cmd := exec.Command("mpirun", append(mpirunArgs(2), "bench", "ddp2")...)
	cmd.Env = append(cleanEnv(), "ZEROENG_THREADS=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"workload":"ddp2","world":2`) || !strings.Contains(lines[0], `"step_ms_median"`) {
		t.Fatalf("want one ddp2 line of a world of 2, got:\n%s", out)
	}
}

// TestLaunchSIGTERMUnderMPI: SIGTERM to zeroeng launch reaches the ranks
// mpirun started, whose checkpoint.Manager saves, and the job exits 0.
func TestLaunchSIGTERMUnderMPI(t *testing.T) {
	needMPI(t)
	ckpt := t.TempDir()
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	j := startJob(t, "launch", "--nproc-per-node", "2", "--quiet", "--metrics", metrics,
		"samples/gpt.js", "--", "--steps", "100000", "--batch", "4", "--zero", "2", "--checkpoint", ckpt)
	j.await(t, time.Minute, "no steps", func() bool {
		b, _ := os.ReadFile(metrics)
		return bytes.Contains(b, []byte(`"step":2,`))
	})
	j.cmd.Process.Signal(syscall.SIGTERM)
	if err := j.wait(t, time.Minute, "SIGTERM"); err != nil {
		t.Fatalf("%v after SIGTERM:\n%s", err, j.out)
	}
	if !strings.Contains(j.out.String(), "[0] zeroeng: stop requested: saved "+ckpt) {
		t.Errorf("no checkpoint was saved:\n%s", j.out)
	}
	if _, err := os.Stat(filepath.Join(ckpt, "latest")); err != nil {
		t.Error(err)
	}
}

// TestMPIRankThatFinishesEarly: as on the in-process backend, a rank
// whose script ends does not leave the others waiting in a collective
// that needs it until the timeout: theirs fails at once, naming it.
// process.exit(0) ends a rank the same way.
func TestMPIRankThatFinishesEarly(t *testing.T) {
	needMPI(t)
	dir := scriptDir(t, map[string]string{"early.js": `
const { tensor, dist } = require("zeroeng");
if (dist.rank != 1) dist.allReduce(tensor.ones([4]), "sum").wait();`, "exits.js": `
const { tensor, dist } = require("zeroeng");
if (dist.rank == 1) process.exit(0);
dist.allReduce(tensor.ones([4]), "sum").wait();`})
	for script, want := range map[string]string{
		"early.js": "[0] early.js:3:65: mpi: AllReduce of 4 float32 on rank 0: rank 1 has finished its script; this collective can never complete",
		"exits.js": "[0] exits.js:4:45: mpi: AllReduce of 4 float32 on rank 0: rank 1 has finished its script; this collective can never complete",
	} {
		cmd := exec.Command("mpirun", append(mpirunArgs(2), "run", "--dist-timeout", "2m", script)...)
		cmd.Dir = dir
		cmd.Env = cleanEnv()
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s: the job succeeded:\n%s", script, out)
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("%s: output lacks %q:\n%s", script, want, out)
		}
		if took := time.Since(start); took > time.Minute {
			t.Errorf("%s: took %v: rank 0 waited for its timeout", script, took)
		}
	}
}

// TestLaunchSaysWhatMPIReported: a job under mpirun that fails ends with
// launch's own account of it (the rank and its status), not Open MPI's
// banners; so does an Open MPI that cannot start the ranks.
func TestLaunchSaysWhatMPIReported(t *testing.T) {
	needMPI(t)
	dir := scriptDir(t, map[string]string{"exit3.js": `
const { dist } = require("zeroeng");
if (dist.rank === 1) process.exit(3);
dist.barrier().wait();`})
	r := zeroeng(t, dir, nil, "launch", "--nproc-per-node", "2", "exit3.js")
	if r.code != 3 || !strings.Contains(r.stderr, "zeroeng launch: rank 1 exited with status 3; mpirun stopped the other ranks") {
		t.Errorf("status %d\n%s", r.code, r.stderr)
	}
	for _, banner := range []string{"-----", "Primary job", "Process name"} {
		if strings.Contains(r.stdout+r.stderr, banner) {
			t.Errorf("Open MPI's banner came through (%q):\n%s%s", banner, r.stdout, r.stderr)
		}
	}
	// Open MPI does not always deliver its help text about the component
	// (its show_help can fail under load): then launch quotes what came.
	r = zeroeng(t, dir, []string{"OMPI_MCA_btl=nonexistent"}, "launch", "--nproc-per-node", "2", "exit3.js")
	if r.code == 0 || !strings.Contains(r.stderr, `Open MPI has no btl component named "nonexistent"`) && !strings.Contains(r.stderr, "Open MPI could not start the ranks") {
		t.Errorf("a misspelled Open MPI component: status %d\n%s", r.code, r.stderr)
	}
}
