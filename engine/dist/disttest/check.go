package disttest

import (
	"fmt"
	"math"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// ops are the reduce operations, in the order the cases try them.
var ops = []dist.ReduceOp{dist.Sum, dist.Avg, dist.Max, dist.Min, dist.Product}

// reducible says whether op combines elements of dt (the rules of
// dist.ProcessGroup: averages need floating point, booleans take only max
// and min).
func reducible(dt dtype.DType, op dist.ReduceOp) bool {
	switch {
	case dt == dtype.Bool:
		return op == dist.Max || op == dist.Min
	case op == dist.Avg:
		return dt.IsFloat()
	}
	return true
}

// Value is element i of rank r's input to a collective on dt (reduced by
// op where it reduces), in the cases and in a backend's own tests: small
// integers, exact in every dtype, and sums, products, maxima and minima
// of up to several ranks' values stay exact too, so that the expected
// results do not depend on the order in which a backend combines them.
// Every rank computes any rank's values itself.
func Value(dt dtype.DType, op dist.ReduceOp, r, i int) float64 {
	switch {
	case dt == dtype.Bool:
		return float64((r + i) % 2)
	case op == dist.Product && dt == dtype.Uint8:
		return []float64{1, 2, 1}[(r+i)%3]
	case op == dist.Product:
		return []float64{1, 2, -1}[(r+i)%3]
	case dt == dtype.Uint8:
		return float64((r + i) % 5)
	}
	return float64((r+1)*(i%7) - 3*r)
}

// Values are elements offset to offset+n of rank r's input (Value).
func Values(dt dtype.DType, op dist.ReduceOp, r, n, offset int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = Value(dt, op, r, offset+i)
	}
	return v
}

// blocks concatenates the values of ranks (elements offset to offset+n
// of each).
func blocks(dt dtype.DType, ranks []int, n, offset int) []float64 {
	var v []float64
	for _, r := range ranks {
		v = append(v, Values(dt, dist.Sum, r, n, offset)...)
	}
	return v
}

// upTo lists 0 to n-1.
func upTo(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// avgTolerance is how far an average may be from the exact one, relative
// to the mean magnitude of the inputs (at least 1): a few roundings in
// the dtype, as a backend that scales each input before summing them, or
// sums in the dtype itself, makes.
var avgTolerance = map[dtype.DType]float64{
	dtype.Float64:  1e-13,
	dtype.Float32:  1e-6,
	dtype.Float16:  4e-3,
	dtype.BFloat16: 3e-2,
}

// Reduced is the expected combination by op of elements offset to
// offset+n of the given ranks' inputs (Values), exact in float64, and for
// each element how far a result may be from it (slack is nil but for
// averages).
func Reduced(dt dtype.DType, op dist.ReduceOp, ranks []int, n, offset int) (want, slack []float64) {
	want = make([]float64, n)
	if op == dist.Avg {
		slack = make([]float64, n)
	}
	for i := range want {
		k := offset + i
		acc := Value(dt, op, ranks[0], k)
		mag := math.Abs(acc)
		for _, r := range ranks[1:] {
			x := Value(dt, op, r, k)
			mag += math.Abs(x)
			switch op {
			case dist.Sum, dist.Avg:
				acc += x
			case dist.Product:
				acc *= x
			case dist.Max:
				acc = math.Max(acc, x)
			case dist.Min:
				acc = math.Min(acc, x)
			}
		}
		if op == dist.Avg {
			acc /= float64(len(ranks))
			slack[i] = avgTolerance[dt] * math.Max(1, mag/float64(len(ranks)))
		}
		want[i] = acc
	}
	return want, slack
}

// checker collects a rank's failures: a case records them and goes on
// issuing the collectives every rank issues, and returns the first (with
// a count of the others) at its end.
type checker struct {
	rank    int
	first   error
	more    int
	pending []func() // checks of works issued with later, run by settle
}

// later checks w's outcome and x's values once settle runs, after the
// case has issued every collective (a check that waits for one work would
// hold up the rest).
func (c *checker) later(w *dist.Work, what string, x *tensor.Tensor, want []float64) {
	c.pending = append(c.pending, func() {
		if c.ok(w, what) {
			c.expect(x, want, nil, what)
		}
	})
}

// settle runs the checks that later recorded.
func (c *checker) settle() {
	for _, check := range c.pending {
		check()
	}
	c.pending = nil
}

func newChecker(pg dist.ProcessGroup) *checker { return &checker{rank: pg.Rank()} }

func (c *checker) errorf(format string, args ...any) {
	if c.first != nil {
		c.more++
		return
	}
	c.first = fmt.Errorf("rank %d: "+format, append([]any{c.rank}, args...)...)
}

// err is the case's outcome.
func (c *checker) err() error {
	if c.more > 0 {
		return fmt.Errorf("%w (and %d more failures)", c.first, c.more)
	}
	return c.first
}

// ok reports whether the work succeeded, recording its error if not.
func (c *checker) ok(w *dist.Work, what string) bool {
	if err := w.Wait(); err != nil {
		c.errorf("%s failed: %v", what, err)
		return false
	}
	return true
}

// failsSoon is how long a call with invalid arguments may take to fail.
const failsSoon = 10 * time.Second

// fails checks that w, a call with invalid arguments, fails.
func (c *checker) fails(w *dist.Work, what string) {
	select {
	case <-w.Done():
		if w.Err() == nil {
			c.errorf("%s succeeded; it must fail", what)
		} else if w.Err().Error() == "" {
			c.errorf("%s failed with an empty message", what)
		}
	case <-time.After(failsSoon):
		c.errorf("%s has not failed after %v; it must fail without communicating", what, failsSoon)
	}
}

// ReadBack returns t's elements as float64s (booleans as 0 and 1).
func ReadBack(t *tensor.Tensor) ([]float64, error) {
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

// expect checks that t holds want, within slack[i] of element i when
// slack is not nil, and records the first wrong element.
func (c *checker) expect(t *tensor.Tensor, want, slack []float64, what string) {
	got, err := ReadBack(t)
	if err != nil {
		c.errorf("%s: reading the result: %v", what, err)
		return
	}
	if len(got) != len(want) {
		c.errorf("%s: %d elements, want %d", what, len(got), len(want))
		return
	}
	for i, g := range got {
		w := want[i]
		if t.DType() == dtype.Bool && w != 0 {
			w = 1
		}
		d := math.Abs(g - w)
		if d == 0 || slack != nil && d <= slack[i] {
			continue
		}
		if slack != nil {
			c.errorf("%s: element %d is %v, want %v (± %.3g)", what, i, g, w, slack[i])
		} else {
			c.errorf("%s: element %d is %v, want %v", what, i, g, w)
		}
		return
	}
}
