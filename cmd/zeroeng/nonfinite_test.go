package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/checkpoint"
)

// TestSamplesStopOnNonFiniteLoss: gpt.js and llama.js trained with a
// learning rate of 1e30 (finite parameters after step 1, NaN ones a step
// or two later) stop with status 1 after --max-nonfinite steps of a NaN
// loss, naming the step and the loss, print no result and save no
// checkpoint of that step; the checkpoints they saved of NaN parameters
// on the way did not retire step 1's, whose manifest says it is finite,
// and which the run resumes from as the save's warning says.
func TestSamplesStopOnNonFiniteLoss(t *testing.T) {
	stopped := regexp.MustCompile(`(gpt|llama)\.js: the loss is (NaN|-?Infinity) at step (\d+), and has not been finite since step (\d+) \(3 steps in a row, --max-nonfinite 3\): stopping without saving step (\d+)\n`)
	for _, c := range []struct {
		script string
		ranks  int
		flags  []string
	}{
		{"gpt", 1, nil},
		{"gpt", 2, []string{"--zero", "3"}}, // each rank's slices checked
		{"llama", 1, nil},
	} {
		t.Run(fmt.Sprintf("%s/%d-ranks%s", c.script, c.ranks, strings.Join(c.flags, "")), func(t *testing.T) {
			dir := t.TempDir()
			run := func(args ...string) result {
				all := append([]string{"run", "--quiet", "--nproc", fmt.Sprint(c.ranks), "samples/" + c.script + ".js", "--",
					"--warmup", "0", "--eval-every", "100", "--checkpoint", dir, "--checkpoint-every", "1", "--keep", "2"}, c.flags...)
				return zeroeng(t, "../..", nil, append(all, args...)...)
			}
			r := run("--steps", "20", "--lr", "1e30", "--max-nonfinite", "3")
			m := stopped.FindStringSubmatch(r.stderr)
			if r.code != 1 || m == nil {
				t.Fatalf("status %d, want 1 and the stop in stderr:\n%s", r.code, r.stderr)
			}
			step, _ := strconv.Atoi(m[3])
			since, _ := strconv.Atoi(m[4])
			if m[1] != c.script || step-since != 2 || m[5] != m[3] {
				t.Errorf("the stop names the wrong script or steps: %q", m[0])
			}
			if strings.Contains(r.stdout, `"workload"`) {
				t.Errorf("a stopped run printed a result:\n%s", r.stdout)
			}
			if _, err := os.Stat(filepath.Join(dir, checkpoint.StepName(int64(step)))); !os.IsNotExist(err) {
				t.Errorf("step %d, the one it stopped at, was saved (%v)", step, err)
			}
			if latest, err := checkpoint.Latest(dir); err != nil || filepath.Base(latest) != checkpoint.StepName(int64(step-1)) {
				t.Errorf("latest is %q (%v), want the newest save, step %d", latest, err, step-1)
			}
			first := filepath.Join(dir, checkpoint.StepName(1))
			if finite, known, err := checkpoint.ParamsFinite(first); !finite || !known || err != nil {
				t.Fatalf("ParamsFinite(%s) = %v, %v, %v; want the finite checkpoint kept", first, finite, known, err)
			}
			resume := fmt.Sprintf("kept step-00000001, the newest checkpoint with finite ones, beyond keep 2. %s names ", filepath.Join(dir, "latest"))
			if !strings.Contains(r.stderr, resume) || !strings.Contains(r.stderr, "run: echo step-00000001 > "+filepath.Join(dir, "latest")) {
				t.Fatalf("no warning that step 1 was kept, and how to resume from it:\n%s", r.stderr)
			}
			// As the warning says: the run resumes from step 1.
			if err := os.WriteFile(filepath.Join(dir, "latest"), []byte("step-00000001\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if r := run("--steps", "1"); r.code != 0 || !strings.Contains(r.stdout, "(step 1, ") || !strings.Contains(r.stdout, "nothing left to train") {
				t.Errorf("resuming from step 1: status %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// TestProgramSampleGPTStopsOnNonFiniteLoss: gpt.js's Rust twin takes
// --max-nonfinite and stops as the script does, at the same step with the
// same message, leaving the same checkpoints.
func TestProgramSampleGPTStopsOnNonFiniteLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("builds samples/programs/rust/gpt.rs (rustc for wasm32-wasi): make test-all")
	}
	work := t.TempDir()
	prog := checkProgram(t, work, "gpt_rust")
	if prog == "" {
		t.Skip("gpt_rust was not built (see check/gpt_rust)")
	}
	script, err := filepath.Abs("../../samples/gpt.js")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Abs("../../docs")
	if err != nil {
		t.Fatal(err)
	}
	stop := regexp.MustCompile(`(?m)^\S+: (the loss is .*)$`)
	var want struct{ stop, dirs string }
	for i, target := range []string{script, prog} {
		dir := filepath.Join(work, fmt.Sprint("ckpt", i))
		r := zeroeng(t, work, nil, "run", "--quiet", target, "--", "--data", filepath.Join(docs, "*.md"), "--steps", "20", "--lr", "1e30",
			"--warmup", "0", "--eval-every", "100", "--checkpoint", dir, "--checkpoint-every", "1", "--keep", "2", "--max-nonfinite", "3")
		m := stop.FindStringSubmatch(r.stderr)
		if r.code != 1 || m == nil {
			t.Fatalf("%s: status %d, want 1 and the stop in stderr:\n%s", filepath.Base(target), r.code, r.stderr)
		}
		var names []string
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		got := struct{ stop, dirs string }{m[1], strings.Join(names, " ")}
		if i == 0 {
			want = got
		} else if got != want {
			t.Errorf("the program stopped with %q, leaving %s; the script with %q, leaving %s", got.stop, got.dirs, want.stop, want.dirs)
		}
		if r := zeroeng(t, work, nil, "run", target, "--", "--max-nonfinite", "1.5"); r.code != 2 || !strings.Contains(r.stderr, "--max-nonfinite takes a whole number") {
			t.Errorf("%s --max-nonfinite 1.5: status %d\n%s", filepath.Base(target), r.code, r.stderr)
		}
	}
}
