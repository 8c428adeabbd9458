// Command fashion_mnist is samples/fashion_mnist.js as a WebAssembly
// training program in Go, over the Go SDK (sdk/go/zeroeng): an MLP
// 784-256-128-10 (ReLU) trained with Adam (lr 1e-3), batch 128, on
// Debian's dataset-fashion-mnist. It makes the script's calls in the
// script's order, so that it draws the same random numbers and trains the
// same model bit for bit: on one rank, and on several with each rank's
// share of every batch under DistributedDataParallel (or ZeRO).
//
//	make programs   # samples/programs/build/fashion_mnist_go.wasm
//	zeroeng run samples/programs/build/fashion_mnist_go.wasm                  # 5 epochs
//	zeroeng run samples/programs/build/fashion_mnist_go.wasm -- --data DIR --epochs 1
//	zeroeng run --nproc 2 samples/programs/build/fashion_mnist_go.wasm        # DDP over 2 ranks
//	zeroeng run --nproc 4 samples/programs/build/fashion_mnist_go.wasm -- --zero 2
//
// The flags are the script's: --data DIR (a program has no environment:
// the default is /usr/share/datasets/fashion-mnist, not
// ZEROENG_FMNIST_DIR), --epochs N, --steps N (at most N steps an epoch),
// --zero 1|2|overlap, --bf16. Every epoch prints the test accuracy; the
// last line is the result as JSON; with zeroeng run --metrics FILE every
// step's loss goes to FILE.
//
// Build (its own module, offline):
//
//	cd samples/programs/go && GOOS=wasip1 GOARCH=wasm go build -o fashion_mnist_go.wasm ./fashion_mnist
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	ze "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

const usageArgs = "[-- --data DIR] [--epochs N] [--steps N] [--zero 1|2|overlap] [--bf16]"

// options are the script's flags, with its defaults.
type options struct {
	data   string
	epochs int
	steps  int // at most this many steps an epoch (0: every step)
	zero   string
	bf16   bool
}

func main() {
	prog := filepath.Base(os.Args[0])
	opts, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\nusage: zeroeng run %s %s\n", prog, err, prog, usageArgs)
		os.Exit(2)
	}
	if opts == nil { // --help
		fmt.Printf("usage: zeroeng run %s %s\n", prog, usageArgs)
		return
	}
	if err := train(opts); err != nil {
		var de *dataError
		if errors.As(err, &de) {
			fmt.Fprintf(os.Stderr, "%s: cannot read the Fashion-MNIST data in %s:\n  %v\n"+
				"Install it with `sudo apt-get install dataset-fashion-mnist` (Debian, Ubuntu), or point --data DIR\n"+
				"at a directory holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,\n"+
				"t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz.\n", prog, opts.data, de.err)
		} else {
			fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
		}
		os.Exit(1)
	}
}

// parseArgs reads the script's flags (--name value or --name=value); nil
// options for --help.
func parseArgs(args []string) (*options, error) {
	opts := &options{data: "/usr/share/datasets/fashion-mnist", epochs: 5}
	var bad bool
	for i := 0; i < len(args); i++ {
		name, inline, hasInline := strings.Cut(args[i], "=")
		value := func() (string, bool) {
			if hasInline {
				return inline, true
			}
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		switch name {
		case "--data":
			v, ok := value()
			opts.data, bad = v, bad || !ok || v == ""
		case "--epochs":
			v, _ := value()
			opts.epochs = count(v)
			bad = bad || opts.epochs == 0
		case "--steps":
			v, _ := value()
			opts.steps = count(v)
			bad = bad || opts.steps == 0
		case "--zero":
			opts.zero, _ = value()
			if opts.zero != "1" && opts.zero != "2" && opts.zero != "overlap" {
				return nil, errors.New("--zero takes 1 (sharded optimizer state), 2 (sharded gradients too) or overlap (stage 1, step overlapped with backward)")
			}
		case "--bf16":
			opts.bf16 = true
		case "-h", "--help":
			return nil, nil
		default:
			return nil, fmt.Errorf("unknown argument %s", args[i])
		}
	}
	if bad {
		return nil, errors.New("--data needs a directory, --epochs and --steps a positive integer")
	}
	return opts, nil
}

// count parses a positive integer as the script's Number(value) does for
// one (0 for anything else).
func count(s string) int {
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || x != math.Trunc(x) || x <= 0 || x > 1e9 {
		return 0
	}
	return int(x)
}

// dataError is a failure to read the data set.
type dataError struct{ err error }

func (e *dataError) Error() string { return e.err.Error() }

// held collects handles to release them together.
type held []ze.Handle

// t adds a tensor result's handle.
func (h *held) t(t ze.Tensor, err error) (ze.Tensor, error) {
	if err == nil {
		*h = append(*h, t.Handle)
	}
	return t, err
}

func (h *held) release() error {
	var first error
	for _, x := range *h {
		if err := x.Release(); err != nil && first == nil {
			first = err
		}
	}
	*h = (*h)[:0]
	return first
}

// load reads one split: images as float32 in [0, 1], [N, 784], and int64
// labels. The uint8 images and the unscaled copy go back before it
// returns: only the two results stay.
func load(dir, prefix string) (x, y ze.Tensor, err error) {
	var tmp held
	defer func() {
		if rerr := tmp.release(); err == nil && rerr != nil {
			err = rerr
		}
	}()
	images, err := tmp.t(ze.T("io.loadIdx", dir+"/"+prefix+"-images-idx3-ubyte.gz"))
	if err != nil {
		return x, y, &dataError{err}
	}
	labels, err := tmp.t(ze.T("io.loadIdx", dir+"/"+prefix+"-labels-idx1-ubyte.gz"))
	if err != nil {
		return x, y, &dataError{err}
	}
	flat, err := tmp.t(images.M("reshape", -1, 784))
	if err != nil {
		return x, y, &dataError{err}
	}
	f, err := tmp.t(flat.M("float"))
	if err != nil {
		return x, y, &dataError{err}
	}
	if x, err = f.M("div", 255); err != nil {
		return x, y, &dataError{err}
	}
	if y, err = labels.M("long"); err != nil {
		return x, y, &dataError{err}
	}
	return x, y, nil
}

// rows is a tensor's first dimension.
func rows(t ze.Tensor) (int, error) {
	_, shape, err := t.Shape()
	if err != nil || len(shape) == 0 {
		return 0, err
	}
	return int(shape[0]), nil
}

// number encodes x for JSON: NaN and the infinities as the ABI's
// {"$num": ...} (encoding/json refuses them).
func number(x float64) any {
	switch {
	case math.IsNaN(x):
		return json.RawMessage(`{"$num":"NaN"}`)
	case math.IsInf(x, 1):
		return json.RawMessage(`{"$num":"Infinity"}`)
	case math.IsInf(x, -1):
		return json.RawMessage(`{"$num":"-Infinity"}`)
	}
	return x
}

// fixed writes x as JavaScript's x.toFixed(digits): strconv rounds an
// exact tie (x an odd multiple of 2^-(digits+1)) to even, toFixed away
// from zero.
func fixed(x float64, digits int) string {
	if t := math.Ldexp(math.Abs(x), digits+1); t == math.Trunc(t) && math.Mod(t, 2) == 1 {
		x = math.Nextafter(x, math.Copysign(math.Inf(1), x))
	}
	if x == 0 {
		x = 0 // -0 too: toFixed writes no sign
	}
	return strconv.FormatFloat(x, 'f', digits, 64)
}

func train(opts *options) error {
	xTrain, yTrain, err := load(opts.data, "train")
	if err != nil {
		return err
	}
	xTest, yTest, err := load(opts.data, "t10k")
	if err != nil {
		return err
	}
	n, err := rows(xTrain)
	if err != nil {
		return err
	}
	const batch = 128
	steps := (n + batch - 1) / batch
	if opts.steps > 0 {
		steps = min(steps, opts.steps)
	}

	// With --nproc N the ranks share each batch of 128 (data parallel):
	// every rank draws the same permutation, takes its N-th of each batch,
	// and DistributedDataParallel averages the gradients.
	w, err := ze.Call("dist.worldSize")
	if err != nil {
		return err
	}
	r, err := ze.Call("dist.rank")
	if err != nil {
		return err
	}
	world, rank := int(w.(float64)), int(r.(float64))
	var layers [5]ze.Object
	for i, l := range []struct {
		path string
		args []any
	}{{"nn.Linear", []any{784, 256}}, {"nn.ReLU", nil}, {"nn.Linear", []any{256, 128}}, {"nn.ReLU", nil}, {"nn.Linear", []any{128, 10}}} {
		if layers[i], err = ze.O(l.path, l.args...); err != nil {
			return err
		}
	}
	seq, err := ze.O("nn.Sequential", layers[0], layers[1], layers[2], layers[3], layers[4])
	if err != nil {
		return err
	}
	for _, l := range layers {
		if err := l.Release(); err != nil {
			return err
		}
	}
	if opts.bf16 {
		same, err := seq.Method("bfloat16") // the module itself, a new handle
		if err != nil {
			return err
		}
		if err := same.(ze.Object).Release(); err != nil {
			return err
		}
	}
	// --zero shards Adam's state over the ranks (ZeroRedundancyOptimizer):
	// stage 1 under DDP; stage 2 without DDP; overlap runs the sharded
	// step inside DDP's backward.
	model := seq
	if (opts.zero == "" && world > 1) || (opts.zero != "" && opts.zero != "2") {
		if model, err = ze.O("nn.parallel.DistributedDataParallel", seq); err != nil {
			return err
		}
	}
	params, err := model.Method("parameters")
	if err != nil {
		return err
	}
	var opt ze.Object
	if opts.zero == "" {
		opt, err = ze.O("optim.Adam", params, map[string]any{"lr": 1e-3})
	} else {
		stage := 1
		if opts.zero == "2" {
			stage = 2
		}
		opt, err = ze.O("zero.ZeroRedundancyOptimizer", params, map[string]any{
			"optimizer": "adam", "lr": 1e-3, "stage": stage, "overlapWithDDP": opts.zero == "overlap",
		})
		if err == nil && opts.zero == "overlap" {
			err = registerOverlap(model, opt)
		}
	}
	if err != nil {
		return err
	}
	for _, p := range params.([]any) {
		if err := p.(ze.Tensor).Release(); err != nil {
			return err
		}
	}
	enabled, err := ze.Call("metrics.enabled")
	if err != nil {
		return err
	}
	metrics, _ := enabled.(bool)

	nTest, err := rows(xTest)
	if err != nil {
		return err
	}
	var dtypeWord, zeroWord, worldWord, plural string
	if opts.bf16 {
		dtypeWord = " in bfloat16"
	}
	if opts.zero != "" {
		zeroWord = " (ZeRO " + opts.zero + ")"
	}
	if world > 1 {
		worldWord = fmt.Sprintf(" over %d ranks", world)
	}
	if opts.epochs != 1 {
		plural = "s"
	}
	fmt.Printf("fashion-mnist: %d training and %d test images (%s), MLP 784-256-128-10%s, Adam lr 1e-3%s, batch %d%s, %d epoch%s\n",
		n, nTest, opts.data, dtypeWord, zeroWord, batch, worldWord, opts.epochs, plural)

	// input is x as the model takes it: a bfloat16 copy under --bf16.
	input := func(x ze.Tensor, h *held) (ze.Tensor, error) {
		if !opts.bf16 {
			return x, nil
		}
		return h.t(x.Op("bfloat16"))
	}
	// The step's calls take handles and numbers: they go without JSON
	// (Op, Invoke), the fast path for calls made every step.
	crossEntropy, err := ze.Lookup("nn.functional.crossEntropy")
	if err != nil {
		return err
	}
	var trainMs int64
	var acc float64
	step := 0
	for epoch := 1; epoch <= opts.epochs; epoch++ {
		bar, err := ze.O("progress.bar", map[string]any{"total": steps, "label": fmt.Sprintf("epoch %d/%d", epoch, opts.epochs)})
		if err != nil {
			return err
		}
		start := time.Now().UnixMilli()
		// The permutation outlives the automatic release of each step's
		// tensors: keep it for the epoch.
		var epochHeld held
		perm, err := epochHeld.t(ze.T("tensor.randperm", n))
		if err != nil {
			return err
		}
		if _, err := epochHeld.t(perm.M("keep")); err != nil {
			return err
		}
		sum := 0.0
		for i, s := 0, 1; i < n && s <= steps; i, s = i+batch, s+1 {
			size := min(batch, n-i)
			lo, hi := size*rank/world, size*(rank+1)/world
			var h held
			l, err := func() (float64, error) {
				idx, err := h.t(perm.Op("narrow", 0, i+lo, hi-lo))
				if err != nil {
					return 0, err
				}
				if _, err := opt.Op("zeroGrad"); err != nil {
					return 0, err
				}
				xb, err := h.t(xTrain.Op("indexSelect", 0, idx))
				if err != nil {
					return 0, err
				}
				in, err := input(xb, &h)
				if err != nil {
					return 0, err
				}
				out, err := h.t(model.Op("forward", in))
				if err != nil {
					return 0, err
				}
				yb, err := h.t(yTrain.Op("indexSelect", 0, idx))
				if err != nil {
					return 0, err
				}
				loss, err := h.t(crossEntropy.Invoke(out, yb))
				if err != nil {
					return 0, err
				}
				if _, err := loss.Op("backward"); err != nil {
					return 0, err
				}
				if _, err := opt.Op("step"); err != nil {
					return 0, err
				}
				return loss.Item()
			}()
			if err != nil {
				return err
			}
			sum += l
			step++
			if metrics {
				if _, err := ze.Call("metrics.log", ze.Fields{"step", step, "epoch", epoch, "loss", l}); err != nil {
					return err
				}
			}
			if _, err := bar.Method("update", s, ze.Fields{"loss", l, "samples", min(i+batch, n)}); err != nil {
				return err
			}
			if err := h.release(); err != nil {
				return err
			}
		}
		if err := epochHeld.release(); err != nil {
			return err
		}
		trainMs += time.Now().UnixMilli() - start
		if _, err := bar.Method("done"); err != nil {
			return err
		}
		if err := bar.Release(); err != nil {
			return err
		}
		if acc, err = accuracy(model, xTest, yTest, input); err != nil {
			return err
		}
		if _, err := ze.Call("metrics.log", struct {
			Epoch   int     `json:"epoch"`
			TestAcc any     `json:"test_acc"`
			TrainS  float64 `json:"train_s"`
		}{epoch, number(acc), float64(trainMs) / 1e3}); err != nil {
			return err
		}
		fmt.Printf("epoch %d  loss %s  test accuracy %s  (training %ss)\n", epoch, fixed(sum/float64(steps), 4), fixed(acc, 4), fixed(float64(trainMs)/1e3, 1))
	}

	// The result in bench/torch_fmnist.py's form; train_s counts the
	// training steps only.
	dtype := "float32"
	if opts.bf16 {
		dtype = "bfloat16"
	}
	acc4, _ := strconv.ParseFloat(fixed(acc, 4), 64)
	result, err := json.Marshal(struct {
		Workload string  `json:"workload"`
		DType    string  `json:"dtype"`
		Epochs   int     `json:"epochs"`
		TestAcc  any     `json:"test_acc"`
		TrainS   float64 `json:"train_s"`
	}{"fashion_mnist_mlp", dtype, opts.epochs, number(acc4), float64(trainMs) / 1e3})
	if err != nil {
		return err
	}
	if _, err := ze.Call("metrics.log", json.RawMessage(result)); err != nil {
		return err
	}
	fmt.Println(string(result))
	return nil
}

// registerOverlap runs ZeRO's step inside DDP's backward (schedule B):
// model.registerCommHook(null, zero.hookWithZeroStepInterleaved(
// dist.commHooks.allreduceHook, model, opt, { shardBuckets: true })).
func registerOverlap(model, opt ze.Object) error {
	hooks, err := ze.O("dist.commHooks")
	if err != nil {
		return err
	}
	allreduce, err := hooks.Get("allreduceHook")
	if err != nil {
		return err
	}
	hook, err := ze.O("zero.hookWithZeroStepInterleaved", allreduce, model, opt, map[string]any{"shardBuckets": true})
	if err != nil {
		return err
	}
	_, err = model.Method("registerCommHook", nil, hook)
	return err
}

// accuracy is the model's accuracy on the test set, without autograd,
// its tensors given back.
func accuracy(model ze.Object, xTest, yTest ze.Tensor, input func(ze.Tensor, *held) (ze.Tensor, error)) (float64, error) {
	var acc float64
	var h held
	err := ze.NoGrad(func() error {
		return ze.Scope(func() ([]ze.Tensor, error) {
			in, err := input(xTest, &h)
			if err != nil {
				return nil, err
			}
			t, err := h.t(model.M("forward", in))
			for _, m := range []struct {
				name string
				args []any
			}{{"argmax", []any{1}}, {"eq", []any{yTest}}, {"float", nil}, {"mean", nil}} {
				if err != nil {
					return nil, err
				}
				t, err = h.t(t.M(m.name, m.args...))
			}
			if err != nil {
				return nil, err
			}
			acc, err = t.Item()
			return nil, err
		})
	})
	if rerr := h.release(); err == nil {
		err = rerr
	}
	return acc, err
}
