package script

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/safetensors"
)

// runScript runs src as file name in a fresh runtime in dir, returning
// stdout and the error.
func runScript(t *testing.T, dir, name, src string, opts Options) (string, error) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	opts.Stdout, opts.Stderr = &out, &out
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.RunFile(path)
	return out.String(), err
}

func copyFixtures(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", "readme", n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadmeListing runs the host-API listing of the issue verbatim and
// compares every loss and the saved weights with PyTorch running the same
// loop from the same files (testdata/readme/gen.py).
func TestReadmeListing(t *testing.T) {
	dir := t.TempDir()
	copyFixtures(t, dir, "init.safetensors", "x.npy", "y.npy")
	src, err := os.ReadFile("testdata/readme/train.js")
	if err != nil {
		t.Fatal(err)
	}
	exp, err := safetensors.ReadFile("testdata/readme/expected_final.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	out, err := runScript(t, dir, "train.js", string(src), Options{AutoRelease: true})
	if err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
	var want []float64
	if err := json.Unmarshal([]byte(exp.Metadata["losses"]), &want); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want)+1 {
		t.Fatalf("printed %d lines, want %d losses and one more line:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		f := strings.Fields(lines[i])
		if len(f) != 2 || f[0] != strconv.Itoa(i) {
			t.Fatalf("line %d is %q", i, lines[i])
		}
		got, _ := strconv.ParseFloat(f[1], 64)
		if math.Abs(got-w) > 1e-5*math.Abs(w)+1e-6 {
			t.Errorf("step %d: loss %.9g, PyTorch %.9g", i, got, w)
		}
	}
	if last := lines[len(lines)-1]; last != "0 1 [ [ 1 ], [ 3 ] ]" {
		t.Errorf("last line %q", last)
	}
	got, err := safetensors.ReadFile(filepath.Join(dir, "final.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Tensors) != len(exp.Tensors) {
		t.Fatalf("saved %d tensors, want %d", len(got.Tensors), len(exp.Tensors))
	}
	for _, e := range exp.Tensors {
		g, ok := got.Get(e.Name)
		if !ok {
			t.Fatalf("final.safetensors lacks %s", e.Name)
		}
		gv, ev := f32s(g.Data), f32s(e.Data)
		for i := range ev {
			if math.Abs(float64(gv[i]-ev[i])) > 1e-5*math.Abs(float64(ev[i]))+1e-6 {
				t.Fatalf("%s[%d] = %v, PyTorch %v", e.Name, i, gv[i], ev[i])
			}
		}
	}
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}

// TestJobStopsOtherRanks: when one rank throws, the others, stuck in a loop,
// are interrupted and the job reports the failing rank once.
func TestJobStopsOtherRanks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.js")
	src := `const { dist } = require("zeroeng");
if (dist.rank === 1) throw new Error("rank one gives up");
for (;;) {}
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	start := time.Now()
	err := RunJob(context.Background(), path, JobOptions{Ranks: 3, Rank: Options{Stdout: &out, Stderr: &out}})
	if time.Since(start) > 5*time.Second {
		t.Fatalf("the job took %v to stop", time.Since(start))
	}
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || !strings.Contains(err.Error(), "rank one gives up") || !strings.Contains(err.Error(), "job.js:2") {
		t.Fatalf("job error %v", err)
	}
}
