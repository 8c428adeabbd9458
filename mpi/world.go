package mpi

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// World is this process's place in an MPI job: MPI initialised by the
// world's communication goroutine, and its group of all ranks over
// MPI_COMM_WORLD. A process holds one rank; MPI is initialised once per
// process, so a process makes one World.
type World struct {
	e     *engine
	lib   *Lib
	group *Group

	localRank, localSize int

	closeOnce sync.Once
	closeErr  error
	leaveOnce sync.Once
}

var (
	worldMu   sync.Mutex
	worldMade bool
)

// NewWorld initialises MPI (MPI_Init_thread, asking for
// MPI_THREAD_FUNNELED: every MPI call comes from the world's
// communication goroutine, which is locked to its OS thread) and returns
// the world. Under mpirun it joins the job; a process started otherwise
// is a world of one rank (MPI's singleton mode). opts.Timeout bounds every
// collective from the moment it is issued (dist.DefaultTimeout when
// zero); opts.Debug checks before each collective that every rank called
// the same one (an extra all-gather of its description); opts.Trace
// records the collectives. opts.Net is not used.
func NewWorld(lib *Lib, opts dist.Options) (*World, error) {
	if lib == nil {
		return nil, errors.New("mpi: NewWorld: no library (mpi.Load loads it)")
	}
	worldMu.Lock()
	if worldMade {
		worldMu.Unlock()
		return nil, errors.New("mpi: MPI was initialised by an earlier NewWorld in this process; MPI can be initialised only once per process")
	}
	worldMade = true
	worldMu.Unlock()

	e := newEngine(lib, opts)
	w := &World{e: e, lib: lib}
	ready := make(chan error, 1)
	go e.loop(ready, w.init)
	if err := <-ready; err != nil {
		return nil, err
	}
	w.group = e.groups[0]
	var ok bool
	if w.localRank, w.localSize, ok = localPlace(os.Getenv); !ok {
		w.localRank, w.localSize = e.rank, e.size
	}
	return w, nil
}

// init initialises MPI, on the communication goroutine.
func (w *World) init() error {
	e, l := w.e, w.lib
	var flag int32
	// int MPI_Initialized(int *flag)
	if rc := call(l.initialized, uintptr(unsafe.Pointer(&flag))); rc != success {
		return fmt.Errorf("mpi: %w", l.err("MPI_Initialized", rc))
	}
	if flag != 0 {
		return errors.New("mpi: MPI is already initialised in this process, by other code: the engine must initialise it on its own communication thread")
	}
	var provided int32
	// int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
	if rc := call(l.initThread, 0, 0, threadFunneled, uintptr(unsafe.Pointer(&provided))); rc != success {
		return fmt.Errorf("mpi: %w", l.err("MPI_Init_thread", rc))
	}
	if provided < threadFunneled {
		call(l.finalize)
		return fmt.Errorf("mpi: MPI_Init_thread provided %s, and the engine needs %s (its MPI calls come from one thread that is not the process's first)",
			threadLevel(provided), threadLevel(threadFunneled))
	}
	fail := func(err error) error {
		call(l.finalize)
		return fmt.Errorf("mpi: %w", err)
	}
	g, err := e.newGroup(l.commWorld, 0, nil)
	if err != nil {
		return fail(err)
	}
	e.rank, e.size = g.rank, g.size
	g.ranks = make([]int, g.size)
	for i := range g.ranks {
		g.ranks[i] = i
	}
	if err := e.openNotices(); err != nil {
		return fail(err)
	}
	return nil
}

// finalize cancels the receive of Leave notices, frees the notices' and
// the subgroups' communicators and calls MPI_Finalize, on the
// communication goroutine, once nothing is in flight.
func (e *engine) finalize() error {
	l := e.lib
	errs := e.closeNotices()
	for _, g := range e.groups[1:] {
		c := g.comm
		// int MPI_Comm_free(MPI_Comm *comm)
		if rc := call(l.commFree, uintptr(unsafe.Pointer(&c))); rc != success {
			errs = append(errs, l.err("MPI_Comm_free", rc))
		}
	}
	// int MPI_Finalize(void)
	if rc := call(l.finalize); rc != success {
		errs = append(errs, l.err("MPI_Finalize", rc))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mpi: closing rank %d: %w", e.rank, err)
	}
	return nil
}

// Rank is this process's rank in MPI_COMM_WORLD.
func (w *World) Rank() int { return w.e.rank }

// Size is the number of ranks in MPI_COMM_WORLD.
func (w *World) Size() int { return w.e.size }

// LocalRank and LocalSize place this process among the job's processes on
// its node (OMPI_COMM_WORLD_LOCAL_RANK and _SIZE, set by mpirun; Rank and
// Size when no launcher says).
func (w *World) LocalRank() int { return w.localRank }

// LocalSize: see LocalRank.
func (w *World) LocalSize() int { return w.localSize }

// Lib is the library the world runs on.
func (w *World) Lib() *Lib { return w.lib }

// Group returns the process's group of all ranks (a *Group) for local
// rank 0, the only one a process holds, and nil for any other.
func (w *World) Group(local int) dist.ProcessGroup {
	if local != 0 {
		return nil
	}
	return w.group
}

// Abort stops the world's collectives: every pending and later work of
// every group fails with err (the first failure wins), at once and
// without an MPI call (MPI cannot cancel a collective). The memory of
// works that were in flight is never given back: MPI may still write
// into it. Close then leaves MPI as it is.
func (w *World) Abort(err error) {
	if err == nil {
		err = errors.New("mpi: the world was aborted")
	}
	w.e.fail(nil, err, false)
}

// Err is the error the world failed with (a timeout, a failed MPI call,
// Abort), or else that of the first work that failed, while MPI had it,
// because another rank left (Leave) without issuing its part; or nil.
func (w *World) Err() error {
	w.e.mu.Lock()
	defer w.e.mu.Unlock()
	if w.e.failed {
		return w.e.err
	}
	return w.e.stuck
}

// Close ends the world. Calls made after it fail with dist.ErrClosed.
// When nothing failed, it waits for the works still in flight to complete
// (each within its timeout), frees the communicators and calls
// MPI_Finalize, which waits for every rank to call it too (Open MPI's
// ends with a fence of all the ranks: when another rank exits without
// it, mpirun ends the job). After a failure (Abort, a timeout, a failed
// MPI call) it returns nil at once and leaves MPI as it is: MPI_Finalize
// would wait for ranks that may be dead, and the process is expected to
// exit with a failure, which makes mpirun end the job. It also returns
// at once without MPI_Finalize, with an error that says why, when a work
// that MPI had has failed because another rank left (Leave): MPI cannot
// cancel it.
func (w *World) Close() error {
	w.closeOnce.Do(func() {
		e := w.e
		e.mu.Lock()
		e.stopping = true
		if e.err == nil {
			e.err = dist.ErrClosed
		}
		failed, stuck := e.failed, e.stuck
		e.mu.Unlock()
		e.signal()
		if failed {
			return
		}
		if stuck != nil {
			w.closeErr = e.unfinalised(stuck)
			return
		}
		<-e.exited
		w.closeErr = e.closeErr
	})
	return w.closeErr
}

// killWait is how long Kill waits for the communication goroutine before
// it calls MPI_Abort itself.
const killWait = 2 * time.Second

// Kill ends the whole job at once (MPI_Abort on MPI_COMM_WORLD with code):
// mpirun kills every rank. It does not return. The communication
// goroutine makes the call unless it is stuck inside MPI, when the
// caller's goroutine makes it after killWait.
func (w *World) Kill(code int) {
	e, l := w.e, w.lib
	select {
	case <-e.exited: // MPI was finalised
		os.Exit(code)
	default:
	}
	e.mu.Lock()
	e.kill = func() { call(l.abort, l.commWorld, cint(code)) }
	e.mu.Unlock()
	e.signal()
	time.Sleep(killWait)
	call(l.abort, l.commWorld, cint(code))
	os.Exit(code)
}
