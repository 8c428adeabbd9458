package tensorio_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
)

// TestOpenSafetensorsLazy: a file's tensors opened lazily read nothing until
// used; a range reads only itself (into a lazy parameter's slice, through a
// copy recorded on it, as a state dict loaded into a model built with
// zero.init); their values are those the eager load gives; a file changed
// or cut short after it was opened is an error naming it.
func TestOpenSafetensorsLazy(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	path := filepath.Join(t.TempDir(), "w.safetensors")
	w := rt.Randn(tensor.Float32, 300, 7)
	b := rt.Randn(tensor.BFloat16, 11)
	if err := tensorio.SaveSafetensors(path, []tensorio.Named{{Name: "w", Tensor: w}, {Name: "b", Tensor: b}}, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	eager, _, err := tensorio.LoadSafetensors(rt, path)
	if err != nil {
		t.Fatal(err)
	}
	lrt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	lazy, meta, err := tensorio.OpenSafetensorsLazy(lrt, path)
	if err != nil {
		t.Fatal(err)
	}
	if meta["format"] != "pt" || len(lazy) != 2 {
		t.Fatalf("metadata %v, %d tensors", meta, len(lazy))
	}
	if s := lrt.Stats(); s.LiveBytes != 0 {
		t.Fatalf("%d bytes live after opening the file lazily", s.LiveBytes)
	}
	for i, n := range lazy {
		want, _ := eager[i].Tensor.Bytes()
		// A lazy parameter takes the tensor as a load_state_dict would,
		// and makes one range of it.
		p := lrt.Lazy(n.Tensor.DType(), n.Tensor.Shape()...)
		if err := p.CopyFrom(n.Tensor); err != nil {
			t.Fatal(err)
		}
		part := lrt.Empty(n.Tensor.DType(), 5)
		if err := p.CopyRangeTo(part, 3); err != nil {
			t.Fatal(err)
		}
		got, _ := part.Bytes()
		size := n.Tensor.DType().Size()
		if !bytes.Equal(got, want[3*size:8*size]) || !n.Tensor.IsLazy() {
			t.Fatalf("%s: elements 3 to 8 differ from the eager load's (the file's tensor still lazy: %v)", n.Name, n.Tensor.IsLazy())
		}
		all, err := n.Tensor.Bytes()
		if err != nil || !bytes.Equal(all, want) {
			t.Fatalf("%s: the values differ from the eager load's (%v)", n.Name, err)
		}
	}
	for _, c := range []struct {
		name   string
		damage func()
		want   string
	}{
		{"rewritten", func() {
			if err := os.Chtimes(path, time.Now(), time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}, "changed after it was opened"},
		{"removed", func() { os.Remove(path) }, "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			again, _, err := tensorio.OpenSafetensorsLazy(lrt, path)
			if err != nil {
				t.Fatal(err)
			}
			c.damage()
			err = again[0].Tensor.SumAll().Err()
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "w") {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
		})
	}
}
