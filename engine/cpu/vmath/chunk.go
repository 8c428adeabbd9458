package vmath

// chunk bounds the length of one kernel call. A goroutine inside an
// assembly loop cannot be preempted, so a single call over a 25M-element
// parameter would hold off a garbage collection (and every goroutine waiting
// on it) for tens of milliseconds; 64K elements take tens of microseconds.
// The kernels are elementwise or accumulate in float64, so splitting does
// not change any element of the result.
const chunk = 1 << 16

func split2(dst, x []float32, f func(dst, x []float32)) {
	for len(x) > chunk {
		f(dst[:chunk], x[:chunk])
		dst, x = dst[chunk:], x[chunk:]
	}
	f(dst, x)
}

func split3(a, b, c []float32, f func(a, b, c []float32)) {
	for len(c) > chunk {
		f(a[:chunk], b[:chunk], c[:chunk])
		a, b, c = a[chunk:], b[chunk:], c[chunk:]
	}
	f(a, b, c)
}

func splitScalar(dst, x []float32, s float32, f func(dst, x []float32, s float32)) {
	for len(x) > chunk {
		f(dst[:chunk], x[:chunk], s)
		dst, x = dst[chunk:], x[chunk:]
	}
	f(dst, x, s)
}

func splitScalar2(dst, x []float32, a, b float32, f func(dst, x []float32, a, b float32)) {
	for len(x) > chunk {
		f(dst[:chunk], x[:chunk], a, b)
		dst, x = dst[chunk:], x[chunk:]
	}
	f(dst, x, a, b)
}

func splitSum(x []float32, f func(x []float32) float64) float64 {
	var s float64
	for len(x) > chunk {
		s += f(x[:chunk])
		x = x[chunk:]
	}
	return s + f(x)
}
