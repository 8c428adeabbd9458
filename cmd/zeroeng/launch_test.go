package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Jobs of several processes, started as users start them: zeroeng launch,
// or zeroeng run under torchrun's variables. These tests run on the CPU
// without MPI (--spawn direct): the ranks meet at the rendezvous store and
// run scripts that do not communicate; mpi_test.go runs real training
// under mpirun.

// busyLoop keeps a rank running until it is signalled.
const busyLoop = `const t0 = Date.now(); while (Date.now() - t0 < 60000) {}`

func TestLaunchPrefixesEveryRank(t *testing.T) {
	dir := scriptDir(t, map[string]string{"hello.js": `
const { dist } = require("zeroeng");
console.log("hello from", dist.rank, "of", dist.worldSize, "local", dist.localRank);
console.error("stderr of", dist.rank);
`})
	r := zeroeng(t, dir, nil, "launch", "--spawn", "direct", "--nproc-per-node", "3", "--quiet",
		"--metrics", "m.jsonl", "--trace", "t.json", "hello.js")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	// Rank 0 writes the files named; the others their own beside them.
	for _, f := range []string{"m.jsonl", "m.rank1.jsonl", "m.rank2.jsonl", "t.json", "t.rank1.json", "t.rank2.json"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	for rank := range 3 {
		want := fmt.Sprintf("[%d] hello from %d of 3 local %d\n", rank, rank, rank)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
		if want := fmt.Sprintf("[%d] stderr of %d\n", rank, rank); !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stdout, "] [") {
		t.Errorf("a line has two prefixes:\n%s", r.stdout)
	}
}

// TestLaunchStopsTheOthersWhenOneFails: the rank that failed is the one
// named, also when it is rank 0, which serves the store and leaves last.
func TestLaunchStopsTheOthersWhenOneFails(t *testing.T) {
	dir := scriptDir(t, map[string]string{"fail.js": `
const { dist } = require("zeroeng");
if (dist.rank == Number(process.argv[2])) { throw new Error("rank " + dist.rank + " gives up"); }
` + busyLoop})
	for _, failing := range []int{1, 0} {
		r := zeroeng(t, dir, nil, "launch", "--spawn", "direct", "--nproc-per-node", "3", "--quiet", "fail.js", "--", strconv.Itoa(failing))
		if r.code != 1 {
			t.Fatalf("exit %d, want 1 (rank %d's status)\nstderr:\n%s", r.code, failing, r.stderr)
		}
		if r.took > 30*time.Second {
			t.Errorf("took %v: the other ranks were not stopped", r.took)
		}
		for _, want := range []string{fmt.Sprintf("rank %d gives up", failing), fmt.Sprintf("zeroeng launch: rank %d (pid ", failing), "exited with status 1; stopping the other 2 ranks"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
		}
	}
}

func TestLaunchNamesAKilledRank(t *testing.T) {
	dir := scriptDir(t, map[string]string{"pid.js": `
const { dist } = require("zeroeng");
console.log("pid", dist.rank, process.pid);
` + busyLoop})
	p := start(t, dir, nil, "launch", "--spawn", "direct", "--nproc-per-node", "2", "--quiet", "--grace", "5s", "pid.js")
	cmd, stderr, lines := p.cmd, p.stderr, p.lines
	pids := map[int]int{}
	re := regexp.MustCompile(`^\[(\d)\] pid (\d) (\d+)$`)
	for len(pids) < 2 && lines.Scan() {
		if m := re.FindStringSubmatch(lines.Text()); m != nil {
			rank, _ := strconv.Atoi(m[2])
			pid, _ := strconv.Atoi(m[3])
			pids[rank] = pid
		}
	}
	if len(pids) < 2 {
		t.Fatalf("the ranks did not print their pids: %v\n%s", pids, stderr.String())
	}
	start := time.Now()
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.drain()
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+9 {
		t.Fatalf("exit %d (%v), want 137 (rank 1's SIGKILL)\nstderr:\n%s", code, err, stderr.String())
	}
	want := fmt.Sprintf("zeroeng launch: rank 1 (pid %d) was killed by SIGKILL; stopping the other 1 rank", pids[1])
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("rank 0 stopped %v after rank 1 was killed", took)
	}
}

func TestLaunchForwardsSIGTERM(t *testing.T) {
	dir := scriptDir(t, map[string]string{"wait.js": `console.log("started");` + busyLoop})
	p := start(t, dir, nil, "launch", "--spawn", "direct", "--nproc-per-node", "2", "--quiet", "wait.js")
	cmd, stderr, lines := p.cmd, p.stderr, p.lines
	for n := 0; n < 2 && lines.Scan(); {
		if strings.HasSuffix(lines.Text(), "started") {
			n++
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	p.drain()
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 {
		t.Fatalf("exit %d, want 143\nstderr:\n%s", code, stderr.String())
	}
	if strings.Count(stderr.String(), "interrupted by SIGTERM") != 2 {
		t.Errorf("both ranks should report SIGTERM:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "stopping the other") {
		t.Errorf("a forwarded signal is not a rank's failure:\n%s", stderr.String())
	}
}

// rankEnv is the environment of rank of a job of size started by hand,
// with torchrun's variables.
func rankEnv(rank, size, port int) []string {
	return []string{"RANK=" + strconv.Itoa(rank), "WORLD_SIZE=" + strconv.Itoa(size),
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port)}
}

func TestRendezvousErrors(t *testing.T) {
	dir := scriptDir(t, map[string]string{"noop.js": `console.log("ran")`})
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a rank never arrives", func(t *testing.T) {
		r := zeroeng(t, dir, rankEnv(0, 3, port), "run", "--rdzv-timeout", "1s", "noop.js")
		if r.code == 0 || !strings.Contains(r.stderr, "ranks 1, 2 of 3 did not join within 1s") {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		if strings.Contains(r.stdout, "ran") {
			t.Errorf("the script ran without its ranks")
		}
	})

	t.Run("rank 0 never starts", func(t *testing.T) {
		r := zeroeng(t, dir, rankEnv(1, 2, port), "run", "--rdzv-timeout", "1s", "noop.js")
		if r.code == 0 || !strings.Contains(r.stderr, fmt.Sprintf("no store at 127.0.0.1:%d after 1s", port)) {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
	})

	t.Run("the port is in use", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		busy := l.Addr().(*net.TCPAddr).Port
		r := zeroeng(t, dir, rankEnv(0, 2, busy), "run", "--rdzv-timeout", "5s", "noop.js")
		if r.code == 0 || !strings.Contains(r.stderr, "the port is in use") || r.took > 4*time.Second {
			t.Fatalf("exit %d after %v\n%s", r.code, r.took, r.stderr)
		}
	})

	t.Run("world sizes differ", func(t *testing.T) {
		other := make(chan result, 1)
		go func() { other <- zeroeng(t, dir, rankEnv(1, 3, port), "run", "--rdzv-timeout", "20s", "noop.js") }()
		r0 := zeroeng(t, dir, rankEnv(0, 2, port), "run", "--rdzv-timeout", "20s", "noop.js")
		r1 := <-other
		if r0.code == 0 || r1.code == 0 {
			t.Fatalf("exits %d and %d\nrank 0:\n%s\nrank 1:\n%s", r0.code, r1.code, r0.stderr, r1.stderr)
		}
		if !strings.Contains(r1.stderr, "WORLD_SIZE 3 but rank 0") {
			t.Errorf("rank 1 should name the mismatch:\n%s", r1.stderr)
		}
		if r0.took > 15*time.Second || r1.took > 15*time.Second {
			t.Errorf("took %v and %v: a mismatch must not wait for the timeout", r0.took, r1.took)
		}
	})

	t.Run("bad variables", func(t *testing.T) {
		r := zeroeng(t, dir, []string{"RANK=x", "WORLD_SIZE=2"}, "run", "noop.js")
		if r.code != 2 || !strings.Contains(r.stderr, `RANK="x" is not a non-negative integer`) {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
	})

	t.Run("collectives need MPI on the CPU", func(t *testing.T) {
		dir := scriptDir(t, map[string]string{"ar.js": `
const { tensor, dist } = require("zeroeng");
dist.allReduce(tensor.ones([2]), "sum").wait();`})
		r := zeroeng(t, dir, nil, "launch", "--spawn", "direct", "--nproc-per-node", "2", "--quiet", "ar.js")
		if r.code != 1 || !strings.Contains(r.stderr, "collectives between processes on the CPU run on Open MPI") {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
	})
}

func TestLaunchUsageErrors(t *testing.T) {
	dir := scriptDir(t, map[string]string{"noop.js": ``})
	tests := []struct {
		args []string
		env  []string
		want string
	}{
		{args: []string{"launch"}, want: "no script given"},
		{args: []string{"launch", "missing.js"}, want: "cannot open script"},
		{args: []string{"launch", "--nproc-per-node", "0", "noop.js"}, want: "--nproc-per-node must be 1 or more"},
		{args: []string{"launch", "--nnodes", "2", "--node-rank", "2", "noop.js"}, want: "--node-rank 2 is not one of --nnodes 2"},
		{args: []string{"launch", "--nnodes", "2", "--spawn", "direct", "noop.js"}, want: "2 nodes need --master HOST:PORT"},
		{args: []string{"launch", "--master", "nohost", "noop.js"}, want: `--master "nohost" is not HOST:PORT`},
		{args: []string{"launch", "--spawn", "ssh", "noop.js"}, want: "--spawn must be auto, direct or mpirun"},
		{args: []string{"launch", "noop.js"}, env: []string{"RANK=0", "WORLD_SIZE=1"}, want: "RANK/WORLD_SIZE are already set"},
		{args: []string{"run", "--nproc", "2", "noop.js"}, env: rankEnv(0, 2, 1), want: "--nproc 2 in a job of 2 processes"},
	}
	for _, tc := range tests {
		r := zeroeng(t, dir, tc.env, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("zeroeng %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestPerRankFile(t *testing.T) {
	for path, want := range map[string]string{
		"trace.json":              "trace.rank2.json",
		"out/m.jsonl":             "out/m.rank2.jsonl",
		"metrics":                 "metrics.rank2",
		"run.d/metrics":           "run.d/metrics.rank2",
		filepath.Join("a.b", "c"): filepath.Join("a.b", "c.rank2"),
	} {
		if got := perRankFile(path, 2); got != want {
			t.Errorf("perRankFile(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestKilledRankStopsTheOthers: ranks started by hand (no launcher to
// stop them) learn through the rendezvous store that a rank was killed,
// and stop with an error naming it, though none waits in a collective.
func TestKilledRankStopsTheOthers(t *testing.T) {
	dir := scriptDir(t, map[string]string{"loop.js": `console.log("started");` + busyLoop})
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	startRank := func(rank int) (*exec.Cmd, *bytes.Buffer, <-chan struct{}) {
		p := start(t, dir, rankEnv(rank, 2, port), "run", "--quiet", "loop.js")
		ready := make(chan struct{})
		go func() {
			for p.lines.Scan() {
				if strings.HasSuffix(p.lines.Text(), "started") {
					close(ready)
				}
			}
		}()
		return p.cmd, p.stderr, ready
	}
	r0, stderr0, started0 := startRank(0)
	r1, _, started1 := startRank(1)
	for _, started := range []<-chan struct{}{started0, started1} {
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatalf("the ranks did not start:\n%s", stderr0)
		}
	}
	// Rank 1 dies: rank 0 names it. Then a second job where rank 0, which
	// serves the store, dies: rank 1 loses the store.
	if err := r1.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	r1.Wait()
	r0.Wait()
	if code := r0.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("rank 0 exit %d, want 1\n%s", code, stderr0)
	}
	want := fmt.Sprintf("stopped: rank 1 (%s pid %d) failed: it lost its connection to the store", hostname(t), r1.Process.Pid)
	if !strings.Contains(stderr0.String(), want) {
		t.Errorf("rank 0's stderr lacks %q:\n%s", want, stderr0)
	}

	r0, _, started0 = startRank(0)
	r1, stderr1, started1 := startRank(1)
	<-started0
	<-started1
	if err := r0.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r0.Wait()
	r1.Wait()
	if code := r1.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr1.String(), "stopped: rendezvous: lost the store at 127.0.0.1:") {
		t.Errorf("rank 1 exit %d after rank 0 was killed:\n%s", r1.ProcessState.ExitCode(), stderr1)
	}
	if took := time.Since(killed); took > 10*time.Second {
		t.Errorf("rank 0 stopped %v after rank 1 was killed", took)
	}
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestLaunchTwoNodes runs two launches side by side as two nodes of one
// job, each placed by flags, by Slurm's variables (srun with one task per
// node) or by Open MPI's (mpirun with one launch per node): the four ranks
// meet at node 0's store and each knows its place.
func TestLaunchTwoNodes(t *testing.T) {
	dir := scriptDir(t, map[string]string{"where.js": `
const { dist } = require("zeroeng");
console.log("rank", dist.rank, "of", dist.worldSize, "local", dist.localRank);`})
	for _, tc := range []struct {
		name string
		node func(node, port int) (args, env []string)
	}{
		{"flags", func(node, port int) ([]string, []string) {
			return []string{"--nnodes", "2", "--node-rank", strconv.Itoa(node), "--master", fmt.Sprintf("127.0.0.1:%d", port)}, nil
		}},
		{"flags and a secret", func(node, port int) ([]string, []string) {
			return []string{"--nnodes", "2", "--node-rank", strconv.Itoa(node), "--master", fmt.Sprintf("127.0.0.1:%d", port)},
				[]string{"ZEROENG_JOB_TOKEN=two-nodes-share-this-secret"}
		}},
		{"slurm", func(node, port int) ([]string, []string) {
			return nil, []string{"SLURM_STEP_ID=0", "SLURM_PROCID=" + strconv.Itoa(node), "SLURM_NTASKS=2", "SLURM_LOCALID=0",
				"SLURM_NODEID=" + strconv.Itoa(node), "SLURM_STEP_TASKS_PER_NODE=1(x2)", "SLURM_STEP_NODELIST=localhost,other",
				"MASTER_PORT=" + strconv.Itoa(port)}
		}},
		{"mpirun", func(node, port int) ([]string, []string) {
			return nil, []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(node), "OMPI_COMM_WORLD_SIZE=2",
				"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			results := make(chan result, 2)
			for node := range 2 {
				args, env := tc.node(node, port)
				all := append(append([]string{"launch", "--spawn", "direct", "--nproc-per-node", "2", "--quiet"}, args...), "where.js")
				go func() { results <- zeroeng(t, dir, env, all...) }()
			}
			var out string
			for range 2 {
				r := <-results
				if r.code != 0 {
					t.Fatalf("a node's launch exited %d\n%s\n%s", r.code, r.stdout, r.stderr)
				}
				out += r.stdout
			}
			for rank := range 4 {
				want := fmt.Sprintf("[%d] rank %d of 4 local %d\n", rank, rank, rank%2)
				if !strings.Contains(out, want) {
					t.Errorf("no line %q in:\n%s", want, out)
				}
			}
		})
	}
}

// TestLaunchJobSecret: a job across nodes whose store the network reaches
// needs ZEROENG_JOB_TOKEN; nodes with different secrets fail with an error
// that names it (and never prints a secret); a rank started by hand with
// a non-loopback MASTER_ADDR and no secret is refused before it listens.
func TestLaunchJobSecret(t *testing.T) {
	dir := scriptDir(t, map[string]string{"noop.js": `console.log("ran");`})
	r := zeroeng(t, dir, nil, "launch", "--spawn", "direct", "--nnodes", "2", "--node-rank", "1", "--master", "10.9.9.9:29500", "noop.js")
	if r.code != 2 || !strings.Contains(r.stderr, "a job of 2 nodes needs ZEROENG_JOB_TOKEN") {
		t.Errorf("two nodes without a secret: status %d\n%s", r.code, r.stderr)
	}
	r = zeroeng(t, dir, []string{"ZEROENG_JOB_TOKEN=short"}, "launch", "--nproc-per-node", "1", "noop.js")
	if r.code != 2 || !strings.Contains(r.stderr, "ZEROENG_JOB_TOKEN: the job secret has 5 bytes; it needs at least 16") {
		t.Errorf("a short secret: status %d\n%s", r.code, r.stderr)
	}
	r = zeroeng(t, dir, []string{"ZEROENG_JOB_TOKEN=abababababababab"}, "launch", "--nproc-per-node", "1", "noop.js")
	if r.code != 2 || !strings.Contains(r.stderr, "only 2 distinct characters in 16; it must be random") || strings.Contains(r.stderr, "abababab") {
		t.Errorf("a uniform secret: status %d\n%s", r.code, r.stderr)
	}
	r = zeroeng(t, dir, []string{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=10.9.9.9", "MASTER_PORT=29500"}, "run", "noop.js")
	if r.code == 0 || !strings.Contains(r.stderr, "reachable from the network, and ZEROENG_JOB_TOKEN is not set") {
		t.Errorf("a hand-started rank without a secret: status %d\n%s", r.code, r.stderr)
	}

	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"node-zero-has-this-secret", "node-one-has-another-one"}
	results := make(chan result, 2)
	for node := range 2 {
		go func() {
			results <- zeroeng(t, dir, []string{"ZEROENG_JOB_TOKEN=" + secrets[node]}, "launch", "--spawn", "direct", "--grace", "1s",
				"--nnodes", "2", "--node-rank", strconv.Itoa(node), "--master", fmt.Sprintf("127.0.0.1:%d", port), "--rdzv-timeout", "3s", "noop.js")
		}()
	}
	var all string
	for range 2 {
		r := <-results
		if r.code == 0 {
			t.Errorf("a node with its own secret succeeded:\n%s", r.stdout)
		}
		all += r.stdout + r.stderr
	}
	if !strings.Contains(all, "does not have the job's secret (ZEROENG_JOB_TOKEN)") {
		t.Errorf("the error does not name the secret:\n%s", all)
	}
	for _, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("a secret was printed:\n%s", all)
		}
	}
}

// TestSignalWhileWaitingForRanks: a rank waiting at the rendezvous for
// ranks that never come stops at the first SIGTERM, not at its timeout.
func TestSignalWhileWaitingForRanks(t *testing.T) {
	dir := scriptDir(t, map[string]string{"noop.js": `console.log("ran");`})
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, dir, []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port)}, "run", "noop.js")
	s.drain()
	time.Sleep(300 * time.Millisecond)
	sent := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	err = s.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 || time.Since(sent) > 3*time.Second {
		t.Fatalf("after SIGTERM: %v after %v\n%s", err, time.Since(sent), s.stderr)
	}
}
