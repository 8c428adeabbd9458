package tensorio

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/idx"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestIdxDecodedOncePerProcess: ranks loading the same idx file at once
// decode it once and each get a tensor of their own; a file changed on
// disk is decoded again.
func TestIdxDecodedOncePerProcess(t *testing.T) {
	src, err := os.ReadFile("../idx/testdata/ubyte.idx.gz")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "labels.idx.gz")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	const ranks = 4
	before := idxDecodes.Load()
	arrays := make([]*idx.Array, ranks)
	tensors := make([]*tensor.Tensor, ranks)
	var wg sync.WaitGroup
	for i := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := readIdxShared(path)
			if err != nil {
				t.Error(err)
				return
			}
			arrays[i] = a // held, as a rank holds it while it copies
			rt := tensor.NewRuntime(cpu.New(cpu.Options{Index: i}), 0)
			tensors[i], err = LoadIdx(rt, path)
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := idxDecodes.Load() - before; n != 1 {
		t.Errorf("%d ranks decoded the file %d times, want once", ranks, n)
	}
	if err := tensors[0].Fill(7); err != nil {
		t.Fatal(err)
	}
	a, _ := tensors[0].Float64s()
	b, _ := tensors[1].Float64s()
	if a[0] != 7 || b[0] == 7 {
		t.Errorf("the ranks' tensors share memory: %v and %v", a[0], b[0])
	}

	// Another file at the same path (another size and time) is read anew.
	raw, err := os.ReadFile("../idx/testdata/ubyte.idx")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	before = idxDecodes.Load()
	if _, err := readIdxShared(path); err != nil {
		t.Fatal(err)
	}
	if n := idxDecodes.Load() - before; n != 1 {
		t.Errorf("a changed file was decoded %d times, want once", n)
	}
}
