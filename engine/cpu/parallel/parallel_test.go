package parallel

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestForCoversEveryIndexOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 5} {
		SetThreads(threads)
		for _, tc := range []struct{ n, grain int }{{0, 1}, {1, 1}, {7, 3}, {1000, 1}, {1000, 64}, {100003, 1000}} {
			hits := make([]int32, tc.n)
			For(tc.n, tc.grain, func(lo, hi int) {
				if hi-lo < 1 {
					t.Errorf("empty chunk [%d,%d)", lo, hi)
				}
				for i := lo; i < hi; i++ {
					atomic.AddInt32(&hits[i], 1)
				}
			})
			for i, h := range hits {
				if h != 1 {
					t.Fatalf("threads %d n %d grain %d: index %d ran %d times", threads, tc.n, tc.grain, i, h)
				}
			}
		}
	}
	SetThreads(0)
}

// TestConcurrentCallers runs loops from several goroutines at once, as
// in-process ranks do.
func TestConcurrentCallers(t *testing.T) {
	SetThreads(3)
	defer SetThreads(0)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 50; r++ {
				var sum atomic.Int64
				For(10000, 100, func(lo, hi int) {
					s := 0
					for i := lo; i < hi; i++ {
						s += i
					}
					sum.Add(int64(s))
				})
				if sum.Load() != 10000*9999/2 {
					t.Errorf("sum %d", sum.Load())
				}
			}
		}()
	}
	wg.Wait()
}

func TestPanicReachesCaller(t *testing.T) {
	SetThreads(4)
	defer SetThreads(0)
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v", r)
		}
	}()
	For(1000, 10, func(lo, hi int) {
		if lo >= 500 {
			panic("boom")
		}
	})
	t.Fatal("no panic")
}

func TestBlocks(t *testing.T) {
	var total atomic.Int64
	Blocks(1000, 128, func(lo, hi int) {
		if lo%128 != 0 || (hi-lo != 128 && hi != 1000) {
			t.Errorf("block [%d,%d)", lo, hi)
		}
		total.Add(int64(hi - lo))
	})
	if total.Load() != 1000 {
		t.Fatal(total.Load())
	}
}

// TestSharedAmongCallers: a loop that runs while another is running
// recruits no more than its share of the workers: with as many loops as
// threads, each runs on its caller alone.
func TestSharedAmongCallers(t *testing.T) {
	SetThreads(2)
	defer SetThreads(0)
	inner := make(chan int, 1)
	For(2, 1, func(lo, hi int) {
		if lo != 0 {
			return
		}
		// This loop runs inside another: two loops, two threads.
		var mu sync.Mutex
		var now, most int
		For(8, 1, func(lo, hi int) {
			mu.Lock()
			now++
			most = max(most, now)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			now--
			mu.Unlock()
		})
		inner <- most
	})
	if most := <-inner; most != 1 {
		t.Errorf("a loop beside another ran %d chunks at once on 2 threads, want 1", most)
	}
}

// BenchmarkWakeParked measures how long a parked worker takes to start a
// loop's second chunk: the caller works for about 100 µs first, so that
// the worker has parked, then holds the first chunk until the second
// starts (or 2 ms pass). The median delay is the metric "µs-to-start";
// it is what a loop pays before two threads help (RATIONALE.md, "One
// worker pool for the process").
func BenchmarkWakeParked(b *testing.B) {
	if Threads() < 2 {
		b.Skip("one thread: no worker to wake")
	}
	buf := make([]float32, 40000)
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		for r := 0; r < 10; r++ {
			for j := range buf {
				buf[j] += 1
			}
		}
		var first atomic.Int64
		t0 := time.Now()
		For(2, 1, func(lo, hi int) {
			if first.CompareAndSwap(0, 1) {
				for time.Since(t0) < 2*time.Millisecond && first.Load() == 1 {
				}
				return
			}
			first.Store(2)
			lat = append(lat, time.Since(t0))
		})
	}
	if len(lat) == 0 {
		b.Fatal("the second chunk never ran on a worker")
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "µs-to-start")
}

// BenchmarkShortLoop runs a loop of about 50 µs on one thread over every
// thread, with workers that park at once and with workers that poll (as
// beside the Go kernels): how much of a second thread a short loop gets.
// On the 2-vCPU Zen 5 EPYC, polling, 2 threads: 36.0 µs a loop before the
// caller waited for the workers by polling too, 27.9 after (one thread:
// 51-54; workers that park: 60-61, slower than one thread).
func BenchmarkShortLoop(b *testing.B) {
	src := make([]float32, 100_000)
	dst := make([]float32, len(src))
	for i := range src {
		src[i] = float32(i%7) - 3
	}
	all := Threads()
	defer SetThreads(0)
	defer SetPoll(0)
	for _, poll := range []time.Duration{0, 200 * time.Microsecond} {
		for _, threads := range []int{1, all} {
			b.Run(fmt.Sprintf("threads=%d/poll=%v", threads, poll), func(b *testing.B) {
				SetThreads(threads)
				SetPoll(poll)
				for i := 0; i < b.N; i++ {
					For(len(src), len(src)/8, func(lo, hi int) {
						for k := lo; k < hi; k++ {
							dst[k] = max(src[k], 0)
						}
					})
				}
			})
		}
	}
}

// TestForThreads holds ForThreads's numbers: below the limit, never on two
// chunks at once, every index run once, with loops running beside it.
func TestForThreads(t *testing.T) {
	for _, tc := range []struct{ pool, limit, callers int }{{1, 1, 1}, {2, 2, 1}, {4, 2, 1}, {2, 4, 1}, {5, 5, 3}} {
		t.Run(fmt.Sprintf("pool=%d/limit=%d/callers=%d", tc.pool, tc.limit, tc.callers), func(t *testing.T) {
			SetThreads(tc.pool)
			defer SetThreads(0)
			var wg sync.WaitGroup
			for range tc.callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 40 {
						const n = 5000
						busy := make([]atomic.Int32, tc.limit)
						hits := make([]int32, n)
						ForThreads(n, 10, tc.limit, func(thread, lo, hi int) {
							if thread < 0 || thread >= tc.limit {
								t.Errorf("thread %d of a limit of %d", thread, tc.limit)
								return
							}
							if busy[thread].Add(1) != 1 {
								t.Errorf("thread %d runs two chunks at once", thread)
							}
							for i := lo; i < hi; i++ {
								atomic.AddInt32(&hits[i], 1)
							}
							busy[thread].Add(-1)
						})
						for i, h := range hits {
							if h != 1 {
								t.Errorf("index %d ran %d times", i, h)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// TestJobRanges holds the static schedule: a thread runs its own range of
// chunks first, in order, then what is left of the others' after it.
func TestJobRanges(t *testing.T) {
	for _, tc := range []struct {
		chunks, ranges, first int
		want                  []int
	}{
		{8, 2, 0, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{8, 2, 1, []int{4, 5, 6, 7, 0, 1, 2, 3}},
		{7, 3, 2, []int{4, 5, 6, 0, 1, 2, 3}},
		{3, 3, 1, []int{1, 2, 0}},
	} {
		var got []int
		j := &job{fnT: func(thread, lo, hi int) {
			if thread != tc.first {
				t.Errorf("chunk [%d, %d) ran as thread %d, want %d", lo, hi, thread, tc.first)
			}
			got = append(got, lo/10)
		}, n: 10 * tc.chunks, chunk: 10}
		j.deal(tc.chunks, tc.ranges)
		j.work(tc.first)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%d chunks in %d ranges from range %d: ran %v, want %v", tc.chunks, tc.ranges, tc.first, got, tc.want)
		}
	}
}
