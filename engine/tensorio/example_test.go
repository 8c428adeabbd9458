package tensorio_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
)

// Save a model's state dict as safetensors (readable by PyTorch and
// Hugging Face tools) and load it into another model.
func Example() {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	src, _ := nn.NewLinear(rt, 4, 2, true)
	dir, _ := os.MkdirTemp("", "zeroeng")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")

	var named []tensorio.Named
	for _, p := range src.StateDict() {
		named = append(named, tensorio.Named{Name: p.Name, Tensor: p.Tensor})
	}
	if err := tensorio.SaveSafetensors(path, named, map[string]string{"format": "pt"}); err != nil {
		fmt.Println(err)
		return
	}

	loaded, meta, err := tensorio.LoadSafetensors(rt, path)
	if err != nil {
		fmt.Println(err)
		return
	}
	dst, _ := nn.NewLinear(rt, 4, 2, true)
	if err := dst.LoadStateDict(tensorio.Map(loaded), true); err != nil {
		fmt.Println(err)
		return
	}
	same, _ := dst.Weight.Eq(src.Weight).To(tensor.Int64).SumAll().Item()
	fmt.Println(len(loaded), meta["format"], same)
	// Output:
	// 2 pt 8
}

// A malformed file is an error naming the file, never a crash.
func ExampleLoadSafetensors_malformed() {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	dir, _ := os.MkdirTemp("", "zeroeng")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "bad.safetensors")
	_ = os.WriteFile(path, []byte("\xff\xff\xff\xff\xff\xff\xff\x7f{}"), 0o644)
	_, _, err := tensorio.LoadSafetensors(rt, path)
	fmt.Println(err != nil)
	// Output:
	// true
}
