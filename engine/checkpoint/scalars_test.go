package checkpoint

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/zero"
)

// rewriteChunks rewrites the chunk metadata of the optimizer file name of
// the checkpoint at ckpt through edit, and makes the manifest agree.
func rewriteChunks(t *testing.T, ckpt, name string, edit func([]chunkMeta)) {
	t.Helper()
	path := filepath.Join(ckpt, name)
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var meta optimizerMeta
	if err := json.Unmarshal([]byte(f.Metadata[optimizerMetaKey]), &meta); err != nil {
		t.Fatal(err)
	}
	edit(meta.Chunks)
	b, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]string{optimizerMetaKey: string(b)}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	info, err := writeFile(path, func(w io.Writer) error { return safetensors.Write(w, f.Tensors, md) })
	if err != nil {
		t.Fatal(err)
	}
	editManifest(t, ckpt, func(m *Manifest) {
		for i := range m.Files {
			if m.Files[i].Name == name {
				m.Files[i] = info
			}
		}
	})
}

// saveNAdam saves the NAdam job of l after steps [0, 3) and returns the
// checkpoint's path and the parameters of the uninterrupted run after
// step 6.
func saveNAdam(t *testing.T, l layout) (string, [][]float64) {
	t.Helper()
	j := job{nadam: true}
	dir := t.TempDir()
	var ckpt string
	var want [][]float64
	err := onRanks(l.ranks, func(rank int, pg dist.ProcessGroup) error {
		rs := j.newRank(t, l, pg, 0)
		if err := j.train(rs, 0, 3); err != nil {
			return err
		}
		path, err := Save(pg, dir, 3, rs.state(t), SaveOptions{})
		if err != nil {
			return err
		}
		if err := j.train(rs, 3, 6); err != nil {
			return err
		}
		if rank == 0 {
			ckpt, want = path, values(rs.params)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ckpt, want
}

// TestNAdamScalarsSaved: every chunk of a NAdam checkpoint records its
// state's mu_product. A checkpoint without them (written before chunks
// carried scalars) still verifies and loads under any layout, NAdam then
// recomputing mu_product from the step count as it did: under a β₁ that
// changed during the run that differs from the uninterrupted run, which
// is why they are saved.
func TestNAdamScalarsSaved(t *testing.T) {
	flat2 := layout{ranks: 2, zero: true, opts: zero.Options{Partition: "flat"}}
	ckpt, want := saveNAdam(t, flat2)
	names := []string{"optimizer.rank-00000-of-00002.safetensors", "optimizer.rank-00001-of-00002.safetensors"}
	for _, name := range names {
		rewriteChunks(t, ckpt, name, func(cs []chunkMeta) {
			for _, c := range cs {
				if v, ok := c.Scalars["mu_product"]; !ok || !(v > 0 && v < 1) {
					t.Errorf("%s: chunk of parameter %d at %d has scalars %v", name, c.Index, c.At, c.Scalars)
				}
			}
			for i := range cs {
				cs[i].Scalars = nil // as an older checkpoint
			}
		})
	}
	if _, err := Verify(ckpt); err != nil {
		t.Fatalf("verify of a checkpoint without scalars: %v", err)
	}
	for _, l := range []layout{flat2, {ranks: 3, zero: true, opts: zero.Options{Partition: "flat"}}, {ranks: 1}} {
		t.Run(l.String(), func(t *testing.T) {
			err := onRanks(l.ranks, func(rank int, pg dist.ProcessGroup) error {
				j := job{nadam: true}
				rs := j.newRank(t, l, pg, 0.5)
				if _, _, err := Restore(pg, rs.rt, filepath.Dir(ckpt), rs.state(t)); err != nil {
					return err
				}
				if err := j.train(rs, 3, 6); err != nil {
					return err
				}
				if got := values(rs.params); slices.EqualFunc(got, want, slices.Equal) {
					return fmt.Errorf("recomputing mu_product under a changed β₁ matched the uninterrupted run: the test shows nothing")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNAdamScalarsChecked: a chunk whose scalars no run can have (a
// negative mu_product, one above 1, a scalar NAdam does not keep) fails
// verify and the load, naming the file and the reason, on the rank's own
// shard, resharded, and into a plain optimizer.
func TestNAdamScalarsChecked(t *testing.T) {
	flat2 := layout{ranks: 2, zero: true, opts: zero.Options{Partition: "flat"}}
	flat3 := layout{ranks: 3, zero: true, opts: zero.Options{Partition: "flat"}}
	greedy := layout{ranks: 2, zero: true}
	plain := layout{ranks: 1}
	shard0 := "optimizer.rank-00000-of-00002.safetensors"
	cases := []struct {
		name         string
		save, resume layout
		file         string
		scalars      map[string]float64
		want         string
	}{
		{"negative, own shard", flat2, flat2, shard0, map[string]float64{"mu_product": -0.25}, `"mu_product" is -0.25: it is the product of NAdam's momentum coefficients`},
		{"above 1, resharded", greedy, flat3, shard0, map[string]float64{"mu_product": 1.5}, `"mu_product" is 1.5`},
		{"unknown, into a plain optimizer", flat2, plain, shard0, map[string]float64{"mu_product": 0.5, "velocity": 0.5}, `unknown scalar "velocity" for NAdam`},
		{"plain file, plain optimizer", plain, plain, "optimizer.safetensors", map[string]float64{"mu_product": -1}, `"mu_product" is -1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ckpt, _ := saveNAdam(t, c.save)
			rewriteChunks(t, ckpt, c.file, func(cs []chunkMeta) { cs[0].Scalars = c.scalars })
			file := filepath.Join(ckpt, c.file)
			if _, err := Verify(ckpt); err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("verify: %v\nwant an error naming %s and saying %s", err, file, c.want)
			}
			err := onRanks(c.resume.ranks, func(rank int, pg dist.ProcessGroup) error {
				rs := job{nadam: true}.newRank(t, c.resume, pg, 1)
				_, _, err := Restore(pg, rs.rt, filepath.Dir(ckpt), rs.state(t))
				if err == nil {
					return fmt.Errorf("the load took the bad scalars")
				}
				return err
			})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ckpt) {
				t.Errorf("restore: %v\nwant an error naming %s and saying %s", err, ckpt, c.want)
			}
		})
	}
}
