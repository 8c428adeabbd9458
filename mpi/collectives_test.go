package mpi

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dist/disttest"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// The values and the expected results are disttest's (Values, Reduced):
// small integers, exact in every dtype, so that the expected results do
// not depend on summation order.

// reduceRef is the expected reduction by op of elements offset to
// offset+size of n ranks' values (disttest.Reduced), averages rounded as
// the in-process backend rounds them: the results are compared bit for
// bit.
func reduceRef(dt dtype.DType, op dist.ReduceOp, n, size, offset int) []float64 {
	ranks := make([]int, n)
	for k := range ranks {
		ranks[k] = k
	}
	want, _ := disttest.Reduced(dt, op, ranks, size, offset)
	if op == dist.Avg {
		for i, x := range want {
			switch dt {
			case dtype.BFloat16:
				want[i] = float64(dtype.BF16FromFloat32(float32(x)).Float32())
			case dtype.Float16:
				want[i] = float64(dtype.F16FromFloat32(float32(x)).Float32())
			case dtype.Float32:
				want[i] = float64(float32(x))
			}
		}
	}
	return want
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

func check(x *tensor.Tensor, want []float64, format string, args ...any) error {
	got, err := disttest.ReadBack(x)
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

var allOps = []dist.ReduceOp{dist.Sum, dist.Avg, dist.Max, dist.Min, dist.Product}

// sizes cover empty tensors, sizes smaller than and not divisible by the
// number of ranks, and sizes above the chunk size of the np=3 job.
var sizes = []int{0, 1, 3, 7, 64, 1000, 3*4096 + 5}

// TestCollectives runs every collective on jobs of 1 (a singleton, no
// mpirun), 2, 3 (with all-reduces, broadcasts and messages split into
// calls of 1000 elements) and 4 processes.
func TestCollectives(t *testing.T) {
	if isChild() {
		mpiTest(t, nil, nil, collectives)
		return
	}
	for _, np := range []int{1, 2, 3, 4} {
		var env []string
		if np == 3 {
			env = []string{chunkEnv + "=1000"}
		}
		mpiTest(t, []int{np}, env, nil)
	}
}

func collectives(w *World) error {
	pg := w.Group(0)
	rt := newRuntime()
	steps := []struct {
		name string
		fn   func(pg dist.ProcessGroup, rt *tensor.Runtime) error
	}{
		{"allReduce", allReduceEveryType},
		{"block collectives", blockCollectives},
		{"in-place gather and scatter", inPlaceGatherScatter},
		{"send/recv ring", sendRecvRing},
		{"objects", objects},
		{"works in flight", worksInFlight},
		{"bad arguments", badArguments},
		{"subgroups", subgroups},
		{"bit for bit as in-process", sameAsInProcess},
		{"NaN", nanPropagates},
		{"large allReduce", largeAllReduce},
		{"released while in flight", releasedWhileInFlight},
	}
	for _, s := range steps {
		if err := s.fn(pg, rt); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	if err := pg.Barrier().Wait(); err != nil {
		return err
	}
	if c, ok := pg.(dist.CommTimer); !ok || c.CommTime() <= 0 {
		return fmt.Errorf("CommTime: %v", c.CommTime())
	}
	return nil
}

func allReduceEveryType(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	n, r := pg.Size(), pg.Rank()
	for _, dt := range dtype.All {
		for _, op := range allOps {
			if dist.CheckReduce(dt, op) != nil {
				continue
			}
			for _, size := range sizes {
				x := rt.FromValues(dt, disttest.Values(dt, op, r, size, 0), size)
				if err := pg.AllReduce(x, op).Wait(); err != nil {
					return err
				}
				want := reduceRef(dt, op, n, size, 0)
				if err := check(x, want, "%v %v size %d", dt, op, size); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func blockCollectives(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	n, r := pg.Size(), pg.Rank()
	for _, dt := range dtype.All {
		for _, size := range sizes {
			// Broadcast from every root.
			for root := range n {
				x := rt.FromValues(dt, disttest.Values(dt, dist.Sum, r, size, 0), size)
				if err := pg.Broadcast(x, root).Wait(); err != nil {
					return err
				}
				if err := check(x, disttest.Values(dt, dist.Sum, root, size, 0), "%v broadcast from %d, size %d", dt, root, size); err != nil {
					return err
				}
			}
			// All-gather: block k of out is rank k's input.
			in := rt.FromValues(dt, disttest.Values(dt, dist.Sum, r, size, 0), size)
			out := rt.Zeros(dt, n*size)
			if err := pg.AllGather(out, in).Wait(); err != nil {
				return err
			}
			var want []float64
			for k := range n {
				want = append(want, disttest.Values(dt, dist.Sum, k, size, 0)...)
			}
			if err := check(out, want, "%v allGather size %d", dt, size); err != nil {
				return err
			}
			outs := make([]*tensor.Tensor, n)
			for k := range outs {
				outs[k] = rt.Zeros(dt, size)
			}
			if err := pg.AllGatherInto(outs, in).Wait(); err != nil {
				return err
			}
			for k, o := range outs {
				if err := check(o, disttest.Values(dt, dist.Sum, k, size, 0), "%v allGatherInto size %d, output %d", dt, size, k); err != nil {
					return err
				}
			}
			// Reduce-scatter with every op the dtype takes.
			for _, op := range allOps {
				if dist.CheckReduce(dt, op) != nil {
					continue
				}
				big := rt.FromValues(dt, disttest.Values(dt, op, r, n*size, 0), n*size)
				part := rt.Zeros(dt, size)
				if err := pg.ReduceScatter(part, big, op).Wait(); err != nil {
					return err
				}
				want = reduceRef(dt, op, n, size, r*size)
				if err := check(part, want, "%v reduceScatter %v size %d", dt, op, size); err != nil {
					return err
				}
			}
			// All-to-all: block k of rank r's output is block r of rank k's input.
			src := rt.FromValues(dt, disttest.Values(dt, dist.Sum, r, n*size, 0), n*size)
			dst := rt.Zeros(dt, n*size)
			if err := pg.AllToAll(dst, src).Wait(); err != nil {
				return err
			}
			want = want[:0]
			for k := range n {
				want = append(want, disttest.Values(dt, dist.Sum, k, size, r*size)...)
			}
			if err := check(dst, want, "%v allToAll size %d", dt, size); err != nil {
				return err
			}
		}
	}
	return pg.Barrier().Wait()
}

func inPlaceGatherScatter(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	// ZeRO gathers into a flat buffer whose block r is this rank's shard,
	// and reduce-scatters a flat gradient into its own block.
	n, r := pg.Size(), pg.Rank()
	const size = 1001
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
		flat := rt.Zeros(dt, n*size)
		shard := flat.Narrow(0, r*size, size)
		if err := shard.CopyFrom(rt.FromValues(dt, disttest.Values(dt, dist.Sum, r, size, 0), size)); err != nil {
			return err
		}
		if err := pg.AllGather(flat, shard).Wait(); err != nil {
			return err
		}
		var want []float64
		for k := range n {
			want = append(want, disttest.Values(dt, dist.Sum, k, size, 0)...)
		}
		if err := check(flat, want, "%v in-place allGather", dt); err != nil {
			return err
		}
		for _, op := range []dist.ReduceOp{dist.Sum, dist.Avg} {
			grad := rt.FromValues(dt, disttest.Values(dt, op, r, n*size, 0), n*size)
			own := grad.Narrow(0, r*size, size)
			if err := pg.ReduceScatter(own, grad, op).Wait(); err != nil {
				return err
			}
			want = reduceRef(dt, op, n, size, r*size)
			if err := check(own, want, "%v in-place reduceScatter %v", dt, op); err != nil {
				return err
			}
		}
	}
	return nil
}

func sendRecvRing(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	n, r := pg.Size(), pg.Rank()
	if n == 1 {
		return nil
	}
	// A ring: every rank sends to the next and receives from the
	// previous, sends first (messages do not wait for each other).
	next, prev := (r+1)%n, (r+n-1)%n
	for _, size := range []int{0, 2, 5000, 1 << 20} {
		for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Int64, dtype.Bool} {
			out := rt.FromValues(dt, disttest.Values(dt, dist.Sum, r, size, 0), size)
			in := rt.Zeros(dt, size)
			send := pg.Send(out, next)
			if err := pg.Recv(in, prev).Wait(); err != nil {
				return err
			}
			if err := send.Wait(); err != nil {
				return err
			}
			if err := check(in, disttest.Values(dt, dist.Sum, prev, size, 0), "%v recv of %d", dt, size); err != nil {
				return err
			}
		}
	}
	// Pairs: even ranks send, then receive; odd ones the other way; with
	// a collective between the two halves.
	if n%2 == 0 {
		peer := r ^ 1
		a := rt.FromValues(dtype.Float32, []float64{float64(r)}, 1)
		b := rt.Zeros(dtype.Float32, 1)
		var first, second *dist.Work
		if r%2 == 0 {
			first = pg.Send(a, peer)
		} else {
			first = pg.Recv(b, peer)
		}
		if err := pg.Barrier().Wait(); err != nil {
			return err
		}
		if r%2 == 0 {
			second = pg.Recv(b, peer)
		} else {
			second = pg.Send(a, peer)
		}
		if err := errors.Join(first.Wait(), second.Wait()); err != nil {
			return err
		}
		if err := check(b, []float64{float64(peer)}, "pair recv"); err != nil {
			return err
		}
	}
	// A message of the wrong size fails the receive.
	if r < 2 {
		x := rt.Zeros(dtype.Float32, 4+r)
		var err error
		if r == 0 {
			err = pg.Send(x, 1).Wait()
		} else {
			err = pg.Recv(x, 0).Wait()
			if err == nil || !strings.Contains(err.Error(), "rank 0 sent 4 elements") {
				return fmt.Errorf("a short message: %v", err)
			}
			err = nil
		}
		if err != nil {
			return err
		}
	}
	return pg.Barrier().Wait()
}

func objects(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	n, r := pg.Size(), pg.Rank()
	payload := func(k int) []byte {
		// Rank 0's is empty; the last rank's is large.
		size := 13 * k
		if k == n-1 && k > 0 {
			size = 300_000
		}
		return bytes.Repeat([]byte{byte('a' + k)}, size)
	}
	for root := range n {
		got, err := pg.BroadcastObject(payload(r), root)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, payload(root)) {
			return fmt.Errorf("broadcastObject from %d gave %d bytes, want %d", root, len(got), len(payload(root)))
		}
		all, err := pg.GatherObject(payload(r), root)
		if err != nil {
			return err
		}
		if r != root {
			if all != nil {
				return fmt.Errorf("gatherObject to %d gave rank %d %d payloads", root, r, len(all))
			}
			continue
		}
		if len(all) != n {
			return fmt.Errorf("gatherObject gave %d payloads", len(all))
		}
		for k, p := range all {
			if !bytes.Equal(p, payload(k)) {
				return fmt.Errorf("gatherObject to %d: rank %d's payload has %d bytes, want %d", root, k, len(p), len(payload(k)))
			}
		}
	}
	// Empty everywhere.
	got, err := pg.BroadcastObject(nil, 0)
	if err != nil || len(got) != 0 {
		return fmt.Errorf("empty broadcastObject: %q, %v", got, err)
	}
	// Objects between asynchronous collectives keep the order.
	x := rt.FromValues(dtype.Float32, []float64{1}, 1)
	before := pg.AllReduce(x, dist.Sum)
	got, err = pg.BroadcastObject([]byte(fmt.Sprintf("from %d", r)), n-1)
	if err != nil || string(got) != fmt.Sprintf("from %d", n-1) {
		return fmt.Errorf("broadcastObject gave %q, %v", got, err)
	}
	if err := before.Wait(); err != nil {
		return err
	}
	return check(x, []float64{float64(n)}, "allReduce before an object")
}

func worksInFlight(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	// Several collectives in flight at once complete in order, and Then
	// runs after its work.
	n, r := pg.Size(), pg.Rank()
	var mu sync.Mutex
	var order []int
	var works, thens []*dist.Work
	var xs []*tensor.Tensor
	for k := range 40 {
		size := 1 + (k%5)*10000
		x := rt.FromValues(dtype.Float32, disttest.Values(dtype.Float32, dist.Sum, r+k, size, 0), size)
		xs = append(xs, x)
		var w *dist.Work
		switch k % 4 {
		case 0, 1:
			w = pg.AllReduce(x, dist.Sum)
		case 2:
			w = pg.Broadcast(x, k%n)
		case 3:
			w = pg.Barrier()
		}
		works = append(works, w)
		thens = append(thens, w.Then(func(err error) error {
			mu.Lock()
			order = append(order, k)
			mu.Unlock()
			return err
		}))
	}
	for k, w := range thens {
		if err := w.Wait(); err != nil {
			return fmt.Errorf("work %d: %w", k, err)
		}
	}
	if !slices.IsSorted(order) || len(order) != len(works) {
		return fmt.Errorf("continuations ran in the order %v", order)
	}
	for k, x := range xs {
		size := x.Numel()
		want := make([]float64, size)
		for i := range want {
			switch k % 4 {
			case 0, 1:
				for q := range n {
					want[i] += disttest.Value(dtype.Float32, dist.Sum, q+k, i)
				}
			case 2:
				want[i] = disttest.Value(dtype.Float32, dist.Sum, k%n+k, i)
			case 3:
				want[i] = disttest.Value(dtype.Float32, dist.Sum, r+k, i)
			}
		}
		if err := check(x, want, "work %d", k); err != nil {
			return err
		}
	}
	// A continuation may issue the next collective (and must not wait
	// for it: continuations of the group run one after another).
	y := rt.FromValues(dtype.Float32, []float64{1}, 1)
	var next *dist.Work
	chained := pg.AllReduce(y, dist.Sum).Then(func(err error) error {
		if err == nil {
			next = pg.AllReduce(y, dist.Sum)
		}
		return err
	})
	if err := chained.Wait(); err != nil {
		return err
	}
	if err := next.Wait(); err != nil {
		return err
	}
	return check(y, []float64{float64(n * n)}, "chained allReduce")
}

func badArguments(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	n := pg.Size()
	x := rt.Zeros(dtype.Float32, 4, 6)
	released := rt.Zeros(dtype.Float32, 4)
	released.Release()
	cases := []struct {
		name string
		work *dist.Work
		want string
	}{
		{"non-contiguous", pg.AllReduce(x.Transpose(0, 1), dist.Sum), "must be contiguous"},
		{"released", pg.AllReduce(released, dist.Sum), "was released"},
		{"nil", pg.Broadcast(nil, 0), "the tensor is nil"},
		{"avg of integers", pg.AllReduce(rt.Zeros(dtype.Int64, 4), dist.Avg), "avg needs a floating-point tensor"},
		{"sum of booleans", pg.AllReduce(rt.Zeros(dtype.Bool, 4), dist.Sum), "not defined for bool"},
		{"unknown op", pg.AllReduce(rt.Zeros(dtype.Float32, 4), dist.ReduceOp(9)), "unknown reduce op"},
		{"root out of range", pg.Broadcast(x, n), fmt.Sprintf("rank %d is not in the group", n)},
		{"gather size", pg.AllGather(rt.Zeros(dtype.Float32, 4*n+1), rt.Zeros(dtype.Float32, 4)), fmt.Sprintf("%d ranks × the input's 4", n)},
		{"scatter size", pg.ReduceScatter(rt.Zeros(dtype.Float32, 4), rt.Zeros(dtype.Float32, 4*n+1), dist.Sum), fmt.Sprintf("%d ranks × the output's 4", n)},
		{"dtypes", pg.AllGather(rt.Zeros(dtype.Float64, 4*n), rt.Zeros(dtype.Float32, 4)), "the input is float32 and the output float64"},
		{"send to self", pg.Send(x, pg.Rank()), "cannot send to itself"},
		{"alltoall aliasing", pg.AllToAll(x.Flatten(0, 1), x.Flatten(0, 1)), "share memory"},
		{"gatherInto count", pg.AllGatherInto(make([]*tensor.Tensor, n+1), x), fmt.Sprintf("%d output tensors for %d ranks", n+1, n)},
	}
	for _, c := range cases {
		if err := c.work.Wait(); err == nil || !strings.Contains(err.Error(), c.want) {
			return fmt.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, err := pg.NewGroup([]int{0, 0}); err == nil {
		return errors.New("newGroup with a repeated rank succeeded")
	}
	if _, err := pg.BroadcastObject(nil, -1); err == nil {
		return errors.New("broadcastObject from rank -1 succeeded")
	}
	// The group goes on.
	y := rt.FromValues(dtype.Float32, []float64{2}, 1)
	if err := pg.AllReduce(y, dist.Sum).Wait(); err != nil {
		return err
	}
	return check(y, []float64{float64(2 * n)}, "allReduce after bad arguments")
}

func subgroups(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	n, r := pg.Size(), pg.Rank()
	// The odd ranks, listed backwards: members are ordered by rank.
	var odd []int
	for k := n - 1; k >= 0; k-- {
		if k%2 == 1 {
			odd = append(odd, k)
		}
	}
	var sub dist.ProcessGroup
	if len(odd) > 0 {
		var err error
		if sub, err = pg.NewGroup(odd); err != nil {
			return err
		}
		if (sub != nil) != (r%2 == 1) {
			return fmt.Errorf("rank %d: subgroup %v", r, sub)
		}
	}
	x := rt.FromValues(dtype.Float32, []float64{float64(r)}, 1)
	var subWork *dist.Work
	if sub != nil {
		if sub.Size() != len(odd) || sub.Rank() != r/2 {
			return fmt.Errorf("rank %d is rank %d of %d in the subgroup", r, sub.Rank(), sub.Size())
		}
		subWork = sub.AllReduce(x, dist.Sum)
	}
	// The world group goes on independently of the subgroup, and the
	// subgroup's work may be waited for later.
	y := rt.FromValues(dtype.Float32, []float64{1}, 1)
	if err := pg.AllReduce(y, dist.Sum).Wait(); err != nil {
		return err
	}
	if err := check(y, []float64{float64(n)}, "world allReduce after the subgroup"); err != nil {
		return err
	}
	if sub != nil {
		if err := subWork.Wait(); err != nil {
			return err
		}
		want := 0
		for _, k := range odd {
			want += k
		}
		if err := check(x, []float64{float64(want)}, "subgroup allReduce"); err != nil {
			return err
		}
		// Subgroups of subgroups, objects and messages in them.
		got, err := sub.BroadcastObject([]byte(fmt.Sprint(r)), sub.Size()-1)
		if err != nil || string(got) != fmt.Sprint(odd[0]) {
			return fmt.Errorf("subgroup broadcastObject: %q, %v", got, err)
		}
		one, err := sub.NewGroup([]int{0})
		if err != nil {
			return err
		}
		if (one != nil) != (sub.Rank() == 0) {
			return fmt.Errorf("a subgroup of one: %v", one)
		}
		if one != nil {
			z := rt.FromValues(dtype.Float32, []float64{5}, 1)
			if err := one.AllReduce(z, dist.Avg).Wait(); err != nil {
				return err
			}
			if err := check(z, []float64{5}, "allReduce on one rank"); err != nil {
				return err
			}
		}
	}
	// A group of all ranks, with its own order of calls.
	all := make([]int, n)
	for k := range all {
		all[k] = k
	}
	everyone, err := pg.NewGroup(all)
	if err != nil {
		return err
	}
	a := rt.FromValues(dtype.Float32, []float64{1}, 1)
	b := rt.FromValues(dtype.Float32, []float64{float64(r)}, 1)
	wa := everyone.AllReduce(a, dist.Sum)
	wb := pg.AllReduce(b, dist.Max)
	if err := errors.Join(wb.Wait(), wa.Wait()); err != nil {
		return err
	}
	if err := errors.Join(check(a, []float64{float64(n)}, "everyone"), check(b, []float64{float64(n - 1)}, "world")); err != nil {
		return err
	}
	// Ranks that pass different lists all get an error, and nothing is
	// made.
	if n > 1 {
		list := []int{0, 1}
		if r == 1 {
			list = []int{1}
		}
		g, err := pg.NewGroup(list)
		if err == nil || !strings.Contains(err.Error(), "every rank must pass the same list") || g != nil {
			return fmt.Errorf("newGroup with different lists: %v, %v", g, err)
		}
	}
	return pg.Barrier().Wait()
}

// lcg makes reproducible pseudo-random values per rank.
type lcg uint64

func (s *lcg) next() float64 {
	*s = *s*6364136223846793005 + 1442695040888963407
	return float64(*s>>11) / (1 << 53)
}

// inputs is rank r's input of a comparison with the in-process backend:
// values in [-4, 4), a NaN now and then.
func inputs(r, size int, nan bool) []float64 {
	s := lcg(r*7919 + 17)
	v := make([]float64, size)
	for i := range v {
		v[i] = 8*s.next() - 4
		if nan && i%97 == r {
			v[i] = math.NaN()
		}
	}
	return v
}

// inProcess computes what the in-process backend's all-reduce of n ranks
// gives on inputs(r, ...).
func inProcess(n int, dt dtype.DType, op dist.ReduceOp, size int, nan bool) ([]float64, error) {
	w, err := dist.NewWorld(n, dist.Options{})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	var wg sync.WaitGroup
	out := make([][]float64, n)
	errs := make([]error, n)
	for r := range n {
		wg.Go(func() {
			rt := newRuntime()
			x := rt.FromValues(dt, inputs(r, size, nan), size)
			if errs[r] = w.Group(r).AllReduce(x, op).Wait(); errs[r] == nil {
				out[r], errs[r] = disttest.ReadBack(x)
			}
		})
	}
	wg.Wait()
	return out[0], errors.Join(errs...)
}

// sameAsInProcess checks that all-reduces of random values (whose sums
// round differently in another order) give bit for bit the in-process
// backend's results, for every floating-point type and op.
func sameAsInProcess(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	n, r := pg.Size(), pg.Rank()
	const size = 5003
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float32, dtype.Float64} {
		for _, op := range allOps {
			want, err := inProcess(n, dt, op, size, false)
			if err != nil {
				return err
			}
			x := rt.FromValues(dt, inputs(r, size, false), size)
			if err := pg.AllReduce(x, op).Wait(); err != nil {
				return err
			}
			if err := check(x, want, "%v %v against the in-process backend", dt, op); err != nil {
				return err
			}
		}
	}
	return nil
}

func nanPropagates(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	n, r := pg.Size(), pg.Rank()
	const size = 1000
	for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64, dtype.BFloat16} {
		for _, op := range []dist.ReduceOp{dist.Max, dist.Min} {
			want, err := inProcess(n, dt, op, size, true)
			if err != nil {
				return err
			}
			nans := 0
			for _, v := range want {
				if math.IsNaN(v) {
					nans++
				}
			}
			if nans == 0 {
				return errors.New("no NaN in the expected result")
			}
			x := rt.FromValues(dt, inputs(r, size, true), size)
			if err := pg.AllReduce(x, op).Wait(); err != nil {
				return err
			}
			if err := check(x, want, "%v %v with NaNs", dt, op); err != nil {
				return err
			}
			// The same through a reduce-scatter.
			big := rt.FromValues(dt, inputs(r, n*size, true), n*size)
			part := rt.Zeros(dt, size)
			if err := pg.ReduceScatter(part, big, op).Wait(); err != nil {
				return err
			}
			full, err := inProcess(n, dt, op, n*size, true)
			if err != nil {
				return err
			}
			if err := check(part, full[r*size:(r+1)*size], "%v reduceScatter %v with NaNs", dt, op); err != nil {
				return err
			}
		}
	}
	return nil
}

func largeAllReduce(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	n, r := pg.Size(), pg.Rank()
	size := 4 << 20
	if testing.Short() {
		size = 1 << 18
	}
	x := rt.FromValues(dtype.Float32, disttest.Values(dtype.Float32, dist.Avg, r, size, 0), size)
	if err := pg.AllReduce(x, dist.Avg).Wait(); err != nil {
		return err
	}
	return check(x, reduceRef(dtype.Float32, dist.Avg, n, size, 0), "avg of %d float32", size)
}

func releasedWhileInFlight(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	// The collective keeps the memory alive: releasing the tensor right
	// after issuing it must not hand the buffer to another tensor.
	r := pg.Rank()
	x := rt.FromValues(dtype.Float32, disttest.Values(dtype.Float32, dist.Sum, r, 5000, 0), 5000)
	view := x.View(5000)
	w := pg.AllReduce(view, dist.Sum)
	view.Release()
	x.Release()
	other := rt.Zeros(dtype.Float32, 5000) // may reuse a freed buffer of that size
	if err := w.Wait(); err != nil {
		return err
	}
	got, err := disttest.ReadBack(other)
	if err != nil {
		return err
	}
	for i, v := range got {
		if v != 0 {
			return fmt.Errorf("element %d of a fresh tensor is %v: the collective wrote into reused memory", i, v)
		}
	}
	return nil
}

// TestDebugAndTrace runs mismatched collectives with dist.Options.Debug:
// every rank fails them, and the group goes on; Options.Trace records
// the collectives and messages.
func TestDebugAndTrace(t *testing.T) {
	mpiTest(t, []int{2}, []string{debugEnv + "=1", traceEnv + "=1"}, func(w *World) error {
		pg, rt, r := w.Group(0), newRuntime(), w.Rank()
		for _, c := range []struct {
			name string
			call func() *dist.Work
			want string
		}{
			{"different collectives", func() *dist.Work {
				x := rt.Zeros(dtype.Float32, 4)
				if r == 0 {
					return pg.AllReduce(x, dist.Sum)
				}
				return pg.Broadcast(x, 0)
			}, "does not match across ranks"},
			{"different sizes", func() *dist.Work { return pg.AllReduce(rt.Zeros(dtype.Float32, 4+r), dist.Sum) }, "4 elements"},
			{"different ops", func() *dist.Work {
				return pg.AllReduce(rt.Zeros(dtype.Float32, 4), []dist.ReduceOp{dist.Sum, dist.Max}[r])
			}, "op max"},
			{"different shapes", func() *dist.Work {
				return pg.AllReduce(rt.Zeros(dtype.Float32, [][]int{{2, 3}, {3, 2}}[r]...), dist.Sum)
			}, "shape [3 2]"},
		} {
			if err := c.call().Wait(); err == nil || !strings.Contains(err.Error(), c.want) {
				return fmt.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
			}
		}
		x := rt.FromValues(dtype.Float32, []float64{1}, 1)
		if err := pg.AllReduce(x, dist.Sum).Wait(); err != nil {
			return err
		}
		if err := check(x, []float64{2}, "allReduce after the mismatches"); err != nil {
			return err
		}
		var msg *dist.Work
		if r == 0 {
			msg = pg.Send(x, 1)
		} else {
			msg = pg.Recv(x, 0)
		}
		if err := msg.Wait(); err != nil {
			return err
		}
		sub, err := pg.NewGroup([]int{0, 1})
		if err != nil {
			return err
		}
		if err := sub.Barrier().Wait(); err != nil {
			return err
		}
		want := map[string]trace.Lane{"all_reduce": trace.Comm, "send": trace.P2P, "recv": trace.P2P, "barrier": trace.CommLane(1)}
		for _, ev := range w.e.trace.Events() {
			if lane, ok := want[ev.Name]; ok && ev.Lane == lane && ev.Rank == r && !ev.End.Before(ev.Start) {
				delete(want, ev.Name)
			}
		}
		if len(want) > 1 { // a rank sends or receives
			return fmt.Errorf("the trace lacks %v", want)
		}
		return nil
	})
}
