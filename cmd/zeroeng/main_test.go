package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/gpu"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// The tests run the real binary, built once, as a user would: exit
// statuses, what reaches stderr and signals are properties of the process.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "zeroeng-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "zeroeng")
	// Without DWARF (-w), which no test reads and which is half of the
	// link; the symbol table and what tracebacks use stay.
	build := exec.Command("go", "build", "-ldflags=-w", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building zeroeng: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// zeroeng runs the binary in dir with args and extra environment
// variables (every ZEROENG_* variable of the test's own environment is
// removed first, so that only the test's settings count).
func zeroeng(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("zeroeng %v: %v", args, err)
	}
	return r
}

// started is the binary running in the background: its stdout line by
// line, its stderr collected.
type started struct {
	cmd    *exec.Cmd
	lines  *bufio.Scanner
	stderr *bytes.Buffer
}

// start starts the binary in dir with args and extra environment
// variables (as zeroeng does) and kills it when the test ends.
func start(t *testing.T, dir string, env []string, args ...string) started {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return started{cmd, bufio.NewScanner(stdout), &stderr}
}

// drain reads the rest of stdout in the background, so that the process
// never blocks writing it.
func (s started) drain() {
	go func() {
		for s.lines.Scan() {
		}
	}()
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); isLauncherVar(k) {
			continue // the tests start their own jobs
		}
		if !strings.HasPrefix(kv, "ZEROENG_") || strings.HasPrefix(kv, "ZEROENG_BLAS=") {
			env = append(env, kv)
		}
	}
	return env
}

// scriptDir writes the named scripts into a new directory.
func scriptDir(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	okJS     = "console.log('hello', process.argv.slice(2).join(','));\n"
	throwJS  = "function f() {\n  throw new Error(\"boom\");\n}\nf();\n"
	syntaxJS = "const a = 1;\nlet b = ;\n"
	shapeJS  = `const { tensor } = require("zeroeng");
const a = tensor.randn([8, 3]);
function g(x) { return x.matmul(tensor.randn([4, 5])); }
g(a);
`
	exitJS = "console.log('bye');\nprocess.exit(3);\nconsole.log('not reached');\n"
	loopJS = "console.log('start');\nwhile (true) {}\n"
)

func TestExitStatus(t *testing.T) {
	dir := scriptDir(t, map[string]string{"ok.js": okJS, "throw.js": throwJS, "syntax.js": syntaxJS,
		"shape.js": shapeJS, "exit.js": exitJS, "exit0.js": "process.exit(0);\n"})
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		msg  string // in stderr
	}{
		{"success", nil, []string{"run", "ok.js"}, 0, ""},
		{"thrown error", nil, []string{"run", "throw.js"}, 1, "Error: boom"},
		{"syntax error", nil, []string{"run", "syntax.js"}, 1, "SyntaxError"},
		{"engine error", nil, []string{"run", "shape.js"}, 1, "matmul"},
		{"process.exit", nil, []string{"run", "exit.js"}, 3, ""},
		{"process.exit(0)", nil, []string{"run", "exit0.js"}, 0, ""},
		{"no script", nil, []string{"run"}, 2, "zeroeng run samples/quickstart.js"},
		{"missing script", nil, []string{"run", "nonexistent.js"}, 2, "nonexistent.js"},
		{"unknown flag", nil, []string{"run", "--frobnicate", "ok.js"}, 2, "frobnicate"},
		{"unknown command", nil, []string{"frobnicate"}, 2, "frobnicate"},
		{"bad nproc", nil, []string{"run", "--nproc", "0", "ok.js"}, 2, "--nproc"},
		{"nproc not a number", nil, []string{"run", "--nproc", "two", "ok.js"}, 2, "two"},
		{"bad device", nil, []string{"run", "--device", "tpu", "ok.js"}, 2, "auto, cpu or cuda"},
		{"bad log format", nil, []string{"run", "--log-format", "xml", "ok.js"}, 2, "text or json"},
		{"bad threads", nil, []string{"run", "--threads", "-1", "ok.js"}, 2, "--threads"},
		{"device cpu", nil, []string{"run", "--device", "cpu", "ok.js"}, 0, ""},
		{"bad net", nil, []string{"run", "--net", "fast", "ok.js"}, 2, "--net"},
		{"bad net variable", []string{"ZEROENG_NET=10Gbit,soon"}, []string{"run", "ok.js"}, 2, "latency"},
		{"net model", nil, []string{"run", "--nproc", "2", "--net", "10Gbit,20us", "ok.js"}, 0, ""},
		{"bad dist timeout", nil, []string{"run", "--dist-timeout", "0s", "ok.js"}, 2, "--dist-timeout"},
		{"dist debug", []string{"ZEROENG_DIST_DEBUG=1"}, []string{"run", "--nproc", "2", "ok.js"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := zeroeng(t, dir, tc.env, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit status %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.msg) {
				t.Errorf("stderr does not say %q:\n%s", tc.msg, r.stderr)
			}
			if strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, ".go:") {
				t.Errorf("stderr shows Go internals:\n%s", r.stderr)
			}
		})
	}
}

// TestRunCUDAWithoutGPU checks that --device cuda on a machine without the
// NVIDIA driver fails with a message that says what is missing and where it
// was looked for.
func TestRunCUDAWithoutGPU(t *testing.T) {
	if r := gpu.Probe(); r.Driver.Err == nil {
		t.Skip("this machine has a CUDA driver; tools/gpucheck/run.sh tests --device cuda there")
	}
	dir := scriptDir(t, map[string]string{"ok.js": okJS})
	r := zeroeng(t, dir, nil, "run", "--device", "cuda", "ok.js")
	if r.code != 1 || !strings.Contains(r.stderr, "--device cuda: CUDA driver not found (libcuda.so.1") || !strings.Contains(r.stderr, "ZEROENG_CUDA_LIBS") {
		t.Errorf("exit status %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestErrorMessages checks the one message a failing script prints: the
// position, the message, the JavaScript stack, and nothing of Go.
func TestErrorMessages(t *testing.T) {
	dir := scriptDir(t, map[string]string{"throw.js": throwJS, "syntax.js": syntaxJS, "shape.js": shapeJS})
	for _, tc := range []struct {
		script string
		want   []string // in order
	}{
		{"syntax.js", []string{"syntax.js:2:9: SyntaxError: Unexpected token ;"}},
		{"throw.js", []string{"throw.js:2:9: Error: boom", "\n    at f (throw.js:2:9)", "\n    at ", "(throw.js:4:2)"}},
		{"shape.js", []string{"shape.js:3:32: tensor: matmul: shapes [8 3] and [4 5] cannot be multiplied", "\n    at g (shape.js:3:32)", "(shape.js:4:2)"}},
	} {
		t.Run(tc.script, func(t *testing.T) {
			r := zeroeng(t, dir, nil, "run", tc.script)
			if r.code != 1 {
				t.Errorf("exit status %d, want 1", r.code)
			}
			rest := r.stderr
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("stderr lacks %q (in order):\n%s", w, r.stderr)
				}
				rest = rest[i+len(w):]
			}
			if !strings.HasPrefix(r.stderr, tc.script+":") {
				t.Errorf("the message does not start with the script position:\n%s", r.stderr)
			}
			for _, bad := range []string{"goroutine", ".go:", "panic", "/tmp/", "zeroeng:prelude"} {
				if strings.Contains(r.stderr, bad) {
					t.Errorf("stderr contains %q:\n%s", bad, r.stderr)
				}
			}
		})
	}
}

// TestRankFailure: with two ranks, the failing rank's error is printed
// once, with its rank, and the other rank (in an endless loop) is stopped.
func TestRankFailure(t *testing.T) {
	dir := scriptDir(t, map[string]string{"fail.js": `const { dist } = require("zeroeng");
if (dist.rank === 1) {
  const t0 = Date.now();
  while (Date.now() - t0 < 200) {}
  throw new Error("rank one fails");
}
while (true) {}
`})
	r := zeroeng(t, dir, nil, "run", "--nproc", "2", "fail.js")
	if r.code != 1 {
		t.Errorf("exit status %d, want 1\n%s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "rank one fails"); n != 1 {
		t.Errorf("the error is printed %d times, want once:\n%s", n, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "rank 1: fail.js:5:9: Error: rank one fails") {
		t.Errorf("the message does not start with the rank and position:\n%s", r.stderr)
	}
	if strings.Contains(r.stderr, "rank 0") {
		t.Errorf("the stopped rank reports too:\n%s", r.stderr)
	}
	if r.took > 10*time.Second {
		t.Errorf("the job took %v to stop", r.took)
	}
}

func TestScriptArgs(t *testing.T) {
	dir := scriptDir(t, map[string]string{"args.js": "console.log(JSON.stringify(process.argv));\n"})
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "args.js", "--", "a", "--lr", "3e-4"}, []string{"a", "--lr", "3e-4"}},
		{[]string{"run", "args.js", "x", "y"}, []string{"x", "y"}},
		{[]string{"run", "--quiet", "--", "args.js", "--data", "d"}, []string{"--data", "d"}},
		{[]string{"run", "args.js"}, []string{}},
	} {
		r := zeroeng(t, dir, nil, tc.args...)
		var argv []string
		if err := json.Unmarshal([]byte(r.stdout), &argv); err != nil || r.code != 0 {
			t.Fatalf("%v: status %d, output %q (%v)\n%s", tc.args, r.code, r.stdout, err, r.stderr)
		}
		if len(argv) < 2 || argv[0] != "zeroeng" || argv[1] != "args.js" {
			t.Errorf("%v: argv %q does not start with zeroeng, args.js", tc.args, argv)
			continue
		}
		if got := argv[2:]; strings.Join(got, "\x00") != strings.Join(tc.want, "\x00") {
			t.Errorf("%v: script args %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestEnvironment checks that every flag has its ZEROENG_* variable and
// that a flag on the command line wins over it.
func TestEnvironment(t *testing.T) {
	dir := scriptDir(t, map[string]string{
		"world.js": `const { dist, tensor, metrics, progress } = require("zeroeng");
if (dist.rank === 0) console.log("world", dist.worldSize, "draw", tensor.rand([1]).item());
metrics.log({ rank_seen: dist.rank });
const bar = progress.bar({ total: 1, label: "bar" }); bar.update(1); bar.done();
`,
		"throw.js": throwJS,
	})
	// With several ranks, console lines start with "[rank] ".
	draw := func(r result) string {
		m := regexp.MustCompile(`world (\d+) draw (\S+)`).FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("status %d, output %q\n%s", r.code, r.stdout, r.stderr)
		}
		return m[1] + " " + m[2]
	}
	base := draw(zeroeng(t, dir, nil, "run", "world.js"))
	if got := draw(zeroeng(t, dir, []string{"ZEROENG_NPROC=3"}, "run", "world.js")); !strings.HasPrefix(got, "3 ") {
		t.Errorf("ZEROENG_NPROC=3: world size in %q", got)
	}
	if got := draw(zeroeng(t, dir, []string{"ZEROENG_NPROC=3"}, "run", "--nproc", "2", "world.js")); !strings.HasPrefix(got, "2 ") {
		t.Errorf("--nproc 2 over ZEROENG_NPROC=3: world size in %q", got)
	}
	seedEnv := draw(zeroeng(t, dir, []string{"ZEROENG_SEED=7"}, "run", "world.js"))
	seedFlag := draw(zeroeng(t, dir, nil, "run", "--seed", "7", "world.js"))
	if seedEnv != seedFlag || seedEnv == base {
		t.Errorf("ZEROENG_SEED=7 draws %q, --seed 7 %q, seed 0 %q", seedEnv, seedFlag, base)
	}
	if r := zeroeng(t, dir, []string{"ZEROENG_DEVICE=tpu"}, "run", "world.js"); r.code != 2 || !strings.Contains(r.stderr, "auto, cpu or cuda") {
		t.Errorf("ZEROENG_DEVICE=tpu: status %d\n%s", r.code, r.stderr)
	}
	if r := zeroeng(t, dir, []string{"ZEROENG_THREADS=-2"}, "run", "world.js"); r.code != 2 || !strings.Contains(r.stderr, "threads") {
		t.Errorf("ZEROENG_THREADS=-2: status %d\n%s", r.code, r.stderr)
	}
	if r := zeroeng(t, dir, []string{"ZEROENG_THREADS=1"}, "run", "world.js"); r.code != 0 {
		t.Errorf("ZEROENG_THREADS=1: status %d\n%s", r.code, r.stderr)
	}
	if r := zeroeng(t, dir, []string{"ZEROENG_THREDS=1"}, "run", "world.js"); r.code != 2 || !strings.Contains(r.stderr, "did you mean ZEROENG_THREADS?") {
		t.Errorf("ZEROENG_THREDS=1: status %d\n%s", r.code, r.stderr)
	}
	// A kernel override names a kernel of this CPU; "go" exists on all.
	for _, kv := range []string{"ZEROENG_GEMM=sse", "ZEROENG_VMATH=avx3"} {
		if r := zeroeng(t, dir, []string{kv}, "run", "world.js"); r.code != 2 || !strings.Contains(r.stderr, kv+" names no") {
			t.Errorf("%s: status %d\n%s", kv, r.code, r.stderr)
		}
	}
	if r := zeroeng(t, dir, []string{"ZEROENG_GEMM=go", "ZEROENG_VMATH=go"}, "info"); r.code != 0 ||
		!strings.Contains(r.stdout, "gemm kernels:   sgemm go") || !strings.Contains(r.stdout, "vector kernels: go") {
		t.Errorf("ZEROENG_GEMM=go ZEROENG_VMATH=go: status %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := zeroeng(t, dir, []string{"ZEROENG_NPROC=many"}, "run", "world.js"); r.code != 2 || !strings.Contains(r.stderr, "ZEROENG_NPROC") {
		t.Errorf("ZEROENG_NPROC=many: status %d\n%s", r.code, r.stderr)
	}
	r := zeroeng(t, dir, nil, "run", "world.js")
	if !strings.Contains(r.stderr, "bar") || !strings.Contains(r.stderr, "finished") {
		t.Errorf("without --quiet, stderr lacks the progress line or the summary:\n%s", r.stderr)
	}
	if r := zeroeng(t, dir, []string{"ZEROENG_QUIET=1"}, "run", "world.js"); r.stderr != "" {
		t.Errorf("ZEROENG_QUIET=1: stderr %q", r.stderr)
	}
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	zeroeng(t, dir, []string{"ZEROENG_METRICS=" + metrics, "ZEROENG_NPROC=2"}, "run", "world.js")
	if lines := readJSONLines(t, metrics); len(lines) != 4 {
		t.Errorf("ZEROENG_METRICS: %d lines, want 2 logged and 2 summaries", len(lines))
	}
	r = zeroeng(t, dir, []string{"ZEROENG_LOG_FORMAT=json"}, "run", "throw.js")
	if lines := parseJSONLines(t, r.stderr); len(lines) != 1 || lines[0]["level"] != "error" {
		t.Errorf("ZEROENG_LOG_FORMAT=json: stderr %q", r.stderr)
	}
}

// TestJSONLog checks --log-format json: one JSON object per line with
// level, msg, rank and time, for errors and the summary.
func TestJSONLog(t *testing.T) {
	dir := scriptDir(t, map[string]string{"throw.js": throwJS, "ok.js": okJS,
		"rank.js": "if (require('zeroeng').dist.rank === 1) throw new Error('r1');\nwhile (true) {}\n"})
	r := zeroeng(t, dir, nil, "run", "--log-format", "json", "throw.js")
	lines := parseJSONLines(t, r.stderr)
	if r.code != 1 || len(lines) != 1 {
		t.Fatalf("status %d, stderr %q", r.code, r.stderr)
	}
	l := lines[0]
	for _, k := range []string{"level", "msg", "rank", "time"} {
		if _, ok := l[k]; !ok {
			t.Errorf("no %q in %v", k, l)
		}
	}
	if l["msg"] != "throw.js:2:9: Error: boom" || l["rank"] != 0.0 || l["level"] != "error" {
		t.Errorf("error line %v", l)
	}
	if st, ok := l["stack"].([]any); !ok || len(st) != 2 || st[0] != "f (throw.js:2:9)" {
		t.Errorf("stack %v", l["stack"])
	}
	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(l["time"])); err != nil {
		t.Errorf("time: %v", err)
	}

	r = zeroeng(t, dir, nil, "run", "--log-format", "json", "--nproc", "2", "rank.js")
	lines = parseJSONLines(t, r.stderr)
	if r.code != 1 || len(lines) != 1 || lines[0]["rank"] != 1.0 || !strings.Contains(fmt.Sprint(lines[0]["msg"]), "Error: r1") {
		t.Errorf("two ranks: status %d, stderr %q", r.code, r.stderr)
	}

	r = zeroeng(t, dir, nil, "run", "--log-format", "json", "ok.js")
	lines = parseJSONLines(t, r.stderr)
	if r.code != 0 || len(lines) != 1 || lines[0]["level"] != "info" || lines[0]["rank"] != nil || lines[0]["ranks"] != 1.0 {
		t.Errorf("summary: status %d, stderr %q", r.code, r.stderr)
	}
}

func TestMetricsFile(t *testing.T) {
	dir := scriptDir(t, map[string]string{"m.js": `const { metrics, tensor, dist } = require("zeroeng");
for (let step = 1; step <= 3; step++) {
  metrics.log({ step, loss: tensor.fromArray([1 / step]).sum(), phase: "train", last: step === 3 });
}
`})
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	if err := os.WriteFile(path, []byte("stale line from an earlier run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := zeroeng(t, dir, nil, "run", "--quiet", "--nproc", "2", "--metrics", path, "m.js")
	if r.code != 0 {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	lines := readJSONLines(t, path)
	if len(lines) != 8 {
		t.Fatalf("%d lines, want 3 per rank and one summary per rank", len(lines))
	}
	steps := map[float64]int{}
	for _, l := range lines[:6] {
		rank, ok := l["rank"].(float64)
		if !ok || (rank != 0 && rank != 1) {
			t.Errorf("rank in %v", l)
		}
		if _, ok := l["time"].(float64); !ok {
			t.Errorf("time in %v", l)
		}
		step := l["step"].(float64)
		steps[step]++
		if l["loss"] != 1/step && fmt.Sprintf("%.6f", l["loss"]) != fmt.Sprintf("%.6f", 1/step) {
			t.Errorf("loss in %v", l)
		}
		if l["phase"] != "train" || l["last"] != (step == 3) {
			t.Errorf("fields of %v", l)
		}
	}
	if steps[1] != 2 || steps[2] != 2 || steps[3] != 2 {
		t.Errorf("steps %v", steps)
	}
	ranks := map[float64]bool{}
	for _, l := range lines[6:] {
		if l["event"] != "end" || l["status"] != "ok" {
			t.Errorf("summary %v", l)
		}
		for _, k := range []string{"elapsed_s", "peak_bytes", "live_bytes", "live_tensors", "pooled_bytes"} {
			if _, ok := l[k].(float64); !ok {
				t.Errorf("summary lacks %s: %v", k, l)
			}
		}
		ranks[l["rank"].(float64)] = true
	}
	if !ranks[0] || !ranks[1] {
		t.Errorf("summaries for ranks %v", ranks)
	}

	// A failing rank: its summary says error, the stopped one stopped.
	dir = scriptDir(t, map[string]string{"f.js": "if (require('zeroeng').dist.rank === 1) throw new Error('x');\nwhile (true) {}\n"})
	zeroeng(t, dir, nil, "run", "--nproc", "2", "--metrics", path, "f.js")
	lines = readJSONLines(t, path)
	if len(lines) != 2 || lines[0]["status"] != "stopped" || lines[1]["status"] != "error" {
		t.Errorf("summaries of a failed job: %v", lines)
	}
}

func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseJSONLines(t, string(b))
}

func parseJSONLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q (%v)", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestSignals sends SIGINT and SIGTERM to a script in an endless loop: the
// ranks stop and the process exits 130 or 143 soon after.
func TestSignals(t *testing.T) {
	dir := scriptDir(t, map[string]string{"loop.js": loopJS})
	for _, tc := range []struct {
		sig   syscall.Signal
		code  int
		nproc string
		twice bool
	}{
		{syscall.SIGINT, 130, "1", false},
		{syscall.SIGINT, 130, "2", false},
		{syscall.SIGTERM, 143, "1", false},
		{syscall.SIGINT, 130, "1", true},
	} {
		t.Run(fmt.Sprintf("%v-nproc%s-twice=%v", tc.sig, tc.nproc, tc.twice), func(t *testing.T) {
			p := start(t, dir, nil, "run", "--nproc", tc.nproc, "loop.js")
			cmd, stderr := p.cmd, p.stderr
			// Wait until the script runs, so that the signal meets it.
			if !p.lines.Scan() || !strings.Contains(p.lines.Text(), "start") {
				t.Fatalf("first line %q: %v", p.lines.Text(), p.lines.Err())
			}
			sent := time.Now()
			cmd.Process.Signal(tc.sig)
			if tc.twice {
				cmd.Process.Signal(tc.sig)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("still running 10s after %v", tc.sig)
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Errorf("exit %v, want status %d\n%s", err, tc.code, stderr.String())
			}
			if d := time.Since(sent); d > 5*time.Second {
				t.Errorf("exited %v after the signal", d)
			}
			// Every rank stops in its JavaScript loop; the job says where.
			if want := fmt.Sprintf("interrupted by %s at loop.js:", signalName(tc.sig)); !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr does not say %q: %q", want, stderr.String())
			}
			if strings.Contains(stderr.String(), "goroutine") {
				t.Errorf("stderr: %s", stderr.String())
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	r := zeroeng(t, t.TempDir(), nil, "run", "--help")
	if r.code != 0 {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"ZEROENG_NPROC", "ZEROENG_DEVICE", "ZEROENG_SEED", "ZEROENG_THREADS",
		"ZEROENG_LOG_FORMAT", "ZEROENG_METRICS", "ZEROENG_QUIET", "--nproc", "process.argv",
		"Examples:", "zeroeng run samples/quickstart.js", "Exit status"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run --help does not mention %s:\n%s", want, r.stdout)
		}
	}
}

func TestInfoAndVersion(t *testing.T) {
	r := zeroeng(t, t.TempDir(), nil, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "zeroeng ") || !strings.Contains(r.stdout, "go1.") {
		t.Errorf("version: status %d, %q", r.code, r.stdout)
	}
	r = zeroeng(t, t.TempDir(), nil, "info")
	if r.code != 0 {
		t.Fatalf("info: status %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"zeroeng ", "cpu features:", "vector kernels:", "blas:", "cuda driver:", "gpus:", "nvrtc:", "cublas:", "nccl:", "mpi:", "ZEROENG_CUDA_LIBS"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("info lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestQuickstart runs the README's first command: it must succeed and the
// loss must go down.
func TestQuickstart(t *testing.T) {
	r := zeroeng(t, "../..", nil, "run", "samples/quickstart.js")
	if r.code != 0 {
		t.Fatalf("status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var losses []float64
	for _, m := range regexp.MustCompile(`(?m)^epoch \d+  loss ([0-9.]+)$`).FindAllStringSubmatch(r.stdout, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		losses = append(losses, v)
	}
	if len(losses) < 3 || losses[len(losses)-1] >= losses[0]/2 {
		t.Errorf("losses %v do not go down\n%s", losses, r.stdout)
	}
	m := regexp.MustCompile(`learned the hidden rule: ([0-9.]+)% `).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no final line:\n%s", r.stdout)
	}
	if acc, _ := strconv.ParseFloat(m[1], 64); acc < 90 {
		t.Errorf("test accuracy %v%%, want at least 90%%", acc)
	}
	if r.took > 30*time.Second {
		t.Errorf("the quickstart took %v", r.took)
	}
}

// fmnistDir is where Debian's dataset-fashion-mnist installs the data.
const fmnistDir = "/usr/share/datasets/fashion-mnist"

// TestFashionMNIST trains one epoch (the 5-epoch acceptance run is a
// benchmark: bench/sidebyside.sh fmnist-js).
func TestFashionMNIST(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Fashion-MNIST epoch takes seconds")
	}
	dir := os.Getenv("ZEROENG_FMNIST_DIR")
	if dir == "" {
		dir = fmnistDir
	}
	if _, err := os.Stat(filepath.Join(dir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST is not installed in %s (apt-get install dataset-fashion-mnist, or set ZEROENG_FMNIST_DIR)", dir)
	}
	r := zeroeng(t, "../..", nil, "run", "--quiet", "samples/fashion_mnist.js", "--", "--data", dir, "--epochs", "1")
	if r.code != 0 {
		t.Fatalf("status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var res struct {
		Epochs  int     `json:"epochs"`
		TestAcc float64 `json:"test_acc"`
		TrainS  float64 `json:"train_s"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line is not the JSON result: %v\n%s", err, r.stdout)
	}
	if res.Epochs != 1 || res.TestAcc <= 0.8 {
		t.Errorf("after %d epoch: test accuracy %v, want > 0.8\n%s", res.Epochs, res.TestAcc, r.stdout)
	}
	if !strings.Contains(r.stdout, "epoch 1  loss ") {
		t.Errorf("no epoch line:\n%s", r.stdout)
	}
	t.Logf("1 epoch: test accuracy %.4f, training %.2fs", res.TestAcc, res.TrainS)

	// Data parallel, with DDP and with ZeRO (stage 1 under DDP, stage 2,
	// stage 1 overlapped with backward): the same run up to rounding.
	// With Wasm hooks: the averaging one gives the same run, DDP alone
	// and under ZeRO's overlap; top-k sending 1% of the gradient
	// converges more slowly, but converges. In bfloat16 with float32
	// master weights sharded by ZeRO stage 2, the accuracy is float32's
	// within a point.
	allreduce := filepath.Join(t.TempDir(), "allreduce.wasm")
	topk := filepath.Join(t.TempDir(), "topk.wasm")
	os.WriteFile(allreduce, hookbuild.Sample(t, "allreduce"), 0o644)
	os.WriteFile(topk, hookbuild.Sample(t, "topk"), 0o644)
	for _, c := range []struct {
		ranks int
		zero  string
		hook  []string
		tol   float64
		bf16  bool
	}{{2, "", nil, 0.002, false}, {2, "1", nil, 0.002, false}, {4, "2", nil, 0.002, false}, {4, "overlap", nil, 0.002, false},
		{2, "", []string{"--hook", allreduce}, 0.002, false}, {4, "overlap", []string{"--hook", allreduce}, 0.002, false},
		{2, "", []string{"--hook", topk, "--hook-config", `{"ratio":0.01}`}, 0.06, false},
		{2, "2", nil, 0.01, true}} {
		args := append([]string{"run", "--quiet", "--nproc", fmt.Sprint(c.ranks)}, c.hook...)
		args = append(args, "samples/fashion_mnist.js", "--", "--data", dir, "--epochs", "1")
		if c.zero != "" {
			args = append(args, "--zero", c.zero)
		}
		if c.bf16 {
			args = append(args, "--bf16")
		}
		r2 := zeroeng(t, "../..", nil, args...)
		if r2.code != 0 {
			t.Fatalf("%v: status %d\n%s\n%s", args, r2.code, r2.stdout, r2.stderr)
		}
		for rank := range c.ranks {
			prefix := fmt.Sprintf("[%d] {", rank)
			var got struct {
				TestAcc float64 `json:"test_acc"`
			}
			found := false
			for _, line := range strings.Split(r2.stdout, "\n") {
				if strings.HasPrefix(line, prefix) {
					found = json.Unmarshal([]byte(line[len(prefix)-1:]), &got) == nil
				}
			}
			if !found || math.Abs(got.TestAcc-res.TestAcc) > c.tol {
				t.Errorf("--nproc %d --zero %q %v bf16=%v, rank %d: test accuracy %v (found %v), one rank %v\n%s", c.ranks, c.zero, c.hook, c.bf16, rank, got.TestAcc, found, res.TestAcc, r2.stdout)
			}
		}
		if c.zero != "" && !strings.Contains(r2.stderr, "zero: rank 0 of") {
			t.Errorf("--zero %s: no memory line on the log:\n%s", c.zero, r2.stderr)
		}
	}
}

// TestHookCheck: zeroeng hook check accepts a sample hook, listing its
// exports and imports, and refuses what is not a hook with the reasons.
func TestHookCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "allreduce_wat.wasm")
	os.WriteFile(good, hookbuild.Sample(t, "allreduce_wat"), 0o644)
	noMarker := filepath.Join(dir, "plain.wasm")
	os.WriteFile(noMarker, hookbuild.WAT(t, `(module (memory (export "memory") 1) (func (export "on_bucket") (param i32) (result i32) (i32.const 0)))`), 0o644)
	notWasm := filepath.Join(dir, "notes.wasm")
	os.WriteFile(notWasm, []byte("hello"), 0o644)
	for _, c := range []struct {
		path         string
		code         int
		stdout, errs string
	}{
		{good, 0, "zeroeng hook ABI v1\nmemory: 1 pages initially\nexports:\n  init (i32, i32) -> (i32)\n  on_bucket (i32) -> (i32)\n  zeroeng_hook_abi_v1 () -> ()\nimports:\n  zeroeng.all_reduce (i32, i32) -> (i32)\n  zeroeng.scale (i32, f64) -> (i32)\nok\n", ""},
		{noMarker, 1, "no zeroeng hook ABI marker", "no ABI marker: a zeroeng hook exports a function named zeroeng_hook_abi_v1"},
		{notWasm, 1, "", "wasm hook notes.wasm: not a WebAssembly module"},
		{filepath.Join(dir, "missing.wasm"), 1, "", "no such file or directory"},
	} {
		r := zeroeng(t, ".", nil, "hook", "check", c.path)
		if r.code != c.code || !strings.Contains(r.stdout, c.stdout) || !strings.Contains(r.stderr, c.errs) {
			t.Errorf("hook check %s: status %d\nstdout:\n%s\nstderr:\n%s\nwant status %d, %q and %q", filepath.Base(c.path), r.code, r.stdout, r.stderr, c.code, c.stdout, c.errs)
		}
	}
	if r := zeroeng(t, ".", nil, "run", "--hook-on-error", "retry", "x.js"); r.code != 2 || !strings.Contains(r.stderr, "--hook-on-error must be abort or fallback") {
		t.Errorf("bad --hook-on-error: status %d, %s", r.code, r.stderr)
	}
}

func TestFashionMNISTMissingData(t *testing.T) {
	r := zeroeng(t, "../..", nil, "run", "samples/fashion_mnist.js", "--", "--data", t.TempDir())
	if r.code == 0 || !strings.Contains(r.stderr, "apt-get install dataset-fashion-mnist") {
		t.Errorf("status %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestZeroOverlapSample runs samples/zero_overlap.js on 4 ranks with each
// schedule (the built-ins, the sample's own lag-K, the C sample lag_k.wasm,
// none, stage 2 with and without asReduced): it checks itself (ranks in
// sync, loss falling) and exits 1 otherwise.
func TestZeroOverlapSample(t *testing.T) {
	if testing.Short() {
		t.Skip("runs zero_overlap.js on 4 ranks under 7 schedules, 4 s (-short skips it; make test-all runs it)")
	}
	lagK := filepath.Join(t.TempDir(), "lag_k.wasm")
	if err := os.WriteFile(lagK, hookbuild.ScheduleSample(t, "lag_k"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sched := range []string{"A", "B", "lag-2", lagK, "none", "stage2", "stage2-asReduced"} {
		r := zeroeng(t, "../..", nil, "run", "--quiet", "--nproc", "4", "samples/zero_overlap.js", "--", "--schedule", sched, "--steps", "6")
		if r.code != 0 {
			t.Fatalf("--schedule %s: status %d\n%s\n%s", sched, r.code, r.stdout, r.stderr)
		}
		for rank := range 4 {
			if !strings.Contains(r.stdout, fmt.Sprintf(`[%d] {"workload":"zero_overlap","schedule":%q`, rank, sched)) || !strings.Contains(r.stdout, `"in_sync":true`) {
				t.Errorf("--schedule %s: rank %d printed no result:\n%s", sched, rank, r.stdout)
			}
		}
	}
	r := zeroeng(t, "../..", nil, "run", "samples/zero_overlap.js", "--", "--schedule", "lag-0")
	if r.code != 2 || !strings.Contains(r.stderr, "--schedule takes A, B, lag-K (K ≥ 1), FILE.wasm, none, stage2 or stage2-asReduced") {
		t.Errorf("--schedule lag-0: status %d, stderr %q", r.code, r.stderr)
	}
}

// TestZeroScheduleFlag: zeroeng run --zero-schedule gives its Wasm module
// to every zero.hookWithZeroSchedule that names no schedule, with
// --zero-schedule-config for its configure export: lag_k with k 1 is the
// interleaved schedule, bit for bit; without the flag such a call is an
// error that says what to give.
func TestZeroScheduleFlag(t *testing.T) {
	dir := scriptDir(t, map[string]string{"train.js": `const { tensor, nn, dist, zero } = require("zeroeng");
tensor.manualSeed(0);
const net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3));
const model = nn.parallel.DistributedDataParallel(net, { bucketCapMB: 0.0002, firstBucketCapMB: 0.0001 });
const opt = zero.ZeroRedundancyOptimizer(model.parameters(), { optimizer: "adamw", lr: 0.01, logMemory: false, overlapWithDDP: true });
const schedule = process.argv[2] === "interleaved" ? zero.schedules.interleaved : undefined;
model.registerCommHook(null, zero.hookWithZeroSchedule(dist.commHooks.allreduceHook, model, opt, schedule, { strict: true }));
tensor.manualSeed(1 + dist.rank);
for (let step = 0; step < 3; step++) {
  opt.zeroGrad();
  model.forward(tensor.randn([4, 6])).pow(2).mean().backward();
  opt.step();
}
console.log(JSON.stringify(net.parameters().map(p => p.toArray())));
`})
	lagK := filepath.Join(dir, "lag_k.wasm")
	if err := os.WriteFile(lagK, hookbuild.ScheduleSample(t, "lag_k"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := zeroeng(t, dir, nil, "run", "--quiet", "--nproc", "2", "train.js", "--", "interleaved")
	got := zeroeng(t, dir, nil, "run", "--quiet", "--nproc", "2", "--zero-schedule", lagK, "--zero-schedule-config", `{"k": 1}`, "train.js")
	// The ranks' lines in any order, less the module's own.
	lines := func(out string) string {
		var keep []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.Contains(l, "lag_k.wasm: ") {
				keep = append(keep, l)
			}
		}
		slices.Sort(keep)
		return strings.Join(keep, "\n")
	}
	if want.code != 0 || got.code != 0 || lines(want.stdout) != lines(got.stdout) {
		t.Fatalf("built-in interleaved: status %d\n%s%s\n--zero-schedule lag_k.wasm (k 1): status %d\n%s%s", want.code, want.stdout, want.stderr, got.code, got.stdout, got.stderr)
	}
	none := zeroeng(t, dir, nil, "run", "--quiet", "train.js")
	if none.code == 0 || !strings.Contains(none.stderr, "zero.hookWithZeroSchedule: no schedule given and no --zero-schedule on the command line") {
		t.Errorf("no schedule: status %d, stderr %q", none.code, none.stderr)
	}
}

// TestHookThatLoops: a Wasm hook that never returns does not make the
// process deaf: its loops check for interruption (unless it is trusted),
// so Ctrl-C stops a job whose every rank loops in it (more ranks than
// GOMAXPROCS), and when one rank loops while the others' collectives time
// out, the job ends with their timeout, naming the rank that never came.
func TestHookThatLoops(t *testing.T) {
	dir := scriptDir(t, map[string]string{"train.js": `
const { tensor, nn, optim } = require("zeroeng");
const net = nn.Linear(4, 2);
const model = nn.parallel.DistributedDataParallel(net);
const opt = optim.SGD(net.parameters(), { lr: 0.1 });
console.log("training");
for (let step = 0; step < 1000; step++) {
  opt.zeroGrad();
  model.forward(tensor.ones([2, 4])).sum().backward();
  opt.step();
}`})
	everyRank := filepath.Join(dir, "loop.wasm")
	os.WriteFile(everyRank, hookbuild.WAT(t, `(module
  (memory (export "memory") 1)
  (func (export "zeroeng_hook_abi_v1"))
  (func (export "on_bucket") (param $b i32) (result i32) (loop $forever (br $forever)) (i32.const 0)))`), 0o644)
	rankOne := filepath.Join(dir, "loop_rank1.wasm")
	os.WriteFile(rankOne, hookbuild.WAT(t, `(module
  (import "zeroeng" "all_reduce" (func $all_reduce (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $rank (mut i32) (i32.const 0))
  (func (export "zeroeng_hook_abi_v1"))
  (func (export "init") (param $rank i32) (param $world i32) (result i32) (global.set $rank (local.get $rank)) (i32.const 0))
  (func (export "on_bucket") (param $b i32) (result i32)
    (if (i32.eq (global.get $rank) (i32.const 1)) (then (loop $forever (br $forever))))
    (call $all_reduce (local.get $b) (i32.const 0))))`), 0o644)

	t.Run("Ctrl-C", func(t *testing.T) {
		s := start(t, dir, []string{"GOMAXPROCS=1"}, "run", "--nproc", "3", "--hook", everyRank, "train.js")
		for s.lines.Scan() && !strings.Contains(s.lines.Text(), "training") {
		}
		s.drain()
		time.Sleep(500 * time.Millisecond) // into the hook
		sent := time.Now()
		s.cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- s.cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			s.cmd.Process.Kill()
			t.Fatalf("SIGINT did not stop the job in 20s\n%s", s.stderr)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 || time.Since(sent) > 5*time.Second {
			t.Fatalf("after SIGINT: %v after %v\n%s", err, time.Since(sent), s.stderr)
		}
	})
	t.Run("a collective's timeout", func(t *testing.T) {
		began := time.Now()
		r := zeroeng(t, dir, nil, "run", "--nproc", "2", "--dist-timeout", "2s", "--hook", rankOne, "train.js")
		if r.code == 0 || time.Since(began) > 20*time.Second {
			t.Fatalf("status %d after %v\n%s", r.code, time.Since(began), r.stderr)
		}
		if !strings.Contains(r.stderr, "timed out after 2s: rank 1 did not call it") {
			t.Errorf("stderr:\n%s", r.stderr)
		}
	})
}

// TestWasmCacheDamaged: a damaged entry of the on-disk compilation cache
// is cleared and the hook compiled again, once, with a line naming the
// cache; the run goes on.
func TestWasmCacheDamaged(t *testing.T) {
	dir := scriptDir(t, map[string]string{"ddp.js": `
const { tensor, nn } = require("zeroeng");
const model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2));
model.forward(tensor.ones([2, 4])).sum().backward();
console.log("ok");`})
	hook := filepath.Join(dir, "allreduce.wasm")
	os.WriteFile(hook, hookbuild.Sample(t, "allreduce_wat"), 0o644)
	cache := filepath.Join(t.TempDir(), "cache")
	env := []string{"ZEROENG_WASM_CACHE=" + cache}
	if r := zeroeng(t, dir, env, "run", "--quiet", "--hook", hook, "ddp.js"); r.code != 0 {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	damaged := 0
	filepath.WalkDir(cache, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(path)
			for i := 64; i < len(b); i += 97 {
				b[i] ^= 0xff
			}
			os.WriteFile(path, b, 0o644)
			damaged++
		}
		return nil
	})
	if damaged == 0 {
		t.Fatalf("nothing cached in %s", cache)
	}
	for run := range 2 {
		r := zeroeng(t, dir, env, "run", "--quiet", "--hook", hook, "ddp.js")
		if r.code != 0 || r.stdout != "ok\n" {
			t.Fatalf("run %d: status %d\n%s\n%s", run, r.code, r.stdout, r.stderr)
		}
		if said := strings.Contains(r.stderr, "the Wasm compilation cache in "+cache+" was damaged"); said != (run == 0) {
			t.Errorf("run %d: stderr %q", run, r.stderr)
		}
	}
}

// TestRunHelpListsModules: run --help names every module that
// require("zeroeng") gives a script.
func TestRunHelpListsModules(t *testing.T) {
	dir := scriptDir(t, map[string]string{"keys.js": `console.log(Object.keys(require("zeroeng")).join(" "));`})
	r := zeroeng(t, dir, nil, "run", "--quiet", "keys.js")
	if r.code != 0 {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	help := zeroeng(t, dir, nil, "run", "--help")
	text := strings.Join(strings.Fields(help.stdout+help.stderr), " ")
	for _, m := range strings.Fields(r.stdout) {
		if !strings.Contains(text, " "+m+",") && !strings.Contains(text, " "+m+" ") && !strings.Contains(text, " "+m+".") {
			t.Errorf("run --help does not name the module %s", m)
		}
	}
}

// TestUsageHints: a misspelled flag names the flag meant, --hook on a
// script that builds no DistributedDataParallel warns that it did nothing,
// and --zero-schedule's mistakes are usage errors.
func TestUsageHints(t *testing.T) {
	dir := scriptDir(t, map[string]string{"plain.js": `console.log("ok");`})
	if r := zeroeng(t, dir, nil, "run", "--nprc", "2", "plain.js"); r.code != 2 || !strings.Contains(r.stderr, "(did you mean --nproc?)") {
		t.Errorf("misspelled flag: status %d\n%s", r.code, r.stderr)
	}
	hook := filepath.Join(dir, "allreduce_wat.wasm")
	os.WriteFile(hook, hookbuild.Sample(t, "allreduce_wat"), 0o644)
	if r := zeroeng(t, dir, nil, "run", "--hook", hook, "plain.js"); r.code != 0 || !strings.Contains(r.stderr, "--hook "+hook+": the script made no DistributedDataParallel") {
		t.Errorf("--hook without DDP: status %d, no warning\n%s", r.code, r.stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--zero-schedule-config", `{"k":2}`}, "run: --zero-schedule-config needs --zero-schedule"},
		{[]string{"--zero-schedule", "none.wasm"}, "run: --zero-schedule: stat none.wasm: no such file"},
		{[]string{"--zero-shedule", "lag_k.wasm"}, "(did you mean --zero-schedule?)"},
	} {
		if r := zeroeng(t, dir, nil, append(append([]string{"run"}, c.args...), "plain.js")...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("run %s: status %d, want 2 and %q\n%s", strings.Join(c.args, " "), r.code, c.want, r.stderr)
		}
	}
}

// TestMaxMemory: --max-memory bounds each rank's device memory: an
// allocation past it ends the run with an out-of-memory error naming the
// rank and the numbers; the same script runs without it; a bad size is a
// usage error.
func TestMaxMemory(t *testing.T) {
	dir := scriptDir(t, map[string]string{"big.js": `
const { tensor, nn } = require("zeroeng");
const m = nn.Linear(1024, 1024);
const x = tensor.randn([4096, 1024]);  // 16 MiB
m.forward(x);                          // 16 MiB more
console.log("done");`})
	if r := zeroeng(t, dir, nil, "run", "--quiet", "big.js"); r.code != 0 {
		t.Fatalf("without a limit: status %d\n%s", r.code, r.stderr)
	}
	r := zeroeng(t, dir, nil, "run", "--quiet", "--nproc", "2", "--max-memory", "24MiB", "big.js")
	if !strings.HasPrefix(r.stderr, "rank 0: ") && !strings.HasPrefix(r.stderr, "rank 1: ") {
		t.Errorf("the error does not name the rank:\n%s", r.stderr)
	}
	for _, want := range []string{": big.js:5:", "out of memory: 16 MiB more would make 36 MiB live, over the device's limit of 24 MiB"} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("status %d, stderr lacks %q:\n%s", r.code, want, r.stderr)
		}
	}
	if r := zeroeng(t, dir, []string{"ZEROENG_MAX_MEMORY=24MiB"}, "run", "--quiet", "big.js"); r.code != 1 || !strings.Contains(r.stderr, "out of memory") {
		t.Errorf("ZEROENG_MAX_MEMORY: status %d\n%s", r.code, r.stderr)
	}
	if r := zeroeng(t, dir, nil, "run", "--max-memory", "lots", "big.js"); r.code != 2 || !strings.Contains(r.stderr, `--max-memory: size "lots"`) {
		t.Errorf("a bad size: status %d\n%s", r.code, r.stderr)
	}
}
