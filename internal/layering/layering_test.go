package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/zeroeng/zeroeng"

// floors places every package of the module, by the longest prefix of its
// path (relative to the module root) that the table names. A package may
// import only packages whose floor is the same as its own or lower. The
// order inside engine/ is that of what each floor builds on: the plain
// types and kernels, the device contract and the file formats, the
// tensor, what is built on tensors (modules, collectives, data), training
// (optimizers, DDP), and checkpoints, which save all of it.
var floors = []struct {
	floor    int
	prefixes []string
}{
	// Shared helpers that know nothing of the engine.
	{0, []string{"internal"}},
	// engine/: plain types, kernels, tracing and the job's environment.
	{1, []string{"engine/dtype", "engine/cpu/parallel", "engine/cpu/vmath", "engine/cpu/gemm", "engine/cpu/cblas", "engine/cpu/blas", "engine/trace", "engine/jobenv", "engine/rendezvous"}},
	// engine/: the device contract and the CPU device, the generator,
	// the file formats.
	{2, []string{"engine/device", "engine/cpu", "engine/rand", "engine/npy", "engine/safetensors", "engine/idx", "engine/torchfile"}},
	{3, []string{"engine/tensor"}},
	// engine/: what is built on tensors: modules, functional ops,
	// collectives, tensor files and token data.
	{4, []string{"engine/nn", "engine/dist", "engine/tensorio", "engine/tokens"}},
	// engine/: training: optimizers, DDP, and the types a sharded
	// optimizer's state crosses into checkpoints in.
	{5, []string{"engine/optim", "engine/ddp", "engine/checkpoint/shard"}},
	{6, []string{"engine/checkpoint"}},
	// Back ends: the CUDA device and the collectives over NCCL and MPI
	// (each implements an engine/ interface: device.Device,
	// dist.ProcessGroup).
	{7, []string{"gpu", "nccl", "mpi"}},
	{8, []string{"zero"}},
	{9, []string{"hooks"}},
	{10, []string{"script"}},
	// Programs over the public API: samples, benchmarks, tools.
	{11, []string{"samples", "bench", "tools"}},
	{12, []string{"cmd"}},
}

// floorOf is rel's floor, or -1 when the table does not place it.
func floorOf(rel string) int {
	best, floor := -1, -1
	for _, f := range floors {
		for _, p := range f.prefixes {
			if (rel == p || strings.HasPrefix(rel, p+"/")) && len(p) > best {
				best, floor = len(p), f.floor
			}
		}
	}
	return floor
}

// imports lists, for each package directory of the module (relative to
// its root), the module's packages its non-test files import, over every
// file whatever its build constraints (a windows.go counts too). Folders
// with a go.mod of their own (the SDKs, the samples' guests) are other
// modules, and testdata is not code.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root {
				if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		dir = filepath.ToSlash(dir)
		if _, ok := out[dir]; !ok {
			out[dir] = nil
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if rel, ok := strings.CutPrefix(p, module+"/"); ok && !slices.Contains(out[dir], rel) {
				out[dir] = append(out[dir], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNoArrowBackUp fails when a package imports one above its floor, or
// when a package is in no floor (a new top-level folder: place it in the
// table, and say why in RATIONALE.md).
func TestNoArrowBackUp(t *testing.T) {
	graph := imports(t, filepath.Join("..", ".."))
	if len(graph) < 20 || graph["zero"] == nil {
		t.Fatalf("found %d packages (zero imports %q): is the test run from internal/layering?", len(graph), graph["zero"])
	}
	for _, pkg := range slices.Sorted(maps.Keys(graph)) {
		from := floorOf(pkg)
		if from < 0 {
			if pkg != "." {
				t.Errorf("%s is in no floor of the table", pkg)
			}
			continue
		}
		for _, im := range graph[pkg] {
			to := floorOf(im)
			switch {
			case to < 0:
				t.Errorf("%s imports %s, which is in no floor of the table", pkg, im)
			case to > from:
				t.Errorf("%s (floor %d) imports %s (floor %d): a lower floor must not know a higher one", pkg, from, im, to)
			}
		}
	}
}

// TestFloorsTable checks the table itself: each prefix once.
func TestFloorsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range floors {
		for _, p := range f.prefixes {
			if seen[p] {
				t.Errorf("%s is in the table twice", p)
			}
			seen[p] = true
		}
	}
}

// TestFloorOf checks the longest prefix wins, and that the edges the
// table exists to forbid are upward: engine/checkpoint once imported zero
// (for *zero.Optimizer and zero.Chunk), which the ShardedOptimizer
// interface and engine/checkpoint/shard replaced.
func TestFloorOf(t *testing.T) {
	for _, c := range []struct {
		pkg  string
		want int
	}{
		{"engine/cpu", 2}, {"engine/cpu/gemm", 1}, {"engine/checkpoint", 6},
		{"engine/checkpoint/shard", 5}, {"gpu/cuda", 7}, {"zero", 8},
		{"cmd/zeroeng", 12}, {"internal/fileio", 0}, {"zeroish", -1},
	} {
		if got := floorOf(c.pkg); got != c.want {
			t.Errorf("floorOf(%q) = %d, want %d", c.pkg, got, c.want)
		}
	}
	for _, up := range [][2]string{{"engine/checkpoint", "zero"}, {"engine/tensor", "gpu"}, {"zero", "script"}, {"hooks/wasm", "script"}, {"engine/dist", "nccl"}} {
		if floorOf(up[0]) >= floorOf(up[1]) {
			t.Errorf("%s → %s is not upward in the table", up[0], up[1])
		}
	}
}
