package rand

import (
	"fmt"
	"math"
)

// LinearBounds returns the bounds of PyTorch 1.13's default initialisation of
// a layer whose weight has fan_in = fanIn (nn.Linear(in, out): fanIn = in;
// nn.Conv*d: in_channels/groups times the kernel size), computed in float64
// exactly as torch/nn/init.py and nn.Linear.reset_parameters do in Python:
//
//	a      = math.sqrt(5)
//	gain   = math.sqrt(2.0 / (1 + a**2))   # calculate_gain('leaky_relu', a); a**2 == 5.000000000000001
//	std    = gain / math.sqrt(fan_in)
//	weight = math.sqrt(3.0) * std          # kaiming_uniform_ bound
//	bias   = 1 / math.sqrt(fan_in)
//
// The weight bound is not exactly 1/sqrt(fan_in) (a**2 is not exactly 5, and
// the operations round differently), and it is rounded to float32 only when
// uniform_ casts it, so both bounds are kept in float64 until Uniform32.
func LinearBounds(fanIn int) (weight, bias float64) {
	if fanIn <= 0 {
		return 0, 0 // PyTorch: bound = 0 when fan_in == 0 (and kaiming warns)
	}
	a := math.Sqrt(5)
	gain := math.Sqrt(2.0 / (1 + a*a))
	std := gain / math.Sqrt(float64(fanIn))
	return math.Sqrt(3.0) * std, 1 / math.Sqrt(float64(fanIn))
}

// LinearInit initialises the parameters of nn.Linear(in, out) as PyTorch 1.13
// does right after construction (Linear.reset_parameters): first the weight,
// out×in row-major, with kaiming_uniform_(a=sqrt(5)), i.e. uniform_(-w, w);
// then the bias, out values, with uniform_(-b, b); (w, b) = LinearBounds(in).
// The draws are one 32-bit output per weight element, then one per bias
// element. bias may be nil (bias=False), in which case nothing is drawn for
// it. The same recipe initialises nn.Conv1d/2d/3d with in = fan_in.
//
// So with g := New(seed), LinearInit reproduces
// torch.manual_seed(seed); torch.nn.Linear(in, out) bit for bit.
func LinearInit(g *Generator, weight, bias []float32, in, out int) {
	if len(weight) != in*out {
		panic(fmt.Sprintf("rand: LinearInit: weight has %d elements, want %d×%d", len(weight), out, in))
	}
	if bias != nil && len(bias) != out {
		panic(fmt.Sprintf("rand: LinearInit: bias has %d elements, want %d", len(bias), out))
	}
	if len(weight) == 0 {
		// PyTorch warns and skips the weight; the bias bound is 0.
		if bias != nil {
			g.Uniform32(bias, 0, 0)
		}
		return
	}
	w, b := LinearBounds(in)
	g.Uniform32(weight, -w, w)
	if bias != nil {
		g.Uniform32(bias, -b, b)
	}
}

// EmbeddingInit initialises the weight of nn.Embedding(num, dim), num×dim
// row-major, as PyTorch 1.13 does (Embedding.reset_parameters): normal_(0, 1)
// over the whole weight, so the size rules of Normal32 apply to num*dim
// (16 or more elements take the vectorised path). With padding_idx, PyTorch
// then zeroes that row; the draws are the same, so callers zero it themselves.
func EmbeddingInit(g *Generator, weight []float32, num, dim int) {
	if len(weight) != num*dim {
		panic(fmt.Sprintf("rand: EmbeddingInit: weight has %d elements, want %d×%d", len(weight), num, dim))
	}
	g.Normal32(weight, 0, 1)
}
