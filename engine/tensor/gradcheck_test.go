package tensor_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

func newRT() *tensor.Runtime { return tensor.NewRuntime(cpu.New(cpu.Options{}), 0) }

// testRT is the runtime of the table-driven tests, so that index tensors
// built in a table and the inputs built by checkGrad can be mixed.
var testRT = newRT()

// input describes one float64 argument of a gradient check.
type input struct {
	shape  []int
	vals   []float64 // nil: random in [-1, 1)
	noGrad bool
}

// gradCase is one entry of the finite-difference table: f builds the op
// from its inputs.
type gradCase struct {
	name   string
	inputs []input
	f      func(in []*tensor.Tensor) *tensor.Tensor
}

func randVals(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.Float64()*2 - 1
	}
	return v
}

func numelOf(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// checkGrad compares autograd's gradient of Σ f(x)·w (w random, to cover the
// whole Jacobian) with central differences in float64.
func checkGrad(t *testing.T, tc gradCase) {
	t.Helper()
	rt := testRT
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([][]float64, len(tc.inputs))
	for i, in := range tc.inputs {
		if in.vals != nil {
			vals[i] = in.vals
		} else {
			vals[i] = randVals(r, numelOf(in.shape))
		}
	}
	build := func(grad bool) []*tensor.Tensor {
		ts := make([]*tensor.Tensor, len(vals))
		for i, v := range vals {
			ts[i] = rt.FromFloat64s(v, tc.inputs[i].shape...)
			if grad && !tc.inputs[i].noGrad {
				if err := ts[i].SetRequiresGrad(true); err != nil {
					t.Fatal(err)
				}
			}
		}
		return ts
	}
	ins := build(true)
	out := tc.f(ins)
	if err := out.Err(); err != nil {
		t.Fatalf("forward: %v", err)
	}
	w := rt.FromFloat64s(randVals(r, out.Numel()), out.Shape()...)
	scalar := func(o *tensor.Tensor) float64 {
		v, err := o.Mul(w).SumAll().Item()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	loss := out.Mul(w).SumAll()
	if err := loss.Backward(); err != nil {
		t.Fatalf("backward: %v", err)
	}
	const eps = 1e-6
	for i := range vals {
		if tc.inputs[i].noGrad {
			continue
		}
		g := ins[i].Grad()
		if g == nil {
			t.Fatalf("input %d got no gradient", i)
		}
		analytic, err := g.Float64s()
		if err != nil {
			t.Fatal(err)
		}
		for j := range vals[i] {
			orig := vals[i][j]
			var fp, fm float64
			rt.NoGrad(func() {
				vals[i][j] = orig + eps
				fp = scalar(tc.f(build(false)))
				vals[i][j] = orig - eps
				fm = scalar(tc.f(build(false)))
			})
			vals[i][j] = orig
			numeric := (fp - fm) / (2 * eps)
			if d := math.Abs(numeric - analytic[j]); d > 1e-5+1e-4*math.Abs(numeric) {
				t.Errorf("input %d element %d: autograd %.8g, finite differences %.8g", i, j, analytic[j], numeric)
			}
		}
	}
}

func in(shape ...int) input { return input{shape: shape} }

// positive returns inputs in [0.5, 1.5) for ops defined on positive reals.
func positive(shape ...int) input {
	r := rand.New(rand.NewPCG(3, 4))
	v := randVals(r, numelOf(shape))
	for i := range v {
		v[i] = 1 + v[i]/2
	}
	return input{shape: shape, vals: v}
}

func TestGradients(t *testing.T) {
	cases := []gradCase{
		{"add_broadcast", []input{in(2, 3), in(3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Add(x[1]) }},
		{"sub_broadcast", []input{in(2, 1, 3), in(4, 1)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Sub(x[1]) }},
		{"mul", []input{in(2, 3), in(2, 3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Mul(x[1]) }},
		{"div", []input{in(2, 3), positive(3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Div(x[1]) }},
		{"pow", []input{positive(2, 3), in(2, 3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Pow(x[1]) }},
		{"maximum", []input{in(5), in(5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Maximum(x[1]) }},
		{"neg", []input{in(4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Neg() }},
		{"exp", []input{in(4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Exp() }},
		{"log", []input{positive(4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Log() }},
		{"sqrt", []input{positive(4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Sqrt() }},
		{"rsqrt", []input{positive(4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Rsqrt() }},
		{"square", []input{in(4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Square() }},
		{"reciprocal", []input{positive(4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Reciprocal() }},
		{"abs", []input{in(4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Abs() }},
		{"relu", []input{in(6)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Relu() }},
		{"gelu", []input{in(6)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Gelu("none") }},
		{"gelu_tanh", []input{in(6)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Gelu("tanh") }},
		{"silu", []input{in(6)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Silu() }},
		{"tanh", []input{in(6)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Tanh() }},
		{"sigmoid", []input{in(6)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Sigmoid() }},
		{"scalars", []input{positive(5)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return x[0].AddScalar(2).MulScalar(3).SubScalar(1).RSubScalar(4).DivScalar(2).PowScalar(3).RDivScalar(2)
		}},
		{"sum_dims", []input{in(2, 3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Sum([]int{0, 2}, false) }},
		{"sum_keepdim", []input{in(2, 3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Sum([]int{1}, true) }},
		{"mean", []input{in(2, 3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Mean([]int{-1}, false) }},
		{"var", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Var([]int{1}, 1, true) }},
		{"max_dim", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { v, _ := x[0].Max(1, false); return v }},
		{"max_all", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].MaxAll() }},
		{"min_dim", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { v, _ := x[0].Min(0, true); return v }},
		{"min_all", []input{in(4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].MinAll() }},
		{"std", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Std([]int{0}, 0, false) }},
		{"amax", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Amax([]int{0}, false) }},
		{"matmul_2d", []input{in(3, 4), in(4, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Matmul(x[1]) }},
		{"matmul_batched_broadcast", []input{in(2, 3, 4), in(4, 2)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Matmul(x[1]) }},
		{"matmul_vec", []input{in(4), in(4, 3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Matmul(x[1]) }},
		{"matmul_transposed", []input{in(4, 3), in(5, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].T().Matmul(x[1].T()) }},
		{"linear", []input{in(2, 3, 4), in(5, 4), in(5)}, func(x []*tensor.Tensor) *tensor.Tensor { return tensor.Linear(x[0], x[1], x[2]) }},
		{"linear_nobias", []input{in(3, 4), in(2, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return tensor.Linear(x[0], x[1], nil) }},
		{"reshape_transpose_permute", []input{in(2, 3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return x[0].Transpose(0, 2).Reshape(4, 6).Permute(1, 0).Contiguous().View(3, 8)
		}},
		{"narrow_select", []input{in(4, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Narrow(1, 1, 3).Select(0, 2) }},
		{"expand", []input{in(3, 1)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Expand(2, 3, 4) }},
		{"squeeze_unsqueeze_flatten", []input{in(2, 1, 3)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return x[0].Squeeze().Unsqueeze(0).Flatten(0, -1)
		}},
		{"cat_stack", []input{in(2, 3), in(2, 2)}, func(x []*tensor.Tensor) *tensor.Tensor {
			c := tensor.Cat([]*tensor.Tensor{x[0], x[1]}, 1)
			return tensor.Stack([]*tensor.Tensor{c, c.MulScalar(2)}, 0)
		}},
		{"split_chunk", []input{in(5, 2)}, func(x []*tensor.Tensor) *tensor.Tensor {
			p := x[0].Split(2, 0)
			q := x[0].Chunk(2, 1)
			return p[0].Sum(nil, false).Add(p[2].Mul(q[1].Narrow(0, 0, 1)).SumAll())
		}},
		{"where_masked_fill", []input{in(2, 3), in(2, 3)}, func(x []*tensor.Tensor) *tensor.Tensor {
			mask := x[0].GtScalar(0)
			return tensor.Where(mask, x[0], x[1]).MaskedFill(x[1].LtScalar(-0.5), 3)
		}},
		{"to_float32_and_back", []input{in(3)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return x[0].MulScalar(2).To(tensor.Float64)
		}},
		{"clone_weight_tying", []input{in(3, 3)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return x[0].Matmul(x[0].T()).Add(x[0].Clone())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkGrad(t, tc) })
	}
}

func TestGradientsIndexing(t *testing.T) {
	rt := testRT
	idx := rt.FromInt64s([]int64{2, 0, 2, 1})
	gidx := rt.FromInt64s([]int64{0, 2, 1, 1, 0, 0}, 3, 2)
	cases := []gradCase{
		{"index_select", []input{in(3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].IndexSelect(0, idx) }},
		{"index_select_dim1", []input{in(2, 3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].IndexSelect(1, idx) }},
		{"embedding", []input{in(3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return tensor.Embedding(idx.Reshape(2, 2), x[0], -1)
		}},
		{"gather", []input{in(3, 2)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Gather(0, gidx) }},
		{"scatter_add", []input{in(3, 2), in(3, 2)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].ScatterAdd(0, gidx, x[1]) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkGrad(t, tc) })
	}
}

func TestGradientsNN(t *testing.T) {
	rt := testRT
	target := rt.FromInt64s([]int64{1, 0, 3, -100, 2})
	cases := []gradCase{
		{"softmax", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Softmax(1) }},
		{"softmax_dim0", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Softmax(0) }},
		{"log_softmax", []input{in(2, 3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].LogSoftmax(-1) }},
		{"layer_norm", []input{in(3, 2, 4), in(2, 4), in(2, 4)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return tensor.LayerNorm(x[0], []int{2, 4}, x[1], x[2], 1e-5)
		}},
		{"layer_norm_noaffine", []input{in(3, 6)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return tensor.LayerNorm(x[0], []int{6}, nil, nil, 1e-5)
		}},
		{"cross_entropy", []input{in(5, 4)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return tensor.CrossEntropy(x[0], target, tensor.CrossEntropyOptions{IgnoreIndex: -100, LabelSmoothing: 0.1})
		}},
		{"cross_entropy_sum", []input{in(5, 4)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return tensor.CrossEntropy(x[0], target, tensor.CrossEntropyOptions{Reduction: tensor.ReduceSum, IgnoreIndex: -100})
		}},
		{"cross_entropy_none", []input{in(5, 4)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return tensor.CrossEntropy(x[0], target, tensor.CrossEntropyOptions{Reduction: tensor.ReduceNone, IgnoreIndex: -100})
		}},
		{"mse", []input{in(3, 4), in(3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return tensor.MSELoss(x[0], x[1], tensor.ReduceMean) }},
		{"attention_causal", []input{in(2, 2, 4, 3), in(2, 2, 4, 3), in(2, 2, 4, 3)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return tensor.ScaledDotProductAttention(x[0], x[1], x[2], true)
		}},
		{"attention_strided_qkv", []input{in(2, 3, 12)}, func(x []*tensor.Tensor) *tensor.Tensor {
			// GPT layout: one [B, T, 3C] projection split into heads.
			parts := x[0].Split(4, 2)
			heads := func(p *tensor.Tensor) *tensor.Tensor { return p.View(2, 3, 2, 2).Transpose(1, 2) }
			y := tensor.ScaledDotProductAttention(heads(parts[0]), heads(parts[1]), heads(parts[2]), true)
			return y.Transpose(1, 2).Contiguous().View(2, 3, 4)
		}},
		{"attention_full", []input{in(1, 2, 3, 2), in(1, 2, 5, 2), in(1, 2, 5, 2)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return tensor.ScaledDotProductAttention(x[0], x[1], x[2], false)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkGrad(t, tc) })
	}
}

// TestScatterAddRefusesShortSource: an index longer than src along the
// scattered dimension would read src past its rows (a wrong value forward,
// a failing backward); it is refused, as PyTorch refuses it, and an index
// longer than the tensor in another dimension too.
func TestScatterAddRefusesShortSource(t *testing.T) {
	for _, c := range []struct {
		name           string
		self, src, idx []int
		dim            int
		want           string
	}{
		{"along dim", []int{2, 5}, []int{4, 1}, []int{1, 2}, 1, "index shape [1 2] is larger than src's [4 1] in dimension 1"},
		{"another dim than src", []int{2, 5}, []int{1, 3}, []int{2, 1}, 1, "index shape [2 1] is larger than [1 3] in dimension 0"},
		{"another dim than self", []int{1, 5}, []int{3, 3}, []int{2, 1}, 1, "index shape [2 1] is larger than the tensor's [1 5] in dimension 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := 1
			for _, e := range c.idx {
				n *= e
			}
			idx := testRT.FromInt64s(make([]int64, n), c.idx...)
			err := testRT.Zeros(tensor.Float32, c.self...).ScatterAdd(c.dim, idx, testRT.Ones(tensor.Float32, c.src...)).Err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestScatterAddLargerSource covers a case PyTorch 1.13 itself crashes on:
// src larger than index, whose unscattered elements get zero gradient.
func TestScatterAddLargerSource(t *testing.T) {
	idx := testRT.FromInt64s([]int64{0, 2}, 2, 1)
	checkGrad(t, gradCase{"scatter_add_big_src", []input{in(3, 2), in(3, 3)}, func(x []*tensor.Tensor) *tensor.Tensor {
		return x[0].ScatterAdd(0, idx, x[1])
	}})
}
