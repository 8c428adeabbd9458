package script

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// The conformance suite of the program ABI (docs/wasm-program-abi.md):
// every host function of module "zeroeng", called by hand-written WAT
// programs with good arguments and with what a careless or hostile
// program hands it — handles never given or released, handles of another
// kind, pointers past the memory, lengths of 0xFFFFFFFF, ptr+len that
// wraps around 2^32, dtype 99, ndim 17, shapes whose byte size overflows,
// JSON nested 100 deep — each ending in its status and a message that
// names the problem, never a Go trace, an "internal error" or a hang.
// Each hostile case runs twice: once clearing the failure (the program
// goes on, its next call works), once leaving it pending (the next call
// ends the rank with the original message).
//
// Hand-written WAT rather than an SDK: an SDK never passes a pointer past
// the memory or a negative length, and the raw i32s are the point.
//
// The expectations are the ABI document's (statuses, "failures are not
// lost", the lifetimes of handles and frames). A case that fails shows
// the host departing from it: fix the host, or the document, rather than
// the case.

// confPrelude is the WAT helper library every conformance program starts
// with: the imports, a fixed memory layout, and helpers that print
// through WASI's fd_write.
//
// Memory (one page, 65536 bytes, and no more: a memory without a maximum
// is allocated at --wasm-memory-mb, 512 MiB to clear for every run):
//
//	0     fd_write's iovec and count        64  LEN: u32 len_out
//	68    H: u32 handle out                  72  PREV: grad_enabled's u32
//	76    ID: u32 scope id                   80  MLEN: error_message's length
//	88    ABI: abi_info's two u32            128 SHAPE: tensor_shape's 136 bytes
//	512   ARGS: JSON made by $args_h         1024 MSG: the message, 2048 bytes
//	4096  OUT: results, 4096 bytes           8192 the strings of S"…" and P"…"
//	32768 FREE: the case's own               49152 ARGV: invoke's records
//
// In a body, S"text" stands for (i32.const ptr) (i32.const len) of a
// string in a data segment (WAT escapes: \ff is byte 0xff), P"text" for
// its pointer alone, and @out for OUT, its capacity and LEN: a call's
// last three arguments.
const confPrelude = `
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "zeroeng" "abi_info" (func $abi_info (param i32) (result i32)))
  (import "zeroeng" "error_message" (func $error_message (param i32 i32 i32) (result i32)))
  (import "zeroeng" "error_clear" (func $error_clear (result i32)))
  (import "zeroeng" "call" (func $call (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "zeroeng" "call_method" (func $call_method (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "zeroeng" "get" (func $get (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "zeroeng" "set" (func $set (param i32 i32 i32 i32 i32) (result i32)))
  (import "zeroeng" "result_read" (func $result_read (param i32 i32) (result i32)))
  (import "zeroeng" "release" (func $release (param i32) (result i32)))
  (import "zeroeng" "scope_open" (func $scope_open (param i32) (result i32)))
  (import "zeroeng" "scope_close" (func $scope_close (param i32 i32 i32) (result i32)))
  (import "zeroeng" "grad_enabled" (func $grad_enabled (param i32 i32) (result i32)))
  (import "zeroeng" "tensor_from_bytes" (func $tensor_from_bytes (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "zeroeng" "tensor_data" (func $tensor_data (param i32 i32 i32 i32) (result i32)))
  (import "zeroeng" "tensor_shape" (func $tensor_shape (param i32 i32) (result i32)))
  {{imports11}}
  (memory (export "memory") 1 1)
  (func (export "zeroeng_program_abi_v1"))

  (global $keep (mut i32) (i32.const 0))
  (global $LEN i32 (i32.const 64))
  (global $H i32 (i32.const 68))
  (global $PREV i32 (i32.const 72))
  (global $ID i32 (i32.const 76))
  (global $MLEN i32 (i32.const 80))
  (global $ABI i32 (i32.const 88))
  (global $SHAPE i32 (i32.const 128))
  (global $ARGS i32 (i32.const 512))
  (global $MSG i32 (i32.const 1024))
  (global $OUT i32 (i32.const 4096))
  (global $CAP i32 (i32.const 4096))
  (global $FREE i32 (i32.const 32768))
  (global $ARGV i32 (i32.const 49152))

  (func $h (result i32) (i32.load (global.get $H)))
  (func $len (result i32) (i32.load (global.get $LEN)))

  (func $print (param $p i32) (param $n i32)
    (i32.store (i32.const 0) (local.get $p))
    (i32.store (i32.const 4) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))

  ;; $print_u32 prints v in decimal, unsigned.
  (func $print_u32 (param $v i32)
    (local $i i32)
    (local.set $i (i32.const 48))
    (loop $digits
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (i32.store8 (local.get $i) (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $digits (local.get $v)))
    (call $print (local.get $i) (i32.sub (i32.const 48) (local.get $i))))

  ;; $show prints "label v".
  (func $show (param $p i32) (param $n i32) (param $v i32)
    (call $print (local.get $p) (local.get $n))
    (call $print S" ")
    (call $print_u32 (local.get $v))
    (call $print S"\n"))

  ;; $message prints the pending failure's message (2048 bytes at most).
  (func $message
    (drop (call $error_message (global.get $MSG) (i32.const 2048) (global.get $MLEN)))
    (call $print (global.get $MSG) (select (i32.load (global.get $MLEN)) (i32.const 2048)
      (i32.lt_u (i32.load (global.get $MLEN)) (i32.const 2048)))))

  ;; $report prints "status N: message <end>" for the call under test (a
  ;; message may have several lines: a trap's stack) and
  ;; clears the failure, unless the program was given an argument (keep
  ;; mode), when it leaves the failure pending.
  (func $report (param $st i32)
    (call $print S"status ")
    (call $print_u32 (local.get $st))
    (call $print S": ")
    (call $message)
    (call $print S" <end>\n")
    (if (i32.eqz (global.get $keep)) (then (drop (call $error_clear)))))

  ;; $must is for the calls that set a case up: any status but OK ends
  ;; the program with status 99, printing it and the message.
  (func $must (param $st i32)
    (if (local.get $st) (then
      (call $print S"FAIL status ")
      (call $print_u32 (local.get $st))
      (call $print S": ")
      (call $message)
      (call $print S"\n")
      (call $proc_exit (i32.const 99)))))

  ;; $print_out prints "out <the result in OUT>".
  (func $print_out
    (call $print S"out ")
    (call $print (global.get $OUT) (select (call $len) (global.get $CAP) (i32.lt_u (call $len) (global.get $CAP))))
    (call $print S"\n"))

  ;; $handle_out is the handle of a result {"$":N,...} in OUT.
  (func $handle_out (result i32) (call $handle_at (i32.add (global.get $OUT) (i32.const 5))))

  ;; $handle_at reads the decimal number at p.
  (func $handle_at (param $p i32) (result i32)
    (local $v i32) (local $c i32)
    (block $end (loop $digits
      (local.set $c (i32.sub (i32.load8_u (local.get $p)) (i32.const 48)))
      (br_if $end (i32.gt_u (local.get $c) (i32.const 9)))
      (local.set $v (i32.add (i32.mul (local.get $v) (i32.const 10)) (local.get $c)))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br $digits)))
    (local.get $v))

  ;; $put_u32 writes v in decimal at p and returns the end.
  (func $put_u32 (param $p i32) (param $v i32) (result i32)
    (local $i i32) (local $n i32)
    (local.set $i (i32.const 48))
    (loop $digits
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (i32.store8 (local.get $i) (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $digits (local.get $v)))
    (local.set $n (i32.sub (i32.const 48) (local.get $i)))
    (memory.copy (local.get $p) (local.get $i) (local.get $n))
    (i32.add (local.get $p) (local.get $n)))

  ;; $args_h writes [{"$":h}] at ARGS and returns its length.
  (func $args_h (param $h i32) (result i32)
    (local $p i32)
    (memory.copy (global.get $ARGS) P"[{\"$\":" (i32.const 6))
    (local.set $p (call $put_u32 (i32.add (global.get $ARGS) (i32.const 6)) (local.get $h)))
    (i32.store16 (local.get $p) (i32.const 0x5d7d)) ;; }]
    (i32.sub (i32.add (local.get $p) (i32.const 2)) (global.get $ARGS)))

  ;; $arg_h and $arg_num write invoke's argument record i: a handle, a
  ;; number; $arg_tag one of any tag.
  (func $arg_tag (param $i i32) (param $tag i32) (param $h i32) (param $x f64)
    (local $p i32)
    (local.set $p (i32.add (global.get $ARGV) (i32.shl (local.get $i) (i32.const 4))))
    (i32.store (local.get $p) (local.get $tag))
    (i32.store offset=4 (local.get $p) (local.get $h))
    (f64.store offset=8 (local.get $p) (local.get $x)))
  (func $arg_h (param $i i32) (param $h i32) (call $arg_tag (local.get $i) (i32.const 0) (local.get $h) (f64.const 0)))
  (func $arg_num (param $i i32) (param $x f64) (call $arg_tag (local.get $i) (i32.const 1) (i32.const 0) (local.get $x)))

  ;; $tensor makes the float32 tensor [[1,2,3],[4,5,6]] and returns its
  ;; handle.
  (func $tensor (result i32)
    (call $must (call $tensor_from_bytes (i32.const 0)
      P"\02\00\00\00\00\00\00\00\03\00\00\00\00\00\00\00" (i32.const 2)
      S"\00\00\80\3f\00\00\00\40\00\00\40\40\00\00\80\40\00\00\a0\40\00\00\c0\40" (global.get $H)))
    (call $h))

  ;; $object makes nn.Linear(3, 2) and returns its handle.
  (func $object (result i32)
    (call $must (call $call S"nn.Linear" S"[3,2]" @out))
    (call $handle_out))

  ;; $then shows that the program goes on: an ordinary call after the
  ;; case. In keep mode the host ends the program here instead.
  (func $then
    (call $show S"then" (call $call S"tensor.manualSeed" S"[0]" @out)))

  (func (export "_start")
    (drop (call $args_sizes_get (i32.const 0) (i32.const 4)))
    (global.set $keep (i32.gt_u (i32.load (i32.const 0)) (i32.const 1)))
    (call $case)
    {{then}})
`

// confImports11 are the imports of ABI 1.1 (callbacks, handle-only calls).
const confImports11 = `
  (import "zeroeng" "function_new" (func $function_new (param i32 i32) (result i32)))
  (import "zeroeng" "frame_args" (func $frame_args (param i32 i32 i32 i32) (result i32)))
  (import "zeroeng" "frame_return" (func $frame_return (param i32 i32 i32) (result i32)))
  (import "zeroeng" "error_set" (func $error_set (param i32 i32) (result i32)))
  (import "zeroeng" "lookup" (func $lookup (param i32 i32 i32) (result i32)))
  (import "zeroeng" "invoke" (func $invoke (param i32 i32 i32 i32) (result i32)))
  (import "zeroeng" "invoke_method" (func $invoke_method (param i32 i32 i32 i32 i32 i32) (result i32)))`

// confProgram is a conformance program: the prelude's helpers, the
// case's own functions (funcs), its zeroeng_callback export when callback
// is not "", and _start running body then $then (unless noThen).
type confProgram struct {
	imports  string // more imports
	funcs    string // module-level WAT: functions, globals
	body     string // the instructions of $case
	callback string // the body of zeroeng_callback(id, frame) -> i32; "" for no export
	abi11    bool   // imports the functions of ABI 1.1
	noThen   bool   // _start ends after the case, without $then
}

var (
	confStringRE = regexp.MustCompile(`(^|[\s(])([SP])"((?:[^"\\]|\\.)*)"`)
	confEscapeRE = regexp.MustCompile(`\\([0-9a-fA-F]{2}|[nrt"'\\])`)
)

// wat returns the program's WAT text, its S"…" and P"…" strings placed in
// data segments.
func (c confProgram) wat() string {
	var src strings.Builder
	src.WriteString("(module\n")
	prelude := confPrelude
	imports := c.imports
	if c.abi11 {
		imports += confImports11
	}
	prelude = strings.Replace(prelude, "{{imports11}}", imports, 1)
	then := "(call $then)"
	if c.noThen {
		then = ""
	}
	prelude = strings.Replace(prelude, "{{then}}", then, 1)
	src.WriteString(prelude)
	src.WriteString(c.funcs)
	if c.callback != "" {
		src.WriteString("\n  (func (export \"zeroeng_callback\") (param $id i32) (param $frame i32) (result i32)\n    (local $h i32) (local $h2 i32) (local $st i32) (local $i i32)\n")
		src.WriteString(c.callback)
		src.WriteString(")\n")
	}
	src.WriteString("\n  (func $case (local $h i32) (local $h2 i32) (local $h3 i32) (local $st i32) (local $i i32) (local $f i32)\n")
	src.WriteString(c.body)
	src.WriteString(")\n")
	text := strings.ReplaceAll(src.String(), "@out", "(global.get $OUT) (global.get $CAP) (global.get $LEN)")

	// The strings, each once, from 8192 on.
	addr := map[string]int{}
	var data strings.Builder
	next := 8192
	text = confStringRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := confStringRE.FindStringSubmatch(m)
		lead, kind, lit := sub[1], sub[2], sub[3]
		n := len(confUnescape(lit))
		p, ok := addr[lit]
		if !ok {
			p = next
			addr[lit] = p
			next += n + 1
			fmt.Fprintf(&data, "  (data (i32.const %d) \"%s\")\n", p, lit)
		}
		if kind == "P" {
			return fmt.Sprintf("%s(i32.const %d)", lead, p)
		}
		return fmt.Sprintf("%s(i32.const %d) (i32.const %d)", lead, p, n)
	})
	if next > 32768 {
		panic("conformance program: the strings run past 32768")
	}
	return text + data.String() + ")\n"
}

// confUnescape decodes a WAT string's escapes (those the cases use).
func confUnescape(s string) string {
	return confEscapeRE.ReplaceAllStringFunc(s, func(e string) string {
		switch e[1] {
		case 'n':
			return "\n"
		case 'r':
			return "\r"
		case 't':
			return "\t"
		case '"', '\'', '\\':
			return e[1:]
		}
		b, _ := strconv.ParseUint(e[1:], 16, 8)
		return string([]byte{byte(b)})
	})
}

// confRun is how a conformance program runs.
type confRun struct {
	ranks     int
	maxMemory int64         // JobOptions.MaxMemory (--max-memory)
	limits    wasm.Config   // --wasm-memory-mb, --wasm-trusted
	timeout   time.Duration // cancels the job (a loop's interruption)
	args      []string
}

// confHang is how long a run may take before the suite calls it a hang.
const confHang = 60 * time.Second

// runConf runs wasmBytes and returns its standard output and error and the
// job's error. A run that does not return is a failure of the test, with
// the goroutines' stacks: a hang of the host.
func runConf(t *testing.T, wasmBytes []byte, rc confRun) (string, string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prog.wasm")
	if err := os.WriteFile(path, wasmBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if rc.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rc.timeout)
		defer cancel()
	}
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- RunJob(ctx, path, JobOptions{Ranks: max(1, rc.ranks), MaxMemory: rc.maxMemory,
			Rank: Options{Stdout: &out, Stderr: &errOut, AutoRelease: true, Args: rc.args, Program: rc.limits}})
	}()
	select {
	case err := <-done:
		return out.String(), errOut.String(), err
	case <-time.After(confHang):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("the program did not end in %v (a hang of the host); output so far:\n%s%s\ngoroutines:\n%s", confHang, out.String(), errOut.String(), buf)
		return "", "", nil
	}
}

// syncBuffer is a bytes.Buffer the ranks of a job may write at once, and
// the test read while they do (a hang's report).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// confTraceRE matches what must never reach a program's user: a Go panic
// or its trace, a runtime error, a recovered "internal error".
var confTraceRE = regexp.MustCompile(`goroutine \d+ \[|panic:|runtime error|internal error|\.go:\d+|nil pointer`)

// noTrace fails the test when any of texts shows a Go trace or an
// internal error: the host must turn everything into a clear error.
func noTrace(t *testing.T, what string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if m := confTraceRE.FindString(s); m != "" {
			t.Errorf("HOST BUG: %s shows %q (a Go trace or an internal error), in:\n%s", what, m, s)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// hostCase is a case of one host function: body calls it, with
// (call $report <status>) around the call under test.
type hostCase struct {
	name     string // "function/what": the function is the one whose failure the message names
	fn       string // the function the message names, when not the name's
	imports  string
	funcs    string
	body     string
	callback string      // the body of zeroeng_callback, if the program exports it
	abi11    bool        // imports ABI 1.1's functions
	status   wasm.Status // the reported status
	// msg is what the failure's message says, besides the function and
	// the status's name; nil when the status is not a failure (OK, or
	// ERR_SIZE of a result that did not fit): nothing is pending then.
	msg   []string
	out   []string // more the output shows, in order
	check func(t *testing.T, out string)
	run   confRun
}

// checkHostCases runs each case twice: clearing the failure (the program
// goes on: "then 0") and, for a failure, leaving it pending (the rank
// fails with the original message, on its next call).
func checkHostCases(t *testing.T, cases []hostCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prog := confProgram{imports: c.imports, funcs: c.funcs, body: c.body, callback: c.callback, abi11: c.abi11 || c.callback != ""}
			wasmBytes := hookbuild.WAT(t, prog.wat())
			out, stderr, err := runConf(t, wasmBytes, c.run)
			noTrace(t, "the run", out, stderr, errString(err))
			if err != nil || strings.Contains(out, "FAIL") {
				t.Fatalf("error %v\noutput:\n%s%s", err, out, stderr)
			}
			t.Logf("output:\n%s", out)
			fn, _, _ := strings.Cut(c.name, "/")
			if c.fn != "" {
				fn = c.fn
			}
			line := fmt.Sprintf("status %d: ", c.status)
			i := strings.Index(out, line)
			if i < 0 {
				t.Fatalf("want %q (%v), got output:\n%s", line, c.status, out)
			}
			msg, _, _ := strings.Cut(out[i+len(line):], " <end>\n")
			if !utf8.ValidString(msg) {
				t.Errorf("the message %q is not UTF-8", msg)
			}
			if c.msg == nil {
				if msg != "" {
					t.Errorf("status %v is not a failure, but error_message says %q", c.status, msg)
				}
			} else {
				want := append([]string{"host call " + fn + " failed", "(" + c.status.String() + ")"}, c.msg...)
				for _, w := range want {
					if !strings.Contains(msg, w) {
						t.Errorf("the message %q does not say %q", msg, w)
					}
				}
			}
			rest := out
			for _, w := range append(c.out, "then 0\n") {
				j := strings.Index(rest, w)
				if j < 0 {
					t.Fatalf("the output does not show %q (in order); output:\n%s", w, out)
				}
				rest = rest[j+len(w):]
			}
			if c.check != nil {
				c.check(t, out)
			}
			if c.msg == nil && c.status == wasm.OK {
				return
			}
			// Keep mode: the failure left pending ends the rank at the
			// next call, with the original message; a status that is not
			// a failure (ERR_SIZE of a result) leaves nothing pending.
			rc := c.run
			rc.args = append(rc.args, "keep")
			out, stderr, err = runConf(t, wasmBytes, rc)
			noTrace(t, "the run that keeps the failure", out, stderr, errString(err))
			if c.msg == nil {
				if err != nil || !strings.Contains(out, "then 0\n") {
					t.Fatalf("status %v is not a failure, but the program's next call failed: %v\noutput:\n%s", c.status, err, out)
				}
				return
			}
			if err == nil || strings.Contains(out, "then ") {
				t.Fatalf("keeping the failure: error %v, want the original message; output:\n%s", err, out)
			}
			// The very message error_message gave (the runs are the same
			// up to the failure), whole; inside a callback it travels in
			// the exception of the call that led there, which names the
			// program once.
			for _, w := range []string{strings.TrimPrefix(msg, "prog.wasm: "), "without clearing the failure"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("keeping the failure: the rank's error %q does not say %q", err, w)
				}
			}
		})
	}
}

// nest is JSON n arrays deep.
func nest(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestProgramConformanceHost: every host function of ABI 1.0, with good
// arguments and hostile ones.
func TestProgramConformanceHost(t *testing.T) {
	checkHostCases(t, hostCases())
}

// hostCases are the cases of ABI 1.0's host functions.
func hostCases() []hostCase {
	return []hostCase{
		// abi_info
		{name: "abi_info/good", body: `
    (call $report (call $abi_info (global.get $ABI)))
    (call $show S"major" (i32.load (global.get $ABI)))
    (call $show S"minor" (i32.load offset=4 (global.get $ABI)))`,
			status: wasm.OK, out: []string{"major 1\n", "minor "},
			check: func(t *testing.T, out string) {
				// The minor version is the newest functions': 1 with
				// callbacks.
				if _, ok := programFuncs["function_new"]; ok && !strings.Contains(out, "minor 1\n") {
					t.Errorf("the host has ABI 1.1's functions, but abi_info does not say minor 1")
				}
			}},
		{name: "abi_info/out straddles the memory's end", body: `
    (call $report (call $abi_info (i32.const 65532)))`,
			status: wasm.ErrBounds, msg: []string{"8 bytes at 65532"}},
		{name: "abi_info/out wraps around 2^32", body: `
    (call $report (call $abi_info (i32.const 0xFFFFFFFC)))`,
			status: wasm.ErrBounds, msg: []string{"8 bytes at 4294967292"}},
		{name: "abi_info/runs while a failure is pending", fn: "release", body: `
    (local.set $st (call $release (i32.const 999)))
    (call $show S"abi_info" (call $abi_info (global.get $ABI)))
    (call $report (local.get $st))`,
			status: wasm.ErrHandle, msg: []string{"handle 999"}, out: []string{"abi_info 0\n"}},

		// error_message, error_clear
		{name: "error_message/nothing pending", body: `
    (call $report (call $error_message (global.get $MSG) (i32.const 2048) (global.get $MLEN)))
    (call $show S"len" (i32.load (global.get $MLEN)))`,
			status: wasm.OK, out: []string{"len 0\n"}},
		{name: "error_message/truncated to cap, its whole length written", fn: "release", body: `
    (local.set $st (call $release (i32.const 999)))
    (call $show S"st" (call $error_message (global.get $MSG) (i32.const 10) (global.get $MLEN)))
    (call $print S"part ") (call $print (global.get $MSG) (i32.const 10)) (call $print S"|\n")
    (call $show S"len" (i32.load (global.get $MLEN)))
    (call $report (local.get $st))`,
			status: wasm.ErrHandle, msg: []string{"handle 999"}, out: []string{"st 0\n", "part prog.wasm:|\n"},
			check: func(t *testing.T, out string) {
				// The length written is the whole message's.
				var n int
				fmt.Sscanf(out[strings.Index(out, "len "):], "len %d", &n)
				_, msg, _ := strings.Cut(out, "status 2: ")
				msg, _, _ = strings.Cut(msg, " <end>\n")
				if n != len(msg) {
					t.Errorf("error_message wrote the length %d, the message is %d bytes", n, len(msg))
				}
			}},
		{name: "error_message/cap 0 at a null buffer asks the length", fn: "release", body: `
    (local.set $st (call $release (i32.const 999)))
    (call $show S"st" (call $error_message (i32.const 0) (i32.const 0) (global.get $MLEN)))
    (call $show S"len" (i32.load (global.get $MLEN)))
    (call $report (local.get $st))`,
			status: wasm.ErrHandle, msg: []string{"handle 999"}, out: []string{"st 0\n", "len "}},
		{name: "error_message/buffer past the memory keeps the failure", fn: "release", body: `
    (local.set $st (call $release (i32.const 999)))
    (call $show S"buf" (call $error_message (i32.const 65530) (i32.const 2048) (global.get $MLEN)))
    (call $show S"wrap" (call $error_message (i32.const 0xFFFFFFF0) (i32.const 2048) (global.get $MLEN)))
    (call $show S"len_out" (call $error_message (global.get $MSG) (i32.const 2048) (i32.const 65534)))
    (call $report (local.get $st))`,
			status: wasm.ErrHandle, msg: []string{"handle 999"}, out: []string{"buf 3\n", "wrap 3\n", "len_out 3\n"}},
		{name: "error_clear/nothing pending", body: `
    (call $report (call $error_clear))`,
			status: wasm.OK},
		{name: "error_clear/clears", body: `
    (drop (call $release (i32.const 999)))
    (call $report (call $error_clear))
    (drop (call $error_message (global.get $MSG) (i32.const 2048) (global.get $MLEN)))
    (call $show S"len" (i32.load (global.get $MLEN)))`,
			status: wasm.OK, out: []string{"len 0\n"}},

		// call
		{name: "call/good", body: `
    (call $report (call $call S"tensor.randn" S"[[2,3]]" @out))
    (call $print_out)`,
			status: wasm.OK, out: []string{`out {"$":1,"type":"tensor"}`}},
		{name: "call/reads a value", body: `
    (call $report (call $call S"dist.worldSize" (i32.const 0) (i32.const 0) @out))
    (call $print_out)`,
			status: wasm.OK, out: []string{"out 1\n"}},
		{name: "call/constructs", body: `
    (call $report (call $call S"new nn.Linear" S"[3,2]" @out))
    (call $print_out)`,
			status: wasm.OK, out: []string{`"type":"object"}`}},
		{name: "call/result larger than the buffer is not a failure", body: `
    (call $report (call $call S"dist.worldSize" (i32.const 0) (i32.const 0) (global.get $OUT) (i32.const 0) (global.get $LEN)))
    (call $show S"len" (call $len))
    (call $show S"read" (call $result_read (global.get $OUT) (i32.const 1)))
    (call $print_out)`,
			status: wasm.ErrSize, out: []string{"len 1\n", "read 0\n", "out 1\n"}},
		{name: "call/path past the memory", body: `
    (call $report (call $call (i32.const 0xFFFFFFF0) (i32.const 32) (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrBounds, msg: []string{"32 bytes at 4294967280", "65536 bytes of memory"}},
		{name: "call/path length 0xFFFFFFFF", body: `
    (call $report (call $call P"tensor.randn" (i32.const -1) (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrBounds, msg: []string{"4294967295 bytes at"}},
		{name: "call/path ptr+len wraps around 2^32", body: `
    (call $report (call $call (i32.const 0xFFFFFF00) (i32.const 0x200) (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrBounds, msg: []string{"512 bytes at 4294967040"}},
		{name: "call/empty path", body: `
    (call $report (call $call (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrInvalid, msg: []string{`"" is not a path of the API`}},
		{name: "call/name not in the API", body: `
    (call $report (call $call S"tensor.randm" S"[[2]]" @out))`,
			status: wasm.ErrInvalid, msg: []string{`"tensor.randm" is not in the API`, "did you mean rand"}},
		{name: "call/empty segment", body: `
    (call $report (call $call S"tensor..randn" S"[[2]]" @out))`,
			status: wasm.ErrInvalid, msg: []string{`"tensor..randn"`, `"" names nothing`}},
		{name: "call/path through a number", body: `
    (call $report (call $call S"dist.rank.x" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrInvalid, msg: []string{`"dist.rank.x"`, `"x" names nothing`}},
		{name: "call/invalid UTF-8 in the path", body: `
    (call $report (call $call S"tensor.\ff\fe" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrInvalid, msg: []string{`"tensor.\xff\xfe" is not in the API`}},
		{name: "call/new alone", body: `
    (call $report (call $call S"new " (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrInvalid, msg: []string{"names nothing"}},
		{name: "call/args past the memory", body: `
    (call $report (call $call S"tensor.randn" (i32.const 65530) (i32.const 10) @out))`,
			status: wasm.ErrBounds, msg: []string{"10 bytes at 65530"}},
		{name: "call/args length 0xFFFFFFFF", body: `
    (call $report (call $call S"tensor.randn" P"[[2]]" (i32.const -1) @out))`,
			status: wasm.ErrBounds, msg: []string{"4294967295 bytes at"}},
		{name: "call/args JSON that does not parse", body: `
    (call $report (call $call S"tensor.randn" S"[[2,3]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"the arguments: JSON at byte 6", "unterminated array"}},
		{name: "call/args not an array", body: `
    (call $report (call $call S"tensor.randn" S"{\"a\":1}" @out))`,
			status: wasm.ErrInvalid, msg: []string{"the arguments must be a JSON array"}},
		{name: "call/args trailing bytes", body: `
    (call $report (call $call S"tensor.randn" S"[[2]] x" @out))`,
			status: wasm.ErrInvalid, msg: []string{`unexpected 'x' after the value at byte 6`}},
		{name: "call/args nest 100 deep", body: `
    (call $report (call $call S"tensor.randn" S"` + nest(100) + `" @out))`,
			status: wasm.ErrInvalid, msg: []string{"nested deeper than 64 levels"}},
		{name: "call/args nest 64 deep", body: `
    (call $report (call $call S"tensor.manualSeed" S"[0,` + nest(63) + `]" @out))`,
			status: wasm.OK},
		{name: "call/a huge JSON number", body: `
    (call $report (call $call S"tensor.full" S"[[1],1e999]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"1e999"}},
		{name: "call/a 400-digit JSON number", body: `
    (call $report (call $call S"tensor.full" S"[[1],1` + strings.Repeat("0", 400) + `]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"1000000"}},
		{name: "call/a number with a sign inside", body: `
    (call $report (call $call S"tensor.manualSeed" S"[1-2]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"the arguments: JSON", "1-2"}},
		{name: "call/a number with two points", body: `
    (call $report (call $call S"tensor.manualSeed" S"[1.2.3]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"the arguments: JSON", "1.2.3"}},
		{name: "call/a bad \\u escape", body: `
    (call $report (call $call S"tensor.manualSeed" S"[\"\\uZZZZ\"]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"the arguments: JSON", `bad \u escape`}},
		{name: "call/a NaN argument", body: `
    (call $must (call $call S"tensor.full" S"[[1],{\"$num\":\"NaN\"}]" @out))
    (call $report (call $call_method (call $handle_out) S"item" (i32.const 0) (i32.const 0) @out))
    (call $print_out)`,
			status: wasm.OK, out: []string{`out {"$num":"NaN"}`}},
		{name: "call/a bad $num", body: `
    (call $report (call $call S"tensor.full" S"[[1],{\"$num\":\"nan\"}]" @out))`,
			status: wasm.ErrInvalid, msg: []string{`{"$num": "nan"}`, `want "NaN", "Infinity" or "-Infinity"`}},
		{name: "call/a handle never given", body: `
    (call $report (call $call S"nn.functional.relu" S"[{\"$\":999}]" @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}},
		{name: "call/handle 0", body: `
    (call $report (call $call S"nn.functional.relu" S"[{\"$\":0}]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"handle 0 is not a handle number"}},
		{name: "call/a negative handle", body: `
    (call $report (call $call S"nn.functional.relu" S"[{\"$\":-1}]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"handle -1 is not a handle number"}},
		{name: "call/a handle that is a string", body: `
    (call $report (call $call S"nn.functional.relu" S"[{\"$\":\"one\"}]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"is not a handle number"}},
		{name: "call/the API raises", body: `
    (call $report (call $call S"tensor.randn" S"[\"x\"]" @out))`,
			status: wasm.ErrCall, msg: []string{"tensor.randn"}},
		{name: "call/a NaN size", body: `
    (call $report (call $call S"tensor.zeros" S"[[{\"$num\":\"NaN\"}]]" @out))`,
			status: wasm.ErrCall, msg: []string{"tensor.zeros", "NaN"}},
		{name: "call/a negative size", body: `
    (call $report (call $call S"tensor.zeros" S"[[2,-1]]" @out))`,
			status: wasm.ErrCall, msg: []string{"tensor.zeros", "-1"}},
		{name: "call/a size past memory", body: `
    (call $report (call $call S"tensor.zeros" S"[[1e12,1e12]]" @out))`,
			status: wasm.ErrCall, msg: []string{"tensor.zeros", "1000000000000"}},
		{name: "call/a value called with arguments", body: `
    (call $report (call $call S"dist.rank" S"[1]" @out))`,
			status: wasm.ErrCall, msg: []string{"dist.rank is not a function"}},
		{name: "call/new of a function that does not construct", body: `
    (call $report (call $call S"new tensor.randn" S"[[2]]" @out))`,
			status: wasm.ErrCall, msg: []string{"tensor.randn"}},
		{name: "call/out past the memory", body: `
    (call $report (call $call S"dist.rank" (i32.const 0) (i32.const 0) (i32.const 0xFFFFFF00) (i32.const 4096) (global.get $LEN)))`,
			status: wasm.ErrBounds, msg: []string{"4096 bytes at 4294967040"}},
		{name: "call/len_out past the memory", body: `
    (call $report (call $call S"dist.rank" (i32.const 0) (i32.const 0) (global.get $OUT) (global.get $CAP) (i32.const -1)))`,
			status: wasm.ErrBounds, msg: []string{"4 bytes at 4294967295"}},

		// call_method
		{name: "call_method/good", body: `
    (call $report (call $call_method (call $tensor) S"sum" (i32.const 0) (i32.const 0) @out))
    (call $must (call $call_method (call $handle_out) S"item" (i32.const 0) (i32.const 0) @out))
    (call $print_out)`,
			status: wasm.OK, out: []string{"out 21\n"}},
		{name: "call_method/handle never given", body: `
    (call $report (call $call_method (i32.const 999) S"sum" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}},
		{name: "call_method/handle 0", body: `
    (call $report (call $call_method (i32.const 0) S"sum" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 0 is not one the program holds"}},
		{name: "call_method/handle -1", body: `
    (call $report (call $call_method (i32.const -1) S"sum" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 4294967295 is not one the program holds"}},
		{name: "call_method/released handle", body: `
    (local.set $h (call $tensor))
    (call $must (call $release (local.get $h)))
    (call $report (call $call_method (local.get $h) S"sum" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 1 is not one the program holds (never given, or released)"}},
		{name: "call_method/no such method", body: `
    (call $report (call $call_method (call $tensor) S"nosuch" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrInvalid, msg: []string{"a tensor has no method nosuch"}},
		{name: "call_method/a property that is not a function", body: `
    (call $report (call $call_method (call $tensor) S"shape" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrCall, msg: []string{"tensor.shape is not a function"}},
		{name: "call_method/name past the memory", body: `
    (call $report (call $call_method (call $tensor) (i32.const 65535) (i32.const 2) (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrBounds, msg: []string{"2 bytes at 65535"}},
		{name: "call_method/invalid UTF-8 in the name", body: `
    (call $report (call $call_method (call $tensor) S"s\ffm" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrInvalid, msg: []string{"has no method"}},
		{name: "call_method/the method raises", body: `
    (call $report (call $call_method (call $tensor) S"reshape" S"[[7]]" @out))`,
			status: wasm.ErrCall, msg: []string{"tensor.reshape"}},
		{name: "call_method/args JSON that does not parse", body: `
    (call $report (call $call_method (call $tensor) S"reshape" S"[[6]" @out))`,
			status: wasm.ErrInvalid, msg: []string{"the arguments: JSON"}},
		{name: "call_method/a tensor gone with its scope", body: `
    (call $must (call $scope_open (global.get $ID)))
    (local.set $h (call $tensor))
    (call $must (call $scope_close (i32.load (global.get $ID)) (i32.const 0) (i32.const 0)))
    (call $report (call $call_method (local.get $h) S"sum" (i32.const 0) (i32.const 0) @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 1", "released", "scope"}},
		{name: "call/a tensor gone with its scope as an argument", body: `
    (call $must (call $scope_open (global.get $ID)))
    (local.set $h (call $tensor))
    (call $must (call $scope_close (i32.load (global.get $ID)) (i32.const 0) (i32.const 0)))
    (call $report (call $call S"nn.functional.relu" (global.get $ARGS) (call $args_h (local.get $h)) @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 1", "released", "scope"}},

		// get
		{name: "get/good", body: `
    (call $report (call $get (call $tensor) S"shape" @out))
    (call $print_out)`,
			status: wasm.OK, out: []string{"out [2,3]\n"}},
		{name: "get/a property the value does not have", body: `
    (call $report (call $get (call $tensor) S"nosuch" @out))
    (call $print_out)`,
			status: wasm.OK, out: []string{"out null\n"}},
		{name: "get/result larger than the buffer is not a failure", body: `
    (call $report (call $get (call $tensor) S"shape" (global.get $OUT) (i32.const 2) (global.get $LEN)))
    (call $show S"len" (call $len))
    (call $show S"read" (call $result_read (global.get $OUT) (global.get $CAP)))
    (call $print_out)`,
			status: wasm.ErrSize, out: []string{"len 5\n", "read 0\n", "out [2,3]\n"}},
		{name: "get/handle never given", body: `
    (call $report (call $get (i32.const 999) S"shape" @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}},
		{name: "get/name past the memory", body: `
    (call $report (call $get (call $tensor) (i32.const 65536) (i32.const 1) @out))`,
			status: wasm.ErrBounds, msg: []string{"1 bytes at 65536"}},
		{name: "get/out past the memory", body: `
    (call $report (call $get (call $tensor) S"shape" (i32.const 65534) (i32.const 100) (global.get $LEN)))`,
			status: wasm.ErrBounds, msg: []string{"100 bytes at 65534"}},
		{name: "get/len_out past the memory", body: `
    (call $report (call $get (call $tensor) S"shape" (global.get $OUT) (global.get $CAP) (i32.const 65533)))`,
			status: wasm.ErrBounds, msg: []string{"4 bytes at 65533"}},
		{name: "get/a tensor gone with its scope", body: `
    (call $must (call $scope_open (global.get $ID)))
    (local.set $h (call $tensor))
    (call $must (call $scope_close (i32.load (global.get $ID)) (i32.const 0) (i32.const 0)))
    (call $report (call $get (local.get $h) S"grad" @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 1", "released", "scope"}},

		// set
		{name: "set/good", body: `
    (local.set $h (call $object))
    (call $report (call $set (local.get $h) S"note" S"[1,{\"a\":2}]"))
    (call $must (call $get (local.get $h) S"note" @out))
    (call $print_out)`,
			status: wasm.OK, out: []string{`out [1,{"a":2}]`}},
		{name: "set/handle never given", body: `
    (call $report (call $set (i32.const 999) S"note" S"1"))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}},
		{name: "set/name past the memory", body: `
    (call $report (call $set (call $object) (i32.const 0xFFFFFFFF) (i32.const 1) S"1"))`,
			status: wasm.ErrBounds, msg: []string{"1 bytes at 4294967295"}},
		{name: "set/value past the memory", body: `
    (call $report (call $set (call $object) S"note" (i32.const 65536) (i32.const 1)))`,
			status: wasm.ErrBounds, msg: []string{"1 bytes at 65536"}},
		{name: "set/empty value", body: `
    (call $report (call $set (call $object) S"note" (i32.const 0) (i32.const 0)))`,
			status: wasm.ErrInvalid, msg: []string{"the value: JSON", "unexpected end"}},
		{name: "set/value JSON that does not parse", body: `
    (call $report (call $set (call $object) S"note" S"{\"a\" 1}"))`,
			status: wasm.ErrInvalid, msg: []string{"the value: JSON", `want : after key "a"`}},
		{name: "set/value nests 100 deep", body: `
    (call $report (call $set (call $object) S"note" S"` + nest(100) + `"))`,
			status: wasm.ErrInvalid, msg: []string{"nested deeper than 64 levels"}},
		{name: "set/value names a handle never given", body: `
    (call $report (call $set (call $object) S"note" S"{\"$\":999}"))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}},

		// result_read
		{name: "result_read/nothing waiting", body: `
    (call $report (call $result_read (global.get $OUT) (global.get $CAP)))`,
			status: wasm.ErrInvalid, msg: []string{"no result is waiting"}},
		{name: "result_read/buffer too small", body: `
    (drop (call $call S"dist.worldSize" (i32.const 0) (i32.const 0) (global.get $OUT) (i32.const 0) (global.get $LEN)))
    (call $report (call $result_read (global.get $OUT) (i32.const 0)))
    (if (i32.eqz (global.get $keep)) (then
      (call $show S"again" (call $result_read (global.get $OUT) (i32.const 1)))
      (call $print_out)))`,
			status: wasm.ErrSize, msg: []string{"the result is 1 bytes, the buffer 0"}, out: []string{"again 0\n", "out 1\n"}},
		{name: "result_read/out past the memory", body: `
    (drop (call $call S"dist.worldSize" (i32.const 0) (i32.const 0) (global.get $OUT) (i32.const 0) (global.get $LEN)))
    (call $report (call $result_read (i32.const 65536) (i32.const 16)))`,
			status: wasm.ErrBounds, msg: []string{"1 bytes at 65536"}},
		{name: "result_read/read twice", body: `
    (drop (call $call S"dist.worldSize" (i32.const 0) (i32.const 0) (global.get $OUT) (i32.const 0) (global.get $LEN)))
    (call $must (call $result_read (global.get $OUT) (i32.const 1)))
    (call $report (call $result_read (global.get $OUT) (global.get $CAP)))`,
			status: wasm.ErrInvalid, msg: []string{"no result is waiting"}},
		{name: "result_read/after a later call that fitted", body: `
    (drop (call $call S"dist.worldSize" (i32.const 0) (i32.const 0) (global.get $OUT) (i32.const 0) (global.get $LEN)))
    (call $must (call $call S"dist.rank" (i32.const 0) (i32.const 0) @out))
    (call $report (call $result_read (global.get $OUT) (global.get $CAP)))`,
			status: wasm.ErrInvalid, msg: []string{"no result is waiting"}},

		// release
		{name: "release/twice", body: `
    (local.set $h (call $tensor))
    (call $show S"first" (call $release (local.get $h)))
    (call $report (call $release (local.get $h)))`,
			status: wasm.ErrHandle, msg: []string{"handle 1 is not one the program holds (never given, or released)"}, out: []string{"first 0\n"}},
		{name: "release/handle 0", body: `
    (call $report (call $release (i32.const 0)))`,
			status: wasm.ErrHandle, msg: []string{"handle 0 is not one the program holds"}},
		{name: "release/handle -1", body: `
    (call $report (call $release (i32.const -1)))`,
			status: wasm.ErrHandle, msg: []string{"handle 4294967295 is not one the program holds"}},
		{name: "release/a parameter is only forgotten", body: `
    (local.set $h (call $object))
    (call $must (call $get (local.get $h) S"weight" @out))
    (call $report (call $release (call $handle_out)))
    (call $must (call $call_method (local.get $h) S"forward" (global.get $ARGS) (call $args_h (call $tensor)) @out))
    (call $must (call $get (local.get $h) S"weight" @out))
    (call $must (call $tensor_shape (call $handle_out) (global.get $SHAPE)))
    (call $show S"weight ndim" (i32.load offset=4 (global.get $SHAPE)))`,
			status: wasm.OK, out: []string{"weight ndim 2\n"}},

		// scope_open, scope_close
		{name: "scope_close/keeps what it is told to", fn: "tensor_data", body: `
    (call $must (call $scope_open (global.get $ID)))
    (local.set $h (call $tensor))
    (local.set $h2 (call $tensor))
    (i32.store (global.get $FREE) (local.get $h))
    (call $show S"close" (call $scope_close (i32.load (global.get $ID)) (global.get $FREE) (i32.const 1)))
    (call $show S"kept" (call $tensor_data (local.get $h) @out))
    (call $report (call $tensor_data (local.get $h2) @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 2's tensor was released", "scope"}, out: []string{"close 0\n", "kept 0\n"}},
		{name: "scope_open/id_out past the memory", body: `
    (call $report (call $scope_open (i32.const 65535)))
    (call $must (call $scope_open (global.get $ID)))
    (call $show S"close" (call $scope_close (i32.load (global.get $ID)) (i32.const 0) (i32.const 0)))`,
			status: wasm.ErrBounds, msg: []string{"4 bytes at 65535"}, out: []string{"close 0\n"}},
		{name: "scope_close/a scope never opened", body: `
    (call $report (call $scope_close (i32.const 999) (i32.const 0) (i32.const 0)))`,
			status: wasm.ErrHandle, msg: []string{"scope 999 is not open"}},
		{name: "scope_close/scope 0", body: `
    (call $report (call $scope_close (i32.const 0) (i32.const 0) (i32.const 0)))`,
			status: wasm.ErrHandle, msg: []string{"scope 0 is not open"}},
		{name: "scope_close/out of order", body: `
    (call $must (call $scope_open (global.get $ID)))
    (local.set $h (i32.load (global.get $ID)))
    (call $must (call $scope_open (global.get $ID)))
    (call $report (call $scope_close (local.get $h) (i32.const 0) (i32.const 0)))
    (call $show S"inner" (call $scope_close (i32.load (global.get $ID)) (i32.const 0) (i32.const 0)))
    (call $show S"outer" (call $scope_close (local.get $h) (i32.const 0) (i32.const 0)))`,
			status: wasm.ErrInvalid, msg: []string{"scope 1 is not the innermost open scope"}, out: []string{"inner 0\n", "outer 0\n"}},
		{name: "scope_close/twice", body: `
    (call $must (call $scope_open (global.get $ID)))
    (call $must (call $scope_close (i32.load (global.get $ID)) (i32.const 0) (i32.const 0)))
    (call $report (call $scope_close (i32.load (global.get $ID)) (i32.const 0) (i32.const 0)))`,
			status: wasm.ErrHandle, msg: []string{"scope 1 is not open"}},
		{name: "scope_close/n 0xFFFFFFFF", body: `
    (call $must (call $scope_open (global.get $ID)))
    (call $report (call $scope_close (i32.load (global.get $ID)) (global.get $FREE) (i32.const -1)))
    (call $show S"close" (call $scope_close (i32.load (global.get $ID)) (i32.const 0) (i32.const 0)))`,
			status: wasm.ErrSize, msg: []string{"4294967295 handles to keep"}, out: []string{"close 0\n"}},
		{name: "scope_close/4n wraps around 2^32", body: `
    (call $must (call $scope_open (global.get $ID)))
    (call $report (call $scope_close (i32.load (global.get $ID)) (global.get $FREE) (i32.const 0x40000001)))`,
			status: wasm.ErrSize, msg: []string{"1073741825 handles to keep"}},
		{name: "scope_close/keep past the memory", body: `
    (call $must (call $scope_open (global.get $ID)))
    (call $report (call $scope_close (i32.load (global.get $ID)) (i32.const 65532) (i32.const 2)))`,
			status: wasm.ErrBounds, msg: []string{"8 bytes at 65532"}},
		{name: "scope_close/keep a handle never given", body: `
    (call $must (call $scope_open (global.get $ID)))
    (i32.store (global.get $FREE) (i32.const 999))
    (call $report (call $scope_close (i32.load (global.get $ID)) (global.get $FREE) (i32.const 1)))`,
			status: wasm.ErrHandle, msg: []string{"kept handle 0", "handle 999 is not one the program holds"}},
		{name: "scope_close/keep an object", body: `
    (call $must (call $scope_open (global.get $ID)))
    (i32.store (global.get $FREE) (call $object))
    (call $report (call $scope_close (i32.load (global.get $ID)) (global.get $FREE) (i32.const 1)))`,
			status: wasm.ErrHandle, msg: []string{"kept handle 0", "is a object, not a tensor"}},

		// grad_enabled
		{name: "grad_enabled/good", body: `
    (call $report (call $grad_enabled (i32.const 0) (global.get $PREV)))
    (call $show S"was" (i32.load (global.get $PREV)))
    (call $must (call $grad_enabled (i32.const 1) (global.get $PREV)))
    (call $show S"was" (i32.load (global.get $PREV)))`,
			status: wasm.OK, out: []string{"was 1\n", "was 0\n"}},
		{name: "grad_enabled/prev_out past the memory changes nothing", body: `
    (call $report (call $grad_enabled (i32.const 0) (i32.const 65534)))
    (call $must (call $grad_enabled (i32.const 1) (global.get $PREV)))
    (call $show S"was" (i32.load (global.get $PREV)))`,
			status: wasm.ErrBounds, msg: []string{"4 bytes at 65534"}, out: []string{"was 1\n"}},

		// tensor_from_bytes
		{name: "tensor_from_bytes/every dtype", body: `
    (local $dt i32)
    (block $done (loop $dtypes
      (br_if $done (i32.eq (local.get $dt) (i32.const 8)))
      (local.set $st (call $tensor_from_bytes (local.get $dt) P"\02\00\00\00\00\00\00\00" (i32.const 1) (global.get $FREE)
        (i32.mul (i32.const 2) (i32.load8_u (i32.add P"\04\02\02\08\08\04\01\01" (local.get $dt)))) (global.get $H)))
      (call $must (local.get $st))
      (call $must (call $tensor_shape (call $h) (global.get $SHAPE)))
      (call $show S"dtype" (i32.load (global.get $SHAPE)))
      (local.set $dt (i32.add (local.get $dt) (i32.const 1)))
      (br $dtypes)))
    (call $report (i32.const 0))`,
			status: wasm.OK, out: []string{"dtype 0\n", "dtype 1\n", "dtype 2\n", "dtype 3\n", "dtype 4\n", "dtype 5\n", "dtype 6\n", "dtype 7\n"}},
		{name: "tensor_from_bytes/bytes round trip", body: `
    (call $report (call $tensor_data (call $tensor) @out))
    (call $show S"len" (call $len))
    (call $show S"first" (i32.load (global.get $OUT)))
    (call $show S"last" (i32.load offset=20 (global.get $OUT)))
    (call $must (call $tensor_shape (call $h) (global.get $SHAPE)))
    (call $show S"ndim" (i32.load offset=4 (global.get $SHAPE)))
    (call $show S"d0" (i32.load offset=8 (global.get $SHAPE)))
    (call $show S"d1" (i32.load offset=16 (global.get $SHAPE)))`,
			status: wasm.OK, out: []string{"len 24\n", "first 1065353216\n", "last 1086324736\n", "ndim 2\n", "d0 2\n", "d1 3\n"}},
		{name: "tensor_from_bytes/a scalar", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) (i32.const 0) (i32.const 0) P"\00\00\80\3f" (i32.const 4) (global.get $H)))
    (call $must (call $tensor_shape (call $h) (global.get $SHAPE)))
    (call $show S"ndim" (i32.load offset=4 (global.get $SHAPE)))`,
			status: wasm.OK, out: []string{"ndim 0\n"}},
		{name: "tensor_from_bytes/16 dimensions", body: `
    (memory.fill (global.get $FREE) (i32.const 0) (i32.const 128))
    (local.set $i (i32.const 0))
    (loop $dims
      (i32.store8 (i32.add (global.get $FREE) (i32.mul (local.get $i) (i32.const 8))) (i32.const 1))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $dims (i32.lt_u (local.get $i) (i32.const 16))))
    (call $report (call $tensor_from_bytes (i32.const 6) (global.get $FREE) (i32.const 16) P"\07" (i32.const 1) (global.get $H)))
    (call $must (call $tensor_shape (call $h) (i32.sub (i32.const 65536) (i32.const 136))))
    (call $show S"ndim" (i32.load (i32.sub (i32.const 65536) (i32.const 132))))`,
			status: wasm.OK, out: []string{"ndim 16\n"}},
		{name: "tensor_from_bytes/dtype 99", body: `
    (call $report (call $tensor_from_bytes (i32.const 99) (i32.const 0) (i32.const 0) (global.get $FREE) (i32.const 4) (global.get $H)))`,
			status: wasm.ErrDType, msg: []string{"dtype code 99", "0 float32"}},
		{name: "tensor_from_bytes/dtype -1", body: `
    (call $report (call $tensor_from_bytes (i32.const -1) (i32.const 0) (i32.const 0) (global.get $FREE) (i32.const 4) (global.get $H)))`,
			status: wasm.ErrDType, msg: []string{"dtype code 4294967295"}},
		{name: "tensor_from_bytes/ndim 17", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) (global.get $FREE) (i32.const 17) (global.get $FREE) (i32.const 4) (global.get $H)))`,
			status: wasm.ErrSize, msg: []string{"17 dimensions, at most 16"}},
		{name: "tensor_from_bytes/ndim -1", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) (global.get $FREE) (i32.const -1) (global.get $FREE) (i32.const 4) (global.get $H)))`,
			status: wasm.ErrSize, msg: []string{"4294967295 dimensions, at most 16"}},
		{name: "tensor_from_bytes/shape past the memory", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) (i32.const 65528) (i32.const 2) (global.get $FREE) (i32.const 4) (global.get $H)))`,
			status: wasm.ErrBounds, msg: []string{"16 bytes at 65528"}},
		{name: "tensor_from_bytes/a negative dimension", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) P"\02\00\00\00\00\00\00\00\ff\ff\ff\ff\ff\ff\ff\ff" (i32.const 2) (global.get $FREE) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrSize, msg: []string{"dimension 1 is -1"}},
		{name: "tensor_from_bytes/byte size past 2^32", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) P"\00\00\00\40\00\00\00\00\04\00\00\00\00\00\00\00" (i32.const 2) (global.get $FREE) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrSize, msg: []string{"[1073741824 4]"}},
		{name: "tensor_from_bytes/element count wraps 2^64", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) P"\00\00\00\00\01\00\00\00\00\00\00\00\01\00\00\00" (i32.const 2) (global.get $FREE) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrSize, msg: []string{"4294967296"}},
		{name: "tensor_from_bytes/byte size wraps 2^64", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) P"\00\00\00\00\00\00\00\40\04\00\00\00\00\00\00\00" (i32.const 2) (global.get $FREE) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrSize, msg: []string{"4611686018427387904"}},
		{name: "tensor_from_bytes/nbytes not the shape's", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) P"\02\00\00\00\00\00\00\00\03\00\00\00\00\00\00\00" (i32.const 2) (global.get $FREE) (i32.const 23) (global.get $H)))`,
			status: wasm.ErrSize, msg: []string{"float32", "[2 3]", "24 bytes, not 23"}},
		{name: "tensor_from_bytes/data past the memory", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) P"\02\00\00\00\00\00\00\00\03\00\00\00\00\00\00\00" (i32.const 2) (i32.const 65520) (i32.const 24) (global.get $H)))`,
			status: wasm.ErrBounds, msg: []string{"24 bytes at 65520"}},
		{name: "tensor_from_bytes/data ptr+len wraps around 2^32", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) P"\02\00\00\00\00\00\00\00\03\00\00\00\00\00\00\00" (i32.const 2) (i32.const 0xFFFFFFF8) (i32.const 24) (global.get $H)))`,
			status: wasm.ErrBounds, msg: []string{"24 bytes at 4294967288"}},
		{name: "tensor_from_bytes/h_out past the memory", body: `
    (call $report (call $tensor_from_bytes (i32.const 0) (i32.const 0) (i32.const 0) (global.get $FREE) (i32.const 4) (i32.const 65535)))`,
			status: wasm.ErrBounds, msg: []string{"4 bytes at 65535"}},

		// tensor_data
		{name: "tensor_data/buffer too small is not a failure", body: `
    (call $report (call $tensor_data (call $tensor) (global.get $OUT) (i32.const 23) (global.get $LEN)))
    (call $show S"len" (call $len))`,
			status: wasm.ErrSize, out: []string{"len 24\n"}},
		{name: "tensor_data/handle never given", body: `
    (call $report (call $tensor_data (i32.const 999) @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}},
		{name: "tensor_data/an object", body: `
    (call $report (call $tensor_data (call $object) @out))`,
			status: wasm.ErrHandle, msg: []string{"handle 1 is a object, not a tensor"}},
		{name: "tensor_data/buffer past the memory", body: `
    (call $report (call $tensor_data (call $tensor) (i32.const 65530) (i32.const 100) (global.get $LEN)))`,
			status: wasm.ErrBounds, msg: []string{"24 bytes at 65530"}},
		{name: "tensor_data/buffer ptr+cap wraps around 2^32", body: `
    (call $report (call $tensor_data (call $tensor) (i32.const 0xFFFFFFF0) (i32.const 24) (global.get $LEN)))`,
			status: wasm.ErrBounds, msg: []string{"24 bytes at 4294967280"}},
		{name: "tensor_data/len_out past the memory", body: `
    (call $report (call $tensor_data (call $tensor) (global.get $OUT) (global.get $CAP) (i32.const 65536)))`,
			status: wasm.ErrBounds, msg: []string{"4 bytes at 65536"}},

		// The hook ABI's functions, which a program may import, fail
		// outside a hook: with a message, as every failure.
		{name: "log/a hook ABI function outside a hook", imports: `
  (import "zeroeng" "log" (func $log (param i32 i32) (result i32)))`, body: `
    (call $report (call $log S"hello"))`,
			status: wasm.ErrInvalid, msg: []string{"hook"}},

		// tensor_shape
		{name: "tensor_shape/out straddles the memory's end", body: `
    (call $report (call $tensor_shape (call $tensor) (i32.const 65528)))`,
			status: wasm.ErrBounds, msg: []string{"24 bytes at 65528"}},
		{name: "tensor_shape/handle never given", body: `
    (call $report (call $tensor_shape (i32.const 999) (global.get $SHAPE)))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}},
		{name: "tensor_shape/a function", body: `
    (call $must (call $get (call $object) S"forward" @out))
    (call $report (call $tensor_shape (call $handle_out) (global.get $SHAPE)))`,
			status: wasm.ErrHandle, msg: []string{"is a function, not a tensor"}},
	}
}

// progCase is a whole program and how its run must end.
type progCase struct {
	name string
	prog confProgram
	wat  string // the module's whole text, instead of prog
	run  confRun
	err  []string // what the job's error says; nil for a run that succeeds
	// interrupted: the run is stopped from outside (an *Error with
	// Interrupted), within 5 s of its timeout.
	interrupted bool
	exit        int      // the job's exit status (proc_exit), when not 0
	out         []string // what the output shows, in order
	slow        bool     // skipped under -short
	check       func(t *testing.T, out string, err error)
}

// checkProgCases runs each program once and checks how it ended: never
// with a Go trace, within its time.
func checkProgCases(t *testing.T, cases []progCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.slow && testing.Short() {
				t.Skip("slow: run without -short")
			}
			text := c.wat
			if text == "" {
				text = c.prog.wat()
			}
			start := time.Now()
			out, stderr, err := runConf(t, hookbuild.WAT(t, text), c.run)
			took := time.Since(start)
			t.Logf("took %v, error %v, output:\n%s%s", took, err, out, stderr)
			noTrace(t, "the run", out, stderr, errString(err))
			var se *Error
			switch {
			case c.interrupted:
				if !errors.As(err, &se) || !se.Interrupted {
					t.Fatalf("error %v, want an interruption", err)
				}
				if limit := c.run.timeout + 5*time.Second; took > limit {
					t.Errorf("the interruption took %v, want it within %v", took, limit)
				}
			case c.exit != 0:
				if !errors.As(err, &se) || se.Exit == nil || se.Exit.Code != c.exit {
					t.Fatalf("error %v, want exit status %d", err, c.exit)
				}
			case c.err == nil:
				if err != nil {
					t.Fatalf("error %v\n%s%s", err, out, stderr)
				}
			default:
				if err == nil {
					t.Fatalf("the run succeeded, want an error saying %q; output:\n%s", c.err, out)
				}
				for _, w := range c.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the error %q does not say %q", err, w)
					}
				}
			}
			if strings.Contains(out, "FAIL") {
				t.Errorf("a step failed:\n%s", out)
			}
			rest := out
			for _, w := range c.out {
				j := strings.Index(rest, w)
				if j < 0 {
					t.Fatalf("the output does not show %q (in order); output:\n%s", w, out)
				}
				rest = rest[j+len(w):]
			}
			if c.check != nil {
				c.check(t, out, err)
			}
		})
	}
}

// confModule is a module of its own (not the prelude's): for the loader's
// checks.
func confModule(imports, body string) string {
	return `(module
  ` + imports + `
  (memory (export "memory") 1 1)
  (func (export "zeroeng_program_abi_v1"))
  (func (export "_start") ` + body + `))`
}

// isRank1 (a function for funcs) tells rank 1 from the others.
const isRank1 = `
  (func $is_rank1 (result i32)
    (call $must (call $call S"dist.rank" (i32.const 0) (i32.const 0) @out))
    (i32.eq (i32.load8_u (global.get $OUT)) (i32.const 49)))`

// TestProgramConformanceLimits: the limits of a program and its guest
// code — the device's memory (--max-memory), a recursion without end, a
// loop stopped from outside, another rank's failure, handle exhaustion —
// and the loader's and the pending failure's rules, each ending in a
// clear error within a bounded time.
func TestProgramConformanceLimits(t *testing.T) {
	checkProgCases(t, []progCase{
		{name: "tensor_from_bytes beyond --max-memory", run: confRun{maxMemory: 1 << 20}, prog: confProgram{body: `
    ;; 16 KiB tensors until the device's 1 MiB is spent.
    (block $full (loop $more
      (local.set $st (call $tensor_from_bytes (i32.const 0) P"\00\10\00\00\00\00\00\00" (i32.const 1) (i32.const 0) (i32.const 16384) (global.get $H)))
      (br_if $full (local.get $st))
      (local.set $h (call $h))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 1000)))))
    (call $report (local.get $st))
    ;; Give one back: the next fits.
    (call $must (call $release (local.get $h)))
    (call $show S"after release" (call $tensor_from_bytes (i32.const 0) P"\00\10\00\00\00\00\00\00" (i32.const 1) (i32.const 0) (i32.const 16384) (global.get $H)))`},
			out: []string{"status 7: prog.wasm: host call tensor_from_bytes failed (ERR_NOMEM): ", "memory", "after release 0\n", "then 0\n"}},
		{name: "a tensor whose handle could not be written is not kept", run: confRun{maxMemory: 1 << 20}, prog: confProgram{body: `
    ;; 200 tensors of 16 KiB, 3 MiB in all, each with h_out past the
    ;; memory: each must go back, or the device's 1 MiB runs out.
    (loop $more
      (local.set $st (call $tensor_from_bytes (i32.const 0) P"\00\10\00\00\00\00\00\00" (i32.const 1) (i32.const 0) (i32.const 16384) (i32.const 65535)))
      (if (i32.ne (local.get $st) (i32.const 3)) (then (call $report (local.get $st)) (return)))
      (drop (call $error_clear))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 200))))
    (call $report (call $tensor_from_bytes (i32.const 0) P"\00\10\00\00\00\00\00\00" (i32.const 1) (i32.const 0) (i32.const 16384) (global.get $H)))`},
			out: []string{"status 0:  <end>\n", "then 0\n"}},
		{name: "a result whose JSON could not be written is not kept", run: confRun{maxMemory: 1 << 20}, prog: confProgram{body: `
    ;; 200 results of 16 KiB, each with out past the memory: the tensor
    ;; of each must go back, or the device's 1 MiB runs out.
    (loop $more
      (local.set $st (call $call S"tensor.zeros" S"[[4096]]" (i32.const 65535) (global.get $CAP) (global.get $LEN)))
      (if (i32.ne (local.get $st) (i32.const 3)) (then (call $report (local.get $st)) (return)))
      (drop (call $error_clear))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 200))))
    (call $report (call $call S"tensor.zeros" S"[[4096]]" @out))`},
			out: []string{"status 0:  <end>\n", "then 0\n"}},
		{name: "a call beyond --max-memory", run: confRun{maxMemory: 1 << 20}, prog: confProgram{body: `
    (call $report (call $call S"tensor.zeros" S"[[1024,1024]]" @out))`},
			out: []string{"status ", "memory", "then 0\n"}},
		{name: "a guest that recurses without end", prog: confProgram{funcs: `
  (func $recurse (param $n i32) (result i32)
    (i32.add (call $recurse (i32.add (local.get $n) (i32.const 1))) (i32.const 1)))`, body: `
    (drop (call $recurse (i32.const 0)))`},
			err: []string{"prog.wasm", "stack", "recurse"}},
		{name: "a guest that recurses through host calls", prog: confProgram{funcs: `
  (func $recurse (param $n i32) (result i32)
    (call $must (call $grad_enabled (i32.const 1) (global.get $PREV)))
    (i32.add (call $recurse (i32.add (local.get $n) (i32.const 1))) (i32.const 1)))`, body: `
    (drop (call $recurse (i32.const 0)))`},
			err: []string{"prog.wasm", "stack", "recurse"}},
		{name: "a guest loop stopped by cancellation", run: confRun{timeout: 300 * time.Millisecond}, prog: confProgram{body: `
    (loop $forever (br $forever))`}, interrupted: true},
		{name: "a loop of host calls stopped by cancellation", run: confRun{timeout: 300 * time.Millisecond}, prog: confProgram{body: `
    (loop $forever
      (call $must (call $grad_enabled (i32.const 1) (global.get $PREV)))
      (br $forever))`}, interrupted: true},
		{name: "a loop stopped by another rank's failure", run: confRun{ranks: 2}, prog: confProgram{funcs: isRank1, body: `
    (if (call $is_rank1) (then
      (drop (call $release (i32.const 999)))
      (drop (call $grad_enabled (i32.const 1) (global.get $PREV)))))
    (loop $forever (br $forever))`, noThen: true},
			err: []string{"rank 1", "host call release failed (ERR_HANDLE)", "handle 999", "without clearing the failure"}},
		{name: "a trap names the function", prog: confProgram{funcs: `
  (func $divide_by_zero (result i32) (i32.div_s (i32.const 1) (i32.const 0)))`, body: `
    (drop (call $divide_by_zero))`},
			err: []string{"prog.wasm", "divide_by_zero"}},
		{name: "a failure not cleared at the end", prog: confProgram{noThen: true, body: `
    (drop (call $release (i32.const 999)))`},
			err: []string{"ended with a failed host call it did not clear", "host call release failed (ERR_HANDLE)", "handle 999"}},
		{name: "a failure not cleared at proc_exit(0)", prog: confProgram{noThen: true, body: `
    (drop (call $release (i32.const 999)))
    (call $proc_exit (i32.const 0))`},
			err: []string{"did not clear", "handle 999"}},
		{name: "proc_exit with a status", prog: confProgram{noThen: true, body: `
    (call $proc_exit (i32.const 7))`}, exit: 7},
		{name: "exempt calls while a failure is pending", prog: confProgram{body: `
    (local.set $st (call $release (i32.const 999)))
    (call $show S"abi_info" (call $abi_info (global.get $ABI)))
    (call $show S"error_message" (call $error_message (global.get $MSG) (i32.const 0) (global.get $MLEN)))
    (call $show S"error_message" (call $error_message (global.get $MSG) (i32.const 0) (global.get $MLEN)))
    (call $report (local.get $st))`},
			out: []string{"abi_info 0\n", "error_message 0\n", "error_message 0\n", "status 2: ", "handle 999", "then 0\n"}},
		{name: "an import the host does not provide", wat: confModule(`
  (import "zeroeng" "nonesuch" (func (param i32) (result i32)))`, ``),
			err: []string{"zeroeng.nonesuch", "does not provide"}},
		{name: "an import of the wrong type", wat: confModule(`
  (import "zeroeng" "release" (func (param i64) (result i32)))`, ``),
			err: []string{"zeroeng.release", "(i64) -> (i32)", "want (i32) -> (i32)"}},
		{name: "an import from another module", wat: confModule(`
  (import "env" "release" (func (param i32) (result i32)))`, ``),
			err: []string{"env.release"}},
	})
}

// TestProgramConformanceHandles: a program that never releases its
// handles gets ERR_LIMIT at 2^20 of them, naming the limit, rather than
// exhausting the host's memory; releasing one lets it go on.
func TestProgramConformanceHandles(t *testing.T) {
	// The limit is 2^20 handles; the test lowers it, which makes the same
	// path fail in milliseconds rather than seconds.
	defer func(n int) { maxProgramHandles = n }(maxProgramHandles)
	maxProgramHandles = 1000
	checkProgCases(t, []progCase{
		{name: "handle exhaustion", prog: confProgram{body: `
    (local.set $h (call $object))
    ;; get gives a new handle for every result: 999 more handles, then
    ;; the one too many.
    (local.set $i (i32.const 1))
    (loop $more
      (call $must (call $get (local.get $h) S"forward" @out))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 1000))))
    (local.set $h2 (call $handle_out))
    (call $report (call $get (local.get $h) S"weight" @out))
    (call $report (call $tensor_from_bytes (i32.const 0) (i32.const 0) (i32.const 0) (global.get $FREE) (i32.const 4) (global.get $H)))
    (call $must (call $release (local.get $h2)))
    (call $show S"after release" (call $get (local.get $h) S"weight" @out))`},
			out: []string{"status 9: prog.wasm: host call get failed (ERR_LIMIT): the program holds 1000 handles",
				"status 9: prog.wasm: host call tensor_from_bytes failed (ERR_LIMIT): the program holds 1000 handles",
				"after release 0\n", "then 0\n"}},
	})
}

// skipWithoutABI11 skips where the host does not implement ABI 1.1 yet.
func skipWithoutABI11(t *testing.T) {
	t.Helper()
	if _, ok := programFuncs["function_new"]; !ok {
		t.Skip("the host does not implement ABI 1.1 (callbacks, handle-only calls) yet")
	}
}

// newFunction (a function for funcs) makes function id and returns its
// handle.
const newFunction = `
  (func $new_function (param $id i32) (result i32)
    (call $must (call $function_new (local.get $id) (global.get $H)))
    (call $h))`

// returnArg0 (callback) returns the callback's first argument, a handle,
// saving its handle in $arg.
const returnArg0 = `
    (call $must (call $frame_args (local.get $frame) @out))
    (global.set $arg (call $handle_at (i32.add (global.get $OUT) (i32.const 6))))
    (call $must (call $frame_return (local.get $frame) (i32.add (global.get $ARGS) (i32.const 1)) (i32.sub (call $args_h (global.get $arg)) (i32.const 2))))
    (i32.const 0)`

// TestProgramConformanceCallbacks: the functions of ABI 1.1 —
// function_new, frame_args, frame_return, error_set, lookup, invoke,
// invoke_method — with good arguments and hostile ones: no
// zeroeng_callback export, a stale or an outer frame, a callback that
// fails (its status, error_set, a host call's failure, a trap), nested
// callbacks, a non-function, a bad tag, 65 arguments, records past the
// memory, a result that is data.
func TestProgramConformanceCallbacks(t *testing.T) {
	skipWithoutABI11(t)
	const globals = `
  (global $arg (mut i32) (i32.const 0))
  (global $saved (mut i32) (i32.const 0))
  (global $f2 (mut i32) (i32.const 0))` + newFunction
	checkHostCases(t, []hostCase{
		// function_new
		{name: "function_new/without a zeroeng_callback export", abi11: true, body: `
    (call $report (call $function_new (i32.const 1) (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{"zeroeng_callback"}},
		{name: "function_new/h_out past the memory", funcs: globals, callback: `(i32.const 0)`, body: `
    (call $report (call $function_new (i32.const 1) (i32.const 65535)))`,
			status: wasm.ErrBounds, msg: []string{"4 bytes at 65535"}},

		// invoke, frame_args, frame_return: good
		{name: "invoke/a callback that returns its argument", funcs: globals, callback: `
    (call $show S"frame" (local.get $frame))
    (call $show S"id" (local.get $id))` + returnArg0, body: `
    (local.set $f (call $new_function (i32.const 7)))
    (local.set $h (call $tensor))
    (call $arg_h (i32.const 0) (local.get $h))
    (call $report (call $invoke (local.get $f) (global.get $ARGV) (i32.const 1) (global.get $H)))
    (call $must (call $tensor_data (call $h) @out))
    (call $show S"first" (i32.load (global.get $OUT)))
    ;; The frame's handle of the argument went when the callback returned.
    (call $show S"frame handle after" (call $release (global.get $arg)))
    (drop (call $error_clear))`,
			status: wasm.OK, out: []string{"frame ", "id 7\n", "first 1065353216\n", "frame handle after 2\n"},
			check: func(t *testing.T, out string) {
				var frame int
				fmt.Sscanf(out[strings.Index(out, "frame "):], "frame %d", &frame)
				if frame <= 0 {
					t.Errorf("the frame number %d is not positive", frame)
				}
			}},
		{name: "call/the API calls a callback", funcs: globals, callback: `
    (call $must (call $grad_enabled (i32.const 0) (global.get $PREV)))
    (call $show S"grad was" (i32.load (global.get $PREV)))
    (call $must (call $frame_return (local.get $frame) S"[42,\"x\"]"))
    (i32.const 0)`, body: `
    (local.set $f (call $new_function (i32.const 1)))
    (call $report (call $call S"tensor.noGrad" (global.get $ARGS) (call $args_h (local.get $f)) @out))
    (call $print_out)`,
			status: wasm.OK, out: []string{"grad was 0\n", `out [42,"x"]`}},
		{name: "invoke/a callback that returns nothing", funcs: globals, callback: `(i32.const 0)`, body: `
    (i32.store (global.get $H) (i32.const 12345))
    (call $report (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))
    (call $show S"result" (call $h))`,
			status: wasm.OK, out: []string{"result 0\n"}},
		{name: "frame_return/a new handle passes to the caller", fn: "release", funcs: globals, callback: `
    (global.set $saved (call $tensor))
    (call $must (call $frame_return (local.get $frame) (i32.add (global.get $ARGS) (i32.const 1)) (i32.sub (call $args_h (global.get $saved)) (i32.const 2))))
    (i32.const 0)`, body: `
    (call $must (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))
    (call $show S"result" (call $tensor_data (call $h) @out))
    (call $report (call $release (global.get $saved)))`,
			status: wasm.ErrHandle, msg: []string{"is not one the program holds"}, out: []string{"result 0\n"}},
		{name: "frame_args/result larger than the buffer is not a failure", funcs: globals, callback: `
    (call $report (call $frame_args (local.get $frame) (global.get $OUT) (i32.const 3) (global.get $LEN)))
    (call $show S"read" (call $result_read (global.get $OUT) (global.get $CAP)))
    (call $print_out)
    (i32.const 0)`, body: `
    (call $arg_num (i32.const 0) (f64.const 1.5))
    (call $arg_tag (i32.const 1) (i32.const 2) (i32.const 0) (f64.const 0))
    (call $must (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 2) (global.get $H)))`,
			status: wasm.ErrSize, out: []string{"read 0\n", "out [1.5,null]\n"}},

		// frame_args, frame_return: hostile
		{name: "frame_args/no callback running", abi11: true, body: `
    (call $report (call $frame_args (i32.const 0) @out))`,
			status: wasm.ErrHandle, msg: []string{"frame 0 is not the innermost running callback's", "none is running"}},
		{name: "frame_args/a frame whose callback returned", funcs: globals, callback: `
    (global.set $saved (local.get $frame))
    (i32.const 0)`, body: `
    (call $must (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))
    (call $report (call $frame_args (global.get $saved) @out))`,
			status: wasm.ErrHandle, msg: []string{"frame 1 is not the innermost running callback's", "none is running"}},
		{name: "frame_args/an outer frame", funcs: globals, callback: `
    (if (i32.eq (local.get $id) (i32.const 1)) (then
      (global.set $saved (local.get $frame))
      (call $show S"inner" (call $invoke (global.get $f2) (global.get $ARGV) (i32.const 0) (global.get $H)))
      (return (i32.const 0))))
    (call $report (call $frame_args (global.get $saved) @out))
    (call $show S"own frame" (call $frame_args (local.get $frame) @out))
    (i32.const 0)`, body: `
    (global.set $f2 (call $new_function (i32.const 2)))
    (call $show S"outer" (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrHandle, msg: []string{"frame 1 is not the innermost running callback's", "the innermost running one is 2"},
			out: []string{"own frame 0\n", "inner 0\n", "outer 0\n"}},
		{name: "frame_return/no callback running", abi11: true, body: `
    (call $report (call $frame_return (i32.const 1) S"1"))`,
			status: wasm.ErrHandle, msg: []string{"frame 1 is not the innermost running callback's"}},
		{name: "frame_args/buffer past the memory", funcs: globals, callback: `
    (call $report (call $frame_args (local.get $frame) (i32.const 65534) (i32.const 100) (global.get $LEN)))
    (i32.const 0)`, body: `
    (call $arg_num (i32.const 0) (f64.const 1))
    (call $show S"invoke" (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 1) (global.get $H)))`,
			status: wasm.ErrBounds, msg: []string{"100 bytes at 65534"}, out: []string{"invoke 0\n"}},
		{name: "frame_return/JSON that does not parse", funcs: globals, callback: `
    (call $report (call $frame_return (local.get $frame) S"[1,"))
    (i32.const 0)`, body: `
    (call $show S"invoke" (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{"the value: JSON"}, out: []string{"invoke 0\n"}},
		{name: "frame_return/a value that nests 100 deep", funcs: globals, callback: `
    (call $report (call $frame_return (local.get $frame) S"` + nest(100) + `"))
    (i32.const 0)`, body: `
    (call $show S"invoke" (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{"nested deeper than 64 levels"}, out: []string{"invoke 0\n"}},
		{name: "frame_return/a handle never given", funcs: globals, callback: `
    (call $report (call $frame_return (local.get $frame) S"{\"$\":999}"))
    (i32.const 0)`, body: `
    (call $show S"invoke" (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}, out: []string{"invoke 0\n"}},
		{name: "frame_return/value past the memory", funcs: globals, callback: `
    (call $report (call $frame_return (local.get $frame) (i32.const 0xFFFFFFFF) (i32.const 2)))
    (i32.const 0)`, body: `
    (call $show S"invoke" (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrBounds, msg: []string{"2 bytes at 4294967295"}, out: []string{"invoke 0\n"}},

		// a callback that fails
		{name: "invoke/a callback that returns a status", funcs: globals, callback: `(i32.const 5)`, body: `
    (call $report (call $invoke (call $new_function (i32.const 3)) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrCall, msg: []string{"3 returned status 5"}},
		{name: "invoke/a callback that sets its error", funcs: globals, callback: `
    (call $must (call $error_set S"the block refuses"))
    (i32.const 1)`, body: `
    (call $report (call $invoke (call $new_function (i32.const 3)) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrCall, msg: []string{"the block refuses"}},
		{name: "invoke/a callback whose host call failed", funcs: globals, callback: `
    (drop (call $release (i32.const 999)))
    (i32.const 1)`, body: `
    (call $report (call $invoke (call $new_function (i32.const 3)) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrCall, msg: []string{"host call release failed (ERR_HANDLE)", "handle 999"}},
		{name: "invoke/a callback that traps", funcs: globals + `
  (func $callback_trap (unreachable))`, callback: `
    (if (i32.eq (local.get $id) (i32.const 3)) (then (call $callback_trap)))
    (i32.const 0)`, body: `
    (call $report (call $invoke (call $new_function (i32.const 3)) (global.get $ARGV) (i32.const 0) (global.get $H)))
    (call $show S"next invoke" (call $invoke (call $new_function (i32.const 4)) (global.get $ARGV) (i32.const 0) (i32.const 1)))
    (drop (call $error_clear))`,
			status: wasm.ErrCall, msg: []string{"unreachable", "callback_trap"}, out: []string{"next invoke 0\n"}},
		{name: "invoke/the API raises inside nested callbacks", funcs: globals, callback: `
    (if (i32.eq (local.get $id) (i32.const 1)) (then
      (return (call $invoke (global.get $f2) (global.get $ARGV) (i32.const 0) (global.get $H)))))
    (call $call S"tensor.randn" S"[\"x\"]" @out)`, body: `
    (global.set $f2 (call $new_function (i32.const 2)))
    (call $report (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrCall, msg: []string{"tensor.randn"}},

		// error_set
		{name: "error_set/message past the memory", abi11: true, body: `
    (call $report (call $error_set (i32.const 65530) (i32.const 7)))`,
			status: wasm.ErrBounds, msg: []string{"7 bytes at 65530"}},

		// lookup
		{name: "lookup/a function and an object", abi11: true, body: `
    (call $report (call $lookup S"nn.functional.relu" (global.get $H)))
    (local.set $f (call $h))
    (call $arg_h (i32.const 0) (call $tensor))
    (call $show S"relu" (call $invoke (local.get $f) (global.get $ARGV) (i32.const 1) (global.get $H)))
    (call $show S"result is a tensor" (call $tensor_shape (call $h) (global.get $SHAPE)))
    (call $show S"object" (call $lookup S"tensor" (global.get $H)))
    (call $arg_num (i32.const 0) (f64.const 4))
    (call $show S"arange" (call $invoke_method (call $h) S"arange" (global.get $ARGV) (i32.const 1) (global.get $H)))
    (call $must (call $tensor_shape (call $h) (global.get $SHAPE)))
    (call $show S"d0" (i32.load offset=8 (global.get $SHAPE)))`,
			status: wasm.OK, out: []string{"relu 0\n", "result is a tensor 0\n", "object 0\n", "arange 0\n", "d0 4\n"}},
		{name: "lookup/a method keeps its object", abi11: true, body: `
    (call $report (call $lookup S"tensor.arange" (global.get $H)))
    (call $arg_num (i32.const 0) (f64.const 3))
    (call $show S"arange" (call $invoke (call $h) (global.get $ARGV) (i32.const 1) (global.get $H)))`,
			status: wasm.OK, out: []string{"arange 0\n"}},
		{name: "lookup/a name not in the API", abi11: true, body: `
    (call $report (call $lookup S"nn.functional.rellu" (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{`"nn.functional.rellu" is not in the API`, "did you mean relu"}},
		{name: "lookup/data", abi11: true, body: `
    (call $report (call $lookup S"dist.rank" (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{`"dist.rank" is data`}},
		{name: "lookup/new", abi11: true, body: `
    (call $report (call $lookup S"new nn.Linear" (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{`"new nn.Linear"`}},
		{name: "lookup/path past the memory", abi11: true, body: `
    (call $report (call $lookup (i32.const 65535) (i32.const 0xFFFFFFFF) (global.get $H)))`,
			status: wasm.ErrBounds, msg: []string{"4294967295 bytes at 65535"}},
		{name: "lookup/h_out past the memory", abi11: true, body: `
    (call $report (call $lookup S"tensor" (i32.const 65533)))`,
			status: wasm.ErrBounds, msg: []string{"4 bytes at 65533"}},

		// invoke, invoke_method: hostile
		{name: "invoke/a tensor", abi11: true, body: `
    (call $report (call $invoke (call $tensor) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrHandle, msg: []string{"handle 1 is a tensor, not a function"}},
		{name: "invoke/a module", abi11: true, body: `
    (call $report (call $invoke (call $object) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrHandle, msg: []string{"is a object, not a function"}},
		{name: "invoke/handle never given", abi11: true, body: `
    (call $report (call $invoke (i32.const 999) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}},
		{name: "invoke/a bad tag", abi11: true, body: `
    (call $must (call $lookup S"nn.functional.relu" (global.get $H)))
    (call $arg_h (i32.const 0) (call $tensor))
    (call $arg_tag (i32.const 1) (i32.const 3) (i32.const 0) (f64.const 0))
    (call $report (call $invoke (i32.const 1) (global.get $ARGV) (i32.const 2) (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{"argument 1 has tag 3"}},
		{name: "invoke/65 arguments", abi11: true, body: `
    (call $must (call $lookup S"nn.functional.relu" (global.get $H)))
    (call $report (call $invoke (call $h) (global.get $ARGV) (i32.const 65) (global.get $H)))`,
			status: wasm.ErrSize, msg: []string{"65 arguments, at most 64"}},
		{name: "invoke/-1 arguments", abi11: true, body: `
    (call $must (call $lookup S"nn.functional.relu" (global.get $H)))
    (call $report (call $invoke (call $h) (global.get $ARGV) (i32.const -1) (global.get $H)))`,
			status: wasm.ErrSize, msg: []string{"4294967295 arguments, at most 64"}},
		{name: "invoke/records past the memory", abi11: true, body: `
    (call $must (call $lookup S"nn.functional.relu" (global.get $H)))
    (call $report (call $invoke (call $h) (i32.const 65530) (i32.const 1) (global.get $H)))`,
			status: wasm.ErrBounds, msg: []string{"16 bytes at 65530"}},
		{name: "invoke/records ptr+len wrap around 2^32", abi11: true, body: `
    (call $must (call $lookup S"nn.functional.relu" (global.get $H)))
    (call $report (call $invoke (call $h) (i32.const 0xFFFFFC00) (i32.const 64) (global.get $H)))`,
			status: wasm.ErrBounds, msg: []string{"1024 bytes at 4294966272"}},
		{name: "invoke/an argument handle never given", abi11: true, body: `
    (call $must (call $lookup S"nn.functional.relu" (global.get $H)))
    (call $arg_h (i32.const 0) (i32.const 999))
    (call $report (call $invoke (call $h) (global.get $ARGV) (i32.const 1) (global.get $H)))`,
			status: wasm.ErrHandle, msg: []string{"argument 0", "handle 999 is not one the program holds"}},
		{name: "invoke/the function raises", abi11: true, body: `
    (call $must (call $lookup S"nn.functional.relu" (global.get $H)))
    (call $arg_num (i32.const 0) (f64.const 1))
    (call $report (call $invoke (call $h) (global.get $ARGV) (i32.const 1) (global.get $H)))`,
			status: wasm.ErrCall, msg: []string{"relu"}},
		{name: "invoke/out past the memory", abi11: true, body: `
    (call $must (call $lookup S"nn.functional.relu" (global.get $H)))
    (call $arg_h (i32.const 0) (call $tensor))
    (call $report (call $invoke (i32.const 1) (global.get $ARGV) (i32.const 1) (i32.const 65536)))`,
			status: wasm.ErrBounds, msg: []string{"4 bytes at 65536"}},
		{name: "invoke_method/good, a NaN and undefined", abi11: true, body: `
    (call $arg_num (i32.const 0) (f64.const nan))
    (call $report (call $invoke_method (call $tensor) S"mul" (global.get $ARGV) (i32.const 1) (global.get $H)))
    (call $must (call $tensor_data (call $h) @out))
    (call $show S"nan bits" (i32.load (global.get $OUT)))
    (call $arg_tag (i32.const 0) (i32.const 2) (i32.const 0) (f64.const 0))
    (call $show S"sum(undefined)" (call $invoke_method (call $h) S"sum" (global.get $ARGV) (i32.const 1) (global.get $H)))`,
			status: wasm.OK, out: []string{"nan bits 2143289344\n", "sum(undefined) 0\n"}},
		{name: "invoke_method/a result that is data", abi11: true, body: `
    (call $must (call $invoke_method (call $tensor) S"sum" (global.get $ARGV) (i32.const 0) (global.get $H)))
    (call $report (call $invoke_method (call $h) S"item" (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{"tensor.item returned data", "call and call_method return data as JSON"}},
		{name: "invoke_method/no such method", abi11: true, body: `
    (call $report (call $invoke_method (call $tensor) S"nosuch" (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{"a tensor has no method nosuch"}},
		{name: "invoke_method/handle never given", abi11: true, body: `
    (call $report (call $invoke_method (i32.const 999) S"sum" (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrHandle, msg: []string{"handle 999 is not one the program holds"}},
		{name: "invoke_method/name past the memory", abi11: true, body: `
    (call $report (call $invoke_method (call $tensor) (i32.const 0xFFFFFFF0) (i32.const 0x20) (global.get $ARGV) (i32.const 0) (global.get $H)))`,
			status: wasm.ErrBounds, msg: []string{"32 bytes at 4294967280"}},
		{name: "invoke_method/a bad tag", abi11: true, body: `
    (call $arg_tag (i32.const 0) (i32.const -1) (i32.const 0) (f64.const 0))
    (call $report (call $invoke_method (call $tensor) S"mul" (global.get $ARGV) (i32.const 1) (global.get $H)))`,
			status: wasm.ErrInvalid, msg: []string{"argument 0 has tag 4294967295"}},
	})

	checkProgCases(t, []progCase{
		{name: "proc_exit inside a callback", prog: confProgram{abi11: true, funcs: globals, callback: `
    (call $proc_exit (i32.const 5))
    (i32.const 0)`, body: `
    (drop (call $invoke (call $new_function (i32.const 1)) (global.get $ARGV) (i32.const 0) (global.get $H)))
    (call $print S"still running\n")`}, exit: 5},
		{name: "error_set outside a callback is pending", prog: confProgram{abi11: true, body: `
    (call $show S"error_set" (call $error_set S"my own failure"))`},
			out: []string{"error_set 0\n"}, err: []string{"my own failure", "without clearing the failure"}},
		{name: "error_set then error_clear", prog: confProgram{abi11: true, body: `
    (call $show S"error_set" (call $error_set S"my own failure"))
    (call $message)
    (call $print S"\n")
    (drop (call $error_clear))`},
			out: []string{"error_set 0\n", "my own failure\n", "then 0\n"}},
		{name: "error_set with an empty message", prog: confProgram{abi11: true, noThen: true, body: `
    (drop (call $error_set (i32.const 0) (i32.const 0)))`},
			err: []string{"empty error message"}},
		{name: "a result whose handle could not be written is not kept", run: confRun{maxMemory: 1 << 20}, prog: confProgram{abi11: true, body: `
    ;; relu of a 16 KiB tensor, 200 times, each with out past the memory:
    ;; each result must go back, or the device's 1 MiB runs out.
    (call $must (call $tensor_from_bytes (i32.const 0) P"\00\10\00\00\00\00\00\00" (i32.const 1) (i32.const 0) (i32.const 16384) (global.get $H)))
    (call $arg_h (i32.const 0) (call $h))
    (call $must (call $lookup S"nn.functional.relu" (global.get $H)))
    (local.set $f (call $h))
    (loop $more
      (local.set $st (call $invoke (local.get $f) (global.get $ARGV) (i32.const 1) (i32.const 65535)))
      (if (i32.ne (local.get $st) (i32.const 3)) (then (call $report (local.get $st)) (return)))
      (drop (call $error_clear))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 200))))
    (call $report (call $invoke (local.get $f) (global.get $ARGV) (i32.const 1) (global.get $H)))`},
			out: []string{"status 0:  <end>\n", "then 0\n"}},
		{name: "error_set with invalid UTF-8", prog: confProgram{abi11: true, noThen: true, body: `
    (drop (call $error_set S"bad \ff\fe bytes"))`},
			err: []string{"bad "}, check: func(t *testing.T, out string, err error) {
				if err != nil && !utf8.ValidString(err.Error()) {
					t.Errorf("the rank's error %q is not UTF-8 (error_message's text is UTF-8)", err)
				}
			}},
	})
}

// confChildEnv names the test a child process of the test binary runs
// (inSubprocess).
const confChildEnv = "ZEROENG_CONFORMANCE_CHILD"

// inSubprocess runs the calling test in a child process of the test
// binary and reports whether the caller is the parent (which then
// returns): a Go fatal error — a goroutine's stack past its limit, which
// deep host-guest recursion could reach — cannot be recovered and would
// end the whole suite rather than fail one test.
func inSubprocess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(confChildEnv) == t.Name() {
		// A Go stack overflow comes sooner at 64 MiB than at Go's 1 GiB
		// (the test would take half a minute), and a host that bounds
		// the depth of callbacks needs far less.
		debug.SetMaxStack(64 << 20)
		return false
	}
	var run []string
	for _, part := range strings.Split(t.Name(), "/") {
		run = append(run, "^"+regexp.QuoteMeta(part)+"$")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*confHang)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+strings.Join(run, "/"), "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), confChildEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	crashed := regexp.MustCompile(`fatal error:|goroutine \d+ \[|panic:`).Match(out)
	passed := err == nil && bytes.Contains(out, []byte("--- PASS"))
	if len(out) > 6000 {
		// A Go trace of a stack overflow is megabytes: its head says it.
		out = append(out[:4000:4000], fmt.Sprintf("\n... (%d bytes)\n", len(out))...)
	}
	t.Logf("the child process:\n%s", out)
	switch {
	case ctx.Err() != nil:
		t.Errorf("HOST BUG: the child process did not end in %v (a hang)", 2*confHang)
	case crashed:
		t.Errorf("HOST BUG: the child process crashed with a Go trace (%v)", err)
	case !passed:
		t.Errorf("the child process failed: %v", err)
	case bytes.Contains(out, []byte("--- SKIP")):
		t.Skip("the child process skipped the test (above)")
	}
	return true
}

// TestProgramConformanceCallbackRecursion: a callback that calls itself
// without end (each call a host call, the API calling the program back)
// ends in a clear error — the guest's stack, or a depth limit — and never
// in a Go stack overflow, which kills the process: it runs in a child
// process, so that such a crash fails this test only.
func TestProgramConformanceCallbackRecursion(t *testing.T) {
	skipWithoutABI11(t)
	if testing.Short() {
		t.Skip("slow: run without -short")
	}
	if inSubprocess(t) {
		return
	}
	checkProgCases(t, []progCase{
		{name: "a callback that recurses without end", prog: confProgram{abi11: true, funcs: `
  (global $f (mut i32) (i32.const 0))
  (global $depth (mut i32) (i32.const 0))
  (global $printed (mut i32) (i32.const 0))`, callback: `
    (global.set $depth (i32.add (global.get $depth) (i32.const 1)))
    (local.set $st (call $invoke (global.get $f) (global.get $ARGV) (i32.const 0) (global.get $H)))
    (if (local.get $st) (then
      ;; The innermost failure says why; the outer ones only pass it on.
      (if (i32.eqz (global.get $printed)) (then
        (global.set $printed (i32.const 1))
        (call $show S"depth" (global.get $depth))
        (call $print S"innermost ")
        (call $report (local.get $st))))
      (drop (call $error_clear))
      (return (i32.const 9))))
    (i32.const 0)`, body: `
    (call $must (call $function_new (i32.const 1) (global.get $H)))
    (global.set $f (call $h))
    (call $report (call $invoke (global.get $f) (global.get $ARGV) (i32.const 0) (global.get $H)))`},
			out: []string{"depth ", "innermost status ", "status 8: ", "returned status 9", "then 0\n"}},
	})
}

// TestProgramConformanceRanks: every case of ABI 1.0's host functions in
// one program, run by 2 ranks at once, then a collective between them;
// and, with ABI 1.1, a collective inside a callback on both ranks. Under
// the race detector (CGO_ENABLED=1 go test -race -run Conformance) this
// is the host's concurrency check: each rank's program, runtime and
// handles are its own.
func TestProgramConformanceRanks(t *testing.T) {
	var funcs, calls strings.Builder
	n := 0
	for _, c := range hostCases() {
		if c.funcs != "" || c.imports != "" || c.run.maxMemory != 0 || c.run.ranks > 1 {
			continue
		}
		n++
		fmt.Fprintf(&funcs, "\n  (func $case%d (local $h i32) (local $h2 i32) (local $h3 i32) (local $st i32) (local $i i32) (local $f i32)\n%s)", n, c.body)
		fmt.Fprintf(&calls, "\n    (call $case%d)", n)
	}
	body := calls.String() + `
    (local.set $h (call $tensor))
    (call $report (call $call S"dist.allReduce" (global.get $ARGS) (call $args_h (local.get $h)) @out))
    (call $must (call $call_method (call $handle_out) S"wait" (i32.const 0) (i32.const 0) @out))
    (call $must (call $tensor_data (local.get $h) @out))
    (call $show S"sum first" (i32.load (global.get $OUT)))`
	out, stderr, err := runConf(t, hookbuild.WAT(t, confProgram{funcs: funcs.String(), body: body}.wat()), confRun{ranks: 2})
	noTrace(t, "the run", out, stderr, errString(err))
	if err != nil || strings.Contains(out, "FAIL") {
		t.Fatalf("error %v\noutput:\n%s%s", err, out, stderr)
	}
	for _, rank := range []string{"[0] ", "[1] "} {
		// Each case reports once, the collective once more.
		if got := strings.Count(out, rank+"status "); got != n+1 {
			t.Errorf("rank %s reported %d statuses, want %d", rank, got, n+1)
		}
		// 1 + 1 = 2.0 (float32 bits).
		for _, w := range []string{rank + "sum first 1073741824\n", rank + "then 0\n"} {
			if !strings.Contains(out, w) {
				t.Errorf("the output does not show %q", w)
			}
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}

	t.Run("callbacks", func(t *testing.T) {
		skipWithoutABI11(t)
		checkProgCases(t, []progCase{{name: "a collective inside a callback", run: confRun{ranks: 2}, prog: confProgram{abi11: true, callback: `
    (call $must (call $frame_args (local.get $frame) @out))
    (local.set $h (call $handle_at (i32.add (global.get $OUT) (i32.const 6))))
    (call $must (call $call S"dist.allReduce" (global.get $ARGS) (call $args_h (local.get $h)) @out))
    (call $must (call $call_method (call $handle_out) S"wait" (i32.const 0) (i32.const 0) @out))
    (i32.const 0)`, body: `
    (call $must (call $function_new (i32.const 1) (global.get $H)))
    (local.set $f (call $h))
    (local.set $h (call $tensor))
    (call $arg_h (i32.const 0) (local.get $h))
    (call $show S"invoke" (call $invoke (local.get $f) (global.get $ARGV) (i32.const 1) (global.get $H)))
    (call $must (call $tensor_data (local.get $h) @out))
    (call $show S"sum first" (i32.load (global.get $OUT)))`},
			out: []string{"sum first 1073741824\n"},
			check: func(t *testing.T, out string, err error) {
				for _, w := range []string{"[0] invoke 0\n", "[1] invoke 0\n", "[0] sum first 1073741824\n", "[1] sum first 1073741824\n"} {
					if !strings.Contains(out, w) {
						t.Errorf("the output does not show %q", w)
					}
				}
			}}})
	})
}
