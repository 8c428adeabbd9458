package cpu

import (
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The bandwidth benchmarks run the multi-threaded kernels on 64 MiB float32
// operands (larger than the caches) and report the bytes each one must
// read and write as throughput, next to a plain copy of the same bytes: the
// memory-bandwidth yardstick (docs/benchmarks.md).

const bwElems = 16 << 20

func bwView(b *testing.B, d *Device, shape ...int) device.View {
	n := 1
	for _, s := range shape {
		n *= s
	}
	buf, err := d.Alloc(dtype.Float32, n)
	if err != nil {
		b.Fatal(err)
	}
	v := device.View{Buf: buf, DType: dtype.Float32, Shape: shape, Strides: device.ContiguousStrides(shape)}
	s := elems[float32](buf)
	for i := range s {
		s[i] = float32(i%1000)/1000 - 0.5
	}
	return v
}

func BenchmarkBandwidthGoCopy(b *testing.B) {
	src := make([]float32, bwElems)
	dst := make([]float32, bwElems)
	b.SetBytes(2 * 4 * bwElems)
	for i := 0; i < b.N; i++ {
		copy(dst, src)
	}
}

func BenchmarkBandwidthCopy(b *testing.B) {
	d := New(Options{})
	src, dst := bwView(b, d, bwElems), bwView(b, d, bwElems)
	b.SetBytes(2 * 4 * bwElems)
	for i := 0; i < b.N; i++ {
		if err := d.Copy(dst, src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBandwidthAdd(b *testing.B) {
	d := New(Options{})
	x, y, z := bwView(b, d, bwElems), bwView(b, d, bwElems), bwView(b, d, bwElems)
	b.SetBytes(3 * 4 * bwElems)
	for i := 0; i < b.N; i++ {
		if err := d.Binary(device.Add, z, x, y); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBandwidthAddBroadcastRow(b *testing.B) {
	d := New(Options{})
	x, z := bwView(b, d, 4096, 4096), bwView(b, d, 4096, 4096)
	row := bwView(b, d, 4096)
	row.Shape, row.Strides = []int{4096, 4096}, []int{0, 1}
	b.SetBytes(2 * 4 * bwElems)
	for i := 0; i < b.N; i++ {
		if err := d.Binary(device.Add, z, x, row); err != nil {
			b.Fatal(err)
		}
	}
}

func benchUnary(b *testing.B, op device.UnaryOp) {
	d := New(Options{})
	x, z := bwView(b, d, bwElems), bwView(b, d, bwElems)
	b.SetBytes(2 * 4 * bwElems)
	for i := 0; i < b.N; i++ {
		if err := d.Unary(op, z, x, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBandwidthGelu(b *testing.B)     { benchUnary(b, device.Gelu) }
func BenchmarkBandwidthGeluTanh(b *testing.B) { benchUnary(b, device.GeluTanh) }
func BenchmarkBandwidthExp(b *testing.B)      { benchUnary(b, device.Exp) }

func BenchmarkBandwidthGeluBackward(b *testing.B) {
	d := New(Options{})
	x, g, z := bwView(b, d, bwElems), bwView(b, d, bwElems), bwView(b, d, bwElems)
	b.SetBytes(3 * 4 * bwElems)
	for i := 0; i < b.N; i++ {
		if err := d.ActivationBackward(device.GeluBackward, z, g, x); err != nil {
			b.Fatal(err)
		}
	}
}

func benchReduce(b *testing.B, dstShape []int) {
	d := New(Options{})
	x := bwView(b, d, 4096, 4096)
	z := bwView(b, d, dstShape...)
	b.SetBytes(4 * bwElems)
	for i := 0; i < b.N; i++ {
		if err := d.Reduce(device.Sum, z, x); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBandwidthSumAll(b *testing.B)     { benchReduce(b, []int{1, 1}) }
func BenchmarkBandwidthSumRows(b *testing.B)    { benchReduce(b, []int{4096, 1}) }
func BenchmarkBandwidthSumColumns(b *testing.B) { benchReduce(b, []int{1, 4096}) }

func BenchmarkBandwidthSoftmax(b *testing.B) {
	d := New(Options{})
	x, z := bwView(b, d, 16384, 1024), bwView(b, d, 16384, 1024)
	b.SetBytes(2 * 4 * bwElems)
	for i := 0; i < b.N; i++ {
		if err := d.Softmax(z, x, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBandwidthLayerNorm(b *testing.B) {
	d := New(Options{})
	x, z := bwView(b, d, 16384, 1024), bwView(b, d, 16384, 1024)
	w, bias := bwView(b, d, 1024), bwView(b, d, 1024)
	mean, rstd := bwView(b, d, 16384), bwView(b, d, 16384)
	b.SetBytes(2 * 4 * bwElems)
	for i := 0; i < b.N; i++ {
		if err := d.LayerNorm(z, mean, rstd, x, w, bias, 1e-5); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBandwidthAdamW(b *testing.B) {
	d := New(Options{})
	p, g, m, v := bwView(b, d, bwElems), bwView(b, d, bwElems), bwView(b, d, bwElems), bwView(b, d, bwElems)
	h := device.AdamHyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, BiasCorrection1: 0.1, BiasCorrection2: 0.001, Decoupled: true}
	// Reads p, g, m, v; writes p, m, v.
	b.SetBytes(7 * 4 * bwElems)
	for i := 0; i < b.N; i++ {
		if err := d.AdamStep(p, g, m, v, device.View{}, h); err != nil {
			b.Fatal(err)
		}
	}
}
