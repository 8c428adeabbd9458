// Command topk is top-k sparsification with error feedback, computed in the guest on the
// bucket's bytes (the host's topk and scatter_add primitives would do it on the device; this
// sample shows guest compute and configuration).
//
// For every float32 bucket, each rank adds the residual it kept for that bucket index (zero at
// first) to its gradient, keeps the k = max(1, ceil(ratio*numel)) entries of largest magnitude
// and carries the rest over as the new residual. The ranks all-gather the k values and their
// int64 indices; on_bucket_done sums the world*k pairs into a dense gradient, divides it by
// the world size and writes it into the bucket.
//
// Configuration (JSON, optional): {"ratio": 0.01}; ratio is in (0, 1], 0.01 by default.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/zeroeng/zeroeng/samples/hooks/go/hookabi"
)

func main() {}

var (
	ratio = 0.01
	world int
	inv   float32 // 1/world

	allocs = map[uint32][]byte{} // alloc's buffers, by address, until configure takes them

	buckets = map[int]*bucket{} // by bucket index

	// Scratch shared by all buckets; no call leaves anything in it for the next.
	dense []float32 // numel: the gradient, then the dense sum
	vals  []float32 // world*k
	idxs  []int64   // world*k
	hist  [1 << 12]int
	lanes [4][1 << 11]uint32
)

// bucket is what a bucket index keeps from step to step.
type bucket struct {
	numel, k   int
	residual   []float32      // error feedback: what was not sent
	vals, idxs hookabi.Handle // this rank's k values (float32) and indices (int64)
	gvals      hookabi.Handle // world*k values, gathered
	gidxs      hookabi.Handle // world*k indices, gathered
}

//go:wasmexport alloc
func alloc(size int32) uint32 {
	buf := make([]byte, max(int(size), 1))
	p := uint32(uintptr(unsafe.Pointer(&buf[0])))
	allocs[p] = buf
	return p
}

//go:wasmexport configure
func configure(ptr, n int32) int32 {
	buf, ok := allocs[uint32(ptr)]
	delete(allocs, uint32(ptr))
	if !ok || int(n) > len(buf) || n < 0 {
		return hookabi.Result(fmt.Errorf("configure: [%d, +%d) is not a buffer from alloc", ptr, n))
	}
	var cfg struct {
		Ratio *float64 `json:"ratio"`
	}
	dec := json.NewDecoder(bytes.NewReader(buf[:n]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return hookabi.Result(fmt.Errorf("topk configuration: %v", err))
	}
	if cfg.Ratio != nil {
		if r := *cfg.Ratio; !(r > 0 && r <= 1) {
			return hookabi.Result(fmt.Errorf("topk configuration: ratio %v is not in (0, 1]", r))
		}
		ratio = *cfg.Ratio
	}
	return 0
}

//go:wasmexport init
func initHook(rank, w int32) int32 {
	world = int(w)
	inv = float32(1) / float32(w)
	return 0
}

// state returns the state of a bucket index, made on first use (and again if its size
// changes).
func state(index, numel int) (*bucket, error) {
	if st := buckets[index]; st != nil {
		if st.numel == numel {
			return st, nil
		}
		for _, h := range []hookabi.Handle{st.vals, st.idxs, st.gvals, st.gidxs} {
			if err := hookabi.TensorFree(h); err != nil {
				return nil, err
			}
		}
		delete(buckets, index)
	}
	k := min(numel, max(1, int(math.Ceil(ratio*float64(numel)))))
	st := &bucket{numel: numel, k: k, residual: make([]float32, numel)}
	var err error
	for _, t := range []struct {
		h  *hookabi.Handle
		dt hookabi.DType
		n  int
	}{
		{&st.vals, hookabi.Float32, k}, {&st.idxs, hookabi.Int64, k},
		{&st.gvals, hookabi.Float32, world * k}, {&st.gidxs, hookabi.Int64, world * k},
	} {
		if *t.h, err = hookabi.TensorNew(t.dt, t.n); err != nil {
			return nil, err
		}
	}
	buckets[index] = st
	if len(dense) < numel {
		dense = make([]float32, numel)
	}
	if len(vals) < world*k {
		vals = make([]float32, world*k)
		idxs = make([]int64, world*k)
	}
	return st, nil
}

func compress(b hookabi.Handle) error {
	info, err := hookabi.BucketInfo(b)
	if err != nil {
		return err
	}
	if info.DType != hookabi.Float32 {
		return hookabi.ErrDType
	}
	if info.Numel == 0 {
		return nil // on every rank: nothing to send
	}
	st, err := state(info.Index, info.Numel)
	if err != nil {
		return err
	}
	g := dense[:st.numel]
	if err := hookabi.Read(b, 0, g); err != nil {
		return err
	}
	acc := st.residual
	addTo(acc, g)
	v, ix := vals[:st.k], idxs[:st.k]
	selectTopK(acc, v, ix, unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(g))), len(g)))
	if err := hookabi.Write(st.vals, 0, v); err != nil {
		return err
	}
	if err := hookabi.Write(st.idxs, 0, ix); err != nil {
		return err
	}
	if err := hookabi.AllGather(st.gvals, st.vals); err != nil {
		return err
	}
	return hookabi.AllGather(st.gidxs, st.idxs)
}

func decompress(b hookabi.Handle) error {
	info, err := hookabi.BucketInfo(b)
	if err != nil {
		return err
	}
	if info.Numel == 0 {
		return nil
	}
	st := buckets[info.Index]
	if st == nil || st.numel != info.Numel {
		return errors.New("on_bucket_done for a bucket that on_bucket did not see")
	}
	v, ix := vals[:world*st.k], idxs[:world*st.k]
	if err := hookabi.Read(st.gvals, 0, v); err != nil {
		return err
	}
	if err := hookabi.Read(st.gidxs, 0, ix); err != nil {
		return err
	}
	sum := dense[:st.numel]
	clear(sum)
	for j, i := range ix {
		if uint64(i) >= uint64(len(sum)) {
			return fmt.Errorf("gathered index %d is outside the bucket's %d elements", i, len(sum))
		}
		sum[i] += v[j]
	}
	scaleBy(sum, inv)
	return hookabi.Write(b, 0, sum)
}

// The loops below take four elements an iteration: in Go's wasm code a loop iteration
// costs more than the few operations each element needs.

// addTo adds g to acc.
func addTo(acc, g []float32) {
	g = g[:len(acc)]
	n := len(acc) &^ 3
	for i := 0; i < n; i += 4 {
		a, x := acc[i:i+4:i+4], g[i:i+4:i+4]
		a[0] += x[0]
		a[1] += x[1]
		a[2] += x[2]
		a[3] += x[3]
	}
	for i := n; i < len(acc); i++ {
		acc[i] += g[i]
	}
}

// scaleBy multiplies x by f.
func scaleBy(x []float32, f float32) {
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		s := x[i : i+4 : i+4]
		s[0] *= f
		s[1] *= f
		s[2] *= f
		s[3] *= f
	}
	for i := n; i < len(x); i++ {
		x[i] *= f
	}
}

// selectTopK moves the len(v) entries of acc of largest magnitude (ties: lower index first)
// into v, with their indices in ix, in index order, and zeroes them in acc. scratch holds
// len(acc) uint32s.
//
// It works on the floats' bits with the sign cleared (a uint32 view of acc): as unsigned
// integers they order like the magnitudes, NaN above +Inf. The k-th largest magnitude, thr,
// comes from a radix select, without reordering or copying acc: count the keys by their
// top 11 bits (one pass over acc), and gather the indices of the entries in the bin the
// k-th largest falls in or above (a second pass); among those in that bin, count by the
// next 12 bits, then by the last 8. The last bin's count says how many
// entries equal to thr are among the k, and the gathered indices hold every entry taken.
func selectTopK(acc, v []float32, ix []int64, scratch []uint32) {
	k := len(v)
	bits := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(acc))), len(acc))
	n := len(bits) &^ 3

	// Four histograms, one per lane, so that runs of keys in one bin do not wait on each
	// other's increments.
	clear(lanes[:])
	for i := 0; i < n; i += 4 {
		b := bits[i : i+4 : i+4]
		lanes[0][b[0]<<1>>21]++
		lanes[1][b[1]<<1>>21]++
		lanes[2][b[2]<<1>>21]++
		lanes[3][b[3]<<1>>21]++
	}
	for _, u := range bits[n:] {
		lanes[0][u<<1>>21]++
	}
	h1 := (*[1 << 11]int)(hist[:])
	for i := range h1 {
		h1[i] = int(lanes[0][i]) + int(lanes[1][i]) + int(lanes[2][i]) + int(lanes[3][i])
	}
	d1, k := pick(h1[:], k)
	p1 := uint32(d1)

	cand := scratch[:len(bits)]
	c := 0
	for i := 0; i < n; i += 4 {
		b := bits[i : i+4 : i+4]
		if max(b[0]<<1, b[1]<<1, b[2]<<1, b[3]<<1)>>21 < p1 {
			continue // the common case: none of the four
		}
		cand[c] = uint32(i)
		c += is(b[0]<<1>>21 >= p1)
		cand[c] = uint32(i + 1)
		c += is(b[1]<<1>>21 >= p1)
		cand[c] = uint32(i + 2)
		c += is(b[2]<<1>>21 >= p1)
		cand[c] = uint32(i + 3)
		c += is(b[3]<<1>>21 >= p1)
	}
	for i := n; i < len(bits); i++ {
		cand[c] = uint32(i)
		c += is(bits[i]<<1>>21 >= p1)
	}
	cand = cand[:c]

	h2 := (*[1 << 12]int)(hist[:])
	clear(h2[:])
	for _, i := range cand {
		u := bits[i]
		h2[u>>8&(1<<12-1)] += is(u<<1>>21 == p1)
	}
	d2, k := pick(h2[:], k)
	p2 := p1<<12 | uint32(d2)

	h3 := (*[1 << 8]int)(hist[:])
	clear(h3[:])
	for _, i := range cand {
		u := bits[i]
		h3[u&(1<<8-1)] += is(u<<1>>9 == p2)
	}
	d3, ties := pick(h3[:], k) // ties: how many entries equal to thr are taken
	thr := p2<<8 | uint32(d3)

	j := 0
	for _, i := range cand {
		if m := bits[i] &^ (1 << 31); m > thr || (m == thr && ties > 0) {
			if m == thr {
				ties--
			}
			v[j] = acc[i]
			ix[j] = int64(i)
			j++
			bits[i] = 0 // sent: nothing left over
		}
	}
}

// is is 1 for true and 0 for false (the compiler makes it a select, not a branch).
func is(c bool) int {
	n := 0
	if c {
		n = 1
	}
	return n
}

// pick returns the bin of counts h (the highest bin last) that holds the k-th largest key,
// and that key's rank from the top within the bin.
func pick(h []int, k int) (bin, rank int) {
	b := len(h) - 1
	for ; b > 0 && h[b] < k; b-- {
		k -= h[b]
	}
	return b, k
}

//go:wasmexport on_bucket
func onBucket(b hookabi.Handle) int32 { return hookabi.Result(compress(b)) }

//go:wasmexport on_bucket_done
func onBucketDone(b hookabi.Handle) int32 { return hookabi.Result(decompress(b)) }
