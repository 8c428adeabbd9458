package functional_test

import (
	"math"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/nn/functional"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The PyTorch fixtures of these ops (values and gradients) are in
// script/layers_test.go; these tests check the Go API against direct
// loops over the definitions and its errors.

func newRT() *tensor.Runtime { return tensor.NewRuntime(cpu.New(cpu.Options{}), 1) }

func values(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	if err := x.Err(); err != nil {
		t.Fatal(err)
	}
	v, err := x.Float64s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// directConv2d is the definition of a 2-D convolution (cross-correlation)
// over x [N, C, H, W] with symmetric padding.
func directConv2d(x, w, b []float64, n, c, h, wd, o, kh, kw int, stride, pad, dil [2]int, groups int) ([]float64, int, int) {
	oh := (h+2*pad[0]-dil[0]*(kh-1)-1)/stride[0] + 1
	ow := (wd+2*pad[1]-dil[1]*(kw-1)-1)/stride[1] + 1
	cg, og := c/groups, o/groups
	out := make([]float64, n*o*oh*ow)
	for s := range n {
		for oc := range o {
			g := oc / og
			for i := range oh {
				for j := range ow {
					sum := b[oc]
					for ic := range cg {
						for p := range kh {
							for q := range kw {
								y, z := i*stride[0]-pad[0]+p*dil[0], j*stride[1]-pad[1]+q*dil[1]
								if y < 0 || y >= h || z < 0 || z >= wd {
									continue
								}
								sum += x[((s*c+g*cg+ic)*h+y)*wd+z] * w[((oc*cg+ic)*kh+p)*kw+q]
							}
						}
					}
					out[((s*o+oc)*oh+i)*ow+j] = sum
				}
			}
		}
	}
	return out, oh, ow
}

func TestConv2dMatchesDirectLoops(t *testing.T) {
	rt := newRT()
	for _, c := range []struct {
		name                  string
		n, c, h, w, o, kh, kw int
		stride, pad, dil      [2]int
		groups                int
	}{
		{"plain", 2, 3, 5, 6, 4, 3, 3, [2]int{1, 1}, [2]int{0, 0}, [2]int{1, 1}, 1},
		{"stride padding", 1, 2, 7, 6, 3, 3, 2, [2]int{2, 1}, [2]int{1, 2}, [2]int{1, 1}, 1},
		{"dilation groups", 2, 4, 7, 5, 6, 3, 3, [2]int{1, 1}, [2]int{1, 1}, [2]int{2, 1}, 2},
		{"depthwise", 1, 3, 4, 4, 3, 2, 2, [2]int{1, 2}, [2]int{1, 0}, [2]int{1, 1}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := rt.Randn(tensor.Float64, c.n, c.c, c.h, c.w)
			w := rt.Randn(tensor.Float64, c.o, c.c/c.groups, c.kh, c.kw)
			b := rt.Randn(tensor.Float64, c.o)
			got := functional.Conv2d(x, w, b, functional.ConvOptions{Stride: c.stride[:], Padding: c.pad[:], Dilation: c.dil[:], Groups: c.groups})
			want, oh, ow := directConv2d(values(t, x), values(t, w), values(t, b), c.n, c.c, c.h, c.w, c.o, c.kh, c.kw, c.stride, c.pad, c.dil, c.groups)
			if s := got.Shape(); len(s) != 4 || s[0] != c.n || s[1] != c.o || s[2] != oh || s[3] != ow {
				t.Fatalf("shape %v, want [%d %d %d %d]", s, c.n, c.o, oh, ow)
			}
			for i, v := range values(t, got) {
				if math.Abs(v-want[i]) > 1e-12 {
					t.Fatalf("element %d is %v, want %v", i, v, want[i])
				}
			}
		})
	}
}

func TestMaxPool2dMatchesDirectLoops(t *testing.T) {
	rt := newRT()
	for _, c := range []struct {
		name                            string
		h, w, k, stride, pad, dil, want int // want: the output's side
		ceil                            bool
	}{
		{"2", 6, 6, 2, 2, 0, 1, 3, false},
		{"3 stride 2 padding 1", 7, 7, 3, 2, 1, 1, 4, false},
		{"ceil", 6, 6, 3, 2, 1, 1, 4, true},
		{"ceil drops a window in the padding", 5, 5, 2, 2, 1, 1, 3, true},
		{"dilation", 7, 7, 2, 1, 0, 3, 4, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := functional.PoolOutputSize(c.h, c.k, c.pad, c.stride, c.dil, c.ceil); got != c.want {
				t.Fatalf("PoolOutputSize %d, want %d", got, c.want)
			}
			x := rt.Randn(tensor.Float64, 2, c.h, c.w)
			xs := values(t, x)
			got := values(t, functional.MaxPool2d(x, functional.PoolOptions{
				KernelSize: []int{c.k}, Stride: []int{c.stride}, Padding: []int{c.pad}, Dilation: []int{c.dil}, CeilMode: c.ceil}))
			if len(got) != 2*c.want*c.want {
				t.Fatalf("%d values, want %d", len(got), 2*c.want*c.want)
			}
			for ch := range 2 {
				for i := range c.want {
					for j := range c.want {
						best := math.Inf(-1)
						for p := range c.k {
							for q := range c.k {
								y, z := i*c.stride-c.pad+p*c.dil, j*c.stride-c.pad+q*c.dil
								if y >= 0 && y < c.h && z >= 0 && z < c.w {
									best = math.Max(best, xs[(ch*c.h+y)*c.w+z])
								}
							}
						}
						if v := got[(ch*c.want+i)*c.want+j]; v != best {
							t.Fatalf("output [%d %d %d] is %v, want %v", ch, i, j, v, best)
						}
					}
				}
			}
		})
	}
}

// TestSyncBatchNormOfOneRank: with a group of one rank (an all-reduce that
// changes nothing), BatchNorm through AllReduce, its custom backward
// included, equals the local one.
func TestSyncBatchNormOfOneRank(t *testing.T) {
	rt := newRT()
	x := rt.Randn(tensor.Float64, 5, 3, 2)
	w, b := rt.Randn(tensor.Float64, 3), rt.Randn(tensor.Float64, 3)
	g := rt.Randn(tensor.Float64, 5, 3, 2)
	calls := 0
	run := func(reduce func(*tensor.Tensor) error) (out, grad, rv []float64) {
		xi := x.Clone()
		if err := xi.SetRequiresGrad(true); err != nil {
			t.Fatal(err)
		}
		runVar := rt.Ones(tensor.Float64, 3)
		y := functional.BatchNorm(xi, functional.BatchNormOptions{
			RunningMean: rt.Zeros(tensor.Float64, 3), RunningVar: runVar, Weight: w, Bias: b,
			Training: true, Momentum: 0.1, Eps: 1e-5, AllReduce: reduce,
		})
		if err := y.Mul(g).SumAll().Backward(); err != nil {
			t.Fatal(err)
		}
		return values(t, y), values(t, xi.Grad()), values(t, runVar)
	}
	y0, g0, v0 := run(nil)
	y1, g1, v1 := run(func(*tensor.Tensor) error { calls++; return nil })
	if calls != 4 { // statistics and their gradients, each two sums
		t.Errorf("%d all-reduces, want 4 (two forward, two backward)", calls)
	}
	for _, p := range []struct {
		what      string
		got, want []float64
	}{{"output", y1, y0}, {"input gradient", g1, g0}, {"running var", v1, v0}} {
		for i := range p.want {
			if math.Abs(p.got[i]-p.want[i]) > 1e-12 {
				t.Fatalf("%s element %d is %v, local %v", p.what, i, p.got[i], p.want[i])
			}
		}
	}
}

func TestLayerErrors(t *testing.T) {
	rt := newRT()
	x4 := rt.Randn(tensor.Float32, 2, 3, 5, 5)
	w := rt.Randn(tensor.Float32, 4, 3, 3, 3)
	for _, c := range []struct {
		name string
		out  *tensor.Tensor
		err  string
	}{
		{"conv channels", functional.Conv2d(rt.Randn(tensor.Float32, 2, 5, 5, 5), w, nil, functional.ConvOptions{}), "nn: conv2d: given groups=1, weight of size [4 3 3 3], expected input[2 5 5 5] to have 3 channels, but got 5 channels instead"},
		{"conv dims", functional.Conv1d(x4, w, nil, functional.ConvOptions{}), "nn: conv1d: expected 2D (unbatched) or 3D (batched) input to conv1d"},
		{"conv dtype", functional.Conv2d(x4.To(tensor.Float64), w, nil, functional.ConvOptions{}), "must have the same dtype"},
		{"conv bias", functional.Conv2d(x4, w, rt.Zeros(tensor.Float32, 3), functional.ConvOptions{}), "expected bias to be 1-dimensional with 4 elements"},
		{"conv groups", functional.Conv2d(x4, w, nil, functional.ConvOptions{Groups: 3}), "expected weight to be divisible by 3 at dimension 0"},
		{"conv same strided", functional.Conv2d(x4, w, nil, functional.ConvOptions{PaddingString: "same", Stride: []int{2}}), "padding='same' is not supported for strided convolutions"},
		{"conv per-dimension list", functional.Conv2d(x4, w, nil, functional.ConvOptions{Stride: []int{1, 1, 1}}), "stride must be one integer or 2"},
		{"conv negative padding", functional.Conv2d(x4, w, nil, functional.ConvOptions{Padding: []int{-1}}), "negative padding is not supported"},
		{"pool kernel", functional.MaxPool2d(x4, functional.PoolOptions{}), "kernel_size must be one integer or 2"},
		{"pool padding", functional.MaxPool2d(x4, functional.PoolOptions{KernelSize: []int{2}, Padding: []int{2}}), "pad should be smaller than or equal to half of kernel size"},
		{"pool stride", functional.MaxPool2d(x4, functional.PoolOptions{KernelSize: []int{2}, Stride: []int{0}}), "stride should be greater than zero"},
		{"pool integer input", functional.MaxPool2d(x4.To(tensor.Int64), functional.PoolOptions{KernelSize: []int{2}}), "expected a floating-point input"},
		{"rms shape", functional.RMSNorm(x4, []int{4}, nil, 1e-6), "nn: rms_norm: given normalized_shape=[4], expected input with shape [*, 4], but got input of size [2 3 5 5]"},
		{"rms weight", functional.RMSNorm(x4, []int{5}, rt.Ones(tensor.Float32, 4), 1e-6), "expected weight to be of same shape as normalized_shape"},
		{"batch norm eval", functional.BatchNorm(x4, functional.BatchNormOptions{}), "running_mean and running_var must be defined in evaluation mode"},
		{"batch norm one value", functional.BatchNorm(rt.Randn(tensor.Float32, 1, 3), functional.BatchNormOptions{Training: true}), "expected more than 1 value per channel when training"},
		{"batch norm weight", functional.BatchNorm(x4, functional.BatchNormOptions{Training: true, Weight: rt.Ones(tensor.Float32, 4)}), "weight should contain 3 elements not 4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.out.Err(); err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
		})
	}
}

func TestRMSNormEps(t *testing.T) {
	for _, c := range []struct {
		dt   tensor.DType
		want float64
	}{{tensor.Float64, 2.220446049250313e-16}, {tensor.Float32, 1.1920928955078125e-07}, {tensor.BFloat16, 1.1920928955078125e-07}} {
		if got := functional.RMSNormEps(c.dt); got != c.want {
			t.Errorf("RMSNormEps(%v) = %g, want %g", c.dt, got, c.want)
		}
	}
}

// TestMaxPoolGradientTap: the gradient of a window goes to the first of
// equal maxima, and to the last of several NaNs, as PyTorch 1.13's
// max_pool2d (values from torch: F.max_pool2d(x, 2).sum().backward() on
// these windows gives the gradients below).
func TestMaxPoolGradientTap(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	nan := math.NaN()
	x := rt.FromFloat64s([]float64{nan, nan, 1, 5, 5, 2, 1, nan, 5, 4, 5, 6}, 1, 1, 2, 6).Persist()
	x.SetRequiresGrad(true)
	y := functional.MaxPool2d(x, functional.PoolOptions{KernelSize: []int{2}})
	if err := y.SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	g, err := x.Grad().Float64s()
	if err != nil {
		t.Fatal(err)
	}
	// Windows [nan nan; 1 nan], [1 5; 5 4] and [5 2; 5 6].
	want := []float64{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}
	for i := range want {
		if g[i] != want[i] {
			t.Fatalf("gradient %v, PyTorch %v", g, want)
		}
	}
}
