package dist

import "sync"

// Work is the handle of an asynchronous collective: a future that
// completes, with or without an error, once the collective has run on the
// rank's communication queue.
type Work struct {
	done chan struct{}
	err  error

	mu    sync.Mutex
	after []func(error) // run, in order, when the work completes
}

func newWork() *Work { return &Work{done: make(chan struct{})} }

// NewWork returns a Work and the function that completes it, for process
// groups implemented outside this package (nccl): complete must be called
// exactly once, from any goroutine, and runs the work's continuations.
func NewWork() (w *Work, complete func(error)) {
	w = newWork()
	return w, w.finish
}

// Failed returns a Work that has already completed with err.
func Failed(err error) *Work { return failed(err) }

// failed returns a Work that has already completed with err.
func failed(err error) *Work {
	w := newWork()
	w.finish(err)
	return w
}

// Done is closed when the work has completed.
func (w *Work) Done() <-chan struct{} { return w.done }

// Wait blocks until the work has completed and returns its error.
func (w *Work) Wait() error {
	<-w.done
	return w.err
}

// IsCompleted reports whether the work has completed.
func (w *Work) IsCompleted() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Err is the work's error once it has completed (nil before).
func (w *Work) Err() error {
	if !w.IsCompleted() {
		return nil
	}
	return w.err
}

// Then returns a Work that completes after fn has run on w's outcome;
// fn's error (or w's, passed through when fn returns it) is the new
// work's error. fn runs on the goroutine that completes w (the
// communication queue), or at once if w has completed.
func (w *Work) Then(fn func(error) error) *Work {
	next := newWork()
	w.onDone(func(err error) { next.finish(fn(err)) })
	return next
}

func (w *Work) onDone(f func(error)) {
	w.mu.Lock()
	if !w.IsCompleted() {
		w.after = append(w.after, f)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	f(w.err)
}

func (w *Work) finish(err error) {
	w.mu.Lock()
	w.err = err
	close(w.done)
	after := w.after
	w.after = nil
	w.mu.Unlock()
	for _, f := range after {
		f(err)
	}
}
