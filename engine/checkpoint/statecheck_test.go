package checkpoint

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/zero"
)

// rewriteTensors rewrites the safetensors file name of the checkpoint at
// ckpt through edit, as a hand edit or a buggy writer would, and makes
// the manifest agree with it (size, CRC-32C, block CRCs): the checks
// that must then find the damage are those of the state's contents.
func rewriteTensors(t *testing.T, ckpt, name string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	path := filepath.Join(ckpt, name)
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tensors := edit(slices.Clone(f.Tensors))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	info, err := writeFile(path, func(w io.Writer) error { return safetensors.Write(w, tensors, f.Metadata) })
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

// entryTensor is the index of the first tensor of a state entry.
func entryTensor(t *testing.T, tensors []safetensors.Tensor, entry string) int {
	t.Helper()
	for i, x := range tensors {
		if strings.HasSuffix(x.Name, "."+entry) {
			return i
		}
	}
	t.Fatalf("no %q among %d tensors", entry, len(tensors))
	return -1
}

// setValue sets element 2 of the first tensor of entry to v.
func setValue(entry string, v float32) func(t *testing.T, ts []safetensors.Tensor) []safetensors.Tensor {
	return func(t *testing.T, ts []safetensors.Tensor) []safetensors.Tensor {
		i := entryTensor(t, ts, entry)
		data := slices.Clone(ts[i].Data)
		binary.LittleEndian.PutUint32(data[8:], math.Float32bits(v))
		ts[i].Data = data
		return ts
	}
}

// TestOptimizerStateChecked: an optimizer file whose CRCs agree with the
// manifest but whose state an optimizer cannot use (an entry missing or
// one it does not keep, a negative second moment, NaN) fails verify and
// the load, naming the file, the tensor or parameter and the reason,
// before anything changes: on the rank's own shard, resharded onto
// another world size, and into a plain optimizer. It used to pass both,
// and the first step after the load died on a nil tensor.
func TestOptimizerStateChecked(t *testing.T) {
	greedy := layout{ranks: 2, zero: true}
	flat2 := layout{ranks: 2, zero: true, opts: zero.Options{Partition: "flat"}}
	flat3 := layout{ranks: 3, zero: true, opts: zero.Options{Partition: "flat"}}
	plain := layout{ranks: 1}
	shard0 := "optimizer.rank-00000-of-00002.safetensors"
	cases := []struct {
		name         string
		save, resume layout
		file         string
		edit         func(*testing.T, []safetensors.Tensor) []safetensors.Tensor
		want         string
	}{
		{"exp_avg_sq missing, own shard", greedy, greedy, shard0, func(t *testing.T, ts []safetensors.Tensor) []safetensors.Tensor {
			return slices.Delete(ts, entryTensor(t, ts, "exp_avg_sq"), entryTensor(t, ts, "exp_avg_sq")+1)
		}, `no "exp_avg_sq": AdamW (amsgrad=false) keeps it from the first step (step 2)`},
		{"exp_avg missing, resharded", flat2, flat3, shard0, func(t *testing.T, ts []safetensors.Tensor) []safetensors.Tensor {
			return slices.Delete(ts, entryTensor(t, ts, "exp_avg"), entryTensor(t, ts, "exp_avg")+1)
		}, `no "exp_avg"`},
		{"an entry AdamW does not keep", plain, plain, "optimizer.safetensors", func(t *testing.T, ts []safetensors.Tensor) []safetensors.Tensor {
			x := ts[entryTensor(t, ts, "exp_avg")]
			x.Name = strings.Replace(x.Name, "exp_avg", "momentum_buffer", 1)
			return append(ts, x)
		}, `entry "momentum_buffer", which AdamW (amsgrad=false) does not keep`},
		{"negative exp_avg_sq, own shard", flat2, flat2, shard0, setValue("exp_avg_sq", -0.5),
			`"exp_avg_sq" holds -0.5 at element 2: it is a running sum of squares or magnitudes, never negative`},
		{"NaN exp_avg, into a plain optimizer", flat2, plain, shard0, setValue("exp_avg", float32(math.NaN())),
			`"exp_avg" holds NaN at element 2: optimizer state is finite`},
		{"infinite exp_avg_sq, resharded", greedy, flat3, shard0, setValue("exp_avg_sq", float32(math.Inf(1))),
			`"exp_avg_sq" holds +Inf at element 2`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var ckpt string
			err := onRanks(c.save.ranks, func(rank int, pg dist.ProcessGroup) error {
				rs := job{}.newRank(t, c.save, pg, 0)
				if err := (job{}).train(rs, 0, 2); err != nil {
					return err
				}
				path, err := Save(pg, dir, 2, rs.state(t), SaveOptions{})
				if rank == 0 {
					ckpt = path
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			rewriteTensors(t, ckpt, c.file, func(ts []safetensors.Tensor) []safetensors.Tensor { return c.edit(t, ts) })
			file := filepath.Join(ckpt, c.file)

			_, err = Verify(ckpt)
			if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("verify: %v\nwant an error naming %s and saying %s", err, file, c.want)
			}

			err = onRanks(c.resume.ranks, func(rank int, pg dist.ProcessGroup) error {
				rs := job{}.newRank(t, c.resume, pg, 1)
				before := values(rs.params)
				_, _, err := Restore(pg, rs.rt, dir, rs.state(t))
				if err == nil {
					return fmt.Errorf("the load took the bad state")
				}
				if after := values(rs.params); fmt.Sprint(after) != fmt.Sprint(before) {
					return fmt.Errorf("a failed load changed the parameters (%v)", err)
				}
				// The optimizer starts afresh as it was: a step works.
				if err := (job{}).train(rs, 0, 1); err != nil {
					return fmt.Errorf("a step after the failed load: %v (the load said %v)", err, err)
				}
				return fmt.Errorf("%w", err)
			})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ckpt) {
				t.Errorf("restore: %v\nwant an error naming %s and saying %s", err, ckpt, c.want)
			}
			if strings.Contains(fmt.Sprint(err), "internal error") {
				t.Errorf("restore: %v", err)
			}
		})
	}
}
