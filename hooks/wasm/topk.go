package wasm

import (
	"math"
	"slices"
)

// topKByMagnitude returns the indices of the k elements of x of largest
// magnitude, in decreasing magnitude, ties to the lower index (the order
// is total, so every rank and every run selects the same elements). It
// selects in linear expected time and sorts only the k it keeps.
func topKByMagnitude(x []float32, k int) []int {
	if k <= 0 {
		return nil
	}
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	// before reports whether element i comes before j in the order.
	before := func(i, j int) bool {
		a, b := math.Abs(float64(x[i])), math.Abs(float64(x[j]))
		// NaN has no magnitude: it comes last, so that it is never
		// selected before a number.
		switch an, bn := math.IsNaN(a), math.IsNaN(b); {
		case an != bn:
			return bn
		case !an && a != b:
			return a > b
		}
		return i < j
	}
	if k < len(idx) {
		selectFirst(idx, k, before)
		idx = idx[:k]
	}
	slices.SortFunc(idx, func(i, j int) int {
		if before(i, j) {
			return -1
		}
		return 1
	})
	return idx
}

// selectFirst reorders idx so that its first k elements are the k first
// in the order of before (Hoare's quickselect, median-of-three pivots).
func selectFirst(idx []int, k int, before func(i, j int) bool) {
	lo, hi := 0, len(idx)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if before(idx[mid], idx[lo]) {
			idx[mid], idx[lo] = idx[lo], idx[mid]
		}
		if before(idx[hi], idx[lo]) {
			idx[hi], idx[lo] = idx[lo], idx[hi]
		}
		if before(idx[hi], idx[mid]) {
			idx[hi], idx[mid] = idx[mid], idx[hi]
		}
		pivot := idx[mid]
		i, j := lo, hi
		for i <= j {
			for before(idx[i], pivot) {
				i++
			}
			for before(pivot, idx[j]) {
				j--
			}
			if i <= j {
				idx[i], idx[j] = idx[j], idx[i]
				i++
				j--
			}
		}
		// Now idx[lo..j] come before or equal the pivot, idx[i..hi] after
		// or equal it; keep the side that holds position k-1.
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			return
		}
	}
}
