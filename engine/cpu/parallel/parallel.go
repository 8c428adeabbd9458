// Package parallel owns the CPU worker pool that every CPU kernel shares.
//
// Kernels call For (or ForThreads, which numbers the threads) to split a
// loop over [0, n) into chunks, dealt to the calling goroutine and the
// pool's workers in one contiguous range each, the same from loop to loop;
// a thread done with its range takes what is left of the others'. The
// pool is process-wide so that in-process ranks running kernels at the
// same time share the cores instead of oversubscribing them: a call
// recruits only the workers that are idle and always makes progress on its
// own goroutine.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// pool is one generation of workers, never changed once published: every
// loop reads the current one without a lock (a lock taken by every loop
// of every in-process rank moved its cache line between the cores at
// each loop).
type pool struct {
	threads int           // total threads a call may use, the caller included
	queue   chan *job     // idle workers wait here
	stop    chan struct{} // closes this generation of workers
}

var (
	mu      sync.Mutex // serialises SetThreads
	current atomic.Pointer[pool]
)

func init() { SetThreads(0) }

// SetThreads sets the number of threads a parallel loop may use, the calling
// goroutine included. n <= 0 means runtime.GOMAXPROCS(0). It replaces the
// worker pool; calls already running finish on the old one.
func SetThreads(n int) {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	mu.Lock()
	defer mu.Unlock()
	if old := current.Load(); old != nil {
		close(old.stop)
	}
	p := &pool{threads: n, queue: make(chan *job, n), stop: make(chan struct{})}
	for i := 0; i < n-1; i++ {
		go worker(p.queue, p.stop)
	}
	current.Store(p)
}

// Threads reports the number of threads a parallel loop may use.
func Threads() int { return current.Load().threads }

// poll is how long, in nanoseconds, a worker that finished a loop keeps
// polling for the next before it parks; 0 parks at once.
var poll atomic.Int64

// SetPoll sets how long a worker that finished a loop polls for the next
// one before it parks (0 or less: it parks at once, the default). A
// parked worker takes about 100 µs to start again on a VM (waking a
// halted virtual CPU, BenchmarkWakeParked), longer than many loops; a
// polling worker starts at once but keeps its core busy meanwhile, which
// a threaded BLAS library's own threads would miss (engine/cpu/blas sets
// it when the Go kernels do the products; RATIONALE.md, "One worker pool
// for the process").
func SetPoll(d time.Duration) { poll.Store(int64(max(d, 0))) }

// Poll reports how long an idle worker polls before it parks (SetPoll).
func Poll() time.Duration { return time.Duration(poll.Load()) }

func worker(q chan *job, stop chan struct{}) {
	for {
		select {
		case j := <-q:
			j.join()
			if !polled(q, stop) {
				return
			}
		case <-stop:
			return
		}
	}
}

// polled runs the loops that arrive within the poll window of the last
// one, yielding the P every 16 turns to any goroutine that wants it. It
// reports false when the pool was replaced.
func polled(q chan *job, stop chan struct{}) bool {
	window := time.Duration(poll.Load())
	if window <= 0 {
		return true
	}
	last := time.Now()
	for i := 1; ; i++ {
		// The queue's length is read without its lock: a poller that
		// took the lock at every turn (a select) made the callers that
		// post loops wait for it, and moved the lock's cache line
		// between the cores.
		if len(q) > 0 {
			select {
			case j := <-q:
				j.join()
				last = time.Now()
				continue
			default: // another worker took it
			}
		}
		if i%16 == 0 {
			select {
			case <-stop:
				return false
			default:
			}
			if time.Since(last) > window {
				return true
			}
			runtime.Gosched()
		}
	}
}

// running counts the loops in For, on every goroutine.
var running atomic.Int32

// A job's chunks are dealt out in contiguous ranges, one for each thread
// the call may use: the caller takes the first, the workers that join the
// next ones in the order they join, and each thread, done with its own
// range, takes what is left of the others'. Every loop of the same size
// thus gives a thread the same part of its data as the loop before, as
// OpenMP's static schedule (PyTorch's at::parallel_for) does: a layer
// reads what the previous one wrote from its own core's cache. Where the
// cores share no cache (two virtual CPUs on different dies), taking chunks
// first come, first served moved most of each layer's data between them
// and doubled the time of the CNN's memory-bound layers (RATIONALE.md,
// "One worker pool for the process").
type job struct {
	fn     func(lo, hi int)
	fnT    func(thread, lo, hi int) // ForThreads's, in place of fn
	n      int
	chunk  int
	ranges []chunkRange
	inline [4]chunkRange // ranges for up to 4 threads, without an allocation
	joined atomic.Int32  // workers that took the job
	wg     sync.WaitGroup
	done   atomic.Int64 // chunks finished (after their wg.Done)
	panicV atomic.Value
}

// chunkRange is one thread's range of chunks [next, end), next advanced
// by whichever thread takes a chunk from it; padded to a cache line so
// that the threads' cursors do not share one.
type chunkRange struct {
	next atomic.Int64
	end  int64
	_    [48]byte
}

// work runs range first's chunks, then those left in the others'.
func (j *job) work(first int) {
	for k := range j.ranges {
		r := &j.ranges[(first+k)%len(j.ranges)]
		for {
			c := r.next.Add(1) - 1
			if c >= r.end {
				break
			}
			lo := int(c) * j.chunk
			j.runChunk(first, lo, min(lo+j.chunk, j.n))
		}
	}
}

// deal splits chunks into ranges contiguous ranges, one per thread.
func (j *job) deal(chunks, ranges int) {
	if ranges <= len(j.inline) {
		j.ranges = j.inline[:ranges]
	} else {
		j.ranges = make([]chunkRange, ranges)
	}
	for r := range j.ranges {
		j.ranges[r].next.Store(int64(r * chunks / ranges))
		j.ranges[r].end = int64((r + 1) * chunks / ranges)
	}
	j.wg.Add(chunks)
}

// join is a worker's turn at j: the next range after those taken.
func (j *job) join() { j.work(int(j.joined.Add(1))) }

func (j *job) runChunk(thread, lo, hi int) {
	defer func() {
		// A panic in a worker would kill the process without the caller's
		// recover ever seeing it; carry it back to the caller instead.
		if r := recover(); r != nil {
			j.panicV.CompareAndSwap(nil, panicBox{r})
		}
		j.wg.Done()
		j.done.Add(1)
	}()
	if j.fnT != nil {
		j.fnT(thread, lo, hi)
		return
	}
	j.fn(lo, hi)
}

// wait returns once every chunk of j has run. While workers poll it polls
// too, for at most the poll window: a caller that parked would be woken
// onto the last worker's P, and the worker, yielding its P to it, would
// wait in the global run queue for an idle P's thread to wake (tens of
// microseconds on a VM) and miss the next loops.
func (j *job) wait(chunks int, window time.Duration) {
	if window > 0 {
		start := time.Now()
		for i := 1; j.done.Load() < int64(chunks); i++ {
			if i%64 == 0 && time.Since(start) > window {
				break
			}
		}
	}
	j.wg.Wait()
}

type panicBox struct{ v any }

// For runs fn over [0, n) split into contiguous chunks of at least grain
// elements, in parallel. It returns when every chunk has run. Small loops
// (n <= grain) run inline on the caller. A panic in fn is re-raised on the
// caller's goroutine.
func For(n, grain int, fn func(lo, hi int)) {
	if t, q, grain, ok := parallelPlan(n, grain, 0); ok {
		run(n, grain, t, q, &job{fn: fn})
	} else if n > 0 {
		fn(0, n)
	}
}

// ForThreads is For on at most threads threads (and no more than the
// pool's), fn told which thread runs each chunk: 0 the caller, 1, 2, …
// the workers that join the call, each number below threads and on one
// goroutine at a time, so that fn may give each its own scratch memory.
// The chunks a thread takes from its own range are the same from call to
// call (see job), so a thread's scratch stays in its core's cache.
func ForThreads(n, grain, threads int, fn func(thread, lo, hi int)) {
	if t, q, grain, ok := parallelPlan(n, grain, threads); ok {
		run(n, grain, t, q, &job{fnT: fn})
	} else if n > 0 {
		fn(0, 0, n)
	}
}

// parallelPlan returns the threads (at most limit, 0: the pool's), the
// pool's queue and the grain (at least 1) for a loop over [0, n), and
// whether it is worth more than the caller's thread: the inline path
// allocates nothing.
func parallelPlan(n, grain, limit int) (t int, q chan *job, g int, ok bool) {
	if n <= 0 {
		return 0, nil, 0, false
	}
	g = max(grain, 1)
	p := current.Load()
	t, q = p.threads, p.queue
	if limit > 0 {
		t = min(t, limit)
	}
	return t, q, g, t > 1 && n > g
}

// run runs j over [0, n) on up to t threads, the caller's included.
func run(n, grain, t int, q chan *job, j *job) {
	// A few chunks per thread balance uneven work; no chunk is below grain.
	chunks := min((n+grain-1)/grain, 4*t)
	chunk := (n + chunks - 1) / chunks
	chunks = (n + chunk - 1) / chunk
	// The threads are shared among the loops running at once (in-process
	// ranks each run their own): a loop recruits at most its share, so that
	// two ranks on two cores run a goroutine each rather than three
	// between them; a loop running alone takes every thread.
	callers := int(running.Add(1))
	defer running.Add(-1)
	share := max(1, t/callers)
	j.n, j.chunk = n, chunk
	j.deal(chunks, min(share, chunks))
recruit:
	for i := 0; i < min(chunks-1, share-1); i++ {
		select {
		case q <- j:
		default: // every worker is busy: the caller does the rest itself
			break recruit
		}
	}
	j.work(0)
	j.wait(chunks, time.Duration(poll.Load()))
	if p := j.panicV.Load(); p != nil {
		panic(p.(panicBox).v)
	}
}

// Blocks calls fn(lo, hi) for blocks of exactly size elements (the last may
// be shorter), in parallel; useful when a kernel's block size is fixed by its
// cache blocking rather than by load balance.
func Blocks(n, size int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	nb := (n + size - 1) / size
	For(nb, 1, func(b0, b1 int) {
		for b := b0; b < b1; b++ {
			fn(b*size, min((b+1)*size, n))
		}
	})
}
