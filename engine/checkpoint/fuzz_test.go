package checkpoint

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/zero"
)

// savedFiles saves a small ZeRO checkpoint and returns its folder.
func savedFiles(f *testing.F) string { return savedFilesT(f) }

func savedFilesT(f testing.TB) string {
	dir := f.TempDir()
	var path string
	err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
		rs := job{}.newRank(f, layout{ranks: 2, zero: true, opts: zero.Options{Partition: "flat"}}, pg, 0)
		if err := (job{}).train(rs, 0, 1); err != nil {
			return err
		}
		p, err := Save(pg, dir, 1, rs.state(f), SaveOptions{})
		if rank == 0 {
			path = p
		}
		return err
	})
	if err != nil {
		f.Fatal(err)
	}
	return path
}

// FuzzReadManifest: any manifest gives a manifest or an error, never a
// panic.
func FuzzReadManifest(f *testing.F) {
	b, err := os.ReadFile(filepath.Join(savedFiles(f), ManifestName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"format":"zeroeng-checkpoint","version":1,"world_size":2,"rng":["AA=="]}`))
	f.Add([]byte(`{"format":"zeroeng-checkpoint","version":1,"world_size":1,"files":[{"name":"../x"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseManifest(data, ManifestName)
		if err == nil {
			for _, file := range m.Files {
				if file.Name != filepath.Base(file.Name) || file.Name[0] == '.' {
					t.Fatalf("accepted the file name %q", file.Name)
				}
			}
		}
	})
}

// FuzzStateParts: any optimizer file's header gives, for a plain
// optimizer, state entries whose parts tile their parameters exactly, or
// an error, never a panic.
func FuzzStateParts(f *testing.F) {
	path := savedFiles(f)
	for _, name := range []string{"optimizer.rank-00000-of-00002.safetensors", "optimizer.rank-00001-of-00002.safetensors"} {
		b, err := os.ReadFile(filepath.Join(path, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var rs *rankState
	onRanks(1, func(rank int, pg dist.ProcessGroup) error {
		rs = job{}.newRank(f, layout{ranks: 1}, pg, 0)
		return nil
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := safetensors.ReadHeader(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			return
		}
		_, _, byIndex, err := optimizerLayout(h, &rangeFile{path: "fuzz"}, rs.params)
		if err != nil {
			return
		}
		saved := map[int][]*savedChunk{}
		for idx, c := range byIndex {
			saved[idx] = append(saved[idx], c)
		}
		states, err := stateParts("fuzz", saved, rs.params)
		if err != nil {
			return
		}
		for idx, s := range states {
			for _, name := range s.names {
				at := 0
				for _, part := range s.parts[name] {
					if part.at != at || part.src.numel < 0 {
						t.Fatalf("accepted %q of parameter %d in parts %+v", name, idx, s.parts[name])
					}
					at += part.src.numel
				}
				if at != rs.params[idx].Numel() {
					t.Fatalf("accepted %q of parameter %d covering %d of %d elements", name, idx, at, rs.params[idx].Numel())
				}
			}
		}
	})
}

// FuzzParseSlices: any slice file gives metadata whose buckets and
// parameters fit its tensors, or an error, never a panic.
func FuzzParseSlices(f *testing.F) {
	path := savedSlices(f)
	for _, name := range []string{"model.rank-00000-of-00002.safetensors", "model.rank-00001-of-00002.safetensors"} {
		b, err := os.ReadFile(filepath.Join(path, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := safetensors.ReadHeader(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			return
		}
		meta, err := parseSlices(h, "fuzz")
		if err != nil {
			return
		}
		for _, b := range meta.Buckets {
			st, _ := h.Get(b.Tensor)
			if b.Lo < 0 || b.Hi > b.Numel || st.End-st.Begin != int64(b.Hi-b.Lo)*int64(st.DType.Size()) {
				t.Fatalf("accepted the bucket %+v over tensor %+v", b, st)
			}
			for _, p := range b.Params {
				n, ok := elems(p.Shape)
				if !ok || p.Offset < 0 || p.Offset+n > b.Numel {
					t.Fatalf("accepted the parameter %+v in a bucket of %d", p, b.Numel)
				}
			}
		}
	})
}

// FuzzOptimizerLayout: any optimizer file's header gives chunks whose
// entries fit the optimizer's parameters, or an error.
func FuzzOptimizerLayout(f *testing.F) {
	path := savedFiles(f)
	for _, name := range []string{"optimizer.rank-00000-of-00002.safetensors", "optimizer.rank-00001-of-00002.safetensors"} {
		b, err := os.ReadFile(filepath.Join(path, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var rs *rankState
	onRanks(1, func(rank int, pg dist.ProcessGroup) error {
		rs = job{}.newRank(f, layout{ranks: 1}, pg, 0)
		return nil
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := safetensors.ReadHeader(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			return
		}
		_, chunks, _, err := optimizerLayout(h, &rangeFile{path: "fuzz"}, rs.params)
		if err != nil {
			return
		}
		for _, c := range chunks {
			if c.n >= 0 && (c.at < 0 || len(c.names) != len(c.offsets)) {
				t.Fatalf("accepted the chunk %+v", c)
			}
		}
	})
}

// FuzzOptimizerShard: a rank's optimizer shard of any contents (its CRCs
// made to agree with the manifest, as a buggy writer's would) is refused
// by verify and by the load with an error, or loads into an optimizer
// that then steps; never a panic or an internal error.
func FuzzOptimizerShard(f *testing.F) {
	saved := savedFiles(f)
	const name = "optimizer.rank-00000-of-00002.safetensors"
	b, err := os.ReadFile(filepath.Join(saved, name))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) { loadShardBytes(t, saved, name, data) })
}

// loadShardBytes is FuzzOptimizerShard's body: saved with its shard name
// replaced by data.
func loadShardBytes(t *testing.T, saved, name string, data []byte) {
	{
		dir := t.TempDir()
		ckpt := filepath.Join(dir, filepath.Base(saved))
		if err := os.CopyFS(ckpt, os.DirFS(saved)); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, LatestName), []byte(filepath.Base(saved)+"\n"), 0o644)
		path := filepath.Join(ckpt, name)
		os.Remove(path)
		info, err := writeFile(path, func(w io.Writer) error { _, err := w.Write(data); return err })
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
		if _, err := Verify(ckpt); err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatalf("verify: %v", err)
		}
		l := layout{ranks: 2, zero: true, opts: zero.Options{Partition: "flat"}}
		err = onRanks(2, func(rank int, pg dist.ProcessGroup) error {
			rs := job{}.newRank(t, l, pg, 1)
			if _, _, err := Restore(pg, rs.rt, dir, rs.state(t)); err != nil {
				return err
			}
			return (job{}).train(rs, 1, 2)
		})
		if err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatalf("restore: %v", err)
		}
	}
}
