// Command logstats is the averaging hook (as the allreduce sample) that also reports on
// every bucket: on_bucket_done reads the reduced gradient and prints one line to stdout,
// which the host puts in the rank's log, with the step, the bucket index, its element and
// parameter counts, its first parameter's name, the L2 norm and the largest magnitude. init
// says it is ready through the host's log function.
package main

import (
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/zeroeng/zeroeng/samples/hooks/go/hookabi"
)

func main() {}

// chunk is how many elements are read into guest memory per host call.
const chunk = 1 << 16

var (
	inv float64 // 1/world, rounded to float32 as the built-in hook does
	buf = make([]float32, chunk)
)

//go:wasmexport init
func initHook(rank, world int32) int32 {
	inv = float64(float32(1) / float32(world))
	msg := "logstats hook ready on rank " + strconv.Itoa(int(rank)) + " of " + strconv.Itoa(int(world))
	return hookabi.Result(hookabi.Log(msg))
}

//go:wasmexport on_bucket
func onBucket(b hookabi.Handle) int32 {
	if err := hookabi.Scale(b, inv); err != nil {
		return hookabi.Result(err)
	}
	return hookabi.Result(hookabi.AllReduce(b, hookabi.Sum))
}

func stats(b hookabi.Handle) error {
	info, err := hookabi.BucketInfo(b)
	if err != nil {
		return err
	}
	if info.DType != hookabi.Float32 {
		return hookabi.ErrDType
	}
	first := ""
	if info.NumParams > 0 {
		p, err := hookabi.BucketParam(b, 0)
		if err != nil {
			return err
		}
		first = p.Name
	}
	var sq, maxAbs float64
	for off := 0; off < info.Numel; off += chunk {
		n := min(chunk, info.Numel-off)
		if err := hookabi.Read(b, off, buf[:n]); err != nil {
			return err
		}
		s, m := sumSqMaxAbs(buf[:n])
		sq += s
		if m > maxAbs || math.IsNaN(m) {
			maxAbs = m
		}
	}
	fmt.Printf("step %d bucket %d: %d elements, %d params (first %s), l2 %.6g, max|g| %.6g\n",
		info.Step, info.Index, info.Numel, info.NumParams, first, math.Sqrt(sq), maxAbs)
	return nil
}

// sumSqMaxAbs returns the sum of the squares of x, in float64, and the largest |x| (NaN
// if x holds one). It takes four elements an iteration, into four partial results (in Go's
// wasm code an iteration costs more than the work on one element), and finds the largest
// magnitude on the floats' bits with the sign cleared, which as unsigned integers order like
// the magnitudes, NaN above +Inf (Go's max of floats is a function call).
func sumSqMaxAbs(x []float32) (sq, maxAbs float64) {
	bits := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
	var s [4]float64
	var m [4]uint32
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		v, b := x[i:i+4:i+4], bits[i:i+4:i+4]
		a0, a1, a2, a3 := float64(v[0]), float64(v[1]), float64(v[2]), float64(v[3])
		s[0] += a0 * a0
		s[1] += a1 * a1
		s[2] += a2 * a2
		s[3] += a3 * a3
		m[0] = max(m[0], b[0]&^(1<<31))
		m[1] = max(m[1], b[1]&^(1<<31))
		m[2] = max(m[2], b[2]&^(1<<31))
		m[3] = max(m[3], b[3]&^(1<<31))
	}
	for i := n; i < len(x); i++ {
		a := float64(x[i])
		s[0] += a * a
		m[0] = max(m[0], bits[i]&^(1<<31))
	}
	return s[0] + s[1] + s[2] + s[3], float64(math.Float32frombits(max(m[0], m[1], m[2], m[3])))
}

//go:wasmexport on_bucket_done
func onBucketDone(b hookabi.Handle) int32 { return hookabi.Result(stats(b)) }
