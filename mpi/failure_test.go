package mpi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// failureJob runs a test whose ranks end with leave (exit code 3, no
// MPI_Finalize) and returns what each rank left.
func failureJob(t *testing.T, np int, env ...string) []string {
	t.Helper()
	needMPI(t)
	dir := t.TempDir()
	env = append(env, dirEnv+"="+dir)
	start := time.Now()
	out, err := job{np: np, test: t.Name(), env: env}.run(t, 60*time.Second)
	if err == nil {
		t.Errorf("the job succeeded; its ranks should have exited with code 3\n%s", out)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the job took %v", d)
	}
	res := results(t, dir, np)
	if t.Failed() {
		t.Fatalf("output:\n%s", out)
	}
	return res
}

// failureRank is a rank of a failureJob: its World, group and runtime
// once every rank has met in a barrier. Rank 1 leaves there, its result
// absent: it takes no part in what the others test.
func failureRank(t *testing.T, absent string) (*World, dist.ProcessGroup, *tensor.Runtime) {
	t.Helper()
	w := childWorld(t)
	pg := w.Group(0)
	if err := pg.Barrier().Wait(); err != nil {
		leave(w, "barrier: "+err.Error())
	}
	if w.Rank() == 1 {
		leave(w, absent)
	}
	return w, pg, newRuntime()
}

// TestTimeout has rank 1 skip a collective: the others' work fails at
// their timeout with an error naming it, later works fail at once, and
// Close returns without MPI_Finalize.
func TestTimeout(t *testing.T) {
	if isChild() {
		w, pg, rt := failureRank(t, "skipped")
		start := time.Now()
		err := pg.AllReduce(rt.Zeros(dtype.Float32, 8), dist.Sum).Wait()
		took := time.Since(start)
		later := pg.Barrier()
		var laterErr error
		select {
		case <-later.Done():
			laterErr = later.Err()
		case <-time.After(time.Second):
			laterErr = errors.New("a work issued after the timeout did not fail at once")
		}
		closed := make(chan error, 1)
		go func() { closed <- w.Close() }()
		var closeErr error
		select {
		case closeErr = <-closed:
		case <-time.After(5 * time.Second):
			closeErr = errors.New("Close did not return")
		}
		leave(w, fmt.Sprintf("%v\n%v\n%v\n%v\n%v", err, took.Round(10*time.Millisecond), laterErr, w.Err(), closeErr))
	}
	res := failureJob(t, 3, timeoutEnv+"=1s")
	if res[1] != "skipped" {
		t.Errorf("rank 1: %s", res[1])
	}
	for _, r := range []int{0, 2} {
		lines := strings.Split(res[r], "\n")
		if len(lines) != 5 {
			t.Errorf("rank %d: %q", r, res[r])
			continue
		}
		// Rank 1 answers the others' status query from its idle
		// communication goroutine.
		want := lines[0]
		if prefix := fmt.Sprintf("mpi: AllReduce of 8 float32 on rank %d timed out after 1s: rank 1 has not called it (it called 1 of the group's collectives before it; its last call of any kind was ", r); !strings.HasPrefix(want, prefix) {
			t.Errorf("rank %d: error %q, want %q...", r, lines[0], prefix)
		}
		if d, err := time.ParseDuration(lines[1]); err != nil || d < time.Second || d > 5*time.Second {
			t.Errorf("rank %d: the timeout came after %s", r, lines[1])
		}
		if !strings.Contains(lines[2], "Barrier on rank") || !strings.Contains(lines[2], "was not issued: "+want) {
			t.Errorf("rank %d: a later work failed with %q", r, lines[2])
		}
		if lines[3] != want {
			t.Errorf("rank %d: World.Err is %q", r, lines[3])
		}
		if lines[4] != "<nil>" {
			t.Errorf("rank %d: Close: %s", r, lines[4])
		}
	}
}

// TestAbort has rank 0 abort while a collective and a message wait for
// rank 1, which never comes: both fail with the abort's error at once.
func TestAbort(t *testing.T) {
	if isChild() {
		w, pg, rt := failureRank(t, "idle")
		coll := pg.AllReduce(rt.Zeros(dtype.Float32, 1<<16), dist.Sum)
		msg := pg.Recv(rt.Zeros(dtype.Int64, 3), 1)
		time.AfterFunc(100*time.Millisecond, func() { w.Abort(errors.New("rank 1 failed")) })
		var got []string
		for _, work := range []*dist.Work{coll, msg} {
			select {
			case <-work.Done():
				got = append(got, fmt.Sprint(work.Err()))
			case <-time.After(5 * time.Second):
				got = append(got, "the abort did not fail the work")
			}
		}
		got = append(got, fmt.Sprint(pg.Barrier().Wait()), fmt.Sprint(w.Close()))
		leave(w, strings.Join(got, "\n"))
	}
	res := failureJob(t, 2)
	want := []string{"rank 1 failed", "rank 1 failed", "mpi: Barrier on rank 0 was not issued: rank 1 failed", "<nil>"}
	if res[0] != strings.Join(want, "\n") {
		t.Errorf("rank 0:\n%s\nwant\n%s", res[0], strings.Join(want, "\n"))
	}
}

// TestKill has rank 0 end the job (MPI_Abort) while rank 1 waits in a
// collective: mpirun ends both at once.
func TestKill(t *testing.T) {
	if isChild() {
		w := childWorld(t)
		pg := w.Group(0)
		if err := pg.Barrier().Wait(); err != nil {
			t.Fatal(err)
		}
		if w.Rank() == 0 {
			w.Kill(7)
		}
		pg.Barrier().Wait() // rank 0 never comes
		t.Fatal("rank 1 was not killed")
	}
	needMPI(t)
	start := time.Now()
	out, err := job{np: 2, test: t.Name()}.run(t, 60*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exit status 7") {
		t.Errorf("the job ended with %v\n%s", err, out)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the job took %v", d)
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := LoadFrom("/nonexistent/libmpi.so.40")
	if err == nil || !strings.Contains(err.Error(), "mpi: cannot load Open MPI (/nonexistent/libmpi.so.40)") || !strings.Contains(err.Error(), "libopenmpi3") {
		t.Errorf("a missing file: %v", err)
	}
	// A library that is not Open MPI.
	_, err = LoadFrom("libc.so.6")
	if err == nil || !strings.Contains(err.Error(), "is not Open MPI") || !strings.Contains(err.Error(), "only Open MPI's ABI is supported") {
		t.Errorf("libc: %v", err)
	}
	if lib, err := Load(); err == nil {
		if lib.Version == "" || lib.Path == "" {
			t.Errorf("Load: %+v", lib)
		}
		t.Logf("%s: %s", lib.Path, lib.Version)
	} else if !strings.Contains(err.Error(), "install Debian's libopenmpi3") {
		t.Errorf("Load: %v", err)
	}
}

func TestInJob(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		env  func(string) string
		want bool
	}{
		{env(), false},
		{env("RANK", "1", "WORLD_SIZE", "2"), false},
		{env("OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_RANK", "1"), true},
		{env("PMIX_RANK", "0"), true},
		{env("PMI_SIZE", "2", "PMI_RANK", "1"), true},
	} {
		if got := inJob(c.env); got != c.want {
			t.Errorf("inJob = %v, want %v", got, c.want)
		}
	}
	if r, s, ok := localPlace(env("OMPI_COMM_WORLD_LOCAL_RANK", "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "2")); !ok || r != 1 || s != 2 {
		t.Errorf("localPlace: %d %d %v", r, s, ok)
	}
	if _, _, ok := localPlace(env("OMPI_COMM_WORLD_LOCAL_RANK", "2", "OMPI_COMM_WORLD_LOCAL_SIZE", "2")); ok {
		t.Error("localPlace took a local rank out of range")
	}
}

// TestStoppedRank has rank 1 stop itself (SIGSTOP) before a collective:
// the others' timeout names it as the rank that did not answer their
// status query, where they used to say only that some rank may have
// died.
func TestStoppedRank(t *testing.T) {
	if isChild() {
		w := childWorld(t)
		pg := w.Group(0)
		if err := pg.Barrier().Wait(); err != nil {
			leave(w, "barrier: "+err.Error())
		}
		pidFile := filepath.Join(os.Getenv(dirEnv), "pid1")
		if w.Rank() == 1 {
			note(w, "stopped")
			os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644)
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			select {} // killed by rank 0
		}
		err := pg.AllReduce(newRuntime().Zeros(dtype.Float32, 8), dist.Sum).Wait()
		if w.Rank() == 0 {
			b, _ := os.ReadFile(pidFile)
			if pid, perr := strconv.Atoi(string(b)); perr == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		leave(w, fmt.Sprint(err))
	}
	res := failureJob(t, 3, timeoutEnv+"=1s")
	for _, r := range []int{0, 2} {
		want := fmt.Sprintf("mpi: AllReduce of 8 float32 on rank %d timed out after 1s: rank 1 did not answer within 2s (its process died, was stopped by SIGSTOP, or hangs outside zeroeng)", r)
		if res[r] != want {
			t.Errorf("rank %d: %q, want %q", r, res[r], want)
		}
	}
}
