// This file implements the double-precision log of Arm Optimized Routines
// (https://github.com/ARM-software/optimized-routines, math/log.c), and
// log_table.go holds its data (math/log_data.c). Their licence:
//
//	Copyright (c) 2018, Arm Limited.
//
//	Permission is hereby granted, free of charge, to any person obtaining a
//	copy of this software and associated documentation files (the
//	"Software"), to deal in the Software without restriction, including
//	without limitation the rights to use, copy, modify, merge, publish,
//	distribute, sublicense, and/or sell copies of the Software, and to permit
//	persons to whom the Software is furnished to do so, subject to the
//	following conditions:
//
//	The above copyright notice and this permission notice shall be included
//	in all copies or substantial portions of the Software.
//
//	THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS
//	OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF
//	MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN
//	NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
//	DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
//	OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE
//	USE OR OTHER DEALINGS IN THE SOFTWARE.
//
// (Newer releases of Optimized Routines are licensed MIT OR Apache-2.0 WITH
// LLVM-exception.)

package rand

import "math"

// PyTorch's double-precision Box-Muller transform calls the C library's log.
// glibc (2.28 and later) ships the Optimized Routines log, and on x86-64 CPUs
// with FMA its dispatcher selects a build compiled with -mfma, where the
// compiler contracts multiply-adds into fused operations. aorLog follows
// that build: each math.FMA below is a fused operation there (as observed in
// the machine code of Debian's libm.so.6, 2.36-9+deb12u14) and each explicit
// float64(x*y) a separately rounded product. TestFixtures checks the result
// bit for bit against that library's log (the "libm_log" records).

// aorLog is the Optimized Routines log, as built for FMA, for positive finite
// normal x, which is all the generator passes it (1-u with u in [0, 1)).
// Other inputs fall back to math.Log, which agrees on the special values.
func aorLog(x float64) float64 {
	const (
		off = 0x3fe6000000000000
		lo  = 0x3fee000000000000 // asuint64(1.0 - 0x1p-4)
		hi  = 0x3ff1090000000000 // asuint64(1.0 + 0x1.09p-4)
	)
	ix := math.Float64bits(x)
	if ix-lo < hi-lo {
		// Close to 1: log1p-style polynomial with a careful split of r*r/2.
		if ix == math.Float64bits(1.0) {
			return 0
		}
		B := &logB
		r := x - 1.0
		r2 := float64(r * r)
		r3 := float64(r * r2)
		t1 := math.FMA(r2, B[3], math.FMA(r, B[2], B[1]))
		t2 := math.FMA(r2, B[6], math.FMA(r, B[5], B[4]))
		t3 := math.FMA(r3, B[10], math.FMA(r2, B[9], math.FMA(r, B[8], B[7])))
		p := math.FMA(math.FMA(t3, r3, t2), r3, t1)
		// w = r*2^27 is exact, so these match the unfused source.
		w := float64(r * 0x1p27)
		rhi := float64(r+w) - w
		rlo := r - rhi
		hiv := math.FMA(float64(rhi*rhi), B[0], r)
		lov := math.FMA(float64(rhi*rhi), B[0], r-hiv)
		lov = math.FMA(float64(B[0]*rlo), rhi+r, lov)
		y := math.FMA(p, r3, lov)
		return hiv + y
	}
	top := ix >> 48
	if top-0x0010 >= 0x7ff0-0x0010 {
		// Zero, subnormal, negative, Inf or NaN: never produced by the
		// generator's arguments.
		return math.Log(x)
	}
	tmp := ix - off
	i := tmp >> (52 - 7) % 128
	k := int64(tmp) >> 52 // arithmetic shift
	iz := ix - tmp&(0xfff<<52)
	invc := math.Float64frombits(logTab[i][0])
	logc := math.Float64frombits(logTab[i][1])
	z := math.Float64frombits(iz)
	kd := float64(k)

	r := math.FMA(z, invc, -1.0)
	w := math.FMA(kd, logLn2hi, logc)
	hiv := w + r
	lov := math.FMA(kd, logLn2lo, (w-hiv)+r)
	r2 := float64(r * r)
	A := &logA
	q := math.FMA(math.FMA(r, A[4], A[3]), r2, math.FMA(r, A[2], A[1]))
	y := math.FMA(float64(r*r2), q, math.FMA(r2, A[0], lov))
	return y + hiv
}
