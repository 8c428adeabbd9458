package checkpoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/zero"
)

// savedFiles saves a small ZeRO checkpoint and returns its folder.
func savedFiles(f *testing.F) string {
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

// FuzzParseOptimizer: any optimizer file gives chunks that fit the
// optimizer's parameters, or an error.
func FuzzParseOptimizer(f *testing.F) {
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
		_, chunks, err := parseOptimizer(data, "fuzz.safetensors", rs.params)
		if err != nil {
			return
		}
		asm := zero.NewAssembly(rs.rt, rs.params)
		defer asm.Release()
		if err := asm.Add("fuzz", chunks); err == nil {
			asm.Complete()
		}
	})
}
