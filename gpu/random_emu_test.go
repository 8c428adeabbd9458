//go:build linux

package gpu

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/rand"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/gpu/kernels/kernelstest"
)

// TestRandomFillEmulated: on a device whose memory is not host memory,
// FillRandom and FillRandomRange write chunk by chunk (uploads, and for a
// half type or a strided view a conversion or strided copy from a device
// buffer of one chunk) and give the CPU's values bit for bit, with the
// generator in the same state after, and a fill raises the device's peak
// memory by at most one chunk.
func TestRandomFillEmulated(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the kernels built for the host (make test-all)")
	}
	t.Setenv("ZEEMU_DIR", kernelstest.Build(t))
	d, _ := openFake(t)
	grt := tensor.NewRuntime(d, 0)
	crt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	fills := map[string]tensor.RandomFill{
		"uniform":     tensor.Uniform(-0.5, 1.5),
		"normal":      tensor.Normal(0.1, 0.02),
		"truncNormal": tensor.TruncNormal(0, 1, -2, 2),
	}
	for name, f := range fills {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64, tensor.BFloat16} {
			for _, n := range []int{5, 33, 1000, 70000 + 3} {
				for _, strided := range []bool{false, true} {
					if strided && n > 1000 {
						continue // (an emulated strided copy of many elements is slow)
					}
					what := fmt.Sprintf("%s %v n=%d strided=%v", name, dt, n, strided)
					get := func(rt *tensor.Runtime) ([]float64, []byte) {
						s := rt.OpenScope()
						defer s.Close()
						g := rand.New(11)
						x := rt.Empty(dt, n, 2)
						v := x.Narrow(1, 0, 1)
						if !strided {
							v = rt.Empty(dt, n)
						}
						if err := v.FillRandom(g, f); err != nil {
							t.Fatalf("%s on %v: %v", what, rt.Device(), err)
						}
						vals, err := v.Float64s()
						if err != nil {
							t.Fatal(err)
						}
						return vals, g.State()
					}
					want, wantState := get(crt)
					got, gotState := get(grt)
					for i := range want {
						if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
							t.Fatalf("%s: element %d is %v on the GPU, %v on the CPU", what, i, got[i], want[i])
						}
					}
					if !bytes.Equal(gotState, wantState) {
						t.Fatalf("%s: generator states differ", what)
					}
				}
			}
			// A range across chunks.
			n, lo, m := 200000+7, 65536-5, 70000
			get := func(rt *tensor.Runtime) []float64 {
				s := rt.OpenScope()
				defer s.Close()
				x := rt.Empty(dt, m)
				if err := x.FillRandomRange(rand.New(12), f, n, lo); err != nil {
					t.Fatal(err)
				}
				v, err := x.Float64s()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			want, got := get(crt), get(grt)
			for i := range want {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("%s %v range: element %d is %v on the GPU, %v on the CPU", name, dt, i, got[i], want[i])
				}
			}
		}
	}
	// Memory: a 16 MiB float32 fill needs no device memory beyond the
	// tensor (uploads from a host chunk); a bfloat16 one one float32 chunk.
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		x := grt.Empty(dt, 4<<20)
		grt.ResetPeakMemStats()
		live := grt.Stats().LiveBytes
		if err := x.FillRandom(rand.New(1), tensor.Normal(0, 1)); err != nil {
			t.Fatal(err)
		}
		if peak := grt.Stats().PeakBytes - live; peak > 1<<20 {
			t.Errorf("%v: the fill raised the device's peak by %d bytes", dt, peak)
		}
		x.Release()
	}
}
