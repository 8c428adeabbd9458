package script

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
)

// lockedBuffer is a bytes.Buffer the ranks may write concurrently.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newTestREPL(t *testing.T, ranks int) (*REPL, *lockedBuffer, *lockedBuffer) {
	t.Helper()
	var stdout, stderr lockedBuffer
	r, err := NewREPL(REPLOptions{Ranks: ranks, Rank: Options{Stdout: &stdout, Stderr: &stderr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, &stdout, &stderr
}

// submitAll types lines one by one and returns the last result.
func submitAll(t *testing.T, r *REPL, lines ...string) Result {
	t.Helper()
	var res Result
	for _, l := range lines {
		var err error
		if res, err = r.Submit(l); err != nil {
			t.Fatalf("Submit(%q): %v", l, err)
		}
	}
	return res
}

func TestREPLEntries(t *testing.T) {
	tests := []struct {
		name   string
		lines  []string
		stdout string // exact
		stderr string // substrings, one per line; "" when nothing
	}{
		{"number", []string{"1 + 1"}, "2\n", ""},
		{"float", []string{"0.1 * 3"}, "0.30000000000000004\n", ""},
		{"string", []string{"'a' + 'b'"}, "\"ab\"\n", ""},
		{"array", []string{"[1, 'x', [2, 3]]"}, "[ 1, \"x\", [ 2, 3 ] ]\n", ""},
		{"undefined expression", []string{"undefined"}, "undefined\n", ""},
		{"console.log", []string{"console.log('hi', 42)"}, "hi 42\nundefined\n", ""},
		{"tensor", []string{"tensor.fromArray([[1, 2], [3, 4]])"}, "tensor([[1, 2],\n        [3, 4]])\n", ""},
		{"float tensor", []string{"tensor.ones([2]).mul(0.5)"}, "tensor([0.5000, 0.5000])\n", ""},
		{"declarations print nothing", []string{"var a = 1", "let b = 2", "const c = 3", "function f() {}", "class K {}"}, "", ""},
		{"declaration after a value", []string{"1; var z = 2"}, "1\n", ""},
		{"block value", []string{"if (true) { 7 }"}, "7\n", ""},
		{"blank and comment lines", []string{"", "   ", "// nothing"}, "", ""},
		{"multi-line function", []string{"function sq(x) {", "  return x * x;", "}", "sq(12)"}, "144\n", ""},
		{"multi-line call", []string{"Math.max(", "  3,", "  9)"}, "9\n", ""},
		{"multi-line template", []string{"`a", "b`"}, "\"a\\nb\"\n", ""},
		{"multi-line comment", []string{"/* a", "b */ 5"}, "5\n", ""},
		{"object literal", []string{"{ a: 1, b: 'x' }"}, "{ a: 1, b: \"x\" }\n", ""},
		{"multi-line object literal", []string{"{", "  a: [1, 2],", "  b: { c: 3 }", "}"}, "{ a: [ 1, 2 ], b: { c: 3 } }\n", ""},
		{"multi-line object in assignment", []string{"o = {", "  k: 1", "}", "o.k"}, "{ k: 1 }\n1\n", ""},
		{"block is not an object", []string{"{ let q = 4; q * 2 };"}, "8\n", ""},
		{"redeclared let", []string{"let x = 1", "let x = 2", "x"}, "2\n", ""},
		{"redeclared const", []string{"const y = 1", "const y = 'two'", "y"}, "\"two\"\n", ""},
		{"const destructuring", []string{"const { sqrt } = Math", "const [p, q] = [3, 4]", "sqrt(p * p + q * q)"}, "5\n", ""},
		{"redeclared class", []string{"class A { f() { return 1 } }", "class A { f() { return 2 } }", "new A().f()"}, "2\n", ""},
		{"class then call line", []string{"class B {}", "(1)"}, "1\n", ""},
		{"let becomes a global", []string{"let g = 5", "globalThis.g"}, "5\n", ""},
		{"nested let stays block-scoped", []string{"for (let i = 0; i < 2; i++) {}", "typeof i"}, "undefined\n\"undefined\"\n", ""},
		{"let in a string is untouched", []string{"'let x = 1; const y'"}, "\"let x = 1; const y\"\n", ""},
		{"function redeclared", []string{"function h() { return 1 }", "function h() { return 2 }", "h()"}, "2\n", ""},
		{"zeroeng globals", []string{"typeof nn.Linear + ' ' + dist.worldSize"}, "\"function 1\"\n", ""},
		{"require", []string{"const { tensor: T } = require('zeroeng')", "T.zeros([1])"}, "tensor([0.])\n", ""},
		{"reference error", []string{"nope + 1"}, "", "REPL1:1:1: ReferenceError: nope is not defined"},
		{"thrown error", []string{"function bad() { throw new Error('boom') }", "bad()"}, "", "REPL1:1:24: Error: boom\nat bad (REPL1:1:24)\nat <anonymous> (REPL2:1:4)"},
		{"syntax error", []string{"1 +* 2"}, "", "REPL1:1:4: SyntaxError: Unexpected token *"},
		{"unterminated string is an error", []string{"'abc"}, "", "SyntaxError"},
		{"error keeps the column of a const", []string{"const w = missing"}, "", "REPL1:1:11: ReferenceError: missing is not defined"},
		{"engine error", []string{"tensor.ones([2, 3]).matmul(tensor.ones([2, 3]))"}, "", "REPL1:1:"},
		{"usable after an error", []string{"throw 1", "2"}, "2\n", "Uncaught 1"},
		{".break abandons the entry", []string{"function broken() {", ".break", "3"}, "3\n", ""},
		{".clear abandons the entry", []string{"[1,", ".clear", "4"}, "4\n", ""},
		{"unknown command", []string{".nope"}, "", "invalid REPL command .nope"},
		{"number starting with a dot", []string{".5 + 1"}, "1.5\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, stdout, stderr := newTestREPL(t, 1)
			submitAll(t, r, tt.lines...)
			if r.Pending() {
				t.Errorf("entry still pending after %q", tt.lines)
			}
			if got := stdout.String(); got != tt.stdout {
				t.Errorf("stdout = %q, want %q", got, tt.stdout)
			}
			got := stderr.String()
			if tt.stderr == "" && got != "" {
				t.Errorf("stderr = %q, want nothing", got)
			}
			for _, want := range strings.Split(tt.stderr, "\n") {
				if !strings.Contains(got, want) {
					t.Errorf("stderr = %q, want it to contain %q", got, want)
				}
			}
		})
	}
}

func TestREPLChainedMethod(t *testing.T) {
	// Inside an entry, a line that starts with a dot but is no known
	// command is JavaScript: a chained call.
	r, stdout, stderr := newTestREPL(t, 1)
	submitAll(t, r, "Math.max(1,", "  [5].map(v => v * 2)", "  .pop())")
	if got := stdout.String(); got != "10\n" || stderr.String() != "" {
		t.Errorf("stdout = %q, stderr = %q; want 10", got, stderr.String())
	}
}

func TestREPLMore(t *testing.T) {
	r, _, _ := newTestREPL(t, 1)
	for _, l := range []string{"function f() {", "if (true) {", "return `x", "${1 +"} {
		res := submitAll(t, r, l)
		if !res.More || !r.Pending() {
			t.Fatalf("after %q: More = %v, Pending = %v; want both", l, res.More, r.Pending())
		}
	}
	res := submitAll(t, r, "2}`}}")
	if res.More || r.Pending() || len(res.Outputs) != 1 || res.Outputs[0].Err != nil {
		t.Fatalf("complete entry: %+v", res)
	}
	if res := submitAll(t, r, "f()"); res.Outputs[0].Value != `"x\n3"` {
		t.Errorf("f() = %q", res.Outputs[0].Value)
	}
}

func TestREPLLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "lib.js")
	src := "const scale = 3;\nfunction triple(v) {\n  return v * scale;\n}\ntriple(2)\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.js")
	if err := os.WriteFile(bad, []byte("let ok = 1;\nundefinedName();\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, stdout, stderr := newTestREPL(t, 1)
	submitAll(t, r, ".load "+file, "triple(5)", ".load "+file)
	if got, want := stdout.String(), "6\n15\n6\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	submitAll(t, r, ".load "+bad)
	if got, want := stderr.String(), bad+":2:14: ReferenceError: undefinedName is not defined"; !strings.Contains(got, want) {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	res := submitAll(t, r, ".load "+filepath.Join(dir, "missing.js"))
	if len(res.Outputs) != 1 || res.Outputs[0].Err == nil || !strings.Contains(stderr.String(), "missing.js") {
		t.Errorf("missing file: %+v, stderr %q", res, stderr.String())
	}
}

func TestREPLCommands(t *testing.T) {
	r, stdout, _ := newTestREPL(t, 1)
	submitAll(t, r, ".help")
	for _, want := range []string{".break", ".clear", ".exit", ".help", ".load"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf(".help does not mention %s:\n%s", want, stdout.String())
		}
	}
	// .exit works in the middle of an entry, like every known command.
	if res := submitAll(t, r, "function f() {", ".exit"); !res.Exit {
		t.Errorf(".exit: %+v", res)
	}
	r.Close()
	if _, err := r.Submit("1"); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
}

func TestREPLRanks(t *testing.T) {
	r, stdout, stderr := newTestREPL(t, 2)
	res := submitAll(t, r, "dist.rank")
	if len(res.Outputs) != 2 || res.Outputs[0].Value != "0" || res.Outputs[1].Value != "1" {
		t.Errorf("dist.rank outputs: %+v", res.Outputs)
	}
	submitAll(t, r, "let w = dist.worldSize * 10 + dist.rank", "w", "tensor.fromArray([dist.rank, 7])")
	want := "[0] 0\n[1] 1\n[0] 20\n[1] 21\n[0] tensor([0, 7])\n[1] tensor([1, 7])\n"
	if got := stdout.String(); got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	submitAll(t, r, "if (dist.rank === 1) throw new Error('only one')")
	if got := stderr.String(); !strings.HasPrefix(got, "[1] REPL5:1:28: Error: only one\n[1]     at") {
		t.Errorf("stderr = %q", got)
	}
	// console output is prefixed by the rank's runtime; values by the REPL.
	stdout.b.Reset()
	submitAll(t, r, "console.log('r' + dist.rank); dist.rank")
	got := stdout.String()
	for _, want := range []string{"[0] r0\n", "[1] r1\n", "[0] 0\n[1] 1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("stdout = %q, want %q", got, want)
		}
	}
}

// TestREPLCollectives: the ranks of a REPL form one process group, so
// collectives can be tried at the prompt; Ctrl-C frees a rank stuck in a
// collective that the other ranks never called.
func TestREPLCollectives(t *testing.T) {
	r, stdout, stderr := newTestREPL(t, 2)
	submitAll(t, r, "const x = tensor.ones([2]).mul(dist.rank + 1)", "dist.allReduce(x).wait()")
	if want := "[0] tensor([3., 3.])\n[1] tensor([3., 3.])\n"; stdout.String() != want {
		t.Errorf("stdout = %q, want %q", stdout.String(), want)
	}
	done := make(chan Result)
	go func() {
		res, _ := r.Submit("if (dist.rank === 0) dist.barrier().wait()")
		done <- res
	}()
	time.Sleep(200 * time.Millisecond)
	r.Interrupt()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Ctrl-C did not free the rank waiting in a collective")
	}
	if !strings.Contains(stderr.String(), "Ctrl-C stopped a collective") || !strings.Contains(stderr.String(), "the process group was made again") {
		t.Errorf("stderr = %q", stderr.String())
	}
	// The session goes on: its variables, and collectives on a new group.
	stdout.b.Reset()
	submitAll(t, r, "dist.allReduce(x).wait()")
	if want := "[0] tensor([6., 6.])\n[1] tensor([6., 6.])\n"; stdout.String() != want {
		t.Errorf("after Ctrl-C: stdout = %q, want %q", stdout.String(), want)
	}
}

// TestREPLCollectiveTimeout: a collective that only some ranks call fails
// after the REPL's timeout, naming the ranks that did not call it; the
// process group is made again and what was made on it (DDP) keeps working.
func TestREPLCollectiveTimeout(t *testing.T) {
	var stdout, stderr lockedBuffer
	r, err := NewREPL(REPLOptions{Ranks: 3, Rank: Options{Stdout: &stdout, Stderr: &stderr}, Dist: dist.Options{Timeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	submitAll(t, r, "tensor.manualSeed(1); const net = nn.Linear(2, 1), model = nn.parallel.DistributedDataParallel(net)")
	start := time.Now()
	res := submitAll(t, r, "if (dist.rank !== 2) dist.barrier().wait()")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the entry took %v with a 300ms timeout", d)
	}
	for rank, o := range res.Outputs {
		if rank < 2 && (o.Err == nil || !strings.Contains(o.Err.Error(), "rank 2 did not call it")) {
			t.Errorf("rank %d: %v, want a timeout naming rank 2", rank, o.Err)
		}
	}
	if !strings.Contains(stderr.String(), "the process group was made again") {
		t.Errorf("stderr = %q", stderr.String())
	}
	stdout.b.Reset()
	submitAll(t, r, "model.forward(tensor.ones([1, 2]).mul(dist.rank)).sum().backward(); net.weight.grad.sum().item()")
	// Inputs 0, 1, 2 averaged over three ranks: each weight's gradient is 1.
	if want := "[0] 2\n[1] 2\n[2] 2\n"; stdout.String() != want {
		t.Errorf("DDP after the reset: stdout = %q, want %q (stderr %q)", stdout.String(), want, stderr.String())
	}
}

func TestREPLInterrupt(t *testing.T) {
	for _, ranks := range []int{1, 2} {
		r, stdout, stderr := newTestREPL(t, ranks)
		done := make(chan Result)
		go func() {
			res, _ := r.Submit("while (true) {}")
			done <- res
		}()
		// Interrupt until the loop stops: the first may come before the
		// evaluation starts, when there is nothing to stop yet.
		var res Result
	wait:
		for deadline := time.Now().Add(10 * time.Second); ; {
			r.Interrupt()
			select {
			case res = <-done:
				break wait
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("the loop was not interrupted")
			}
		}
		for _, o := range res.Outputs {
			var se *Error
			if !errors.As(o.Err, &se) || !se.Interrupted {
				t.Errorf("rank %d: %v, want an interrupted error", o.Rank, o.Err)
			}
		}
		if !strings.Contains(stderr.String(), "interrupted") {
			t.Errorf("stderr = %q", stderr.String())
		}
		// The REPL stays usable, with no interrupt left over.
		if r.Interrupt() {
			t.Error("Interrupt reports a running evaluation on an idle REPL")
		}
		stdout.b.Reset()
		submitAll(t, r, "let n = 0; for (let i = 0; i < 100000; i++) n += i; n")
		want := "4999950000\n"
		if ranks > 1 {
			want = "[0] 4999950000\n[1] 4999950000\n"
		}
		if got := stdout.String(); got != want {
			t.Errorf("after the interrupt: stdout = %q, want %q", got, want)
		}
		// Interrupt abandons a partial entry.
		submitAll(t, r, "function g() {")
		r.Interrupt()
		if r.Pending() {
			t.Error("Interrupt left the partial entry pending")
		}
	}
}

func TestREPLComplete(t *testing.T) {
	r, _, _ := newTestREPL(t, 1)
	submitAll(t, r, "const myTensor = tensor.ones([2])", "let myValue = { alpha: 1, beta: 2 }")
	tests := []struct {
		before, word string
		want         []string // all of them, in order, when exact; else a subset
		exact        bool
	}{
		{"tensor.ra", "tensor.ra", []string{"tensor.rand", "tensor.randint", "tensor.randn", "tensor.randperm"}, true},
		{"x = nn.Li", "nn.Li", []string{"nn.Linear"}, true},
		{"nn.functional.cross", "nn.functional.cross", []string{"nn.functional.crossEntropy"}, true},
		{"myV", "myV", []string{"myValue"}, true},
		{"myValue.a", "myValue.a", []string{"myValue.alpha"}, true},
		{"myTensor.su", "myTensor.su", []string{"myTensor.sub", "myTensor.sum"}, false},
		{"myTensor.sh", "myTensor.sh", []string{"myTensor.shape"}, true},
		{"ten", "ten", []string{"tensor"}, true},
		{"cons", "cons", []string{"console", "const", "constructor"}, true},
		{"Math.sq", "Math.sq", []string{"Math.sqrt"}, true},
		{`require("zeroeng").op`, `require("zeroeng").op`, []string{`require("zeroeng").optim`}, true},
		{"[1].ma", "", nil, true},
		{"nothing.here", "nothing.here", nil, true},
		{".lo", ".lo", []string{".load"}, true},
		{"1.", "", nil, true},
	}
	for _, tt := range tests {
		word, got := r.Complete(tt.before)
		if word != tt.word {
			t.Errorf("Complete(%q) word = %q, want %q", tt.before, word, tt.word)
		}
		if tt.exact && strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("Complete(%q) = %q, want %q", tt.before, got, tt.want)
		}
		for _, w := range tt.want {
			if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+w+" ") {
				t.Errorf("Complete(%q) = %q, want it to include %q", tt.before, got, w)
			}
		}
	}
}

func TestRedeclarable(t *testing.T) {
	tests := []struct{ src, want string }{
		{"let a = 1", "var a = 1"},
		{"const b = 2, c = 3;", "var   b = 2, c = 3;"},
		{"  let {d} = o; const [e] = p", "  var {d} = o; var   [e] = p"},
		{"class F extends G { m() { let h } }", "var F = class F extends G { m() { let h } };"},
		{"if (x) { let i = 1 }", "if (x) { let i = 1 }"},
		{"'let j' + `const k`", "'let j' + `const k`"},
		{"function l() { const m = 1 }", "function l() { const m = 1 }"},
	}
	for _, tt := range tests {
		prog, err := parseEntry("t", tt.src)
		if err != nil {
			t.Fatalf("%q: %v", tt.src, err)
		}
		if got := redeclarable(tt.src, prog); got != tt.want {
			t.Errorf("redeclarable(%q) = %q, want %q", tt.src, got, tt.want)
		}
	}
}

// TestREPLInspectForms: the REPL prints the engine's objects in short,
// PyTorch-like forms, never Go internals.
func TestREPLInspectForms(t *testing.T) {
	r, stdout, stderr := newTestREPL(t, 1)
	for _, c := range []struct{ entry, want string }{
		{"const m = nn.Sequential(nn.Linear(4, 8), nn.ReLU()); m", "Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=True)\n  (1): ReLU()\n)"},
		{"const o = optim.AdamW(m.parameters(), { lr: 1e-3 }); o", "AdamW (\nParameter Group 0\n    amsgrad: False\n    betas: (0.9, 0.999)\n    eps: 1e-08\n    lr: 0.001\n    maximize: False\n    weightDecay: 0.01\n)"},
		{"class Plain extends optim.Optimizer { constructor(p) { super(p, { lr: 0.1, nesterov: true }); } }; new Plain(m.parameters())", "Plain (\nParameter Group 0\n    lr: 0.1\n    nesterov: True\n)"},
		{"const f = dist.allReduce(tensor.ones([2])); f.wait(); f", "Future { tensor([1., 1.]) }"},
		{"f.then(v => v)", "Future { <pending> }"},
		{"f.wait", "[Function: wait]"},
		{"tensor.ones", "[Function: ones]"},
		{"({ [Symbol.for('nodejs.util.inspect.custom')]() { return 'mine' } })", "mine"},
	} {
		stdout.b.Reset()
		submitAll(t, r, c.entry)
		if got := strings.TrimSuffix(stdout.String(), "\n"); got != c.want {
			t.Errorf("%s\nprints %q\nwant   %q\nstderr %q", c.entry, got, c.want, stderr.String())
		}
	}
}
