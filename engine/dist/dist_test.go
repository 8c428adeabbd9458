package dist

import (
	"errors"
	"fmt"
	"math"
	"slices"
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

// value is element i of rank r's input: small integers, exact in every
// dtype, so that the expected results do not depend on summation order.
func value(dt dtype.DType, op ReduceOp, r, i int) float64 {
	switch {
	case op == Product && dt == dtype.Uint8:
		return []float64{1, 2, 1}[(r+i)%3]
	case op == Product:
		return []float64{1, 2, -1}[(r+i)%3]
	case dt == dtype.Uint8 || dt == dtype.Bool:
		if dt == dtype.Bool {
			return float64((r + i) % 2)
		}
		return float64((r + i) % 5)
	}
	return float64((r+1)*(i%7) - 3*r)
}

func values(dt dtype.DType, op ReduceOp, r, n, offset int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = value(dt, op, r, offset+i)
	}
	return v
}

func reduceRef(dt dtype.DType, op ReduceOp, ranks, i int) float64 {
	acc := value(dt, op, 0, i)
	for r := 1; r < ranks; r++ {
		x := value(dt, op, r, i)
		switch op {
		case Sum, Avg:
			acc += x
		case Product:
			acc *= x
		case Max:
			acc = math.Max(acc, x)
		case Min:
			acc = math.Min(acc, x)
		}
	}
	if op == Avg {
		acc /= float64(ranks)
		if dt == dtype.BFloat16 {
			acc = float64(dtype.BF16FromFloat32(float32(acc)).Float32())
		} else if dt == dtype.Float16 {
			acc = float64(dtype.F16FromFloat32(float32(acc)).Float32())
		} else if dt == dtype.Float32 {
			acc = float64(float32(acc))
		}
	}
	return acc
}

func readBack(t *tensor.Tensor) ([]float64, error) {
	if t.DType() == dtype.Bool || t.DType() == dtype.Uint8 {
		b, err := t.Bytes()
		v := make([]float64, len(b))
		for i, x := range b {
			v[i] = float64(x)
		}
		return v, err
	}
	return t.Float64s()
}

func compare(what string, got, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			return fmt.Errorf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
	return nil
}

var allDTypes = []dtype.DType{dtype.Float32, dtype.Float64, dtype.BFloat16, dtype.Float16, dtype.Int64, dtype.Int32, dtype.Uint8, dtype.Bool}

// sizes cover empty tensors, sizes smaller than and not divisible by the
// number of ranks, and sizes spanning several reduction chunks.
var sizes = []int{0, 1, 3, 7, 64, 1000, 3*reduceChunk + 5}

func TestAllReduce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		for _, dt := range allDTypes {
			for _, op := range []ReduceOp{Sum, Avg, Max, Min, Product} {
				if checkReduce(dt, op) != nil {
					continue
				}
				t.Run(fmt.Sprintf("n=%d/%v/%v", n, dt, op), func(t *testing.T) {
					t.Parallel()
					noErrors(t, runRanks(t, n, Options{}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
						for _, size := range sizes {
							x := rt.FromValues(dt, values(dt, op, r, size, 0), size)
							if err := pg.AllReduce(x, op).Wait(); err != nil {
								return err
							}
							got, err := readBack(x)
							if err != nil {
								return err
							}
							want := make([]float64, size)
							for i := range want {
								want[i] = reduceRef(dt, op, n, i)
							}
							if err := compare(fmt.Sprintf("size %d", size), got, want); err != nil {
								return err
							}
						}
						return nil
					}))
				})
			}
		}
	}
}

func TestBlockCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		for _, dt := range allDTypes {
			t.Run(fmt.Sprintf("n=%d/%v", n, dt), func(t *testing.T) {
				t.Parallel()
				noErrors(t, runRanks(t, n, Options{}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
					for _, size := range sizes {
						// Broadcast from the last rank.
						root := n - 1
						x := rt.FromValues(dt, values(dt, Sum, r, size, 0), size)
						if err := pg.Broadcast(x, root).Wait(); err != nil {
							return err
						}
						if err := check(x, values(dt, Sum, root, size, 0), "broadcast size %d", size); err != nil {
							return err
						}
						// All-gather: block k of out is rank k's input.
						in := rt.FromValues(dt, values(dt, Sum, r, size, 0), size)
						out := rt.Zeros(dt, n*size)
						if err := pg.AllGather(out, in).Wait(); err != nil {
							return err
						}
						var want []float64
						for k := range n {
							want = append(want, values(dt, Sum, k, size, 0)...)
						}
						if err := check(out, want, "allGather size %d", size); err != nil {
							return err
						}
						// The same into a list of tensors.
						outs := make([]*tensor.Tensor, n)
						for k := range outs {
							outs[k] = rt.Zeros(dt, size)
						}
						if err := pg.AllGatherInto(outs, in).Wait(); err != nil {
							return err
						}
						for k, o := range outs {
							if err := check(o, values(dt, Sum, k, size, 0), "allGatherInto size %d, output %d", size, k); err != nil {
								return err
							}
						}
						// Reduce-scatter (sum or max): block r of the combined input.
						op := Sum
						if checkReduce(dt, op) != nil {
							op = Max
						}
						big := rt.FromValues(dt, values(dt, op, r, n*size, 0), n*size)
						part := rt.Zeros(dt, size)
						if err := pg.ReduceScatter(part, big, op).Wait(); err != nil {
							return err
						}
						want = want[:0]
						for i := range size {
							want = append(want, reduceRef(dt, op, n, r*size+i))
						}
						if err := check(part, want, "reduceScatter size %d", size); err != nil {
							return err
						}
						// All-to-all: block k of rank r's output is block r of rank k's input.
						src := rt.FromValues(dt, values(dt, Sum, r, n*size, 0), n*size)
						dst := rt.Zeros(dt, n*size)
						if err := pg.AllToAll(dst, src).Wait(); err != nil {
							return err
						}
						want = want[:0]
						for k := range n {
							want = append(want, values(dt, Sum, k, size, r*size)...)
						}
						if err := check(dst, want, "allToAll size %d", size); err != nil {
							return err
						}
					}
					return pg.Barrier().Wait()
				}))
			})
		}
	}
}

func check(x *tensor.Tensor, want []float64, format string, args ...any) error {
	got, err := readBack(x)
	if err != nil {
		return err
	}
	if x.DType() == dtype.Bool {
		for i := range want {
			if want[i] != 0 {
				want[i] = 1
			}
		}
	}
	return compare(fmt.Sprintf(format, args...), got, want)
}

func TestInPlaceGatherAndScatter(t *testing.T) {
	// ZeRO gathers into a flat buffer whose block r is this rank's shard,
	// and reduce-scatters a flat gradient into its own block.
	const n, size = 3, 1001
	noErrors(t, runRanks(t, n, Options{}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
		flat := rt.Zeros(dtype.Float32, n*size)
		shard := flat.Narrow(0, r*size, size)
		if err := shard.CopyFrom(rt.FromValues(dtype.Float32, values(dtype.Float32, Sum, r, size, 0), size)); err != nil {
			return err
		}
		if err := pg.AllGather(flat, shard).Wait(); err != nil {
			return err
		}
		var want []float64
		for k := range n {
			want = append(want, values(dtype.Float32, Sum, k, size, 0)...)
		}
		if err := check(flat, want, "in-place allGather"); err != nil {
			return err
		}
		grad := rt.FromValues(dtype.Float32, values(dtype.Float32, Sum, r, n*size, 0), n*size)
		own := grad.Narrow(0, r*size, size)
		if err := pg.ReduceScatter(own, grad, Sum).Wait(); err != nil {
			return err
		}
		want = want[:0]
		for i := range size {
			want = append(want, reduceRef(dtype.Float32, Sum, n, r*size+i))
		}
		return check(own, want, "in-place reduceScatter")
	}))
}

func TestSendRecvAndObjects(t *testing.T) {
	noErrors(t, runRanks(t, 3, Options{}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
		// A ring: every rank sends to the next and receives from the previous.
		next, prev := (r+1)%3, (r+2)%3
		out := rt.FromValues(dtype.Float32, []float64{float64(r), float64(10 * r)}, 2)
		in := rt.Zeros(dtype.Float32, 2)
		send := pg.Send(out, next)
		if err := pg.Recv(in, prev).Wait(); err != nil {
			return err
		}
		if err := send.Wait(); err != nil {
			return err
		}
		if err := check(in, []float64{float64(prev), float64(10 * prev)}, "recv"); err != nil {
			return err
		}
		got, err := pg.BroadcastObject([]byte(fmt.Sprintf("from %d", r)), 1)
		if err != nil {
			return err
		}
		if string(got) != "from 1" {
			return fmt.Errorf("broadcastObject gave %q", got)
		}
		all, err := pg.GatherObject([]byte{byte(r)}, 0)
		if err != nil {
			return err
		}
		if r == 0 && !slices.EqualFunc(all, [][]byte{{0}, {1}, {2}}, slices.Equal) {
			return fmt.Errorf("gatherObject gave %v", all)
		}
		if r != 0 && all != nil {
			return fmt.Errorf("gatherObject gave rank %d %v", r, all)
		}
		return nil
	}))
}

func TestSubgroups(t *testing.T) {
	noErrors(t, runRanks(t, 4, Options{}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
		odd, err := pg.NewGroup([]int{3, 1})
		if err != nil {
			return err
		}
		if (odd != nil) != (r%2 == 1) {
			return fmt.Errorf("rank %d: subgroup %v", r, odd)
		}
		x := rt.FromValues(dtype.Float32, []float64{float64(r)}, 1)
		if odd != nil {
			if odd.Size() != 2 || odd.Rank() != r/2 {
				return fmt.Errorf("rank %d is rank %d of %d in the subgroup", r, odd.Rank(), odd.Size())
			}
			if err := odd.AllReduce(x, Sum).Wait(); err != nil {
				return err
			}
			if err := check(x, []float64{4}, "subgroup allReduce"); err != nil {
				return err
			}
		}
		// The world group goes on independently of the subgroup.
		y := rt.FromValues(dtype.Float32, []float64{1}, 1)
		if err := pg.AllReduce(y, Sum).Wait(); err != nil {
			return err
		}
		return check(y, []float64{4}, "world allReduce after the subgroup")
	}))
}

func TestAsyncOverlapAndThen(t *testing.T) {
	// Several collectives in flight at once complete in order, and Then
	// runs after its work.
	noErrors(t, runRanks(t, 2, Options{}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
		var works []*Work
		var xs []*tensor.Tensor
		for k := range 8 {
			x := rt.FromValues(dtype.Float32, []float64{float64(k + r)}, 1)
			xs = append(xs, x)
			works = append(works, pg.AllReduce(x, Sum))
		}
		ran := false
		last := works[len(works)-1].Then(func(err error) error { ran = true; return err })
		if err := last.Wait(); err != nil {
			return err
		}
		if !ran {
			return errors.New("Then did not run before its work completed")
		}
		for k, w := range works {
			if err := w.Wait(); err != nil {
				return err
			}
			if err := check(xs[k], []float64{float64(2*k + 1)}, "allReduce %d", k); err != nil {
				return err
			}
		}
		return nil
	}))
}

func TestTensorReleasedWhileInFlight(t *testing.T) {
	// The collective keeps the memory alive: releasing the tensor right
	// after issuing it must not hand the buffer to another tensor.
	noErrors(t, runRanks(t, 2, Options{}, func(r int, pg ProcessGroup, rt *tensor.Runtime) error {
		x := rt.FromValues(dtype.Float32, values(dtype.Float32, Sum, r, 5000, 0), 5000)
		view := x.View(5000)
		w := pg.AllReduce(view, Sum)
		view.Release()
		other := rt.Zeros(dtype.Float32, 5000) // may reuse a freed buffer of that size
		if err := w.Wait(); err != nil {
			return err
		}
		got, err := readBack(other)
		if err != nil {
			return err
		}
		for i, v := range got {
			if v != 0 {
				return fmt.Errorf("element %d of a fresh tensor is %v: the collective wrote into reused memory", i, v)
			}
		}
		return nil
	}))
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
