package bench

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
)

// FashionMNISTOptions configure the Fashion-MNIST job.
type FashionMNISTOptions struct {
	Epochs  int
	DataDir string // holds the four idx .gz files (FashionMNISTDir: Debian's)
	Seed    uint64
}

// FashionMNISTResult is the job's outcome, in torch_fmnist.py's JSON form.
type FashionMNISTResult struct {
	Workload string  `json:"workload"`
	Epochs   int     `json:"epochs"`
	TestAcc  float64 `json:"test_acc"`
	TrainS   float64 `json:"train_s"`
	Threads  int     `json:"threads"`
}

// fmnistSplit loads images (as float32 in [0, 1], [N, 784]) and int64
// labels of one split from dir.
func fmnistSplit(rt *tensor.Runtime, dir, split string) (x, y *tensor.Tensor, err error) {
	load := func(kind string) (*tensor.Tensor, error) {
		prefix := map[string]string{"train": "train", "test": "t10k"}[split]
		return tensorio.LoadIdx(rt, filepath.Join(dir, prefix+"-"+kind+"-ubyte.gz"))
	}
	images, err := load("images-idx3")
	if err != nil {
		return nil, nil, err
	}
	labels, err := load("labels-idx1")
	if err != nil {
		return nil, nil, err
	}
	n := images.Size(0)
	x = images.Reshape(n, 784).To(tensor.Float32).DivScalar(255).Persist()
	y = labels.To(tensor.Int64).Persist()
	images.Release()
	labels.Release()
	return x, y, firstErr(x.Err(), y.Err())
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// FashionMNIST is the same job as bench/torch_fmnist.py (MLP
// 784-256-128-10, Adam 1e-3, batch 128): the seed is applied before the model
// is built, and every epoch draws one randperm, so with the same seed the
// initial weights and batch order are PyTorch's. It prints a line per epoch
// to out; TrainS counts the training steps only, as the PyTorch script does.
func FashionMNIST(out io.Writer, opt FashionMNISTOptions) (FashionMNISTResult, error) {
	res := FashionMNISTResult{Workload: "fashion_mnist_mlp", Epochs: opt.Epochs, Threads: parallel.Threads()}
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	xtr, ytr, err := fmnistSplit(rt, opt.DataDir, "train")
	if err != nil {
		return res, fmt.Errorf("fashion-mnist: %w", err)
	}
	xte, yte, err := fmnistSplit(rt, opt.DataDir, "test")
	if err != nil {
		return res, fmt.Errorf("fashion-mnist: %w", err)
	}
	rt.ManualSeed(opt.Seed)
	l1, err := nn.NewLinear(rt, 784, 256, true)
	if err != nil {
		return res, err
	}
	l2, _ := nn.NewLinear(rt, 256, 128, true)
	l3, _ := nn.NewLinear(rt, 128, 10, true)
	model, err := nn.NewSequential(l1, nn.ReLU(), l2, nn.ReLU(), l3)
	if err != nil {
		return res, err
	}
	adam, err := optim.NewAdam(model.Parameters(), optim.DefaultAdam())
	if err != nil {
		return res, err
	}
	const batch = 128
	n := xtr.Size(0)
	fmt.Fprintf(out, "fashion-mnist: %d training and %d test images (%s), MLP 784-256-128-10, Adam lr 1e-3, batch %d\n",
		n, xte.Size(0), opt.DataDir, batch)
	var training time.Duration
	for epoch := 1; epoch <= opt.Epochs; epoch++ {
		start := time.Now()
		perm := rt.Randperm(n).Persist()
		total, steps := 0.0, 0
		for i := 0; i < n; i += batch {
			sc := rt.OpenScope()
			idx := perm.Narrow(0, i, min(batch, n-i))
			if err := adam.ZeroGrad(false); err != nil {
				return res, err
			}
			loss := tensor.CrossEntropy(model.Forward(xtr.IndexSelect(0, idx)), ytr.IndexSelect(0, idx), tensor.DefaultCrossEntropy)
			if err := loss.Backward(); err != nil {
				return res, err
			}
			if err := adam.Step(); err != nil {
				return res, err
			}
			v, err := loss.Item()
			if err != nil {
				return res, err
			}
			total += v
			steps++
			sc.Close()
		}
		perm.Release()
		training += time.Since(start)
		acc, err := accuracy(rt, model, xte, yte)
		if err != nil {
			return res, err
		}
		res.TestAcc = acc
		fmt.Fprintf(out, "epoch %d  loss %.4f  test accuracy %.4f  (training %.1fs)\n", epoch, total/float64(steps), acc, training.Seconds())
	}
	res.TrainS = float64(training.Milliseconds()) / 1e3
	return res, nil
}

func accuracy(rt *tensor.Runtime, model *nn.Sequential, x, y *tensor.Tensor) (float64, error) {
	sc := rt.OpenScope()
	defer sc.Close()
	var acc float64
	var err error
	rt.NoGrad(func() {
		correct := model.Forward(x).Argmax(1, false).Eq(y).To(tensor.Float32).MeanAll()
		acc, err = correct.Item()
	})
	return acc, err
}
