package optim_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestRegistry: every algorithm's descriptor is complete and consistent:
// kinds 0, 1, 2, ... in order, a description, documented options whose
// defaults pass their own checks, and state names that it declares.
func TestRegistry(t *testing.T) {
	algs := optim.Algorithms()
	if len(algs) < 8 {
		t.Fatalf("%d algorithms registered", len(algs))
	}
	for i, a := range algs {
		if int(a.Kind) != i || a.Kind.Algorithm() != a || a.Kind.String() != a.Name {
			t.Errorf("%s: kind %d at %d", a.Name, a.Kind, i)
		}
		if k, err := optim.ParseKind(strings.ToLower(a.Name)); err != nil || k != a.Kind {
			t.Errorf("%s: ParseKind gives %v, %v", a.Name, k, err)
		}
		if a.Doc == "" {
			t.Errorf("%s has no Doc", a.Name)
		}
		for _, o := range a.Options {
			if o.Doc == "" {
				t.Errorf("%s's option %s has no Doc", a.Name, o.Name)
			}
		}
		d := optim.Defaults(a.Kind)
		if err := d.Validate(a.Kind); err != nil {
			t.Errorf("%s's defaults: %v", a.Name, err)
		}
		for _, h := range []bool{false, true} {
			g := d.Hyper()
			for _, name := range a.Deciding {
				switch g.Get(name).(type) {
				case bool:
					_ = g.Set(name, h)
				case float64:
					_ = g.Set(name, map[bool]float64{false: 0, true: 0.5}[h])
				default:
					t.Errorf("%s: Deciding names %q, not one of its options", a.Name, name)
				}
			}
			for _, name := range optim.RequiredState(a.Kind, &g, false) {
				if !slices.Contains(a.Entries, name) {
					t.Errorf("%s requires %q, not among its Entries %v", a.Name, name, a.Entries)
				}
			}
		}
		for _, name := range a.NonNegative {
			if !slices.Contains(a.Entries, name) || !optim.NonNegativeState(name) {
				t.Errorf("%s: non-negative %q is not among its Entries", a.Name, name)
			}
		}
	}
	if _, err := optim.ParseKind("adamz"); err == nil || !strings.Contains(err.Error(), "nadam, radam") {
		t.Errorf("ParseKind(adamz): %v", err)
	}
}

// TestNAdamWithoutMuProduct: a NAdam state that lost mu_product on its way
// (ZeRO's resharding and checkpoints carry tensors and the step) goes on
// as if it had kept it, to the last bit, while β₁ and ψ stay the same.
func TestNAdamWithoutMuProduct(t *testing.T) {
	rt := newRT()
	mk := func() (*optim.Optimizer, *tensor.Tensor) {
		p := rt.Arange(tensor.Float32, 0, 6, 1).Persist()
		_ = p.SetRequiresGrad(true)
		h := optim.Defaults(optim.NAdam)
		h.LR = 0.05
		_ = h.Set("momentum_decay", 0.2)
		o, err := optim.New(optim.NAdam, []*tensor.Tensor{p}, h)
		if err != nil {
			t.Fatal(err)
		}
		return o, p
	}
	grad := func(s int) *tensor.Tensor {
		return rt.Arange(tensor.Float32, 0, 6, 1).MulScalar(0.3 * float64(s)).SubScalar(0.7)
	}
	a, pa := mk()
	for s := 1; s <= 3; s++ {
		_ = pa.SetGrad(grad(s))
		if err := a.Step(); err != nil {
			t.Fatal(err)
		}
	}
	sd, _ := a.StateDict()
	if _, ok := sd.State[0]["mu_product"]; !ok {
		t.Fatal("no mu_product in the state dict")
	}
	// An impossible mu_product is refused, naming it, and changes nothing.
	for _, bad := range []float64{-0.5, 1.5, math.NaN()} {
		sd.State[0]["mu_product"] = rt.Scalar(tensor.Float32, bad)
		c, _ := mk()
		if err := c.LoadStateDict(sd); err == nil || !strings.Contains(err.Error(), "mu_product") {
			t.Errorf("mu_product %v: %v", bad, err)
		}
	}
	delete(sd.State[0], "mu_product")
	b, pb := mk()
	var err error
	rt.NoGrad(func() { err = pb.CopyFrom(pa) })
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	for s := 4; s <= 6; s++ {
		_ = pa.SetGrad(grad(s))
		_ = pb.SetGrad(grad(s))
		if err := a.Step(); err != nil {
			t.Fatal(err)
		}
		if err := b.Step(); err != nil {
			t.Fatal(err)
		}
	}
	va, _ := pa.Float64s()
	vb, _ := pb.Float64s()
	if !slices.Equal(va, vb) || a.State(pa).Scalars["mu_product"] != b.State(pb).Scalars["mu_product"] {
		t.Fatalf("with mu_product kept %v (%v), recomputed %v (%v)", va, a.State(pa).Scalars, vb, b.State(pb).Scalars)
	}
}

// TestStateDictFromAnotherRuntime: a state dict made on one runtime (an
// in-process rank) loads into an optimizer on another and goes on as the
// original does, to the last bit, for every algorithm.
func TestStateDictFromAnotherRuntime(t *testing.T) {
	for _, a := range optim.Algorithms() {
		t.Run(a.Name, func(t *testing.T) {
			mk := func(rt *tensor.Runtime) (*optim.Optimizer, *tensor.Tensor) {
				p := rt.Arange(tensor.Float32, 0, 6, 1).Persist()
				_ = p.SetRequiresGrad(true)
				h := optim.Defaults(a.Kind)
				h.LR = 0.05
				o, err := optim.New(a.Kind, []*tensor.Tensor{p}, h)
				if err != nil {
					t.Fatal(err)
				}
				return o, p
			}
			grad := func(rt *tensor.Runtime, s int) *tensor.Tensor {
				return rt.Arange(tensor.Float32, 0, 6, 1).MulScalar(0.3 * float64(s)).SubScalar(0.7)
			}
			rtA, rtB := newRT(), newRT()
			a, pa := mk(rtA)
			for s := 1; s <= 3; s++ {
				_ = pa.SetGrad(grad(rtA, s))
				if err := a.Step(); err != nil {
					t.Fatal(err)
				}
			}
			sd, err := a.StateDict()
			if err != nil {
				t.Fatal(err)
			}
			b, pb := mk(rtB)
			va, _ := pa.Float64s()
			rtB.NoGrad(func() { err = pb.CopyFrom(rtB.FromValues(tensor.Float32, va, 6)) })
			if err != nil {
				t.Fatal(err)
			}
			if err := b.LoadStateDict(sd); err != nil {
				t.Fatal(err)
			}
			for s := 4; s <= 5; s++ {
				_ = pa.SetGrad(grad(rtA, s))
				_ = pb.SetGrad(grad(rtB, s))
				if err := a.Step(); err != nil {
					t.Fatal(err)
				}
				if err := b.Step(); err != nil {
					t.Fatal(err)
				}
			}
			va, _ = pa.Float64s()
			vb, _ := pb.Float64s()
			if !slices.Equal(va, vb) {
				t.Fatalf("loaded on another runtime: %v, the original %v", vb, va)
			}
		})
	}
}
