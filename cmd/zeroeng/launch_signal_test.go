package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/checkpoint"
)

// Signals as they reach a job: to a whole process group (a terminal's
// Ctrl-C, timeout(1), kill -- -PGID), to every process (Slurm, systemd),
// or twice to one process (timeout(1) signals its command and then its
// group). However many copies arrive, one signal is one request; a second
// signal, seconds later, is the escape hatch.

// stopJS trains a tiny model under a checkpoint.Manager that saves only
// when SIGTERM asks (every 0): train.js -- DIR STEP_MS LAST. Each step
// takes STEP_MS; at step 1 every rank prints "training RANK PID".
const stopJS = `
const { tensor, nn, optim, checkpoint, dist } = require("zeroeng");
const [dir, stepMs, last] = process.argv.slice(2);
const model = nn.Linear(4, 1);
const opt = optim.SGD(model.parameters(), { lr: 0.01 });
const ckpt = checkpoint.Manager(dir, { state: { model, optimizer: opt } });
const resumed = ckpt.load();
if (resumed) console.log("resumed from step", resumed.step);
for (let step = resumed ? resumed.step + 1 : 1; step <= Number(last); step++) {
  if (step === 1) console.log("training", dist.rank, process.pid);
  const loss = model.forward(tensor.ones([2, 4])).sum();
  opt.zeroGrad(); loss.backward(); opt.step();
  const t0 = Date.now(); while (Date.now() - t0 < Number(stepMs)) {}
  ckpt.save(step);
}`

// groupJob is zeroeng started in a process group of its own, as setsid,
// a shell's job control, timeout(1) or a batch system starts it, so that
// a test can signal the group as they do.
type groupJob struct {
	cmd  *exec.Cmd
	out  *lockedBuffer // stdout and stderr
	done chan struct{} // closed once it has exited
}

func startGroup(t *testing.T, dir string, args ...string) *groupJob {
	t.Helper()
	g := &groupJob{cmd: exec.Command(binary, args...), out: &lockedBuffer{}, done: make(chan struct{})}
	g.cmd.Dir = dir
	g.cmd.Env = cleanEnv()
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.cmd.Wait(); close(g.done) }()
	t.Cleanup(func() {
		// The group, and with launch gone its ranks (the parent-death
		// signal) and mpirun.
		syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
		<-g.done
	})
	return g
}

// training waits until n ranks have started training and returns their
// pids by rank.
func (g *groupJob) training(t *testing.T, n int) map[int]int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(?:\[\d+\] )?training (\d+) (\d+)$`)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		pids := map[int]int{}
		for _, m := range re.FindAllStringSubmatch(g.out.String(), -1) {
			rank, _ := strconv.Atoi(m[1])
			pids[rank], _ = strconv.Atoi(m[2])
		}
		if len(pids) == n {
			return pids
		}
		select {
		case <-g.done:
			t.Fatalf("ended before %d ranks trained:\n%s", n, g.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ranks did not start training within a minute:\n%s", n, g.out)
		}
	}
}

// signal sends sig to the whole process group.
func (g *groupJob) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(-g.cmd.Process.Pid, sig); err != nil {
		t.Fatal(err)
	}
}

// wait returns the exit status, or fails the test after d.
func (g *groupJob) wait(t *testing.T, d time.Duration, after string) int {
	t.Helper()
	select {
	case <-g.done:
		return g.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("still running %v after %s:\n%s", d, after, g.out)
		return 0
	}
}

// savedStep checks that dir/ck holds an intact checkpoint, saved on
// SIGTERM as out says, and returns its step.
func savedStep(t *testing.T, dir, out string) int {
	t.Helper()
	path, err := checkpoint.Latest(filepath.Join(dir, "ck"))
	if err != nil || path == "" {
		t.Fatalf("no checkpoint (%v):\n%s", err, out)
	}
	m, err := checkpoint.Verify(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf("stop requested: saved ck/%s after step %d; exiting", filepath.Base(path), m.Step)) {
		t.Errorf("no word of the save of step %d:\n%s", m.Step, out)
	}
	return int(m.Step)
}

// TestLaunchSIGTERMToTheGroup: SIGTERM to a launched job's process group
// (kill -- -PGID, timeout(1)) reaches each rank once: a checkpoint, saved
// and resumable, and status 0. mpirun, in launch's group, used to get it
// too and abort the job: every rank had SIGTERM twice, the second read as
// "exit at once", and launch exited 1, often without a checkpoint.
func TestLaunchSIGTERMToTheGroup(t *testing.T) {
	needMPI(t)
	dir := scriptDir(t, map[string]string{"train.js": stopJS})
	g := startGroup(t, dir, "launch", "--nproc-per-node", "2", "--quiet", "train.js", "--", "ck", "50", "100000")
	g.training(t, 2)
	g.signal(t, syscall.SIGTERM)
	code := g.wait(t, 30*time.Second, "SIGTERM")
	out := g.out.String()
	if code != 0 || strings.Contains(out, "again:") {
		t.Fatalf("exit %d after one SIGTERM to the group, want 0 and no second request:\n%s", code, out)
	}
	step := savedStep(t, dir, out)

	// Launched again, every rank resumes from it.
	r := zeroeng(t, dir, nil, "launch", "--nproc-per-node", "2", "--quiet", "train.js", "--", "ck", "0", strconv.Itoa(step+1))
	for rank := range 2 {
		if want := fmt.Sprintf("[%d] resumed from step %d\n", rank, step); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("resuming: exit %d, no %q:\n%s\n%s", r.code, want, r.stdout, r.stderr)
		}
	}
}

// TestLaunchSIGINTToTheGroup: a Ctrl-C (SIGINT to the foreground group)
// ends a launched job as it ends zeroeng run: every rank interrupted,
// status 130, and no word of a failure. mpirun, in launch's group, used
// to abort the job on it: SIGTERM to every rank ("SIGTERM again") and
// status 1.
func TestLaunchSIGINTToTheGroup(t *testing.T) {
	needMPI(t)
	dir := scriptDir(t, map[string]string{"train.js": stopJS})
	g := startGroup(t, dir, "launch", "--nproc-per-node", "2", "--quiet", "train.js", "--", "ck", "50", "100000")
	g.training(t, 2)
	g.signal(t, syscall.SIGINT)
	code := g.wait(t, 30*time.Second, "SIGINT")
	out := g.out.String()
	if code != 130 {
		t.Fatalf("exit %d after SIGINT to the group, want 130:\n%s", code, out)
	}
	for rank := range 2 {
		if want := fmt.Sprintf("[%d] zeroeng: interrupted by SIGINT", rank); !strings.Contains(out, want) {
			t.Errorf("no %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"again:", "mpirun stopped the other ranks", "exited with status"} {
		if strings.Contains(out, bad) {
			t.Errorf("a forwarded SIGINT reads as a failure (%q):\n%s", bad, out)
		}
	}
}

// TestLaunchDirectSIGINT: ranks that launch starts itself (--spawn
// direct, as on GPUs) end a Ctrl-C as zeroeng run does, whether the
// SIGINT comes to launch's group (a terminal) or to every process (Slurm,
// systemd: each rank has it twice, from them and from launch): every rank
// interrupted once, status 130. A rank stops at its next JavaScript
// statement, after the matrix product it is in (0.3 s with the two ranks
// sharing two cores, 0.15 s alone), so both copies usually reach it while it runs: the second 50ms
// after the first, lest Go's runtime merge them into one.
func TestLaunchDirectSIGINT(t *testing.T) {
	dir := scriptDir(t, map[string]string{"loop.js": `
const { tensor, dist } = require("zeroeng");
const a = tensor.randn([2048, 2048]);
console.log("training", dist.rank, process.pid);
for (const t0 = Date.now(); Date.now() - t0 < 60000;) a.matmul(a);`})
	for _, every := range []bool{false, true} {
		t.Run(fmt.Sprintf("every process=%v", every), func(t *testing.T) {
			g := startGroup(t, dir, "launch", "--spawn", "direct", "--nproc-per-node", "2", "--quiet", "loop.js")
			pids := g.training(t, 2)
			if every {
				g.signal(t, syscall.SIGINT) // launch, which passes it on
				time.Sleep(50 * time.Millisecond)
				for _, pid := range pids {
					// A rank whose product ended just after launch's copy
					// may have stopped already: then it had one copy.
					if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
						t.Fatal(err)
					} else if err != nil {
						t.Logf("rank process %d had stopped before the second copy", pid)
					}
				}
			} else {
				g.signal(t, syscall.SIGINT)
			}
			code := g.wait(t, 20*time.Second, "SIGINT")
			out := g.out.String()
			if code != 130 || strings.Count(out, "zeroeng: interrupted by SIGINT") != 2 || strings.Contains(out, "again:") {
				t.Fatalf("exit %d, want 130 and each rank interrupted once:\n%s", code, out)
			}
		})
	}
}

// TestLaunchSIGTERMToEveryProcess: Slurm and systemd signal every process
// of a job, so each rank has SIGTERM from them and again from launch,
// which passes it on: still one request, a checkpoint and status 0. The
// steps are long, so that the copy comes mid-step, before the save.
func TestLaunchSIGTERMToEveryProcess(t *testing.T) {
	needMPI(t)
	dir := scriptDir(t, map[string]string{"train.js": stopJS})
	g := startGroup(t, dir, "launch", "--nproc-per-node", "2", "--quiet", "train.js", "--", "ck", "400", "100000")
	pids := g.training(t, 2)
	if err := syscall.Kill(g.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // lest Go's runtime merge the copies
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	code := g.wait(t, 30*time.Second, "SIGTERM")
	out := g.out.String()
	if code != 0 || strings.Contains(out, "again:") {
		t.Fatalf("exit %d after SIGTERM to launch and each rank, want 0 and no second request:\n%s", code, out)
	}
	savedStep(t, dir, out)
}

// TestLaunchSecondSIGTERMForcesExit: a second SIGTERM to the group,
// seconds after the first, ends a job whose step never ends (so whose
// checkpoint never comes) at once.
func TestLaunchSecondSIGTERMForcesExit(t *testing.T) {
	needMPI(t)
	dir := scriptDir(t, map[string]string{"train.js": stopJS})
	g := startGroup(t, dir, "launch", "--nproc-per-node", "2", "--quiet", "train.js", "--", "ck", "1e9", "100000")
	g.training(t, 2)
	g.signal(t, syscall.SIGTERM)
	time.Sleep(2 * sameRequest)
	select {
	case <-g.done:
		t.Fatalf("the first SIGTERM ended a step that never ends:\n%s", g.out)
	default:
	}
	g.signal(t, syscall.SIGTERM)
	code := g.wait(t, 15*time.Second, "the second SIGTERM")
	out := g.out.String()
	if code == 0 || !strings.Contains(out, "zeroeng: SIGTERM again: exiting without waiting for the ranks") {
		t.Fatalf("exit %d after a second SIGTERM, want a failure and the ranks' word of it:\n%s", code, out)
	}
}

// TestRunSIGTERMTwiceAtOnce: timeout(1) sends SIGTERM to its command and
// then to its group, so zeroeng run gets it twice, a moment apart: one
// request, a checkpoint and status 0. Under timeout -s TERM, 1 run in 5
// used to take the copy for a second request and exit mid-step without
// saving; here the copy comes 100ms later (lest Go's runtime merge the
// two), within the step, every time.
func TestRunSIGTERMTwiceAtOnce(t *testing.T) {
	dir := scriptDir(t, map[string]string{"train.js": stopJS})
	g := startGroup(t, dir, "run", "--quiet", "train.js", "--", "ck", "500", "100000")
	g.training(t, 1)
	if err := syscall.Kill(g.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	g.signal(t, syscall.SIGTERM)
	code := g.wait(t, 30*time.Second, "SIGTERM")
	out := g.out.String()
	if code != 0 || strings.Contains(out, "again:") {
		t.Fatalf("exit %d after SIGTERM twice at once, want 0 and no second request:\n%s", code, out)
	}
	savedStep(t, dir, out)
}

// TestRunSecondSIGTERMExits: a second SIGTERM seconds after the first
// still exits at once, with 143.
func TestRunSecondSIGTERMExits(t *testing.T) {
	dir := scriptDir(t, map[string]string{"train.js": stopJS})
	g := startGroup(t, dir, "run", "--quiet", "train.js", "--", "ck", "1e9", "100000")
	g.training(t, 1)
	g.signal(t, syscall.SIGTERM)
	time.Sleep(2 * sameRequest)
	g.signal(t, syscall.SIGTERM)
	code := g.wait(t, 10*time.Second, "the second SIGTERM")
	if out := g.out.String(); code != 143 || !strings.Contains(out, "zeroeng: SIGTERM again: exiting without waiting for the ranks") {
		t.Fatalf("exit %d after a second SIGTERM, want 143:\n%s", code, out)
	}
}

func TestStopRequests(t *testing.T) {
	var r stopRequests
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		after time.Duration
		want  stopRequest
	}{
		{0, firstRequest},
		{0, echoRequest},
		{sameRequest / 2, echoRequest},
		{sameRequest - 1, echoRequest},
		{sameRequest, secondRequest},
		{3 * sameRequest, secondRequest},
	} {
		if got := r.add(t0.Add(tc.after)); got != tc.want {
			t.Errorf("a signal %v after the first: %v, want %v", tc.after, got, tc.want)
		}
	}
}
