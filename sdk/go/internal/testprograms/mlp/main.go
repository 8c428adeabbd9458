// mlp trains a small MLP with SGD on random data, as script/testdata's
// mlp.js does, and prints each step's loss as its float64 bits: the test
// checks that a program trains exactly as the script.
package main

import (
	"fmt"
	"math"
	"os"

	ze "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mlp:", err)
		os.Exit(1)
	}
}

func run() error {
	if _, err := ze.Call("tensor.manualSeed", 0); err != nil {
		return err
	}
	l1, err := ze.O("nn.Linear", 8, 16)
	if err != nil {
		return err
	}
	relu, err := ze.O("nn.ReLU")
	if err != nil {
		return err
	}
	l2, err := ze.O("nn.Linear", 16, 1)
	if err != nil {
		return err
	}
	model, err := ze.O("nn.Sequential", l1, relu, l2)
	if err != nil {
		return err
	}
	// With several ranks, the model is wrapped in DDP, as the script does.
	var ddp ze.Object = model
	world, err := ze.Call("dist.worldSize")
	if err != nil {
		return err
	}
	if world.(float64) > 1 {
		if ddp, err = ze.O("nn.parallel.DistributedDataParallel", model); err != nil {
			return err
		}
	}
	params, err := model.Method("parameters")
	if err != nil {
		return err
	}
	opt, err := ze.O("optim.SGD", params, map[string]any{"lr": 0.1})
	if err != nil {
		return err
	}
	x, err := ze.T("tensor.randn", []int{32, 8})
	if err != nil {
		return err
	}
	y, err := ze.T("tensor.randn", []int{32, 1})
	if err != nil {
		return err
	}
	for step := 0; step < 5; step++ {
		err := ze.Scope(func() ([]ze.Tensor, error) {
			if _, err := opt.Method("zeroGrad"); err != nil {
				return nil, err
			}
			out, err := ddp.M("forward", x)
			if err != nil {
				return nil, err
			}
			loss, err := ze.T("nn.functional.mseLoss", out, y)
			if err != nil {
				return nil, err
			}
			if _, err := loss.Method("backward"); err != nil {
				return nil, err
			}
			if _, err := opt.Method("step"); err != nil {
				return nil, err
			}
			v, err := loss.Item()
			if err != nil {
				return nil, err
			}
			fmt.Printf("loss %d %x\n", step, math.Float64bits(v))
			return nil, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
