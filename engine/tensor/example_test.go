package tensor_test

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

func Example() {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	w := rt.FromFloat32s([]float32{1, 2, 3, 4}, 2, 2)
	_ = w.SetRequiresGrad(true)
	x := rt.FromFloat32s([]float32{1, 0.5}, 1, 2)

	loss := tensor.Linear(x, w, nil).Relu().SumAll()
	if err := loss.Backward(); err != nil {
		fmt.Println(err)
		return
	}
	v, _ := loss.Item()
	fmt.Println(v)
	fmt.Println(w.Grad())
	// Output:
	// 7
	// tensor([[1.0000, 0.5000], [1.0000, 0.5000]])
}

// Errors travel with the tensors and are reported where the result is used.
func Example_errors() {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	a := rt.Ones(tensor.Float32, 8, 3)
	b := rt.Ones(tensor.Float32, 4, 5)
	loss := a.Matmul(b).Exp().SumAll()
	_, err := loss.Item()
	fmt.Println(err)
	// Output:
	// tensor: matmul: shapes [8 3] and [4 5] cannot be multiplied (8x3 and 4x5)
}

// A scope returns every temporary of a step to the device's pool.
func ExampleRuntime_OpenScope() {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	w := rt.Randn(tensor.Float32, 16, 16).Persist()
	before := rt.Stats().LiveTensors
	for step := 0; step < 3; step++ {
		sc := rt.OpenScope()
		_ = w.Matmul(w).Tanh().MeanAll()
		sc.Close()
	}
	fmt.Println(rt.Stats().LiveTensors - before)
	// Output:
	// 0
}

// The generator reproduces torch.manual_seed(0); torch.randn(3).
func ExampleRuntime_Randn() {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	fmt.Println(rt.Randn(tensor.Float32, 3))
	// Output:
	// tensor([1.5410, -0.2934, -2.1788])
}
