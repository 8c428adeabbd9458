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

// runJob runs zeroeng run with a metrics file and returns the job's
// printed lines and metrics lines (not the job's own events: the memory
// pools differ), sorted, with what times matches taken out.
func runJob(t *testing.T, work string, times *regexp.Regexp, ranks int, target string, args ...string) (stdout, metrics []string) {
	t.Helper()
	m := filepath.Join(work, "metrics.jsonl")
	os.Remove(m)
	all := append([]string{"run", "--quiet", "--nproc", fmt.Sprint(ranks), "--metrics", m, target, "--"}, args...)
	r := zeroeng(t, work, nil, all...)
	if r.code != 0 {
		t.Fatalf("zeroeng %s: status %d\n%s\n%s", strings.Join(all, " "), r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.Contains(line, `"event":`) {
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

// checkProgram writes the sample program name to work and checks it with
// zeroeng check; its path, or "" when it was not built (a skip).
func checkProgram(t *testing.T, work, name string) string {
	t.Helper()
	var path string
	t.Run("check/"+name, func(t *testing.T) {
		p := filepath.Join(work, name+".wasm")
		if err := os.WriteFile(p, hookbuild.SampleProgram(t, name), 0o644); err != nil {
			t.Fatal(err)
		}
		r := zeroeng(t, work, nil, "check", p)
		if r.code != 0 || !strings.Contains(r.stdout, "zeroeng program ABI v1") || !strings.HasSuffix(strings.TrimSpace(r.stdout), "ok") {
			t.Fatalf("zeroeng check %s: status %d\n%s\n%s", name, r.code, r.stdout, r.stderr)
		}
		path = p
	})
	return path
}

// countSteps is the number of metrics lines of training steps.
func countSteps(metrics []string) int {
	n := 0
	for _, line := range metrics {
		if strings.Contains(line, `"step":`) {
			n++
		}
	}
	return n
}

// TestProgramSamples: the sample training programs of samples/programs
// that are samples/fashion_mnist.js — in C over the C SDK, in Go over the
// Go SDK and in Rust over the Rust SDK — pass zeroeng check, take the
// script's flags, and train as the script does: for a few steps of two
// epochs, on one rank and on two (DDP, and ZeRO with its step overlapped
// with backward), and in bfloat16, every step's loss in the metrics file
// is the script's bit for bit (the file writes each float64 in the
// shortest form that reads back as it), and so are the printed lines but
// for the training time.
func TestProgramSamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sample programs (clang for wasm32-wasi, Go for wasip1, rustc for wasm32-wasi) and trains Fashion-MNIST: make test-all")
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
	times := regexp.MustCompile(`"time":[0-9.]+,|,"train_s":[0-9.e+-]+|\(training [0-9.]+s\)`)
	run := func(t *testing.T, target string, ranks int, flags ...string) (stdout, metrics []string) {
		t.Helper()
		return runJob(t, work, times, ranks, target, append([]string{"--data", data}, flags...)...)
	}

	var names []string // samples/fashion_mnist.js's twins
	programs := map[string]string{}
	for _, name := range hookbuild.ProgramSamples() {
		if strings.HasPrefix(name, "fashion_mnist_") {
			names = append(names, name)
			programs[name] = checkProgram(t, work, name)
		}
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
		steps := countSteps(wantMetrics)
		if steps == 0 || len(wantOut) < 3 {
			t.Fatalf("%s: the script logged %d steps and printed\n%s", what, steps, strings.Join(wantOut, "\n"))
		}
		for _, name := range names {
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
	for _, name := range names {
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

// TestProgramSampleGPT: samples/programs/rust/gpt.rs, samples/gpt.js as a
// Rust program whose modules' forwards are Rust closures (ABI 1.1's
// functions), passes zeroeng check and trains the tiny GPT as the script
// does, every step's loss, learning rate and gradient norm bit for bit, on
// two ranks: under ZeRO stage 3 (the model built inside zero.init's
// builder, each block a zero.fullyShard unit), and under DDP with
// activation checkpointing (nn.utils.checkpointWrapper, whose backward
// runs the block's Rust forward again). The printed lines are the
// script's but for the times. The program's checkpoint has the script's
// names: the script resumes from its step 10 and trains steps 11 to 20 as
// the program did. Its flag errors are the script's.
func TestProgramSampleGPT(t *testing.T) {
	if testing.Short() {
		t.Skip("builds samples/programs/rust/gpt.rs (rustc for wasm32-wasi) and trains the tiny GPT on 2 ranks: make test-all")
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
	data := filepath.Join(docs, "*.md") // a program reads no files of its own: the same pattern for both
	// The times, and what follows from them; and the step's peak, which
	// differs by 8 bytes (one float64 scalar living a step longer on one
	// side) from step 11 on, not traced yet. The activations' memory is
	// the script's.
	times := regexp.MustCompile(`"time":[0-9.]+,|,"(tokens_per_s|mfu|comm_ms|mem_peak|step_ms_median)":[^,}]+`)
	for _, c := range []struct {
		name  string
		flags []string
	}{
		{"zero3", []string{"--zero", "3"}},
		{"checkpoint-activations", []string{"--checkpoint-activations"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			flags := append([]string{"--steps", "20", "--data", data}, c.flags...)
			progCkpt := filepath.Join(work, c.name+"-program")
			if c.name == "zero3" {
				flags = append(flags, "--checkpoint-every", "10", "--keep", "0")
			}
			ckptFlags := func(dir string) []string {
				if c.name != "zero3" {
					return flags
				}
				return append(slices.Clone(flags), "--checkpoint", dir)
			}
			wantOut, wantMetrics := runJob(t, work, times, 2, script, ckptFlags(filepath.Join(work, c.name+"-script"))...)
			if n := countSteps(wantMetrics); n != 40 || len(wantOut) != 6 {
				t.Fatalf("the script logged %d steps (want 20 on each of 2 ranks) and printed\n%s", n, strings.Join(wantOut, "\n"))
			}
			gotOut, gotMetrics := runJob(t, work, times, 2, prog, ckptFlags(progCkpt)...)
			if !slices.Equal(gotMetrics, wantMetrics) {
				t.Fatalf("the program's metrics\n%s\nthe script's\n%s", strings.Join(gotMetrics, "\n"), strings.Join(wantMetrics, "\n"))
			}
			if !slices.Equal(gotOut, wantOut) {
				t.Fatalf("the program printed\n%s\nthe script\n%s", strings.Join(gotOut, "\n"), strings.Join(wantOut, "\n"))
			}
			t.Logf("20 steps on 2 ranks %v: every loss the script's, the last %s", c.flags, wantMetrics[slices.IndexFunc(wantMetrics, func(l string) bool { return strings.Contains(l, `"step":20,`) })])
			if c.name != "zero3" {
				return
			}
			// The script resumes from the program's checkpoint of step 10.
			if err := os.RemoveAll(filepath.Join(progCkpt, "step-00000020")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(progCkpt, "latest"), []byte("step-00000010"), 0o644); err != nil {
				t.Fatal(err)
			}
			resumedOut, resumed := runJob(t, work, times, 2, script, ckptFlags(progCkpt)...)
			if n := countSteps(resumed); n != 20 || !slices.ContainsFunc(resumedOut, func(l string) bool {
				return strings.Contains(l, "gpt: resumed from") && strings.Contains(l, "(step 10, 2 ranks)")
			}) {
				t.Fatalf("the script resumed from the program's checkpoint: %d steps logged, printed\n%s", n, strings.Join(resumedOut, "\n"))
			}
			for _, line := range resumed {
				if strings.Contains(line, `"step":`) && !slices.Contains(gotMetrics, line) {
					t.Fatalf("resumed from the program's step 10, the script logged\n%s\nwhich is not the program's", line)
				}
			}
		})
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--zero", "5"}, 2, "--zero is 0, 1, 2 or 3"},
		{[]string{"--steps", "x"}, 2, "--steps takes a non-negative number"},
		{[]string{"--config", "huge"}, 2, "--config is one of tiny, bench, gpt2"},
		{[]string{"--fp8"}, 2, "unknown argument --fp8"},
		{[]string{"--seq-len", "65"}, 2, "--seq-len 65 exceeds the tiny model's 64 positions"},
		{[]string{"--checkpoint-every", "5"}, 2, "--checkpoint-every needs --checkpoint DIR"},
		{[]string{"--data", filepath.Join(work, "nothing-*.bin")}, 1, "nothing-*.bin"},
	} {
		r := zeroeng(t, work, nil, append([]string{"run", prog, "--"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("gpt_rust %v: status %d, want %d and %q in\n%s", c.args, r.code, c.code, c.want, r.stderr)
		}
	}
	if r := zeroeng(t, work, nil, "run", prog, "--", "--help"); r.code != 0 || !strings.Contains(r.stdout, "usage: zeroeng run ") || !strings.Contains(r.stdout, "--checkpoint-activations") {
		t.Errorf("gpt_rust --help: status %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
