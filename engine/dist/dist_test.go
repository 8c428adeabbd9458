package dist

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// runRanks runs fn on n ranks of a new world, each on its own goroutine
// with its own tensor runtime, and returns their errors by rank.
func runRanks(t *testing.T, n int, opts Options, fn func(rank int, pg ProcessGroup, rt *tensor.Runtime) error) []error {
	t.Helper()
	w, err := NewWorld(n, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
			errs[r] = fn(r, w.Group(r), rt)
		})
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestMismatchIsAnErrorOnEveryRank(t *testing.T) {
	for _, c := range []struct {
		name  string
		debug bool
		call  func(r int, pg ProcessGroup, rt *tensor.Runtime) *Work
		want  string
	}{
		{"different collectives", false, func(r int, pg ProcessGroup, rt *tensor.Runtime) *Work {
			x := rt.Zeros(dtype.Float32, 4)
			if r == 0 {
				return pg.AllReduce(x, Sum)
			}
			return pg.Broadcast(x, 0)
		}, "does not match across ranks"},
		{"different sizes", false, func(r int, pg ProcessGroup, rt *tensor.Runtime) *Work {
			return pg.AllReduce(rt.Zeros(dtype.Float32, 4+r), Sum)
		}, "4 elements"},
		{"different ops", false, func(r int, pg ProcessGroup, rt *tensor.Runtime) *Work {
			return pg.AllReduce(rt.Zeros(dtype.Float32, 4), []ReduceOp{Sum, Max}[r])
		}, "op max"},
		{"different shapes, debug", true, func(r int, pg ProcessGroup, rt *tensor.Runtime) *Work {
			shape := [][]int{{2, 3}, {3, 2}}[r]
			return pg.AllReduce(rt.Zeros(dtype.Float32, shape...), Sum)
		}, "shape [3 2]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := runRanks(t, 2, Options{Debug: c.debug}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
				return c.call(r, pg, rt).Wait()
			})
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("rank %d: error %v, want one containing %q", r, err, c.want)
				}
			}
		})
	}
}

func TestTimeoutNamesTheMissingRank(t *testing.T) {
	start := time.Now()
	errs := runRanks(t, 3, Options{Timeout: 200 * time.Millisecond}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
		if r == 2 {
			return nil // never calls the collective
		}
		return pg.AllReduce(rt.Zeros(dtype.Float32, 8), Sum).Wait()
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the timeout took %v", d)
	}
	for r := range 2 {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "allReduce #0 of group 0 timed out") || !strings.Contains(errs[r].Error(), "rank 2 did not call it") {
			t.Errorf("rank %d: %v", r, errs[r])
		}
	}
}

func TestAbortWakesWaitingRanks(t *testing.T) {
	w, err := NewWorld(2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	work := w.Group(0).AllReduce(rt.Zeros(dtype.Float32, 4), Sum) // rank 1 never comes
	time.AfterFunc(50*time.Millisecond, func() { w.Abort(errors.New("rank 1 failed")) })
	select {
	case <-work.Done():
		if err := work.Err(); err == nil || err.Error() != "rank 1 failed" {
			t.Errorf("error %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("abort did not wake the waiting collective")
	}
	// Later collectives fail at once.
	if err := w.Group(0).Barrier().Wait(); err == nil {
		t.Error("a collective after abort succeeded")
	}
}

func TestBadArguments(t *testing.T) {
	w, err := NewWorld(2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	pg := w.Group(0)
	x := rt.Zeros(dtype.Float32, 4, 6)
	for _, c := range []struct {
		name string
		work *Work
		want string
	}{
		{"non-contiguous", pg.AllReduce(x.Transpose(0, 1), Sum), "must be contiguous"},
		{"avg of integers", pg.AllReduce(rt.Zeros(dtype.Int64, 4), Avg), "avg needs a floating-point tensor"},
		{"sum of booleans", pg.AllReduce(rt.Zeros(dtype.Bool, 4), Sum), "not defined for bool"},
		{"root out of range", pg.Broadcast(x, 5), "rank 5 is not in the group"},
		{"gather size", pg.AllGather(rt.Zeros(dtype.Float32, 7), rt.Zeros(dtype.Float32, 4)), "2 ranks × the input's 4"},
		{"scatter size", pg.ReduceScatter(rt.Zeros(dtype.Float32, 4), rt.Zeros(dtype.Float32, 7), Sum), "2 ranks × the output's 4"},
		{"dtypes", pg.AllGather(rt.Zeros(dtype.Float64, 8), rt.Zeros(dtype.Float32, 4)), "the input is float32 and the output float64"},
		{"send to self", pg.Send(x, 0), "cannot send to itself"},
		{"alltoall aliasing", pg.AllToAll(x.Flatten(0, 1), x.Flatten(0, 1)), "share memory"},
	} {
		if err := c.work.Wait(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, err := pg.NewGroup([]int{0, 0}); err == nil {
		t.Error("newGroup with a repeated rank succeeded")
	}
}

func TestNetModel(t *testing.T) {
	for _, c := range []struct {
		in   string
		want NetModel
		err  bool
	}{
		{"10Gbit,20us", NetModel{Bandwidth: 1.25e9, Latency: 20 * time.Microsecond}, false},
		{"25Gbit", NetModel{Bandwidth: 25e9 / 8}, false},
		{"1GB,1ms", NetModel{Bandwidth: 1e9, Latency: time.Millisecond}, false},
		{"none", NetModel{}, false},
		{"10", NetModel{}, true},
		{"-1Gbit", NetModel{}, true},
		{"10Gbit,soon", NetModel{}, true},
	} {
		got, err := ParseNetModel(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseNetModel(%q) = %+v, %v; want %+v (error %v)", c.in, got, err, c.want, c.err)
		}
	}
	m := NetModel{Bandwidth: 1e9, Latency: time.Millisecond}
	// 100 MB all-reduced by 4 ranks crosses 2·3/4 of it: 150 ms + latency.
	if got := m.Cost(opAllReduce, 100e6, 4); got != 151*time.Millisecond {
		t.Errorf("all-reduce cost %v", got)
	}
	// The emulated link makes a collective last at least its cost.
	start := time.Now()
	noErrors(t, runRanks(t, 2, Options{Net: NetModel{Latency: 30 * time.Millisecond}}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
		return pg.AllReduce(rt.Zeros(dtype.Float32, 4), Sum).Wait()
	}))
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("an all-reduce over a 30 ms link took %v", d)
	}
}
