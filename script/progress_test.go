package script

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
)

const barJS = `const { progress, tensor } = require("zeroeng");
const bar = progress.bar({ total: 50, label: "epoch 1" });
for (let i = 1; i <= 50; i++) {
  const loss = tensor.fromArray([1 / i]).sum();
  bar.update(i, { loss, samples: 128 * i });
}
bar.done();
console.log("end");
`

// Off a terminal, a short bar prints one plain line, at done.
func TestProgressPlain(t *testing.T) {
	out, err := runScript(t, t.TempDir(), "bar.js", barJS, Options{AutoRelease: true})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || lines[1] != "end" {
		t.Fatalf("output %q, want one progress line and end", out)
	}
	re := regexp.MustCompile(`^epoch 1  50/50 100%  loss 0\.02  [0-9.]+ samples/s  [0-9.]+s$`)
	if !re.MatchString(lines[0]) {
		t.Errorf("line %q does not match %v", lines[0], re)
	}
}

// On a terminal, the line is redrawn in place and ended at done.
func TestProgressTerminal(t *testing.T) {
	out, err := runScript(t, t.TempDir(), "bar.js", `const { progress } = require("zeroeng");
const bar = progress.bar({ total: 4 });
for (let i = 1; i <= 4; i++) {
  const t0 = Date.now();
  while (Date.now() - t0 < 120) {}
  bar.update(i, { loss: 2 / i });
}
bar.done();
`, Options{Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "\r"); n < 4 {
		t.Errorf("%d redraws, want at least 4 (one per update 120 ms apart, and done): %q", n, out)
	}
	if !strings.HasSuffix(out, "\x1b[K\n") || strings.Count(out, "\n") != 1 {
		t.Errorf("the line is not ended once, at done: %q", out)
	}
	last := out[strings.LastIndex(out, "\r")+1:]
	re := regexp.MustCompile(`^\[#{20}\] 4/4 100%  loss 0\.5  [0-9.]+ steps/s  [0-9.]+s\x1b\[K\n$`)
	if !re.MatchString(last) {
		t.Errorf("final line %q does not match %v", last, re)
	}
	if !strings.Contains(out, "ETA ") {
		t.Errorf("no ETA while running: %q", out)
	}
}

// Other ranks and --quiet print nothing.
func TestProgressSilent(t *testing.T) {
	for _, o := range []Options{{Rank: 1, WorldSize: 2}, {Quiet: true}, {Quiet: true, Interactive: true}} {
		out, err := runScript(t, t.TempDir(), "bar.js", barJS, o)
		if err != nil || out != "end\n" {
			t.Errorf("%+v: output %q, error %v", o, out, err)
		}
	}
}

// A loss tensor released before the bar prints it (its scope ended) is
// left out instead of failing the script.
func TestProgressReleasedLoss(t *testing.T) {
	out, err := runScript(t, t.TempDir(), "bar.js", `const { progress, tensor } = require("zeroeng");
const bar = progress.bar({ total: 1 });
tensor.scope(() => { bar.update(1, { loss: tensor.ones([1]).sum() }); });
bar.done();
`, Options{})
	if err != nil || !strings.HasPrefix(out, "1/1 100%  ") || strings.Contains(out, "loss") {
		t.Errorf("output %q, error %v", out, err)
	}
}

func TestProgressUnknownTotal(t *testing.T) {
	out, err := runScript(t, t.TempDir(), "bar.js", `const bar = require("zeroeng").progress.bar();
bar.update(7); bar.done(); bar.done(); bar.update(8);
`, Options{})
	if err != nil || !regexp.MustCompile(`^7  [0-9.]+ steps/s  [0-9.]+s\n$`).MatchString(out) {
		t.Errorf("output %q, error %v", out, err)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0.00s", 250 * time.Millisecond: "0.25s", 4200 * time.Millisecond: "4.2s", 65 * time.Second: "1:05", 3723 * time.Second: "1:02:03", -time.Second: "0.00s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// BenchmarkProgressUpdate is what a training step pays for bar.update when
// nothing is printed: one host call that stores its arguments and reads
// the clock (the loss tensor is not read).
func BenchmarkProgressUpdate(b *testing.B) {
	r, err := New(Options{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, err := r.RunString("setup.js", `const { progress, tensor } = require('zeroeng');
const bar = progress.bar({ total: 1e12 });
const loss = tensor.ones([1]).sum();
function loop(n) { for (let i = 0; i < n; i++) bar.update(i, { loss, samples: i }); }`); err != nil {
		b.Fatal(err)
	}
	loop, _ := goja.AssertFunction(r.vm.Get("loop"))
	b.ResetTimer()
	if _, err := loop(goja.Undefined(), r.vm.ToValue(b.N)); err != nil {
		b.Fatal(err)
	}
}

// screen plays terminal output as a terminal shows it: \r returns to the
// start of the line, ESC[K clears to its end, \n starts the next line.
func screen(out string) []string {
	lines := []string{""}
	col := 0
	for i := 0; i < len(out); i++ {
		cur := &lines[len(lines)-1]
		switch {
		case out[i] == '\r':
			col = 0
		case out[i] == '\n':
			lines = append(lines, "")
			col = 0
		case strings.HasPrefix(out[i:], "\x1b[K"):
			*cur = (*cur)[:col]
			i += 2
		default:
			if col < len(*cur) {
				*cur = (*cur)[:col] + out[i:i+1] + (*cur)[col+1:]
			} else {
				*cur += out[i : i+1]
			}
			col++
		}
	}
	return lines
}

// Lines printed while a bar is on a terminal, by its rank or another one,
// clear the bar and have it drawn again below them (tqdm's write); a bar
// the script never finishes has its line ended when the runtime closes.
func TestProgressTerminalWithPrints(t *testing.T) {
	var out lockedBuffer
	var w io.Writer = &out
	r0, err := New(Options{Stdout: w, Stderr: w, Interactive: true, WorldSize: 2, Prefix: "[0] "})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := New(Options{Stdout: w, Stderr: w, Rank: 1, WorldSize: 2, Prefix: "[1] "})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	if _, err := r0.RunString("bar.js", `const { progress } = require("zeroeng");
const bar = progress.bar({ total: 4 });
function step(i) {
  const t0 = Date.now();
  while (Date.now() - t0 < 110) {}
  bar.update(i, { loss: 2 / i });
  console.log("step " + i);
}
step(1); step(2);`); err != nil {
		t.Fatal(err)
	}
	if _, err := r1.RunString("other.js", `console.log("from rank 1")`); err != nil {
		t.Fatal(err)
	}
	if _, err := r0.RunString("more.js", `step(3);`); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(SharedWriter(w), "zeroeng: a message of the command")
	r0.Close()
	got := screen(out.String())
	want := []*regexp.Regexp{
		regexp.MustCompile(`^\[0\] step 1$`),
		regexp.MustCompile(`^\[0\] step 2$`),
		regexp.MustCompile(`^\[1\] from rank 1$`),
		regexp.MustCompile(`^\[0\] step 3$`),
		regexp.MustCompile(`^zeroeng: a message of the command$`),
		regexp.MustCompile(`^\[#+\.+\] 3/4  75%  loss 0\.6667  .*ETA`),
		regexp.MustCompile(`^$`),
	}
	if len(got) != len(want) {
		t.Fatalf("the terminal shows %d lines, want %d:\n%q", len(got), len(want), got)
	}
	for i, re := range want {
		if !re.MatchString(got[i]) {
			t.Errorf("line %d: %q does not match %v\n%q", i+1, got[i], re, got)
		}
	}
}
