package nn_test

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Modules name their parameters as PyTorch does.
func ExampleNewSequential() {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	l1, _ := nn.NewLinear(rt, 16, 32, true)
	l2, _ := nn.NewLinear(rt, 32, 4, true)
	model, _ := nn.NewSequential(l1, nn.GELU(""), l2)
	for _, p := range model.NamedParameters() {
		fmt.Println(p.Name, p.Tensor.Shape())
	}
	fmt.Println(nn.Repr(model))
	// Output:
	// 0.weight [32 16]
	// 0.bias [32]
	// 2.weight [4 32]
	// 2.bias [4]
	// Sequential(
	//   (0): Linear(in_features=16, out_features=32, bias=True)
	//   (1): GELU()
	//   (2): Linear(in_features=32, out_features=4, bias=True)
	// )
}
