package rand_test

import (
	"fmt"
	"slices"

	"github.com/zeroeng/zeroeng/engine/rand"
)

// torch.manual_seed(0); torch.nn.Linear(4, 3) gives
//
//	weight [[-0.0037,  0.2682, -0.4115, -0.3680],
//	        [-0.1926,  0.1341, -0.0099,  0.3964],
//	        [-0.0444,  0.1323, -0.1511, -0.0983]]
//	bias    [-0.4777, -0.3311, -0.2061]
func ExampleLinearInit() {
	g := rand.New(0)
	w := make([]float32, 3*4)
	b := make([]float32, 3)
	rand.LinearInit(g, w, b, 4, 3)
	for o := 0; o < 3; o++ {
		fmt.Printf("%7.4f\n", w[o*4:o*4+4])
	}
	fmt.Printf("%7.4f\n", b)
	// Output:
	// [-0.0037  0.2682 -0.4115 -0.3680]
	// [-0.1926  0.1341 -0.0099  0.3964]
	// [-0.0444  0.1323 -0.1511 -0.0983]
	// [-0.4777 -0.3311 -0.2061]
}

// torch.manual_seed(0); torch.randn(5); torch.randn(2, 8): the first call has
// fewer than 16 elements and runs the double-precision path, the second the
// vectorised float32 one.
func ExampleGenerator_Normal32() {
	g := rand.New(0)
	a := make([]float32, 5)
	g.Normal32(a, 0, 1)
	b := make([]float32, 16)
	g.Normal32(b, 0, 1)
	fmt.Printf("%7.4f\n%7.4f\n%7.4f\n", a, b[:8], b[8:])
	// Output:
	// [ 1.5410 -0.2934 -2.1788  0.5684 -1.0845]
	// [-0.0885  0.5239 -0.6659  0.8504 -1.3527 -1.6959  0.5667  0.7935]
	// [-0.1932 -0.3090  0.5026 -0.8594  0.7502 -0.5855 -0.1734  0.1835]
}

// A checkpoint stores State; restoring it continues the same sequence.
func ExampleGenerator_State() {
	g := rand.New(42)
	g.Uint32()
	saved := g.State()
	want := g.Uint64()

	h := rand.New(0)
	if err := h.SetState(saved); err != nil {
		panic(err)
	}
	fmt.Println(h.Uint64() == want)
	// Output: true
}

// A rank that holds elements [4, 12) of a parameter of 40 elements draws
// just those, and its generator ends where the whole fill leaves it.
func ExampleStream() {
	whole := make([]float32, 40)
	g := rand.New(0)
	g.Normal32(whole, 0, 1)
	after := g.Uint32()

	part := make([]float32, 8)
	h := rand.New(0)
	s := h.Normal32Stream(40, 0, 1)
	s.Skip(4)
	s.Read32(part)
	s.Finish()
	fmt.Println(slices.Equal(part, whole[4:12]), h.Uint32() == after)
	// Output: true true
}
