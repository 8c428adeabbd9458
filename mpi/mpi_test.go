package mpi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
	"github.com/zeroeng/zeroeng/internal/procwatch"
)

// The tests that need several processes run the test binary itself under
// mpirun: the parent starts `mpirun -np N <test binary> -test.run
// '^TestX$'` with childEnv set, and every rank runs TestX's body on its
// own World (one per process, made on first use and closed by TestMain).
// A rank whose check fails exits non-zero with a message naming it, which
// makes mpirun end the job; the parent checks mpirun's exit code and
// shows the output.
const (
	childEnv   = "ZEROENG_MPI_TEST_CHILD"   // set in the ranks
	timeoutEnv = "ZEROENG_MPI_TEST_TIMEOUT" // the world's dist.Options.Timeout
	debugEnv   = "ZEROENG_MPI_TEST_DEBUG"   // dist.Options.Debug
	traceEnv   = "ZEROENG_MPI_TEST_TRACE"   // dist.Options.Trace
	chunkEnv   = "ZEROENG_MPI_TEST_CHUNK"   // chunkCount
	dirEnv     = "ZEROENG_MPI_TEST_DIR"     // where ranks leave results for the parent
)

func isChild() bool { return os.Getenv(childEnv) != "" }

var child struct {
	once  sync.Once
	world *World
	err   error
}

func TestMain(m *testing.M) {
	if !isChild() {
		os.Exit(m.Run())
	}
	if c, err := strconv.Atoi(os.Getenv(chunkEnv)); err == nil && c > 0 {
		chunkCount = c
	}
	code := m.Run()
	if code == 0 && child.world != nil {
		if err := child.world.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: Close: %v\n", child.world.Rank(), err)
			code = 1
		}
	}
	os.Exit(code)
}

// childWorld is the rank's World, made on first use.
func childWorld(t testing.TB) *World {
	t.Helper()
	child.once.Do(func() {
		lib, err := Load()
		if err != nil {
			child.err = err
			return
		}
		opts := dist.Options{Debug: os.Getenv(debugEnv) != ""}
		if os.Getenv(traceEnv) != "" {
			opts.Trace = trace.New(trace.Options{})
		}
		if d, err := time.ParseDuration(os.Getenv(timeoutEnv)); err == nil {
			opts.Timeout = d
		}
		child.world, child.err = NewWorld(lib, opts)
	})
	if child.err != nil {
		t.Fatalf("NewWorld: %v", child.err)
	}
	return child.world
}

// needMPI skips the test when Open MPI or mpirun is missing.
func needMPI(t *testing.T) {
	t.Helper()
	if testing.Short() && !isChild() {
		t.Skip("jobs of several processes under mpirun run with make test-all")
	}
	if _, err := Load(); err != nil {
		t.Skipf("no Open MPI: %v", err)
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("no mpirun (Debian's openmpi-bin)")
	}
}

// job is one run of a test under mpirun.
type job struct {
	np   int
	test string   // the top-level test's name
	env  []string // more variables, NAME=value
}

// run starts the job (np 1: the test binary alone, a singleton MPI
// process) and returns its output and error.
func (j job) run(t *testing.T, limit time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	testArgs := []string{"-test.run", "^" + j.test + "$", "-test.v", "-test.count=1", "-test.timeout=" + (limit - 5*time.Second).String()}
	if testing.Short() {
		testArgs = append(testArgs, "-test.short")
	}
	env := append(os.Environ(), childEnv+"=1")
	env = append(env, j.env...)
	var cmd *exec.Cmd
	if j.np == 1 {
		cmd = exec.CommandContext(ctx, os.Args[0], testArgs...)
	} else {
		args := []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", strconv.Itoa(j.np), "--tag-output", "-x", childEnv}
		for _, kv := range j.env {
			args = append(args, "-x", strings.SplitN(kv, "=", 2)[0])
		}
		args = append(args, os.Args[0])
		cmd = exec.CommandContext(ctx, "mpirun", append(args, testArgs...)...)
	}
	cmd.Env = env
	start := time.Now()
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return "", err
	}
	// Open MPI's mpirun can hang in its own shutdown once every rank has
	// ended (internal/procwatch): it is stopped, and the job's result is
	// what mpirun reported before.
	watch, stopWatch := context.WithCancel(ctx)
	var stuck atomic.Bool
	go func() {
		if j.np > 1 && procwatch.Outlived(watch, cmd.Process.Pid, 10*time.Second) {
			stuck.Store(true)
			cmd.Process.Kill()
		}
	}()
	err := cmd.Wait()
	stopWatch()
	out := buf.Bytes()
	switch {
	case stuck.Load():
		t.Logf("np=%d: mpirun did not exit after every rank had ended; stopped it", j.np)
		err = nil
		if bytes.Contains(out, []byte("exited with non-zero status")) || bytes.Contains(out, []byte("exited on signal")) {
			err = errors.New("a rank failed (mpirun said so before it hung in its shutdown)")
		}
	case ctx.Err() != nil:
		err = fmt.Errorf("the job did not end within %v: %w", limit, err)
	}
	if strings.Contains(string(out), "WARNING: DATA RACE") {
		t.Errorf("the race detector found a data race in a rank:\n%s", out)
	}
	t.Logf("np=%d: %s in %v", j.np, j.test, time.Since(start).Round(time.Millisecond))
	return string(out), err
}

// mpiTest runs body on every rank of MPI jobs of each size in nps: in the
// test process it starts the jobs (subtests np=N) and checks that they
// succeed; in a rank, it runs body on the rank's World.
func mpiTest(t *testing.T, nps []int, env []string, body func(w *World) error) {
	if isChild() {
		w := childWorld(t)
		if err := body(w); err != nil {
			t.Fatalf("rank %d of %d: %v", w.Rank(), w.Size(), err)
		}
		return
	}
	needMPI(t)
	name := strings.SplitN(t.Name(), "/", 2)[0]
	for _, np := range nps {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			out, err := job{np: np, test: name, env: env}.run(t, 120*time.Second)
			if err != nil || !strings.Contains(out, "PASS") {
				t.Fatalf("%v\n%s", err, out)
			}
			if f := filterOutput(out); testing.Verbose() && f != "" {
				t.Logf("\n%s", f)
			}
		})
	}
}

// filterOutput keeps the ranks' test log lines.
func filterOutput(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, ".go:") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// newRuntime is a rank's tensor runtime on the CPU.
func newRuntime() *tensor.Runtime { return tensor.NewRuntime(cpu.New(cpu.Options{}), 0) }

// results reads the files the ranks of a job left in dir, by rank.
func results(t *testing.T, dir string, np int) []string {
	t.Helper()
	out := make([]string, np)
	for r := range out {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d", r)))
		if err != nil {
			t.Errorf("rank %d left no result: %v", r, err)
		}
		out[r] = string(b)
	}
	return out
}

// note writes the rank's result for the parent.
func note(w *World, result string) {
	dir := os.Getenv(dirEnv)
	tmp := filepath.Join(dir, fmt.Sprintf(".rank%d", w.Rank()))
	os.WriteFile(tmp, []byte(result), 0o644)
	os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("rank%d", w.Rank())))
}

// leave writes the rank's result for the parent, waits until every rank
// has written its own (or 20 s), and ends the process with code 3: the
// jobs that test failures end without MPI_Finalize, and mpirun ends the
// job at the first rank that exits non-zero.
func leave(w *World, result string) {
	dir := os.Getenv(dirEnv)
	note(w, result)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n := 0
		for r := range w.Size() {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("rank%d", r))); err == nil {
				n++
			}
		}
		if n == w.Size() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	os.Exit(3)
}
