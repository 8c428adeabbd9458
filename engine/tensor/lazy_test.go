package tensor_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// initSteps is a parameter's initialisation as modules and scripts write
// it: PyTorch's default init, a re-initialisation, a row zeroed (an
// embedding's padding row), a scale, and what a checkpoint load does.
var initSteps = map[string]func(rt *tensor.Runtime, t *tensor.Tensor) error{
	"uniform": func(rt *tensor.Runtime, t *tensor.Tensor) error {
		return t.FillRandom(rt.Generator(), tensor.Uniform(-0.3, 0.3))
	},
	"normal then normal": func(rt *tensor.Runtime, t *tensor.Tensor) error {
		if err := t.FillRandom(rt.Generator(), tensor.Normal(0, 1)); err != nil {
			return err
		}
		return t.FillRandom(rt.Generator(), tensor.Normal(0.5, 0.02))
	},
	"trunc normal, a row zeroed, scaled": func(rt *tensor.Runtime, t *tensor.Tensor) error {
		if err := t.FillRandom(rt.Generator(), tensor.TruncNormal(0, 1, -2, 2)); err != nil {
			return err
		}
		row := t.Narrow(0, 1, 1)
		defer row.Release()
		if err := row.Zero(); err != nil {
			return err
		}
		if err := t.MulScalarInPlace(0.3); err != nil {
			return err
		}
		return t.DivScalarInPlace(7)
	},
	"fill, then a copy over half": func(rt *tensor.Runtime, t *tensor.Tensor) error {
		if err := t.Fill(2.5); err != nil {
			return err
		}
		half := t.Narrow(0, 0, t.Shape()[0]/2)
		defer half.Release()
		src := rt.Randn(t.DType(), half.Shape()...)
		defer src.Release()
		return half.CopyFrom(src)
	},
	"normal, retyped to bfloat16, scaled": func(rt *tensor.Runtime, t *tensor.Tensor) error {
		if err := t.FillRandom(rt.Generator(), tensor.Normal(0, 0.02)); err != nil {
			return err
		}
		if err := t.Retype(tensor.BFloat16); err != nil {
			return err
		}
		return t.MulScalarInPlace(3)
	},
	"nothing": func(*tensor.Runtime, *tensor.Tensor) error { return nil },
}

// TestLazyValuesAreEager: a lazy tensor's values, made by its first use or
// range by range, are those of the same initialisation run on memory, bit
// for bit, and the generator ends where the eager run leaves it.
func TestLazyValuesAreEager(t *testing.T) {
	for name, init := range initSteps {
		for _, shape := range [][]int{{7, 3}, {33, 17}, {300, 41}} {
			for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
				if dt == tensor.Float64 && strings.Contains(name, "bfloat16") {
					continue
				}
				t.Run(fmt.Sprintf("%s/%v/%v", name, shape, dt), func(t *testing.T) {
					build := func(lazy bool) (*tensor.Runtime, *tensor.Tensor) {
						rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 5)
						x := rt.Empty(dt, shape...)
						if lazy {
							x = rt.Lazy(dt, shape...)
						}
						if err := init(rt, x); err != nil {
							t.Fatal(err)
						}
						if lazy != x.IsLazy() {
							t.Fatalf("IsLazy %v after the initialisation of a tensor made lazy: %v", x.IsLazy(), lazy)
						}
						return rt, x
					}
					ert, eager := build(false)
					lrt, lazy := build(true)
					if !bytes.Equal(ert.Generator().State(), lrt.Generator().State()) {
						t.Fatal("the generator moved on differently")
					}
					want, err := eager.Bytes()
					if err != nil {
						t.Fatal(err)
					}
					// Ranges first (lazy stays lazy), then the whole.
					n, size := eager.Numel(), eager.DType().Size()
					for _, r := range [][2]int{{0, n}, {0, 1}, {n / 3, n/3 + 17}, {n - 5, n}, {15, 33}} {
						if r[1] > n {
							continue
						}
						dst := lrt.Empty(lazy.DType(), r[1]-r[0])
						if err := lazy.CopyRangeTo(dst, r[0]); err != nil {
							t.Fatal(err)
						}
						got, err := dst.Bytes()
						dst.Release()
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(got, want[r[0]*size:r[1]*size]) {
							t.Fatalf("elements %v differ from the eager initialisation's", r)
						}
					}
					if !lazy.IsLazy() {
						t.Fatal("CopyRangeTo made the whole tensor")
					}
					got, err := lazy.Bytes() // any use makes the values
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) || lazy.IsLazy() {
						t.Fatalf("the values made at first use differ from the eager initialisation's (still lazy: %v)", lazy.IsLazy())
					}
					if b := lazy.StorageBytes(); b != n*size {
						t.Errorf("the tensor holds %d bytes once made, want %d", b, n*size)
					}
				})
			}
		}
	}
}

// TestLazyRangeMemory: making a slice of a 64 MiB lazy parameter costs the
// slice and a bounded buffer, not the parameter.
func TestLazyRangeMemory(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{MaxMemory: 8 << 20}), 1)
	p := rt.Lazy(tensor.Float32, 4096, 4096)
	if err := p.FillRandom(rt.Generator(), tensor.Uniform(-1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := p.FillRandom(rt.Generator(), tensor.Normal(0, 0.02)); err != nil {
		t.Fatal(err)
	}
	if err := p.Retype(tensor.BFloat16); err != nil {
		t.Fatal(err)
	}
	slice := rt.Empty(tensor.BFloat16, 1<<20)
	if err := p.CopyRangeTo(slice, 5<<20); err != nil {
		t.Fatal(err)
	}
	if peak := rt.Stats().PeakBytes; peak > 6<<20 {
		t.Errorf("peak %d bytes to make 2 MiB of a 32 MiB lazy parameter", peak)
	}
	// Its first use makes all of it, which the cap refuses: an error
	// naming what was being made, not a crash.
	err := p.SumAll().Err()
	if err == nil || !strings.Contains(err.Error(), "lazily built") {
		t.Fatalf("error %v, want one about making a lazily built tensor", err)
	}
}

// TestLazyCopySourceChanged: a copy into a lazy tensor reads its source when
// the values are made; a source changed in between is an error, never the
// new values silently.
func TestLazyCopySourceChanged(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	p := rt.Lazy(tensor.Float32, 4)
	src := rt.Ones(tensor.Float32, 4)
	if err := p.CopyFrom(src); err != nil {
		t.Fatal(err)
	}
	if err := src.Fill(3); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Float32s(); err == nil || !strings.Contains(err.Error(), "was changed before") {
		t.Fatalf("error %v", err)
	}
}

// TestUnallocated: a tensor made without memory fails ops with the reason
// until RestoreMemory gives it memory.
func TestUnallocated(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	b := rt.Unallocated(tensor.Float32, "the unit is sharded", 6)
	if s := rt.Stats(); s.LiveBytes != 0 {
		t.Fatalf("%d bytes live", s.LiveBytes)
	}
	if err := b.SumAll().Err(); err == nil || !strings.Contains(err.Error(), "the unit is sharded") {
		t.Fatalf("error %v", err)
	}
	if _, err := b.RestoreMemory(); err != nil {
		t.Fatal(err)
	}
	if err := b.Fill(2); err != nil {
		t.Fatal(err)
	}
	v, err := b.Float32s()
	if err != nil || !slices.Equal(v, []float32{2, 2, 2, 2, 2, 2}) {
		t.Fatalf("%v, %v", v, err)
	}
}
