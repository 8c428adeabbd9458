package tensorio_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
)

func TestNpyRoundTrip(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	dir := t.TempDir()
	for _, x := range []*tensor.Tensor{
		rt.Arange(tensor.Float32, 0, 12, 1).Reshape(3, 4),
		rt.Arange(tensor.Int64, -3, 3, 1),
		rt.Arange(tensor.Float64, 0, 6, 0.5).Reshape(2, 3, 2).Transpose(0, 2), // non-contiguous
		rt.Scalar(tensor.Float32, 7),
	} {
		path := filepath.Join(dir, "a.npy")
		if err := tensorio.SaveNpy(path, x); err != nil {
			t.Fatal(err)
		}
		y, err := tensorio.LoadNpy(rt, path)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := x.Float64s()
		b, _ := y.Float64s()
		if !slices.Equal(a, b) || !slices.Equal(x.Shape(), y.Shape()) || x.DType() != y.DType() {
			t.Fatalf("npy round trip: %v %v -> %v %v", x.DType(), x.Shape(), y.DType(), y.Shape())
		}
	}
}

func TestLoadNumPyAndIdxFixtures(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	f, err := tensorio.LoadNpy(rt, "../npy/testdata/fortran_f4.npy")
	if err != nil {
		t.Fatal(err)
	}
	if f.DType() != tensor.Float32 || !f.IsContiguous() {
		t.Fatalf("Fortran-order array loaded as %v, contiguous %v", f.DType(), f.IsContiguous())
	}
	u, err := tensorio.LoadIdx(rt, "../idx/testdata/ubyte.idx.gz")
	if err != nil {
		t.Fatal(err)
	}
	if u.DType() != tensor.Uint8 {
		t.Fatalf("ubyte idx loaded as %v", u.DType())
	}
	if _, err := tensorio.LoadNpy(rt, "../npy/testdata/bad_object.npy"); err == nil || !strings.Contains(err.Error(), "bad_object.npy") {
		t.Fatalf("object array: %v", err)
	}
}

func TestSaveSafetensorsRejectsDuplicateNames(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	x := rt.Ones(tensor.Float32, 2)
	err := tensorio.SaveSafetensors(filepath.Join(t.TempDir(), "d.safetensors"), []tensorio.Named{{Name: "a", Tensor: x}, {Name: "a", Tensor: x}}, nil)
	if err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("duplicate names: %v", err)
	}
}
