package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/zeroeng/zeroeng/engine/jobenv"
	"github.com/zeroeng/zeroeng/engine/rendezvous"
	"github.com/zeroeng/zeroeng/internal/procwatch"
)

const launchDescription = `Starts a job of several processes, one rank each, as torchrun does: on this
node --nproc-per-node processes of "zeroeng run", with RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. Flags of
"zeroeng run" (--device, --seed, --metrics, ...) are passed on to every rank.

On GPUs (--device cuda) each process drives the GPU of its LOCAL_RANK, and the
ranks talk NCCL after meeting at the rendezvous store that rank 0 serves on
--master. On the CPU the ranks talk Open MPI: launch starts them with mpirun
(Debian's openmpi-bin), which must then be on the PATH; with --spawn direct they
meet at the store but have no transport, so their collectives fail (a script
without collectives still runs).

Every line a rank prints is prefixed with its rank. When a rank fails (a
non-zero exit, a signal), launch stops the others (SIGTERM, then SIGKILL after
--grace), names the rank, and exits with its status. SIGINT and SIGTERM are
passed on to every rank (a checkpoint.Manager turns SIGTERM into a checkpoint
and exit 0); a second one, a second or more later, kills them. mpirun and
the ranks are not in launch's process group: a signal to the group (Ctrl-C,
timeout, kill -- -PGID) reaches them once, through launch.

The rendezvous store admits only the processes that have the job's secret,
ZEROENG_JOB_TOKEN: launch makes one for a job of one node; a job of several
nodes needs it set, the same on every node (at least 16 random characters).

Several nodes: run launch once per node with the same --nnodes, --master and
ZEROENG_JOB_TOKEN and each node's --node-rank. Under Slurm (srun --ntasks-per-node=1 zeroeng launch)
and under mpirun (one launch per node), --nnodes, --node-rank and the master's
host come from their variables (SLURM_*, OMPI_*, PMI_*); MASTER_PORT (default
29500) must be free on the master's host.

Examples:

   zeroeng launch --nproc-per-node 2 samples/zero_overlap.js
   zeroeng launch --nproc-per-node 8 --device cuda samples/gpt.js -- --config gpt2 --dtype bfloat16
   zeroeng launch --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 --nproc-per-node 8 --device cuda train.js`

func launchCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.IntFlag{Name: "nproc-per-node", Value: 1, Usage: "processes (ranks) to start on this node", EnvVars: []string{"ZEROENG_NPROC_PER_NODE"}},
		&cli.IntFlag{Name: "nnodes", Value: 1, Usage: "nodes in the job (each runs zeroeng launch)"},
		&cli.IntFlag{Name: "node-rank", Usage: "this node's place among the nodes, 0 to nnodes-1"},
		&cli.StringFlag{Name: "master", Usage: "`HOST:PORT` of the rendezvous store that rank 0 serves (one node: 127.0.0.1 and a free port)"},
		&cli.StringFlag{Name: "spawn", Value: "auto", Usage: "how the ranks start: auto (mpirun on the CPU, directly on GPUs), direct or mpirun"},
		&cli.DurationFlag{Name: "grace", Value: 30 * time.Second, Usage: "after a rank fails, how long the others have to stop after SIGTERM before SIGKILL"},
	}
	for _, f := range runCommand().Flags {
		if f.Names()[0] != "nproc" {
			flags = append(flags, f)
		}
	}
	return &cli.Command{
		Name:         "launch",
		Usage:        "start a job of several processes on this node (as torchrun), one rank each",
		ArgsUsage:    "script.js [-- script args...]",
		Description:  launchDescription,
		OnUsageError: onUsageError,
		Flags:        flags,
		Action:       launchAction,
	}
}

// launchPlan is the checked command line of zeroeng launch.
type launchPlan struct {
	nproc, nnodes, nodeRank int
	masterAddr              string
	masterPort              int
	mpirun                  bool
	grace                   time.Duration
	runArgs                 []string // for every rank: "run", flags, script, "--", script args
	// token is the job's secret launch made (ZEROENG_JOB_TOKEN), when
	// the environment has none; the ranks get it, nobody sees it.
	token string
}

func parseLaunch(c *cli.Context) (launchPlan, error) {
	p := launchPlan{nproc: c.Int("nproc-per-node"), nnodes: c.Int("nnodes"), nodeRank: c.Int("node-rank"), grace: c.Duration("grace")}
	args := c.Args().Slice()
	if len(args) == 0 {
		return p, usagef("launch", "launch: no script given; try: zeroeng launch --nproc-per-node 2 samples/zero_overlap.js")
	}
	if st, err := os.Stat(args[0]); err != nil {
		return p, usagef("launch", "launch: cannot open script: %v", err)
	} else if st.IsDir() {
		return p, usagef("launch", "launch: %s is a directory, not a script", args[0])
	}
	if p.nproc < 1 {
		return p, usagef("launch", "launch: --nproc-per-node must be 1 or more, got %d", p.nproc)
	}
	if p.grace < 0 {
		return p, usagef("launch", "launch: --grace must not be negative, got %v", p.grace)
	}

	// Under srun or mpirun with one launch per node, the launcher's
	// ranks are the nodes.
	node, found, err := jobenv.FromEnv(os.Getenv)
	if err != nil {
		return p, usagef("launch", "launch: %v", err)
	}
	if found && node.Source == "torchrun" {
		return p, usagef("launch", "launch: RANK/WORLD_SIZE are already set (RANK=%d WORLD_SIZE=%d): zeroeng launch starts the ranks itself; run zeroeng run instead, or unset them", node.Rank, node.Size)
	}
	if found && !c.IsSet("nnodes") && !c.IsSet("node-rank") {
		p.nnodes, p.nodeRank = node.Size, node.Rank
	}
	if p.nnodes < 1 || p.nodeRank < 0 || p.nodeRank >= p.nnodes {
		return p, usagef("launch", "launch: --node-rank %d is not one of --nnodes %d", p.nodeRank, p.nnodes)
	}

	cuda := c.String("device") == "cuda"
	switch s := c.String("spawn"); s {
	case "auto":
		p.mpirun = !cuda && p.nproc*p.nnodes > 1
	case "direct":
	case "mpirun":
		p.mpirun = true
	default:
		return p, usagef("launch", "launch: --spawn must be auto, direct or mpirun, got %q", s)
	}
	if p.mpirun {
		if p.nnodes > 1 {
			return p, usagef("launch", "launch: on the CPU the ranks talk Open MPI, and an MPI job across nodes is started by mpirun itself: mpirun -np N -H host1,host2 zeroeng run %s", args[0])
		}
		if found {
			return p, usagef("launch", "launch: this is already an MPI or Slurm job (%s variables); on the CPU start the ranks with mpirun -np N zeroeng run %s", node.Source, args[0])
		}
		if _, err := exec.LookPath("mpirun"); err != nil {
			return p, usagef("launch", "launch: the ranks on the CPU talk Open MPI, started by mpirun, which is not on the PATH: install Debian's openmpi-bin (or use --device cuda)")
		}
	}

	// Where rank 0 serves the rendezvous store.
	master := c.String("master")
	if master == "" && os.Getenv("MASTER_ADDR") != "" {
		master = net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
		if os.Getenv("MASTER_PORT") == "" {
			master = net.JoinHostPort(os.Getenv("MASTER_ADDR"), strconv.Itoa(jobenv.DefaultPort))
		}
	}
	if master == "" && found && node.MasterAddr != "" {
		master = node.Addr()
	}
	switch {
	case master != "":
		host, port, err := net.SplitHostPort(master)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 1 || n > 65535 || host == "" {
			return p, usagef("launch", "launch: --master %q is not HOST:PORT", master)
		}
		p.masterAddr, p.masterPort = host, n
	case p.nnodes > 1:
		return p, usagef("launch", "launch: %d nodes need --master HOST:PORT, the address where rank 0 (node 0) serves the rendezvous store", p.nnodes)
	default:
		p.masterAddr = "127.0.0.1"
		if p.masterPort, err = freePort(); err != nil {
			return p, fmt.Errorf("launch: no free port for the rendezvous store: %w", err)
		}
	}

	// The job's secret, which the rendezvous store asks of every rank.
	switch tok := os.Getenv(jobTokenEnv); {
	case tok != "":
		if _, err := jobSecret(net.JoinHostPort(p.masterAddr, strconv.Itoa(p.masterPort))); err != nil {
			return p, usagef("launch", "launch: %v", strings.TrimPrefix(err.Error(), "run: "))
		}
	case p.nnodes > 1 && isLoopbackHost(p.masterAddr):
		// Nodes on one host (a test): a loopback store is open to this
		// host's processes only, as without launch.
	case p.nnodes > 1:
		return p, usagef("launch", "launch: a job of %d nodes needs %s, the same secret of at least %d characters on every node, which the rendezvous store asks of every rank (for example export %s=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') and pass it to each node's launch)", p.nnodes, jobTokenEnv, rendezvous.MinSecretLen, jobTokenEnv)
	default:
		// 16 random bytes in hex; drawn again in the rare case (about 1
		// in 28 million) that the rendezvous would refuse it as too
		// uniform (fewer than 8 distinct characters).
		for p.token == "" || rendezvous.CheckSecret([]byte(p.token)) != nil {
			b := make([]byte, 16)
			if _, err := rand.Read(b); err != nil {
				return p, fmt.Errorf("launch: making the job's secret: %w", err)
			}
			p.token = hex.EncodeToString(b)
		}
	}

	// Every rank runs "zeroeng run" with launch's run flags.
	p.runArgs = []string{"run"}
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if !isRunFlag(name) || !c.IsSet(name) {
			continue
		}
		p.runArgs = append(p.runArgs, fmt.Sprintf("--%s=%v", name, c.Value(name)))
	}
	p.runArgs = append(p.runArgs, args[0])
	if rest := args[1:]; len(rest) > 0 {
		if rest[0] != "--" {
			p.runArgs = append(p.runArgs, "--")
		}
		p.runArgs = append(p.runArgs, rest...)
	}
	return p, nil
}

func isRunFlag(name string) bool {
	switch name {
	case "nproc-per-node", "nnodes", "node-rank", "master", "spawn", "grace", "help":
		return false
	}
	return true
}

// freePort asks the system for a TCP port that is free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func launchAction(c *cli.Context) error {
	p, err := parseLaunch(c)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("launch: cannot find the zeroeng binary: %w", err)
	}
	env := launchEnv(os.Environ(), p)
	if p.mpirun {
		return runUnderMPI(self, env, p)
	}
	return runDirect(self, env, p)
}

// launchEnv is the environment every rank shares: launch's own, without
// the variables of the launcher that started launch (the ranks get their
// own), with a share of the cores each.
func launchEnv(parent []string, p launchPlan) []string {
	var env []string
	for _, kv := range parent {
		k, _, _ := strings.Cut(kv, "=")
		if isLauncherVar(k) {
			continue
		}
		env = append(env, kv)
	}
	if p.token != "" {
		env = append(env, jobTokenEnv+"="+p.token)
	}
	if os.Getenv("ZEROENG_THREADS") == "" {
		// The ranks of a node share its cores, as torchrun's
		// OMP_NUM_THREADS does.
		env = append(env, fmt.Sprintf("ZEROENG_THREADS=%d", max(1, runtime.NumCPU()/p.nproc)))
	}
	return env
}

func isLauncherVar(k string) bool {
	for _, v := range jobenv.Variables {
		if k == v {
			return true
		}
	}
	for _, prefix := range []string{"OMPI_", "PMIX_", "PMI_", "SLURM_", "ORTE_", "OPAL_"} {
		if strings.HasPrefix(k, prefix) && !strings.HasPrefix(k, "OMPI_MCA_") {
			return true
		}
	}
	return k == launchedEnv
}

// mpirunShutdownGrace is how long mpirun may take to exit once every
// rank has ended.
const mpirunShutdownGrace = 10 * time.Second

// runUnderMPI starts the node's ranks with mpirun, which prefixes nothing:
// the ranks prefix their own lines, and mpirun stops them all when one
// fails and names it.
func runUnderMPI(self string, env []string, p launchPlan) error {
	args := []string{"-np", strconv.Itoa(p.nproc), "--oversubscribe", "--bind-to", "none"}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-run-as-root")
	}
	args = append(args, "-x", "ZEROENG_THREADS", "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", jobTokenEnv)
	args = append(args, self)
	args = append(args, p.runArgs...)
	cmd := exec.Command("mpirun", args...)
	cmd.Env = append(env, "MASTER_ADDR="+p.masterAddr, "MASTER_PORT="+strconv.Itoa(p.masterPort))
	// mpirun in a process group of its own (Open MPI puts each rank in
	// one of its own too): a signal to launch's group (a terminal's
	// Ctrl-C, timeout(1), kill -- -PGID) then reaches launch alone, which
	// passes it on to the ranks once. In launch's group mpirun got it as
	// well and aborted the job: SIGTERM to the ranks, which took it for a
	// second request and exited at once, SIGKILL a second later,
	// checkpoint or not, and status 1. Counting the copies of a signal
	// once (sameRequest) cannot help there, as mpirun's answer to any
	// copy ends the job; and process groups alone do not help where
	// every process is signalled (Slurm, systemd) or launch itself gets
	// a signal twice (timeout(1)): both are needed.
	cmd.SysProcAttr = mpirunProcAttr()
	stdout, err1 := cmd.StdoutPipe()
	stderr, err2 := cmd.StderrPipe()
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("launch: mpirun: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("launch: mpirun: %w", err)
	}
	// Open MPI's own messages are held back and said in our words when
	// the job ends.
	var mpiOut mpirunOutput
	var copying sync.WaitGroup
	copying.Add(2)
	go func() { defer copying.Done(); mpiOut.copy(os.Stdout, stdout) }()
	go func() { defer copying.Done(); mpiOut.copy(os.Stderr, stderr) }()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan error, 1)
	go func() {
		copying.Wait() // Wait closes the pipes: read them to the end first
		done <- cmd.Wait()
	}()
	// An mpirun that outlives every rank is stuck in its own shutdown
	// (procwatch): it is stopped, and the job ends as the ranks did.
	watch, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	var stuck atomic.Bool
	go func() {
		if procwatch.Outlived(watch, cmd.Process.Pid, mpirunShutdownGrace) {
			stuck.Store(true)
			cmd.Process.Kill()
		}
	}()
	var (
		reqs      stopRequests
		forwarded os.Signal // the first signal launch passed on
	)
	for {
		select {
		case sig := <-sigs:
			req := reqs.add(time.Now())
			if req == echoRequest {
				continue // the first signal again (sameRequest)
			}
			if req == firstRequest {
				forwarded = sig
			}
			// The ranks get the signal themselves, as with direct spawns,
			// so that a checkpoint.Manager can save and exit 0: mpirun
			// would answer SIGTERM by killing them a second later, and
			// exit 1 whatever they did. mpirun forks this node's ranks
			// itself; without them (gone already), mpirun gets it, as it
			// does a second request, to end the job.
			ranks := procwatch.Running(cmd.Process.Pid)
			for _, pid := range ranks {
				syscall.Kill(pid, sig.(syscall.Signal))
			}
			if len(ranks) == 0 || req == secondRequest {
				cmd.Process.Signal(sig)
			}
		case err := <-done:
			code := exitCode(cmd.ProcessState)
			if stuck.Load() {
				// Its status is lost: the ranks' is what it reported.
				code, err = mpiOut.rankStatus(), nil
				fmt.Fprintf(os.Stderr, "zeroeng launch: every rank had ended, but mpirun did not exit within %v (Open MPI's mpirun can hang in its own shutdown): stopped it\n", mpirunShutdownGrace)
			}
			// Ranks that ended as the signal launch passed on asked (130
			// after SIGINT) did not fail, though mpirun, which takes such
			// an exit for one, stopped the others: as with direct spawns,
			// there is nothing to explain.
			honoured := forwarded != nil && code == 128+int(forwarded.(syscall.Signal))
			if msg := mpiOut.explain(code); msg != "" && !honoured {
				fmt.Fprintln(os.Stderr, msg)
			}
			if code != 0 {
				return exitStatus{code}
			}
			return err
		}
	}
}

// rankProc is one rank started directly.
type rankProc struct {
	cmd    *exec.Cmd
	out    sync.WaitGroup // its output copiers
	exited bool           // its exit has been received (runDirect's loop's own)
}

type rankExit struct {
	local, rank int
	state       *os.ProcessState
}

// runDirect starts the node's ranks as child processes, prefixes their
// output, forwards signals and stops them all when one fails.
func runDirect(self string, env []string, p launchPlan) error {
	world := p.nproc * p.nnodes
	var out lockedWriter
	procs := make([]*rankProc, p.nproc)
	exits := make(chan rankExit, p.nproc)
	started := 0
	stopAll := func(sig syscall.Signal) {
		for _, rp := range procs[:started] {
			if !rp.exited {
				rp.cmd.Process.Signal(sig)
			}
		}
	}
	for local := range procs {
		rank := p.nodeRank*p.nproc + local
		cmd := exec.Command(self, p.runArgs...)
		cmd.Env = append(env,
			"RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(world),
			"LOCAL_RANK="+strconv.Itoa(local), "LOCAL_WORLD_SIZE="+strconv.Itoa(p.nproc),
			"GROUP_RANK="+strconv.Itoa(p.nodeRank),
			"MASTER_ADDR="+p.masterAddr, "MASTER_PORT="+strconv.Itoa(p.masterPort),
			launchedEnv+"=1")
		// Their own process group: a Ctrl-C at the terminal reaches
		// launch only, which passes it on once (a second SIGINT would
		// make a rank exit at once). Pdeathsig kills a rank whose
		// launch was killed.
		cmd.SysProcAttr = rankProcAttr()
		stdout, err1 := cmd.StdoutPipe()
		stderr, err2 := cmd.StderrPipe()
		if err := errors.Join(err1, err2); err != nil {
			stopAll(syscall.SIGKILL)
			return fmt.Errorf("launch: rank %d: %w", rank, err)
		}
		if err := cmd.Start(); err != nil {
			stopAll(syscall.SIGKILL)
			return fmt.Errorf("launch: starting rank %d: %w", rank, err)
		}
		rp := &rankProc{cmd: cmd}
		procs[local] = rp
		started++
		prefix := fmt.Sprintf("[%d] ", rank)
		rp.out.Add(2)
		go func() { defer rp.out.Done(); copyLines(&out, os.Stdout, prefix, stdout) }()
		go func() { defer rp.out.Done(); copyLines(&out, os.Stderr, prefix, stderr) }()
		go func() {
			rp.out.Wait() // Wait closes the pipes: read them to the end first
			cmd.Wait()
			exits <- rankExit{local, rank, cmd.ProcessState}
		}()
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var (
		reqs      stopRequests
		forwarded os.Signal // the first signal launch passed on
		failed    *rankExit // the first rank that failed on its own
		status    int
		kill      <-chan time.Time
	)
	for running := p.nproc; running > 0; {
		select {
		case sig := <-sigs:
			switch reqs.add(time.Now()) {
			case echoRequest:
				continue // the first signal again (sameRequest)
			case secondRequest:
				out.printf(os.Stderr, "zeroeng launch: %s again: killing the ranks\n", signalName(sig))
				stopAll(syscall.SIGKILL)
				continue
			}
			forwarded = sig
			stopAll(sig.(syscall.Signal))
		case e := <-exits:
			running--
			procs[e.local].exited = true
			code := exitCode(e.state)
			if code == 0 || failed != nil {
				continue
			}
			if forwarded != nil {
				if status == 0 {
					status = code
				}
				continue
			}
			failed, status = &e, code
			if running > 0 {
				out.printf(os.Stderr, "zeroeng launch: rank %d (pid %d) %s; stopping the other %s\n", e.rank, e.state.Pid(), describeExit(e.state), plural(running, "rank"))
				stopAll(syscall.SIGTERM)
				kill = time.After(p.grace)
			} else {
				out.printf(os.Stderr, "zeroeng launch: rank %d (pid %d) %s\n", e.rank, e.state.Pid(), describeExit(e.state))
			}
		case <-kill:
			out.printf(os.Stderr, "zeroeng launch: the ranks did not stop within --grace %v: killing them\n", p.grace)
			stopAll(syscall.SIGKILL)
		}
	}
	if forwarded != nil && status == 0 && failed == nil {
		return nil // every rank honoured the signal and ended well
	}
	if status != 0 {
		return exitStatus{status}
	}
	return nil
}

// exitCode is a process's status as a shell reports it (128+n after
// signal n).
func exitCode(st *os.ProcessState) int {
	if st == nil {
		return 1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

func describeExit(st *os.ProcessState) string {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by %s", unixSignalName(ws.Signal()))
	}
	return fmt.Sprintf("exited with status %d", st.ExitCode())
}

func unixSignalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGQUIT: "SIGQUIT"}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}

// lockedWriter serialises whole lines from several ranks onto launch's
// stdout and stderr.
type lockedWriter struct{ mu sync.Mutex }

func (l *lockedWriter) write(w io.Writer, b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.Write(b)
}

func (l *lockedWriter) printf(w io.Writer, format string, args ...any) {
	l.write(w, []byte(fmt.Sprintf(format, args...)))
}

// copyLines copies r to w line by line, each line prefixed; a last line
// without its newline gets one.
func copyLines(l *lockedWriter, w io.Writer, prefix string, r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if !strings.HasSuffix(line, "\n") {
				line += "\n"
			}
			l.write(w, []byte(prefix+line))
		}
		if err != nil {
			return
		}
	}
}
