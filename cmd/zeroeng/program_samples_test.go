package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// TestProgramSamples: the sample training programs of samples/programs —
// samples/fashion_mnist.js in C over the C SDK and in Go over the Go SDK —
// pass zeroeng check, take the script's flags, and train as the script
// does: for a few steps of two epochs, on one rank and on two (DDP, and
// ZeRO with its step overlapped with backward), and in bfloat16, every
// step's loss in the metrics file is the script's bit for bit (the file
// writes each float64 in the shortest form that reads back as it), and so
// are the printed lines but for the training time.
func TestProgramSamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sample programs (clang for wasm32-wasi, Go for wasip1) and trains Fashion-MNIST: make test-all")
	}
	data := os.Getenv("ZEROENG_FMNIST_DIR")
	if data == "" {
		data = fmnistDir
	}
	if _, err := os.Stat(filepath.Join(data, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST is not installed in %s (apt-get install dataset-fashion-mnist, or set ZEROENG_FMNIST_DIR)", data)
	}
	work := t.TempDir()
	script, err := filepath.Abs("../../samples/fashion_mnist.js")
	if err != nil {
		t.Fatal(err)
	}
	// run trains target and returns its output and metrics, sorted, with
	// the times taken out.
	run := func(t *testing.T, target string, ranks int, flags ...string) (stdout, metrics []string) {
		t.Helper()
		m := filepath.Join(work, "metrics.jsonl")
		os.Remove(m)
		args := append([]string{"run", "--quiet", "--nproc", fmt.Sprint(ranks), "--metrics", m, target, "--", "--data", data}, flags...)
		r := zeroeng(t, work, nil, args...)
		if r.code != 0 {
			t.Fatalf("zeroeng %s: status %d\n%s\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		times := regexp.MustCompile(`"time":[0-9.]+,|,"train_s":[0-9.e+-]+|\(training [0-9.]+s\)`)
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if !strings.Contains(line, `"event":`) { // the job's own lines: the memory pools differ
				metrics = append(metrics, times.ReplaceAllString(line, ""))
			}
		}
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			stdout = append(stdout, times.ReplaceAllString(line, ""))
		}
		slices.Sort(metrics)
		slices.Sort(stdout)
		return stdout, metrics
	}

	programs := map[string]string{}
	for _, name := range hookbuild.ProgramSamples() {
		t.Run("check/"+name, func(t *testing.T) {
			path := filepath.Join(work, name+".wasm")
			if err := os.WriteFile(path, hookbuild.SampleProgram(t, name), 0o644); err != nil {
				t.Fatal(err)
			}
			r := zeroeng(t, work, nil, "check", path)
			if r.code != 0 || !strings.Contains(r.stdout, "zeroeng program ABI v1") || !strings.HasSuffix(strings.TrimSpace(r.stdout), "ok") {
				t.Fatalf("zeroeng check %s: status %d\n%s\n%s", name, r.code, r.stdout, r.stderr)
			}
			programs[name] = path
		})
	}

	for _, c := range []struct {
		ranks int
		flags []string
	}{
		{1, []string{"--epochs", "2", "--steps", "4"}},
		{2, []string{"--epochs", "2", "--steps", "4"}},
		{2, []string{"--epochs=1", "--steps=3", "--zero", "overlap"}},
		{1, []string{"--epochs", "1", "--steps", "3", "--bf16"}},
	} {
		what := fmt.Sprintf("%d ranks %s", c.ranks, strings.Join(c.flags, " "))
		wantOut, wantMetrics := run(t, script, c.ranks, c.flags...)
		steps := 0
		for _, line := range wantMetrics {
			if strings.Contains(line, `"step":`) {
				steps++
			}
		}
		if steps == 0 || len(wantOut) < 3 {
			t.Fatalf("%s: the script logged %d steps and printed\n%s", what, steps, strings.Join(wantOut, "\n"))
		}
		for _, name := range hookbuild.ProgramSamples() {
			t.Run(strings.ReplaceAll(what, " ", "_")+"/"+name, func(t *testing.T) {
				prog := programs[name]
				if prog == "" {
					t.Skip("not built (see check/" + name + ")")
				}
				gotOut, gotMetrics := run(t, prog, c.ranks, c.flags...)
				if !slices.Equal(gotMetrics, wantMetrics) {
					t.Fatalf("%s: the program's metrics\n%s\nthe script's\n%s", what, strings.Join(gotMetrics, "\n"), strings.Join(wantMetrics, "\n"))
				}
				if !slices.Equal(gotOut, wantOut) {
					t.Fatalf("%s: the program printed\n%s\nthe script\n%s", what, strings.Join(gotOut, "\n"), strings.Join(wantOut, "\n"))
				}
				first := slices.IndexFunc(wantMetrics, func(l string) bool { return strings.Contains(l, `"step":1,`) })
				t.Logf("%s: %d steps' losses bit for bit the script's, the first %s", what, steps, wantMetrics[first])
			})
		}
	}

	// Flags they do not take, and data that is not there: the script's
	// statuses and messages.
	for _, name := range hookbuild.ProgramSamples() {
		prog := programs[name]
		if prog == "" {
			continue
		}
		for _, c := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"--zero", "3"}, 2, "--zero takes 1 (sharded optimizer state), 2 (sharded gradients too) or overlap"},
			{[]string{"--fp8"}, 2, "unknown argument --fp8"},
			{[]string{"--epochs", "0"}, 2, "--epochs and --steps a positive integer"},
			{[]string{"--steps", "x"}, 2, "--epochs and --steps a positive integer"},
			{[]string{"--data", work}, 1, "apt-get install dataset-fashion-mnist"},
		} {
			r := zeroeng(t, work, nil, append([]string{"run", prog, "--"}, c.args...)...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s %v: status %d, want %d and %q in\n%s", name, c.args, r.code, c.code, c.want, r.stderr)
			}
		}
		if r := zeroeng(t, work, nil, "run", prog, "--", "--help"); r.code != 0 || !strings.Contains(r.stdout, "usage: zeroeng run ") {
			t.Errorf("%s --help: status %d\n%s%s", name, r.code, r.stdout, r.stderr)
		}
	}
}
