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
		{"avg pool kernel", functional.AvgPool2d(x4, functional.AvgPoolOptions{}), "kernel_size must either be a single int, or a tuple of two ints"},
		{"avg pool padding", functional.AvgPool2d(x4, functional.AvgPoolOptions{KernelSize: []int{3}, Padding: []int{2}}), "pad should be smaller than or equal to half of kernel size"},
		{"avg pool too small", functional.AvgPool2d(x4, functional.AvgPoolOptions{KernelSize: []int{6}}), "Output size is too small"},
		{"avg pool dims", functional.AvgPool2d(rt.Randn(tensor.Float32, 5, 5), functional.AvgPoolOptions{KernelSize: []int{2}}), "nn: avg_pool2d: expected 3D or 4D (batch mode) tensor for input"},
		{"adaptive size", functional.AdaptiveAvgPool2d(x4, []int{1, 2, 3}), "output_size must be 2"},
		{"adaptive zero", functional.AdaptiveAvgPool2d(x4, []int{0}), "output_size must be positive"},
		{"dropout2d p", functional.Dropout2d(x4, 1.5, true), "dropout probability has to be between 0 and 1, but got 1.5"},
		{"dropout2d dims", functional.Dropout2d(rt.Randn(tensor.Float32, 5), 0.5, true), "Feature dropout requires at least 2 dimensions in the input"},
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

func TestAvgPool2dMatchesDirectLoops(t *testing.T) {
	rt := newRT()
	for _, c := range []struct {
		name                      string
		h, w, k, stride, pad, out int
		ceil, excludePad          bool
		divisor                   int
	}{
		{"2", 6, 6, 2, 2, 0, 3, false, false, 0},
		{"padding counted", 7, 7, 3, 2, 1, 4, false, false, 0},
		{"padding not counted", 7, 7, 3, 2, 1, 4, false, true, 0},
		// The last window starts at 5 and is clipped to the padded
		// input's end (7): PyTorch divides by 2·3, not 3·3.
		{"ceil clips to the padded input", 6, 6, 3, 2, 1, 4, true, false, 0},
		{"ceil not counted", 6, 6, 3, 2, 1, 4, true, true, 0},
		{"divisor override", 5, 5, 3, 1, 1, 5, false, false, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := rt.Randn(tensor.Float64, 2, c.h, c.w)
			xs := values(t, x)
			y := functional.AvgPool2d(x, functional.AvgPoolOptions{KernelSize: []int{c.k}, Stride: []int{c.stride}, Padding: []int{c.pad},
				CeilMode: c.ceil, ExcludePad: c.excludePad, DivisorOverride: c.divisor})
			if s := y.Shape(); len(s) != 3 || s[1] != c.out || s[2] != c.out {
				t.Fatalf("shape %v, want [2 %d %d]", s, c.out, c.out)
			}
			got := values(t, y)
			for ch := range 2 {
				for i := range c.out {
					for j := range c.out {
						// PyTorch's avg_pool2d kernel, written out.
						h0, w0 := i*c.stride-c.pad, j*c.stride-c.pad
						h1, w1 := min(h0+c.k, c.h+c.pad), min(w0+c.k, c.w+c.pad)
						size := (h1 - h0) * (w1 - w0)
						h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, c.h), min(w1, c.w)
						sum := 0.0
						for y := h0; y < h1; y++ {
							for z := w0; z < w1; z++ {
								sum += xs[(ch*c.h+y)*c.w+z]
							}
						}
						div := float64(size)
						switch {
						case c.divisor != 0:
							div = float64(c.divisor)
						case c.excludePad:
							div = float64((h1 - h0) * (w1 - w0))
						}
						if v, want := got[(ch*c.out+i)*c.out+j], sum/div; math.Abs(v-want) > 1e-12 {
							t.Fatalf("channel %d output (%d, %d) is %v, want %v", ch, i, j, v, want)
						}
					}
				}
			}
		})
	}
}

func TestAdaptiveAvgPool2dMatchesDirectLoops(t *testing.T) {
	rt := newRT()
	for _, c := range []struct {
		h, w   int
		size   []int
		oh, ow int
	}{
		{7, 5, []int{3, 2}, 3, 2},
		{3, 4, []int{4, 6}, 4, 6}, // larger than the input: windows repeat rows
		{4, 7, []int{-1, 2}, 4, 2},
		{5, 4, []int{1}, 1, 1},
	} {
		x := rt.Randn(tensor.Float64, 1, 2, c.h, c.w)
		xs := values(t, x)
		y := functional.AdaptiveAvgPool2d(x, c.size)
		if s := y.Shape(); len(s) != 4 || s[2] != c.oh || s[3] != c.ow {
			t.Fatalf("%v from %dx%d: shape %v, want [1 2 %d %d]", c.size, c.h, c.w, s, c.oh, c.ow)
		}
		got := values(t, y)
		for ch := range 2 {
			for i := range c.oh {
				for j := range c.ow {
					h0, h1 := i*c.h/c.oh, ((i+1)*c.h+c.oh-1)/c.oh
					w0, w1 := j*c.w/c.ow, ((j+1)*c.w+c.ow-1)/c.ow
					sum := 0.0
					for y := h0; y < h1; y++ {
						for z := w0; z < w1; z++ {
							sum += xs[(ch*c.h+y)*c.w+z]
						}
					}
					want := sum / float64((h1-h0)*(w1-w0))
					if v := got[(ch*c.oh+i)*c.ow+j]; math.Abs(v-want) > 1e-12 {
						t.Fatalf("%v from %dx%d: channel %d output (%d, %d) is %v, want %v", c.size, c.h, c.w, ch, i, j, v, want)
					}
				}
			}
		}
	}
}

// TestDropout2dZeroesWholeChannels: in training every channel of every
// sample is either all zero or all scaled by 1/(1−p); in eval, and with
// p 0, the input is unchanged.
func TestDropout2dZeroesWholeChannels(t *testing.T) {
	rt := newRT()
	const n, c, hw, p = 8, 16, 6, 0.5
	x := rt.Ones(tensor.Float64, n, c, 2, 3)
	got := values(t, functional.Dropout2d(x, p, true))
	dropped := 0
	for ch := range n * c {
		first := got[ch*hw]
		if first != 0 && first != 1/(1-p) {
			t.Fatalf("channel %d holds %v, want 0 or %v", ch, first, 1/(1-p))
		}
		for _, v := range got[ch*hw : (ch+1)*hw] {
			if v != first {
				t.Fatalf("channel %d holds %v, not zeroed or kept as a whole", ch, got[ch*hw:(ch+1)*hw])
			}
		}
		if first == 0 {
			dropped++
		}
	}
	if dropped == 0 || dropped == n*c {
		t.Errorf("%d of %d channels dropped with p = %v", dropped, n*c, p)
	}
	for _, training := range []bool{false, true} {
		pp := 0.0
		if !training {
			pp = p
		}
		for i, v := range values(t, functional.Dropout2d(x, pp, training)) {
			if v != 1 {
				t.Fatalf("training %v, p %v: element %d is %v, want the input's 1", training, pp, i, v)
			}
		}
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
