package nccl

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/cuda"
)

// Device is what a process group needs from a CUDA device (gpu.Device
// implements it): the rank's memory, the primary context NCCL works in,
// the compute stream whose work a collective must follow, the
// communication stream it runs on, and the allocator's hook that holds
// back memory the communication stream still uses.
type Device interface {
	device.Device
	// Props describes the GPU; its Ordinal is the CUDA device number.
	Props() *cuda.Device
	Context() *cuda.Context
	ComputeStream() *cuda.Stream
	CommStream() *cuda.Stream
	// MarkCommUse records that the communication stream uses buf, so that
	// its memory is not handed out again before that stream is past it.
	MarkCommUse(buf device.Buffer)
}

// devicePtr is implemented by the device's buffers (gpu.Buffer).
type devicePtr interface{ Ptr() cuda.DevicePtr }

var _ dist.ProcessGroup = (*Group)(nil)

// Group is one rank's NCCL process group: a communicator, the rank's
// device and its two streams. It implements dist.ProcessGroup; like the
// in-process backend's handles, it is used by the rank's goroutine (its
// methods lock, so continuations of its works may issue more).
//
// Every collective is queued on the device's communication stream after
// an event recorded on its compute stream, so that it sees every kernel
// queued before it, and completes its Work when an event recorded after
// it has passed. See the package documentation.
type Group struct {
	lib     *Lib
	comm    *Comm
	raw     uintptr // the ncclComm_t, for an abort during a call (see abortComm)
	dev     Device
	ctx     *cuda.Context
	compute *cuda.Stream
	stream  *cuda.Stream // the communication stream
	rank    int
	size    int
	timeout time.Duration
	world   *World // nil for NewGroupFromID's groups

	ready *cuda.Event   // compute stream → communication stream
	small device.Buffer // size+1 int64s: Barrier, object lengths
	sptr  uint64        // small's address

	// queryEvent reports whether the work before an event has finished
	// ((*cuda.Event).Query; tests replace it before the first call).
	queryEvent func(*cuda.Event) (bool, error)

	issueMu sync.Mutex // serializes issuing
	// state says whether a goroutine is inside an NCCL call on the
	// communicator (callIn), so that an abort never frees the
	// communicator under a call that is about to start.
	state atomic.Int32

	commMu   sync.RWMutex // held to abort or destroy; read-held to ask for async errors
	commGone bool         // aborted or destroyed
	commErr  error        // the abort's or destroy's own error

	mu       sync.Mutex
	err      error  // why the group failed: later calls fail at once
	failedAt *entry // the work the failure was found on, which fails with err itself
	inflight []*entry
	watching bool
	events   []*cuda.Event // recycled completion events
	watcher  sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

const (
	callIdle = iota
	callIn
	callGone
)

// entry is one issued (or being issued) collective.
type entry struct {
	what     string      // "AllReduce of 4 float32"
	ev       *cuda.Event // recorded after the call; nil until issued
	removed  bool        // completed; one failed before its event was recorded has it destroyed by the issuer
	deadline time.Time
	keep     []func() // releases of the memory it uses
	complete func(error)
}

// The watcher's polling: it yields a few times, then sleeps from
// minPause, doubling to maxPause, until the head work's event passes.
const (
	spinPolls = 16
	minPause  = 4 * time.Microsecond
	maxPause  = time.Millisecond
)

// abortGrace is how long an abort waits for a call into NCCL to return
// before it aborts the communicator under it: long enough for any call
// that enqueues (microseconds), short against a collective timeout.
const abortGrace = 200 * time.Millisecond

// errCallAborted is what a call into NCCL returns once the communicator
// was aborted.
var errCallAborted = errors.New("nccl: the communicator was aborted")

// newGroup makes rank's group on comm.
func newGroup(lib *Lib, comm *Comm, dev Device, rank, size int, opts dist.Options, w *World) (*Group, error) {
	g := &Group{
		lib: lib, comm: comm, raw: comm.Raw(), dev: dev, ctx: dev.Context(),
		compute: dev.ComputeStream(), stream: dev.CommStream(),
		rank: rank, size: size, timeout: opts.Timeout, world: w,
		queryEvent: (*cuda.Event).Query,
	}
	if g.timeout <= 0 {
		g.timeout = dist.DefaultTimeout
	}
	if g.ctx == nil || g.compute == nil || g.stream == nil {
		return nil, fmt.Errorf("nccl: rank %d: device %v has no context or streams", rank, dev)
	}
	var err error
	if g.ready, err = g.ctx.NewEvent(false); err != nil {
		return nil, fmt.Errorf("nccl: rank %d: %w", rank, err)
	}
	if g.small, err = dev.Alloc(dtype.Int64, size+1); err == nil {
		var p devicePtr
		if p, err = ptrOf(g.small); err == nil {
			g.sptr = uint64(p.Ptr())
		}
	}
	if err != nil {
		g.ready.Destroy()
		if g.small != nil {
			dev.Free(g.small)
		}
		return nil, fmt.Errorf("nccl: rank %d: %w", rank, err)
	}
	dev.MarkCommUse(g.small)
	return g, nil
}

func ptrOf(b device.Buffer) (devicePtr, error) {
	p, ok := b.(devicePtr)
	if !ok {
		return nil, fmt.Errorf("the memory is not CUDA memory (a %T buffer)", b)
	}
	return p, nil
}

// Rank implements dist.ProcessGroup.
func (g *Group) Rank() int { return g.rank }

// Size implements dist.ProcessGroup.
func (g *Group) Size() int { return g.size }

// Device is the rank's device.
func (g *Group) Device() Device { return g.dev }

// Err is the error the group failed with (an asynchronous NCCL error, a
// timeout, an abort, Close), or nil.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Abort fails the group with err (the first failure wins): its
// communicator is aborted, its works in flight fail, and later calls fail
// at once. A group of a World aborts the world's other ranks too.
func (g *Group) Abort(err error) {
	if g.world != nil {
		g.world.Abort(err)
		return
	}
	g.abortWith(err)
}

// request is a collective to issue: what it is, the memory it keeps alive and
// the buffers the communication stream uses, and the calls that queue it
// on the stream.
type request struct {
	what  string
	keep  []func()
	bufs  []device.Buffer
	issue func(stream uintptr) error
}

func release(keep []func()) {
	for _, f := range keep {
		f()
	}
}

// submit issues o on the communication stream, after the work queued on
// the compute stream so far, and returns its Work, which the watcher
// completes. A failure to issue aborts the communicator: the other ranks
// would wait for this rank's part forever.
func (g *Group) submit(o request) *dist.Work {
	g.issueMu.Lock()
	defer g.issueMu.Unlock()
	g.mu.Lock()
	if err := g.err; err != nil {
		g.mu.Unlock()
		release(o.keep)
		return dist.Failed(fmt.Errorf("nccl: %s on rank %d was not issued: %w", o.what, g.rank, err))
	}
	w, complete := dist.NewWork()
	e := &entry{what: o.what, deadline: time.Now().Add(g.timeout), keep: o.keep, complete: complete}
	// Registered before it is issued, so that a call that blocks inside
	// NCCL (connecting to a rank that never comes) times out too.
	g.inflight = append(g.inflight, e)
	if !g.watching {
		g.watching = true
		g.watcher.Add(1)
		go g.watch()
	}
	g.mu.Unlock()

	for _, b := range o.bufs {
		g.dev.MarkCommUse(b)
	}
	ev, err := g.event()
	if err == nil {
		err = g.ctx.Do(func() error {
			if err := g.ready.Record(g.compute); err != nil {
				return err
			}
			if err := g.stream.WaitEvent(g.ready); err != nil {
				return err
			}
			if err := o.issue(g.stream.Handle()); err != nil {
				return err
			}
			return ev.Record(g.stream)
		})
	}

	g.mu.Lock()
	late := e.removed // failed meanwhile (a timeout, an abort)
	if err == nil && !late {
		e.ev = ev
	}
	var cause error
	if err != nil && g.err == nil {
		cause = fmt.Errorf("nccl: %s on rank %d could not be issued: %w; the communicator was aborted", o.what, g.rank, err)
		g.err, g.failedAt = cause, e
	}
	g.mu.Unlock()
	if ev != nil && (err != nil || late) {
		ev.Destroy()
	}
	if cause != nil {
		g.abortComm()
		if g.world != nil {
			g.world.abortFrom(g, cause)
		}
	}
	return w
}

// event returns a completion event, recycled or new.
func (g *Group) event() (*cuda.Event, error) {
	g.mu.Lock()
	if n := len(g.events); n > 0 {
		ev := g.events[n-1]
		g.events = g.events[:n-1]
		g.mu.Unlock()
		return ev, nil
	}
	g.mu.Unlock()
	return g.ctx.NewEvent(false)
}

// call runs fn, a call into NCCL on the communicator, unless the
// communicator was aborted.
func (g *Group) call(fn func() error) error {
	if !g.state.CompareAndSwap(callIdle, callIn) {
		return errCallAborted
	}
	err := fn()
	g.state.CompareAndSwap(callIn, callIdle)
	return err
}

// watch completes the works in flight, in order: a work is done when the
// event recorded after it has passed. It fails the head work, aborts the
// communicator and fails every later work when NCCL reports an
// asynchronous error, the event reports a CUDA error, or the work is not
// done by its deadline. It returns when nothing is in flight.
func (g *Group) watch() {
	defer g.watcher.Done()
	polls := 0
	for {
		g.mu.Lock()
		if len(g.inflight) == 0 {
			g.watching = false
			g.mu.Unlock()
			return
		}
		head := g.inflight[0]
		ev, failed := head.ev, g.err != nil
		g.mu.Unlock()
		if failed {
			g.abortComm()
			g.failAll()
			continue
		}
		if ev != nil {
			done, err := g.queryEvent(ev)
			if err != nil {
				g.fail(head, fmt.Errorf("nccl: %s on rank %d failed: %w; the communicator was aborted", head.what, g.rank, err))
				continue
			}
			if done {
				g.finish(head)
				polls = 0
				continue
			}
		}
		if err := g.asyncError(); err != nil {
			g.fail(head, fmt.Errorf("nccl: %s on rank %d failed: %w; the communicator was aborted", head.what, g.rank, err))
			continue
		}
		if time.Now().After(head.deadline) {
			g.fail(head, fmt.Errorf("nccl: %s on rank %d timed out after %v; the communicator was aborted", head.what, g.rank, g.timeout))
			continue
		}
		pause(polls)
		polls++
	}
}

func pause(polls int) {
	if polls < spinPolls {
		runtime.Gosched()
		return
	}
	d := minPause << min(polls-spinPolls, 10)
	time.Sleep(min(d, maxPause))
}

// asyncError asks NCCL for an error met in the background (a peer that
// went away).
func (g *Group) asyncError() error {
	g.commMu.RLock()
	defer g.commMu.RUnlock()
	if g.commGone {
		return nil
	}
	return g.comm.AsyncError()
}

// finish completes head, whose event has passed.
func (g *Group) finish(head *entry) {
	g.mu.Lock()
	g.inflight = g.inflight[1:]
	head.removed = true
	g.events = append(g.events, head.ev)
	head.ev = nil
	g.mu.Unlock()
	release(head.keep)
	head.complete(nil)
}

// fail fails the group with cause, found on work at: it aborts the
// communicator (and the world's other ranks); the watcher then fails the
// works in flight.
func (g *Group) fail(at *entry, cause error) {
	g.mu.Lock()
	first := g.err == nil
	if first {
		g.err, g.failedAt = cause, at
	}
	g.mu.Unlock()
	g.abortComm()
	if first && g.world != nil {
		g.world.abortFrom(g, cause)
	}
}

// abortWith fails the group with err, from outside (World.Abort).
func (g *Group) abortWith(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
	g.abortComm()
}

// failAll fails every work in flight after a failure: the one it was
// found on with the cause itself, the others with an error that wraps it.
// Their events are destroyed: the stream may never pass them.
func (g *Group) failAll() {
	g.mu.Lock()
	works := g.inflight
	g.inflight = nil
	cause, at := g.err, g.failedAt
	for _, e := range works {
		e.removed = true
	}
	g.mu.Unlock()
	for _, e := range works {
		if e.ev != nil {
			e.ev.Destroy()
			e.ev = nil
		}
		err := cause
		if e != at {
			err = fmt.Errorf("nccl: %s on rank %d did not complete: %w", e.what, g.rank, cause)
		}
		release(e.keep)
		e.complete(err)
	}
}

// abortComm aborts the communicator once (ncclCommAbort), which stops its
// kernels still running. It waits up to abortGrace for a call into NCCL in
// progress to return; a call that takes longer is blocked inside NCCL
// (connecting to a peer that does not come), and the communicator is
// aborted under it, from this goroutine, as NCCL allows, which makes the
// call return.
func (g *Group) abortComm() error {
	g.commMu.Lock()
	defer g.commMu.Unlock()
	if g.commGone {
		return g.commErr
	}
	g.commGone = true
	deadline := time.Now().Add(abortGrace)
	safe := false
	for polls := 0; ; polls++ {
		if g.state.CompareAndSwap(callIdle, callGone) {
			safe = true
			break
		}
		if time.Now().After(deadline) {
			g.state.Store(callGone)
			break
		}
		pause(polls)
	}
	if safe {
		// No call is in progress or can start: the Comm is ours alone.
		g.commErr = g.ctx.Do(g.comm.Abort)
	} else {
		// A call is still inside NCCL and reads the Comm: abort the
		// communicator through its handle, leaving the Comm as it is (no
		// method of it is called again).
		g.commErr = g.ctx.Do(func() error {
			// ncclResult_t ncclCommAbort(ncclComm_t comm)
			if r := call(g.lib.commAbort, g.raw); r != success {
				return g.lib.err("ncclCommAbort", r, g.raw)
			}
			return nil
		})
	}
	return g.commErr
}

// destroyComm destroys the communicator (ncclCommDestroy) when no call is
// in progress, and aborts it otherwise.
func (g *Group) destroyComm() error {
	g.commMu.Lock()
	if g.commGone {
		g.commMu.Unlock()
		return g.commErr
	}
	if !g.state.CompareAndSwap(callIdle, callGone) {
		g.commMu.Unlock()
		return g.abortComm()
	}
	g.commGone = true
	g.commErr = g.ctx.Do(g.comm.Destroy)
	g.commMu.Unlock()
	return g.commErr
}

// Close ends the group: with nothing in flight it destroys the
// communicator (ncclCommDestroy); otherwise it aborts it, and the works in
// flight fail with dist.ErrClosed, as do later calls. It waits for the
// watcher, and frees the group's events and device memory.
func (g *Group) Close() error {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		busy := len(g.inflight) > 0
		if g.err == nil {
			g.err = dist.ErrClosed
		}
		g.mu.Unlock()
		var errs []error
		if busy {
			errs = append(errs, g.abortComm())
		} else {
			errs = append(errs, g.destroyComm())
		}
		g.watcher.Wait()
		g.mu.Lock()
		events := g.events
		g.events = nil
		g.mu.Unlock()
		for _, ev := range events {
			errs = append(errs, ev.Destroy())
		}
		errs = append(errs, g.ready.Destroy())
		g.dev.Free(g.small)
		g.closeErr = errors.Join(errs...)
	})
	return g.closeErr
}
