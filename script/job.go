package script

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// JobOptions configure a job: one script run by every rank.
type JobOptions struct {
	// Ranks is the number of in-process ranks (at least 1).
	Ranks int
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
	// NewBackend, when set, makes the ranks' process groups over their
	// devices (NCCL for GPUs); the in-process backend otherwise.
	NewBackend func(devs []device.Device) (Backend, error)
}

// Backend is what a job needs of its ranks' communication: a process group
// per rank, and a way to stop every rank's collectives when one rank fails.
type Backend interface {
	Group(rank int) dist.ProcessGroup
	Abort(err error)
}

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
			devs[rank] = cpu.New(cpu.Options{Index: rank})
			continue
		}
		d, err := jo.NewDevice(rank)
		if err != nil {
			closeDevs()
			return nil, nil, nil, &RankError{rank, n, err}
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

// RunJob runs the script at path on every rank, each on its own goroutine
// with its own JavaScript runtime and CPU device. When a rank fails, the
// others are interrupted (they stop at their next JavaScript instruction,
// within a second unless a single engine call takes longer) and the first
// failure is returned, once. Cancelling ctx interrupts every rank.
func RunJob(ctx context.Context, path string, jo JobOptions) error {
	n := max(1, jo.Ranks)
	if jo.Dist.Trace == nil {
		jo.Dist.Trace = jo.Rank.Trace // the ranks' collectives go in the same trace
	}
	world, devs, closeAll, err := makeBackend(n, jo)
	if err != nil {
		return err
	}
	defer closeAll()
	runtimes := make([]*Runtime, n)
	for rank := range runtimes {
		o := jo.Rank
		o.Rank, o.WorldSize = rank, n
		o.Group = world.Group(rank)
		if n > 1 {
			o.Prefix = fmt.Sprintf("[%d] ", rank)
		}
		o.Runtime = tensor.NewRuntime(devs[rank], o.Seed)
		r, err := New(o)
		if err != nil {
			return &RankError{rank, n, err}
		}
		if jo.Setup != nil {
			if err := jo.Setup(r); err != nil {
				return &RankError{rank, n, err}
			}
		}
		runtimes[rank] = r
	}

	var (
		mu    sync.Mutex
		first *RankError
		wg    sync.WaitGroup
	)
	stopOthers := func(failed int, why string) {
		// Ranks blocked in a collective wake with this error; the others
		// stop at their next JavaScript statement.
		world.Abort(fmt.Errorf("dist: %s", why))
		for i, r := range runtimes {
			if i != failed {
				r.Interrupt(why)
			}
		}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			mu.Lock()
			if first == nil {
				first = &RankError{-1, n, &Error{Message: "interrupted", Interrupted: true}}
			}
			mu.Unlock()
			stopOthers(-1, "interrupted")
		case <-done:
		}
	}()
	for rank, r := range runtimes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			err := r.RunFile(path)
			if err == nil {
				// Collectives waiting for this rank can never complete.
				if l, ok := world.(leaver); ok {
					l.Leave(rank)
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			var se *Error
			if first == nil || (first.Rank < 0 && !(errors.As(err, &se) && se.Interrupted)) {
				first = &RankError{rank, n, err}
				go stopOthers(rank, fmt.Sprintf("stopped: rank %d failed", rank))
			}
		}()
	}
	wg.Wait()
	close(done)
	if first == nil {
		return nil
	}
	return first
}
