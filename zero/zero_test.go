package zero

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

func mlp(t *testing.T, rt *tensor.Runtime) *nn.Sequential {
	t.Helper()
	l1, err := nn.NewLinear(rt, 16, 32, true)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := nn.NewLinear(rt, 32, 32, true)
	l3, _ := nn.NewLinear(rt, 32, 4, true)
	m, err := nn.NewSequential(l1, nn.GELU(""), l2, nn.ReLU(), l3)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPartitionMatchesPyTorch(t *testing.T) {
	// zero-reference.md: on 2 ranks, rank 0 gets 2.weight and rank 1 the rest.
	w, _ := dist.NewWorld(2, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	m := mlp(t, rt)
	z, err := New(w.Group(0), optim.AdamW, m.Parameters(), optim.DefaultAdamW().Group(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for r, shard := range z.Shards() {
		var names []string
		for _, p := range shard {
			for _, np := range m.NamedParameters() {
				if np.Tensor == p {
					names = append(names, np.Name)
				}
			}
		}
		got = append(got, fmt.Sprintf("%d: %s", r, strings.Join(names, " ")))
	}
	want := []string{"0: 2.weight", "1: 0.weight 0.bias 2.bias 4.weight 4.bias"}
	if !slices.Equal(got, want) {
		t.Errorf("shards %q, want %q", got, want)
	}
}

func TestPartitionBalance(t *testing.T) {
	// Sizes [9, 7, 5, 3] × N give every rank the same total, also when the
	// second half arrives with AddParamGroup.
	for n := 1; n <= 4; n++ {
		w, _ := dist.NewWorld(n, dist.Options{})
		rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
		var params []*tensor.Tensor
		for range n {
			for _, size := range []int{9, 7, 5, 3} {
				params = append(params, rt.Zeros(dtype.Float32, size).Persist())
			}
		}
		z, err := New(w.Group(0), optim.SGD, params[:2*n], optim.SGDConfig{LR: 0.1}.Group(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		g := z.Defaults()
		g.Params = params[2*n:]
		if err := z.AddParamGroup(g); err != nil {
			t.Fatal(err)
		}
		for r, total := range z.ShardSizes() {
			if total != 24 {
				t.Errorf("n=%d: rank %d holds %d elements, want 24", n, r, total)
			}
		}
		// The flat partition: equal slices of each group's bucket,
		// padded to a multiple of n.
		f, err := New(w.Group(0), optim.SGD, params[:2*n], optim.SGDConfig{LR: 0.1}.Group(), Options{Partition: "flat"})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.AddParamGroup(g); err != nil {
			t.Fatal(err)
		}
		per := 0
		for _, half := range [][]*tensor.Tensor{params[:2*n], params[2*n:]} {
			sum := 0
			for _, p := range half {
				sum += p.Numel()
			}
			per += (sum + n - 1) / n
		}
		for r, total := range f.ShardSizes() {
			if total != per {
				t.Errorf("n=%d, flat: rank %d holds %d elements, want %d", n, r, total, per)
			}
		}
		w.Close()
	}
}

func TestConstructorErrors(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	if _, err := New(w.Group(0), optim.SGD, nil, optim.SGDConfig{LR: 0.1}.Group(), Options{}); err == nil {
		t.Error("an empty parameter list was accepted")
	}
	mixed := []*tensor.Tensor{rt.Zeros(dtype.Float32, 2), rt.Zeros(dtype.Float64, 2)}
	if _, err := New(w.Group(0), optim.SGD, mixed, optim.SGDConfig{LR: 0.1}.Group(), Options{}); err == nil || !strings.Contains(err.Error(), "one dtype") {
		t.Errorf("mixed dtypes: %v", err)
	}
	if _, err := New(w.Group(0), optim.SGD, mixed[:1], optim.SGDConfig{LR: 0.1}.Group(), Options{Partition: "round-robin"}); err == nil {
		t.Error("an unknown partition was accepted")
	}
}

func newRuntime() *tensor.Runtime { return tensor.NewRuntime(cpu.New(cpu.Options{}), 0) }

func world(t *testing.T, n int) (*dist.World, *tensor.Runtime) {
	t.Helper()
	w, err := dist.NewWorld(n, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return w, newRuntime()
}
