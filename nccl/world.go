package nccl

import (
	"errors"
	"fmt"
	"sync"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// World is a job of one process driving several GPUs, one rank per GPU,
// with communicators made together (ncclCommInitAll). Each rank takes its
// group with Group(rank) and uses it from its own goroutine. The ranks
// share their fate: a rank whose group fails (an asynchronous NCCL error,
// a timeout) aborts the others, which would otherwise wait for it until
// their timeout.
type World struct {
	groups []*Group

	abortOnce sync.Once
	mu        sync.Mutex
	err       error
}

// NewWorld makes the communicators of devs, rank i on devs[i], and the
// ranks' groups. opts.Timeout bounds every collective (dist.DefaultTimeout
// when zero); Debug and Net are not used (NCCL does not compare the
// ranks' calls: a mismatch hangs until the timeout or moves the wrong
// bytes).
func NewWorld(lib *Lib, devs []Device, opts dist.Options) (*World, error) {
	if len(devs) == 0 {
		return nil, errors.New("nccl: a world needs at least one device")
	}
	ordinals := make([]int, len(devs))
	for i, d := range devs {
		if d == nil || d.Props() == nil {
			return nil, fmt.Errorf("nccl: device %d is nil", i)
		}
		ordinals[i] = d.Props().Ordinal
	}
	var comms []*Comm
	err := devs[0].Context().Do(func() error {
		var err error
		comms, err = lib.CommInitAll(ordinals)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("nccl: communicators of CUDA devices %v: %w", ordinals, err)
	}
	w := &World{}
	for r, d := range devs {
		g, err := newGroup(lib, comms[r], d, r, len(devs), opts, w)
		if err != nil {
			w.Close()
			for _, c := range comms[r:] {
				d.Context().Do(c.Destroy)
			}
			return nil, err
		}
		w.groups = append(w.groups, g)
	}
	return w, nil
}

// Size is the number of ranks.
func (w *World) Size() int { return len(w.groups) }

// Group returns rank's group (a *Group).
func (w *World) Group(rank int) dist.ProcessGroup { return w.groups[rank] }

// Abort stops the world: every communicator is aborted (ncclCommAbort),
// and every pending and later collective of every rank fails with an
// error that wraps err (the first Abort wins).
func (w *World) Abort(err error) { w.abort(nil, err) }

// abortFrom aborts the world's other ranks after from failed with cause.
func (w *World) abortFrom(from *Group, cause error) { w.abort(from, cause) }

func (w *World) abort(from *Group, err error) {
	w.abortOnce.Do(func() {
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		// Concurrently: an abort may wait for a call into NCCL to return.
		var wg sync.WaitGroup
		for _, g := range w.groups {
			if g == from {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.abortWith(err)
			}()
		}
		wg.Wait()
	})
}

// Err is the error the world was aborted with (by Abort or by a rank's
// failure), or nil.
func (w *World) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close closes every rank's group (Group.Close), all at once, since
// recent NCCL versions may synchronize the ranks of a process when their
// communicators are destroyed: communicators with nothing in flight are
// destroyed, the others aborted.
func (w *World) Close() error {
	errs := make([]error, len(w.groups))
	var wg sync.WaitGroup
	for r, g := range w.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = g.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// NewGroupFromID makes this process's rank of a group of size ranks,
// each in its own process, on dev (ncclCommInitRank with the id that rank
// 0 made with GetUniqueID and passed to the others). It returns when
// every rank has called it; NCCL bounds that wait, not opts.Timeout,
// which bounds the collectives.
func NewGroupFromID(lib *Lib, dev Device, id UniqueID, rank, size int, opts dist.Options) (*Group, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("nccl: rank %d of a group of %d ranks", rank, size)
	}
	if dev == nil {
		return nil, errors.New("nccl: no device")
	}
	var comm *Comm
	err := dev.Context().Do(func() error {
		var err error
		comm, err = lib.CommInitRank(size, id, rank)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("nccl: rank %d of %d: %w", rank, size, err)
	}
	g, err := newGroup(lib, comm, dev, rank, size, opts, nil)
	if err != nil {
		dev.Context().Do(comm.Destroy)
		return nil, err
	}
	return g, nil
}
