package tensor_test

import (
	"testing"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The PyTorch fixtures of sin, cos, erf, cumsum, cumprod, sort, argsort,
// topk and prod: testdata/torch/sortscan.safetensors, written by
// testdata/torch/gen_sortscan.py in gen_ops.py's layout and replayed by
// TestTorchOps' runner.

const sortScanFixture = "testdata/torch/sortscan.safetensors"

func init() {
	pair := func(v, i *tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{v, i} }
	ops := map[string]opFunc{
		"sin": unaryFn((*tensor.Tensor).Sin),
		"cos": unaryFn((*tensor.Tensor).Cos),
		"erf": unaryFn((*tensor.Tensor).Erf),
		"cumsum": func(x []*tensor.Tensor, a fargs) []*tensor.Tensor {
			return one(x[0].Cumsum(a.int("dim")))
		},
		"cumprod": func(x []*tensor.Tensor, a fargs) []*tensor.Tensor {
			return one(x[0].Cumprod(a.int("dim")))
		},
		"sort": func(x []*tensor.Tensor, a fargs) []*tensor.Tensor {
			return pair(x[0].Sort(a.int("dim"), a.bool("descending"), a.bool("stable")))
		},
		"argsort": func(x []*tensor.Tensor, a fargs) []*tensor.Tensor {
			return one(x[0].Argsort(a.int("dim"), a.bool("descending"), a.bool("stable")))
		},
		"topk": func(x []*tensor.Tensor, a fargs) []*tensor.Tensor {
			return pair(x[0].TopK(a.int("k"), a.int("dim"), a.bool("largest"), a.bool("sorted")))
		},
		"prod_all": unaryFn((*tensor.Tensor).ProdAll),
		"prod": func(x []*tensor.Tensor, a fargs) []*tensor.Tensor {
			return one(x[0].Prod(a.int("dim"), a.bool("keepdim")))
		},
	}
	for name, fn := range ops {
		if _, dup := torchOps[name]; dup {
			panic("torchOps has " + name + " already")
		}
		torchOps[name] = fn
	}
	// Sorting moves values and its gradient moves the upstream gradient's:
	// both must be PyTorch's bits.
	for _, op := range []string{"sort", "argsort", "topk"} {
		exactOps[op] = true
	}
}

// TestTorchSortScanOps replays every case of the fixture file: outputs
// (values and indices, ties and NaN included) and input gradients,
// cumprod's and prod's with zeros among the inputs.
func TestTorchSortScanOps(t *testing.T) {
	cases := loadFixtures(t, sortScanFixture)
	if len(cases) < 100 {
		t.Fatalf("only %d cases in %s", len(cases), sortScanFixture)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runFixture(t, c) })
	}
}
