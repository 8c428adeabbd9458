package script

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// DataLoader workers: data.DataLoader(ds, { numWorkers, prefetchFactor,
// persistentWorkers }) with PyTorch's meaning. numWorkers goroutines gather
// the batches of up to numWorkers × prefetchFactor steps ahead while the
// script trains; next() hands them over in the sampler's order.
//
// JavaScript runs on the script's goroutine only, and the rank's tensor
// runtime is used by one goroutine, so the workers do the one part of
// making a batch that needs neither: they copy the rows of a
// TensorDataset's tensors (contiguous host memory, read in place) into
// buffers of the rank's device (its Alloc is safe from any goroutine, and
// counts them against the device's memory and --max-memory from the
// start), which next() adopts as the batch's tensors without a copy
// (tensor.Runtime.FromBuffer). A script dataset's get(i) and a collateFn are
// script code: with either, numWorkers is an error rather than ignored.
//
// Everything that decides what a batch holds stays on the script's
// goroutine, at the moment it happens without workers: the base seed
// each iteration draws, the permutation a shuffled epoch draws at its
// first next(), the batch next() takes from the sampler. A built-in
// sampler's later batches are read from its order, already drawn, without
// drawing; only a custom sampler (script code) is asked for its indices
// ahead, as PyTorch's iterator asks it, and a failure there is held until
// the batch it belongs to is reached. So the batches, the default
// generator and stateDict are those of the same loader without workers.

// maxLoaderWorkers bounds numWorkers: each is a goroutine, and more of
// them than cores only adds batches waiting in memory.
const maxLoaderWorkers = 1024

// loaderWorkers is the fetching side of a loader with numWorkers > 0. It
// fetches for one iteration at a time (run): when the script goes on with
// another of the loader's iterations, the first one's fetching stops and
// is taken up again if it goes on.
type loaderWorkers struct {
	r          *Runtime
	l          *dataLoader
	n          int  // numWorkers
	prefetch   int  // prefetchFactor
	inFlight   int  // n × prefetch: batches fetched ahead at most
	persistent bool // persistentWorkers: the goroutines outlive iterations
	pool       *workerPool
	run        *fetchRun
	closed     bool // the runtime has closed
}

// batchSlot is a batch whose indices are known and that is not handed
// over yet: being fetched (job), to be fetched, or a custom sampler's
// failure to give it (drawErr, raised when the batch is reached).
type batchSlot struct {
	idx     []int64
	job     *fetchJob
	drawErr any
}

// fetchRun is the fetching for one iteration: the dataset's memory the
// workers read, held (tensor.Retain) until the run stops.
type fetchRun struct {
	e         *loaderEpoch
	dev       device.Device // where the batches' buffers come from
	n         int           // samples in the dataset
	rows      []rowSource
	unretain  []func()
	cancelled atomic.Bool
	pending   sync.WaitGroup // jobs submitted and not finished or dropped
}

// rowSource is one of the dataset's tensors as the workers see it.
type rowSource struct {
	data     []byte // its elements, shared with it
	rowBytes int    // bytes of one sample
	dt       dtype.DType
	tail     []int // its shape after the first dimension
}

// fetchJob is one batch for a worker to gather. The worker writes out,
// or badIndex or err, then closes done.
type fetchJob struct {
	run      *fetchRun
	idx      []int64
	done     chan struct{}
	out      []device.Buffer // one per tensor, the batch's memory
	bad      bool            // badIndex is out of range
	badIndex int64
	err      error // anything else that failed
}

// loaderWorkersOption reads numWorkers, prefetchFactor and
// persistentWorkers; nil without workers.
func (r *Runtime) loaderWorkersOption(fn string, l *dataLoader, o *goja.Object) *loaderWorkers {
	n := r.optInt(fn, o, "numWorkers", 0)
	pf := optValue(o, "prefetchFactor")
	persistent := optBool(o, "persistentWorkers", false)
	switch {
	case n < 0:
		r.throwRangef("%s: numWorkers should be non-negative, got %d; numWorkers 0 makes each batch in next() itself", fn, n)
	case n > maxLoaderWorkers:
		r.throwRangef("%s: numWorkers %d is more than %d", fn, n, maxLoaderWorkers)
	case n == 0 && pf != nil:
		r.throwRangef("%s: prefetchFactor needs numWorkers > 0: it counts the batches each worker prepares ahead", fn)
	case n == 0 && persistent:
		r.throwRangef("%s: persistentWorkers needs numWorkers > 0", fn)
	case n == 0:
		return nil
	case l.ds.td == nil:
		r.throwf("%s: numWorkers needs a data.TensorDataset with the default collate: a script dataset's get(i) runs on the script's thread, which workers cannot use", fn)
	case l.collate != nil:
		r.throwf("%s: numWorkers needs a data.TensorDataset with the default collate: collateFn runs on the script's thread, which workers cannot use", fn)
	}
	w := &loaderWorkers{r: r, l: l, n: n, prefetch: 2, persistent: persistent}
	if pf != nil {
		if w.prefetch = r.intValue(fn, "option prefetchFactor", pf); w.prefetch <= 0 {
			r.throwRangef("%s: prefetchFactor should be a positive integer, got %d", fn, w.prefetch)
		}
	}
	w.inFlight = n * w.prefetch
	if w.prefetch > (1<<31)/n {
		w.inFlight = 1 << 31 // more than any epoch has batches
	}
	for k, jt := range l.ds.td.tensors {
		w.checkLayout(fn, k, r.live(fn, jt))
	}
	r.closers = append(r.closers, w.close)
	return w
}

// checkLayout raises an error when the workers cannot read tensor k of
// the dataset where it is: they copy rows of contiguous host memory.
func (w *loaderWorkers) checkLayout(fn string, k int, t *tensor.Tensor) {
	if dev := t.Device(); dev.Kind() != device.CPU {
		w.r.throwf("%s: numWorkers needs the dataset in host memory: tensor %d of the TensorDataset is on %v, where one index_select on the device gathers a batch (numWorkers 0); workers copy rows on the CPU", fn, k+1, dev)
	}
	if !t.IsContiguous() {
		w.r.throwf("%s: numWorkers needs contiguous tensors: tensor %d of the TensorDataset has shape %v and strides %v; make it with .contiguous()", fn, k+1, t.Shape(), t.Strides())
	}
}

// next is the iterator's next() with workers: the batch the sampler gives
// now, fetched by a worker (ahead, usually), and the fetching topped up to
// inFlight batches ahead while the script runs its step.
func (w *loaderWorkers) next(fn string, e *loaderEpoch) (goja.Value, bool) {
	r, l := w.r, w.l
	if e.done {
		return nil, false
	}
	if w.closed {
		r.throwf("%s: the runtime has closed", fn)
	}
	if e.busy {
		r.throwf("%s: next() was called while this iteration's next() was running (from its sampler)", fn)
	}
	e.busy = true
	defer func() { e.busy, e.head = false, nil }()

	var head *batchSlot
	if l.custom == nil {
		// A built-in sampler: the batch is drawn as without workers; the
		// batches after it are read from its order (peekBatch).
		idx, ok := e.draw(fn)
		if !ok {
			e.done, e.ahead = true, nil
			w.release(e)
			return nil, false
		}
		e.batches++
		if len(e.ahead) > 0 {
			head, e.ahead = e.ahead[0], e.ahead[1:]
		} else {
			head = &batchSlot{idx: idx}
			e.peek = e.pos
		}
	} else {
		w.fill(fn, e, 1)
		if len(e.ahead) == 0 {
			e.done, e.ahead = true, nil
			w.release(e)
			return nil, false
		}
		head, e.ahead = e.ahead[0], e.ahead[1:]
		if head.drawErr != nil {
			panic(head.drawErr) // drawing this batch failed, as it does without workers
		}
		e.batches++
	}
	// The checks that making the batch does without workers, at that point.
	for k, jt := range l.ds.td.tensors {
		if t := r.live(fn, jt); t.RequiresGrad() && r.rt.GradEnabled() {
			r.throwf("%s: numWorkers: tensor %d of the TensorDataset requires grad, and a worker's batch is plain memory without autograd history (PyTorch's workers refuse such batches too); detach it, iterate under tensor.noGrad, or use numWorkers 0", fn, k+1)
		}
	}
	e.head = head
	w.fill(fn, e, w.inFlight-1) // with head: inFlight batches in flight
	w.dispatch(fn, e)
	job := head.job
	<-job.done
	v := w.value(fn, job)
	// Keep inFlight batches in flight while the script runs its step.
	e.head = nil
	w.fill(fn, e, w.inFlight)
	w.dispatch(fn, e)
	return v, true
}

// fill queues the batches after the one being handed over, up to limit:
// a built-in sampler's from its order, a custom sampler's by asking it.
func (w *loaderWorkers) fill(fn string, e *loaderEpoch, limit int) {
	for len(e.ahead) < limit {
		if k := len(e.ahead); k > 0 && e.ahead[k-1].drawErr != nil {
			return // the sampler failed: nothing after that until it is reached
		}
		var s *batchSlot
		if w.l.custom == nil {
			s = e.peekBatch()
		} else {
			s = w.pull(fn, e)
		}
		if s == nil {
			return
		}
		e.ahead = append(e.ahead, s)
	}
}

// peekBatch is the batch after those queued, read from a built-in
// sampler's order without drawing anything (the draw at the order's end,
// the seed option's, happens when next() gets there); nil past the last.
func (e *loaderEpoch) peekBatch() *batchSlot {
	bs := e.l.batchSize
	m := min(bs, e.orderLen()-e.peek)
	if m <= 0 || m < bs && e.l.dropLast {
		return nil
	}
	idx := make([]int64, m)
	for k := range idx {
		idx[k] = e.orderAt(e.peek + k)
	}
	e.peek += m
	return &batchSlot{idx: idx}
}

// pull asks a custom sampler for its next batch ahead of time. A failure
// (the sampler's iterator throws, an index is not an integer) is kept in
// the slot and raised when the script reaches that batch, where it is
// raised without workers; an interrupt is raised at once.
func (w *loaderWorkers) pull(fn string, e *loaderEpoch) (s *batchSlot) {
	defer func() {
		if p := recover(); p != nil {
			if !w.deferrable(p) {
				panic(p)
			}
			s = &batchSlot{drawErr: p}
		}
	}()
	idx, ok := e.draw(fn)
	if !ok {
		return nil
	}
	return &batchSlot{idx: idx}
}

// deferrable reports whether p, recovered from script code, is an error
// the script threw or the host API raised (rather than an interrupt or a
// Go runtime failure).
func (w *loaderWorkers) deferrable(p any) bool {
	if w.r.interrupted.Load() {
		return false
	}
	switch p.(type) {
	case *goja.Object, *goja.Exception:
		return true
	}
	return false
}

// dispatch submits what is not being fetched yet of the batch handed over
// and those queued after it, for e's run (started if another run, or none,
// is going on).
func (w *loaderWorkers) dispatch(fn string, e *loaderEpoch) {
	run := w.runFor(fn, e)
	submit := func(s *batchSlot) {
		if s == nil || s.job != nil || s.drawErr != nil {
			return
		}
		s.job = &fetchJob{run: run, idx: s.idx, done: make(chan struct{})}
		run.pending.Add(1)
		w.pool.submit(s.job)
	}
	submit(e.head)
	for _, s := range e.ahead {
		submit(s)
	}
}

// runFor is the run fetching for e, started when the workers fetch for
// another iteration or none: it reads the dataset's memory as it is now,
// and holds it until the run stops.
func (w *loaderWorkers) runFor(fn string, e *loaderEpoch) *fetchRun {
	if w.run != nil && w.run.e == e {
		return w.run
	}
	w.stopRun()
	r, td := w.r, w.l.ds.td
	run := &fetchRun{e: e, dev: r.rt.Device(), n: td.n, rows: make([]rowSource, len(td.tensors))}
	ts := make([]*tensor.Tensor, len(td.tensors))
	for k, jt := range td.tensors {
		t := r.live(fn, jt)
		w.checkLayout(fn, k, t)
		if t.Size(0) != td.n {
			r.throwf("%s: tensor %d of the TensorDataset has %d rows; it had %d when the dataset was made", fn, k+1, t.Size(0), td.n)
		}
		data, ok := tensor.HostBytes(t)
		if !ok {
			r.throwf("%s: numWorkers: the memory of tensor %d of the TensorDataset cannot be read in place (%v)", fn, k+1, memoryProblem(t))
		}
		shape := t.Shape()
		row := t.DType().Size()
		for _, d := range shape[1:] {
			row *= d
		}
		run.rows[k] = rowSource{data: data, rowBytes: row, dt: t.DType(), tail: shape[1:]}
		ts[k] = t
	}
	for _, t := range ts {
		run.unretain = append(run.unretain, tensor.Retain(t))
	}
	if w.pool == nil {
		w.pool = startWorkerPool(w.n)
	}
	w.run = run
	return run
}

// memoryProblem says why a live, contiguous CPU tensor has no host bytes.
func memoryProblem(t *tensor.Tensor) error {
	if err := t.Err(); err != nil {
		return err
	}
	return errors.New("its memory was given back, or is not made yet")
}

// release stops the fetching for e, if the workers fetch for it: at its
// end, and when the script leaves it (return()).
func (w *loaderWorkers) release(e *loaderEpoch) {
	if w.run != nil && w.run.e == e {
		w.stopRun()
	}
}

// stopRun stops the run going on, if any: queued jobs are dropped, the one
// a worker is gathering is waited for, and the dataset's memory is let go.
// The iteration keeps its queued batches' indices, and fetches them again
// if it goes on. Without persistentWorkers the goroutines end too.
func (w *loaderWorkers) stopRun() {
	run := w.run
	if run == nil {
		return
	}
	w.run = nil
	run.cancelled.Store(true)
	w.pool.drop(run)
	run.pending.Wait()
	e := run.e
	for _, s := range append([]*batchSlot{e.head}, e.ahead...) {
		if s != nil && s.job != nil {
			run.free(s.job)
			s.job = nil
		}
	}
	for _, u := range run.unretain {
		u()
	}
	if !w.persistent {
		w.pool.stop()
		w.pool = nil
	}
}

// close ends the workers when the runtime closes.
func (w *loaderWorkers) close() {
	w.stopRun()
	if w.pool != nil {
		w.pool.stop()
		w.pool = nil
	}
	w.closed = true
}

// value makes the batch of a finished job: the tensors adopt the worker's
// buffers, or its failure is raised as without workers.
func (w *loaderWorkers) value(fn string, job *fetchJob) goja.Value {
	r := w.r
	if job.bad {
		r.throwRangef("%s: the sampler gave index %d, out of range for a dataset of %d samples", fn, job.badIndex, job.run.n)
	}
	if job.err != nil {
		r.throwf("%s: a worker failed to gather the batch of samples %s: %v", fn, indexList(job.idx), job.err)
	}
	out := make([]any, len(job.run.rows))
	for k, src := range job.run.rows {
		shape := append([]int{len(job.idx)}, src.tail...)
		out[k] = r.wrap(r.rt.FromBuffer(job.out[k], src.dt, shape...))
	}
	job.out = nil // the tensors own the buffers now
	return r.vm.NewArray(out...)
}

// indexList prints a batch's sample indices, the first ten of many.
func indexList(idx []int64) string {
	if len(idx) <= 10 {
		return fmt.Sprint(idx)
	}
	return fmt.Sprintf("%v... (%d samples)", idx[:10], len(idx))
}

// gather copies the rows of the job's samples out of the dataset, on a
// worker goroutine. Indices count from the end when negative, as without
// workers; one out of range fails the batch naming it.
func (run *fetchRun) gather(j *fetchJob) {
	defer func() {
		if p := recover(); p != nil {
			j.out, j.err = nil, fmt.Errorf("%v", p)
		}
	}()
	rows := make([]int, len(j.idx))
	for k, i := range j.idx {
		s, ok := wrapIndex(int(i), run.n)
		if !ok {
			j.bad, j.badIndex = true, i
			return
		}
		rows[k] = s
	}
	j.out = make([]device.Buffer, 0, len(run.rows))
	for _, src := range run.rows {
		rb := src.rowBytes
		buf, err := run.dev.Alloc(src.dt, len(rows)*rb/src.dt.Size())
		if err != nil {
			run.free(j)
			j.err = err
			return
		}
		j.out = append(j.out, buf)
		hb, ok := buf.(device.HostBuffer)
		if !ok {
			run.free(j)
			j.err = fmt.Errorf("the device's buffers are not host memory")
			return
		}
		dst := hb.HostBytes()
		for k, s := range rows {
			copy(dst[k*rb:(k+1)*rb], src.data[s*rb:(s+1)*rb])
		}
	}
}

// free gives back the buffers of a job whose batch was never handed over.
func (run *fetchRun) free(j *fetchJob) {
	for _, b := range j.out {
		run.dev.Free(b)
	}
	j.out = nil
}

// workerPool is the worker goroutines and their queue of jobs. The script's
// goroutine never waits to submit (the queue grows), and waits on a job
// only while a worker gathers it; workers wait only for jobs.
type workerPool struct {
	mu     sync.Mutex
	ready  sync.Cond
	queue  []*fetchJob
	closed bool
	wg     sync.WaitGroup
}

func startWorkerPool(n int) *workerPool {
	p := &workerPool{}
	p.ready.L = &p.mu
	p.wg.Add(n)
	for range n {
		go p.work()
	}
	return p
}

// work gathers jobs until the pool stops; a cancelled run's jobs are
// finished without gathering.
func (p *workerPool) work() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.closed {
			p.ready.Wait()
		}
		if p.closed {
			p.mu.Unlock()
			return
		}
		j := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.mu.Unlock()
		if !j.run.cancelled.Load() {
			j.run.gather(j)
		}
		close(j.done)
		j.run.pending.Done()
	}
}

func (p *workerPool) submit(j *fetchJob) {
	p.mu.Lock()
	p.queue = append(p.queue, j)
	p.mu.Unlock()
	p.ready.Signal()
}

// drop takes run's jobs that no worker has taken out of the queue.
func (p *workerPool) drop(run *fetchRun) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.queue[:0]
	for _, j := range p.queue {
		if j.run == run {
			run.pending.Done()
			continue
		}
		kept = append(kept, j)
	}
	clear(p.queue[len(kept):])
	p.queue = kept
}

// stop ends the goroutines, once they have finished the job in hand.
func (p *workerPool) stop() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ready.Broadcast()
	p.wg.Wait()
}
