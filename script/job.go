package script

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// JobOptions configure a job: one script run by every rank.
type JobOptions struct {
	// Ranks is the number of in-process ranks (at least 1).
	Ranks int
	// FirstRank and WorldSize place this process's ranks in a job of
	// several processes (mpirun, zeroeng launch): its Ranks ranks are
	// ranks FirstRank to FirstRank+Ranks-1 of WorldSize. A zero WorldSize
	// means a job of this process alone. NewDevice, Backend.Group and
	// Setup see the local index, 0 to Ranks-1; the scripts, errors and
	// output prefixes see the job's ranks.
	FirstRank, WorldSize int
	// FirstLocalRank is the node-local rank (LOCAL_RANK) of this
	// process's first rank; LocalWorldSize the ranks of its node
	// (LOCAL_WORLD_SIZE; 0: this process's ranks, or the whole job).
	FirstLocalRank, LocalWorldSize int
	// NoPrefix leaves the ranks' output without the "[rank] " prefix that
	// a job of several ranks otherwise gets (zeroeng launch adds it).
	NoPrefix bool
	// Rank holds the options every rank shares; Rank, WorldSize, Prefix
	// and Runtime are set per rank.
	Rank Options
	// Dist configures the ranks' process group (timeout, debug checks,
	// emulated network).
	Dist dist.Options
	// Setup, when set, runs on each rank's runtime before the script (the
	// command line uses it to install its options).
	Setup func(r *Runtime) error
	// NewDevice, when set, makes each rank's device (a GPU); the CPU
	// otherwise. Devices with a Close method are closed after the job.
	NewDevice func(rank int) (device.Device, error)
	// MaxMemory bounds each rank's CPU device memory in bytes (0: none),
	// as a smaller device would; NewDevice applies it to its own devices.
	MaxMemory int64
	// NewBackend, when set, makes the ranks' process groups over their
	// devices (NCCL for GPUs); the in-process backend otherwise.
	NewBackend func(devs []device.Device) (Backend, error)
}

// Backend is what a job needs of its ranks' communication: a process group
// per local rank, and a way to stop every rank's collectives when one rank
// fails.
type Backend interface {
	Group(rank int) dist.ProcessGroup
	Abort(err error)
}

// stopper is implemented by backends that learn of a failure elsewhere in
// the job (a rank of another process died): the job then stops with that
// error, even where no rank is waiting in a collective.
type stopper interface{ Stopped() <-chan error }

// leaver is implemented by backends that learn when a rank has finished,
// so that collectives waiting for it fail at once (the in-process one).
type leaver interface{ Leave(rank int) }

// makeBackend makes the job's devices and process groups, and returns what
// closes them.
func makeBackend(n int, jo JobOptions) (Backend, []device.Device, func(), error) {
	devs := make([]device.Device, n)
	closeDevs := func() {
		for _, d := range devs {
			if c, ok := d.(interface{ Close() error }); ok {
				c.Close()
			}
		}
	}
	for rank := range devs {
		if jo.NewDevice == nil {
			devs[rank] = cpu.New(cpu.Options{Index: rank, MaxMemory: jo.MaxMemory})
			continue
		}
		d, err := jo.NewDevice(rank)
		if err != nil {
			closeDevs()
			return nil, nil, nil, &RankError{Rank: jo.FirstRank + rank, Ranks: max(n, jo.WorldSize), Err: err}
		}
		devs[rank] = d
	}
	if jo.NewBackend == nil {
		world, err := dist.NewWorld(n, jo.Dist)
		if err != nil {
			closeDevs()
			return nil, nil, nil, err
		}
		return world, devs, func() { world.Close(); closeDevs() }, nil
	}
	b, err := jo.NewBackend(devs)
	if err != nil {
		closeDevs()
		return nil, nil, nil, err
	}
	return b, devs, func() {
		if c, ok := b.(interface{ Close() error }); ok {
			c.Close()
		}
		closeDevs()
	}, nil
}

// StopError is what a job aborts its backend with when a rank fails or
// the job is interrupted: the other ranks' collectives fail with it.
type StopError struct {
	Why   string // "stopped: rank 1 failed", "interrupted"
	Cause error  // the failed rank's error; nil when interrupted
}

func (e *StopError) Error() string { return "dist: " + e.Why }

// RankError is the failure of one rank of a job.
type RankError struct {
	Rank, Ranks int
	Err         error
}

func (e *RankError) Error() string {
	if e.Ranks <= 1 {
		return e.Err.Error()
	}
	return fmt.Sprintf("rank %d: %v", e.Rank, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

// hasPosition tells an *Error that says where in the script it happened.
func hasPosition(err error) bool {
	var se *Error
	return errors.As(err, &se) && se.Position != ""
}

// RunJob runs the script at path on every rank, each on its own goroutine
// with its own JavaScript runtime and CPU device. When a rank fails, the
// others are interrupted (they stop at their next JavaScript instruction,
// within a second unless a single engine call takes longer) and the first
// failure is returned, once. Cancelling ctx interrupts every rank.
func RunJob(ctx context.Context, path string, jo JobOptions) error {
	n := max(1, jo.Ranks)
	size := jo.WorldSize
	if size == 0 {
		size, jo.FirstRank = n, 0
	}
	if jo.FirstRank < 0 || jo.FirstRank+n > size {
		return fmt.Errorf("script: ranks %d to %d are outside a job of %d", jo.FirstRank, jo.FirstRank+n-1, size)
	}
	if jo.Dist.Trace == nil {
		jo.Dist.Trace = jo.Rank.Trace // the ranks' collectives go in the same trace
	}
	world, devs, closeAll, err := makeBackend(n, jo)
	if err != nil {
		return err
	}
	defer closeAll()
	// The ranks multiply at the same time: with no more threads than
	// ranks, each runs its library products on a thread of its own.
	defer blas.AddCallers(n - 1)()
	runtimes := make([]*Runtime, n)
	for local := range runtimes {
		rank := jo.FirstRank + local
		o := jo.Rank
		o.Rank, o.WorldSize, o.LocalRank = rank, size, jo.FirstLocalRank+local
		o.LocalWorldSize = jo.LocalWorldSize
		if o.LocalWorldSize == 0 {
			o.LocalWorldSize = n
		}
		o.Group = world.Group(local)
		if size > 1 && !jo.NoPrefix {
			o.Prefix = fmt.Sprintf("[%d] ", rank)
		}
		o.Runtime = tensor.NewRuntime(devs[local], o.Seed)
		r, err := New(o)
		if err != nil {
			return &RankError{Rank: rank, Ranks: size, Err: err}
		}
		if jo.Setup != nil {
			if err := jo.Setup(r); err != nil {
				return &RankError{Rank: rank, Ranks: size, Err: err}
			}
		}
		runtimes[local] = r
	}

	var (
		mu    sync.Mutex
		first *RankError
		exit0 *RankError // the first process.exit(0), when nothing failed
		wg    sync.WaitGroup
	)
	interruptOthers := func(failed int, why string) {
		// They stop at their next JavaScript statement.
		for i, r := range runtimes {
			if i != failed {
				r.Interrupt(why)
				r.interruptHooks()
			}
		}
	}
	stopOthers := func(failed int, why string, cause error) {
		// Ranks blocked in a collective wake with this error.
		world.Abort(&StopError{Why: why, Cause: cause})
		interruptOthers(failed, why)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			mu.Lock()
			if first == nil {
				first = &RankError{Rank: -1, Ranks: size, Err: &Error{Message: "interrupted", Interrupted: true}}
			}
			mu.Unlock()
			stopOthers(-1, "interrupted", nil)
		case <-done:
		}
	}()
	if st, ok := world.(stopper); ok {
		go func() {
			select {
			case err := <-st.Stopped():
				mu.Lock()
				if first == nil {
					first = &RankError{Rank: jo.FirstRank, Ranks: size, Err: err}
				}
				mu.Unlock()
				stopOthers(-1, strings.TrimPrefix(err.Error(), "dist: "), nil)
			case <-done:
			}
		}()
	}
	for local, r := range runtimes {
		rank := jo.FirstRank + local
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			var err error
			if IsProgram(path) {
				err = r.RunProgram(path)
			} else {
				err = r.RunFile(path)
			}
			var se *Error
			exited := errors.As(err, &se) && se.Exit != nil && se.Exit.Code == 0
			if err == nil || exited {
				// Collectives waiting for this rank can never complete.
				// process.exit(0) ends the rank as the end of its script
				// does: the job succeeds if the others need it no more.
				if l, ok := world.(leaver); ok {
					l.Leave(local)
				}
				if exited {
					mu.Lock()
					if exit0 == nil {
						exit0 = &RankError{Rank: rank, Ranks: size, Err: err}
					}
					mu.Unlock()
				}
				return
			}
			mu.Lock()
			interrupted := errors.As(err, &se) && se.Interrupted
			isFirst := first == nil || (first.Rank < 0 && !interrupted)
			if isFirst {
				first = &RankError{Rank: rank, Ranks: size, Err: err}
			} else if interrupted && se.Position != "" && first.Rank < 0 && !hasPosition(first.Err) {
				// The job's interrupt (a signal): the first rank that
				// says where it stopped says it for the job.
				first.Err = err
			}
			mu.Unlock()
			if isFirst {
				why := fmt.Sprintf("stopped: rank %d failed", rank)
				// The abort happens before this goroutine ends, so
				// before the job closes the backend: a backend closed
				// first believes that every rank ended well, and Open
				// MPI's MPI_Finalize would wait for ranks that are
				// waiting for this one.
				world.Abort(&StopError{Why: why, Cause: err})
				go interruptOthers(local, why)
			}
		}()
	}
	wg.Wait()
	close(done)
	mu.Lock()
	defer mu.Unlock()
	if first == nil {
		if exit0 != nil {
			return exit0 // the script's own status, 0
		}
		return nil
	}
	return first
}
