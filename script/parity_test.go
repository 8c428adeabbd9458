package script

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// parityFixtures is testdata/parity/fixtures.json, written by gen.py:
// PyTorch 1.13's results per world size, scenario and rank.
type parityFixtures map[string]json.RawMessage

// TestParityWithPyTorch runs the scenarios of PyTorch's own ZeRO and
// DDP-hook tests as zeroeng scripts (testdata/parity/*.js) on 2 and 3
// in-process ranks and compares every rank's losses, final parameters,
// step(closure)'s return values and the consolidated state dict with
// PyTorch's on gloo ranks. Each zeroeng variant of a scenario (layouts,
// stage 2, the overlap schedules) must give PyTorch's numbers.
func TestParityWithPyTorch(t *testing.T) {
	b, err := os.ReadFile("testdata/parity/fixtures.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx parityFixtures
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	dir := parityScripts(t, fx)
	type run struct {
		script, scenario string
		variants         []string
	}
	layouts := []string{"greedy", "bucket-view", "flat", "stage-2"}
	var overlaps []string
	for _, s := range []string{"A", "B"} {
		for _, gav := range []string{"", "-gav"} {
			for _, sh := range []string{"", "-sharded"} {
				overlaps = append(overlaps, "overlap-"+s+gav+sh)
			}
		}
	}
	runs := []run{
		{"zero.js", "zero-sgd", append(slices.Clone(layouts), "js-class")},
		{"zero.js", "zero-sgd-mixed", append(slices.Clone(layouts), "js-class")},
		{"zero.js", "zero-adam", append(slices.Clone(layouts), "overlap-A", "overlap-B")},
		{"zero.js", "zero-adamw", append(slices.Clone(layouts), overlaps...)},
		{"zero.js", "zero-rmsprop", layouts},
		{"zero.js", "zero-adagrad", layouts},
		{"zero.js", "zero-adamax", layouts},
		{"zero.js", "zero-groups", append(slices.Clone(layouts), "overlap-A", "overlap-B-sharded")},
		{"zero.js", "zero-add-group", layouts},
		{"zero.js", "zero-scheduler", append(slices.Clone(layouts), "overlap-A")},
		{"zero.js", "zero-closure", append(slices.Clone(layouts), "overlap-A")},
		{"join.js", "join", []string{"", "ddp"}},
		{"hooks.js", "hook-allreduce", []string{"", "gav"}},
		{"hooks.js", "hook-fp16", []string{"", "gav"}},
		{"hooks.js", "hook-powersgd", []string{"", "gav"}},
	}
	for _, world := range []int{2, 3} {
		var byScenario map[string][]json.RawMessage
		if err := json.Unmarshal(fx[fmt.Sprint(world)], &byScenario); err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			want, ok := byScenario[r.scenario]
			if !ok {
				t.Fatalf("fixtures.json has no scenario %q", r.scenario)
			}
			for _, v := range r.variants {
				name := fmt.Sprintf("n=%d/%s", world, r.scenario)
				args := []string{}
				if r.script != "join.js" {
					args = append(args, r.scenario)
				}
				if v != "" {
					name += "/" + v
					args = append(args, v)
				}
				t.Run(name, func(t *testing.T) {
					got := runParity(t, filepath.Join(dir, r.script), world, args)
					for rank := range world {
						var g, w any
						if err := json.Unmarshal([]byte(got[rank]), &g); err != nil {
							t.Fatalf("rank %d printed %q: %v", rank, got[rank], err)
						}
						if err := json.Unmarshal(want[rank], &w); err != nil {
							t.Fatal(err)
						}
						if err := parityCompare(g, w, "", parityTolerance(r.scenario)); err != nil {
							t.Errorf("rank %d: %v", rank, err)
						}
					}
				})
			}
		}
	}
}

// parityTolerance is how closely a scenario follows PyTorch: float32
// sums in another order after 5 steps, except where the float16
// compression can round a gradient to the neighbouring half.
func parityTolerance(scenario string) float64 {
	if scenario == "hook-fp16" {
		return 1e-4
	}
	return 1e-5
}

// parityScripts copies the scripts of testdata/parity into a temporary
// directory beside a fixtures.json that holds only what they read (the
// model's initial weights and the batch), and returns the directory. Every
// rank of every run require()s fixtures.json, and parsing the whole file,
// whose expected results only the test reads, was three quarters of the
// test's time.
func parityScripts(t *testing.T, fx parityFixtures) string {
	t.Helper()
	dir := t.TempDir()
	inputs := parityFixtures{}
	for _, k := range []string{"init", "x", "y"} {
		v, ok := fx[k]
		if !ok {
			t.Fatalf("fixtures.json has no %q", k)
		}
		inputs[k] = v
	}
	b, err := json.Marshal(inputs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fixtures.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	scripts, err := filepath.Glob(filepath.Join("testdata", "parity", "*.js"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in testdata/parity (%v)", err)
	}
	for _, s := range scripts {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(s)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runParity runs the parity script at path on world in-process ranks
// with args and returns each rank's output line.
func runParity(t *testing.T, path string, world int, args []string) []string {
	t.Helper()
	var out bytes.Buffer
	err := RunJob(context.Background(), path, JobOptions{Ranks: world, Rank: Options{Stdout: &out, Stderr: &out, AutoRelease: true, Args: args}})
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(path), args, err, out.String())
	}
	lines := make([]string, world)
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rank int
		if _, err := fmt.Sscanf(line, "[%d] ", &rank); err != nil || rank < 0 || rank >= world || lines[rank] != "" {
			t.Fatalf("unexpected output line %q\n%s", line, out.String())
		}
		lines[rank] = line[strings.Index(line, " ")+1:]
	}
	for rank, l := range lines {
		if l == "" {
			t.Fatalf("rank %d printed nothing\n%s", rank, out.String())
		}
	}
	return lines
}

// parityCompare compares decoded JSON: numbers within tol (absolute, or
// relative for large ones), everything else exactly; got must have
// exactly want's keys.
func parityCompare(got, want any, at string, tol float64) error {
	switch w := want.(type) {
	case float64:
		g, ok := got.(float64)
		if !ok {
			return fmt.Errorf("%s: %v, PyTorch %v", at, got, w)
		}
		if math.Abs(g-w) > tol*max(1, math.Abs(w)) {
			return fmt.Errorf("%s: %.9g, PyTorch %.9g", at, g, w)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: %v, PyTorch %v", at, got, w)
		}
		for i := range w {
			if err := parityCompare(g[i], w[i], fmt.Sprintf("%s[%d]", at, i), tol); err != nil {
				return err
			}
		}
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v, PyTorch an object", at, got)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return fmt.Errorf("%s: %q, which PyTorch's has not", at, k)
			}
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if _, ok := g[k]; !ok {
				return fmt.Errorf("%s: no %q", at, k)
			}
			if err := parityCompare(g[k], w[k], at+"."+k, tol); err != nil {
				return err
			}
		}
	default:
		if got != want {
			return fmt.Errorf("%s: %v, PyTorch %v", at, got, want)
		}
	}
	return nil
}
