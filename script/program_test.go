package script

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// runProgram runs the program's bytes on ranks and returns the job's
// standard output and error and its error.
func runProgram(t *testing.T, ctx context.Context, wasmBytes []byte, ranks int, limits wasm.Config, args ...string) (string, string, error) {
	t.Helper()
	skipShortPrograms(t)
	path := filepath.Join(t.TempDir(), "prog.wasm")
	if err := os.WriteFile(path, wasmBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := RunJob(ctx, path, JobOptions{Ranks: ranks, Rank: Options{Stdout: &out, Stderr: &errOut, AutoRelease: true, Args: args, Program: limits}})
	return out.String(), errOut.String(), err
}

// skipShortPrograms skips under -short: the tests build Go programs for
// wasip1, which takes a cold build cache a minute (make test-all runs
// them).
func skipShortPrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go programs for wasip1: make test-all")
	}
}

// mlpJS is the script twin of sdk/go/internal/testprograms/mlp.
const mlpJS = `const { tensor, nn, optim, dist } = require("zeroeng");
tensor.manualSeed(0);
const model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1));
const ddp = dist.worldSize > 1 ? nn.parallel.DistributedDataParallel(model) : model;
const opt = optim.SGD(model.parameters(), { lr: 0.1 });
const x = tensor.randn([32, 8]), y = tensor.randn([32, 1]);
for (let step = 0; step < 5; step++) {
  tensor.scope(() => {
    opt.zeroGrad();
    const loss = nn.functional.mseLoss(ddp.forward(x), y);
    loss.backward();
    opt.step();
    const b = new Uint8Array(new Float64Array([loss.item()]).buffer);
    console.log("loss " + step + " " + Array.from(b).reverse().map(v => v.toString(16).padStart(2, "0")).join("").replace(/^0+/, ""));
  });
}
`

// TestProgramTrainsAsScript: a Go training program and its script twin
// make the same calls, and train the same model bit for bit, on one rank
// and on two under DDP: the program reaches the scripts' own API.
func TestProgramTrainsAsScript(t *testing.T) {
	skipShortPrograms(t)
	prog := hookbuild.Program(t, "./internal/testprograms/mlp")
	dir := t.TempDir()
	js := filepath.Join(dir, "mlp.js")
	if err := os.WriteFile(js, []byte(mlpJS), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ranks := range []int{1, 2} {
		got, stderr, err := runProgram(t, context.Background(), prog, ranks, wasm.Config{})
		if err != nil {
			t.Fatalf("%d ranks: %v\n%s", ranks, err, stderr)
		}
		var want bytes.Buffer
		if err := RunJob(context.Background(), js, JobOptions{Ranks: ranks, Rank: Options{Stdout: &want, Stderr: &want, AutoRelease: true}}); err != nil {
			t.Fatalf("%d ranks, the script: %v", ranks, err)
		}
		g, w := sortedLines(got), sortedLines(want.String())
		if g != w || strings.Count(g, "loss") != 5*ranks {
			t.Fatalf("%d ranks: the program printed\n%s\nthe script\n%s", ranks, g, w)
		}
	}
}

func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := range lines {
		for j := i + 1; j < len(lines); j++ {
			if lines[j] < lines[i] {
				lines[i], lines[j] = lines[j], lines[i]
			}
		}
	}
	return strings.Join(lines, "\n")
}

// hostileProgram is a Go program that calls the host functions directly,
// to hand them what a careless or hostile program would.
const hostileProgram = `package main

import (
	"fmt"
	"os"
	"unsafe"

	ze "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

//go:wasmimport zeroeng call
func call(path unsafe.Pointer, pathLen int32, args unsafe.Pointer, argsLen int32, out unsafe.Pointer, outCap int32, outLen unsafe.Pointer) int32

//go:wasmimport zeroeng call_method
func callMethod(h int32, name unsafe.Pointer, nameLen int32, args unsafe.Pointer, argsLen int32, out unsafe.Pointer, outCap int32, outLen unsafe.Pointer) int32

//go:wasmimport zeroeng tensor_data
func tensorData(h int32, buf unsafe.Pointer, capacity int32, lenOut unsafe.Pointer) int32

//go:wasmimport zeroeng release
func release(h int32) int32

//go:wasmimport zeroeng error_message
func errorMessage(buf unsafe.Pointer, capacity int32, lenOut unsafe.Pointer) int32

//go:wasmimport zeroeng error_clear
func errorClear() int32

func str(s string) (unsafe.Pointer, int32) { b := []byte(s); return unsafe.Pointer(&b[0]), int32(len(b)) }

// report prints a raw call's status and the host's message, and clears
// the failure, as a careful program does.
func report(st ...int32) {
	buf := make([]byte, 512)
	var n uint32
	errorMessage(unsafe.Pointer(&buf[0]), 512, unsafe.Pointer(&n))
	errorClear()
	fmt.Println("status", st, "message", string(buf[:min(int(n), 512)]))
}

func main() {
	out := make([]byte, 256)
	var n uint32
	p, pl := str("tensor.randn")
	a, al := str("[[2,3]]")
	switch os.Args[1] {
	case "bad-handle":
		m, ml := str("add")
		report(callMethod(999, m, ml, nil, 0, unsafe.Pointer(&out[0]), 256, unsafe.Pointer(&n)))
	case "wrong-kind":
		lin := ze.Must(ze.O("nn.Linear", 2, 2))
		report(tensorData(lin.ID, unsafe.Pointer(&out[0]), 256, unsafe.Pointer(&n)))
	case "out-of-bounds":
		report(call(unsafe.Pointer(uintptr(0x7ffffff0)), 64, a, al, unsafe.Pointer(&out[0]), 256, unsafe.Pointer(&n)))
	case "bad-json":
		b, bl := str("[[2,3]")
		report(call(p, pl, b, bl, unsafe.Pointer(&out[0]), 256, unsafe.Pointer(&n)))
	case "not-cleared":
		q, ql := str("tensor.nonesuch")
		call(q, ql, nil, 0, unsafe.Pointer(&out[0]), 256, unsafe.Pointer(&n))
		call(p, pl, a, al, unsafe.Pointer(&out[0]), 256, unsafe.Pointer(&n)) // goes on as if nothing failed
		fmt.Println("still running")
	case "not-cleared-at-end":
		q, ql := str("tensor.nonesuch")
		call(q, ql, nil, 0, unsafe.Pointer(&out[0]), 256, unsafe.Pointer(&n))
	case "double-release":
		t := ze.Must(ze.T("tensor.randn", []int{2}))
		report(release(t.ID), release(t.ID))
	}
	if len(os.Args) > 2 { // the program goes on: its next call works
		_, err := ze.Call(os.Args[2], 1)
		fmt.Println("then:", err)
	}
}
`

// TestProgramHostile: what a careless or hostile program hands the host
// ends in a status and a message naming what was wrong — a handle never
// given or released, a handle of another kind, memory outside the
// program's, JSON that does not parse, a name not in the API (with the one
// meant), an option the API does not take (the scripts' own check) — and
// never in a host trap; a failure the program does not look at is not lost:
// its next call, or its end, fails the rank with the original message.
func TestProgramHostile(t *testing.T) {
	skipShortPrograms(t)
	prog := hookbuild.ProgramSource(t, hostileProgram)
	for _, c := range []struct {
		args    []string
		out     string // in its output
		err     string // in the rank's error ("" for none)
		message string // what error_message said (printed by the SDK after the status)
	}{
		{[]string{"bad-handle", "tensor.manualSeed"}, "status [2]", "", "handle 999 is not one the program holds"},
		{[]string{"wrong-kind", "tensor.manualSeed"}, "status [2]", "", "is a object, not a tensor"},
		{[]string{"out-of-bounds", "tensor.manualSeed"}, "status [3]", "", "outside the program's"},
		{[]string{"bad-json", "tensor.manualSeed"}, "status [1]", "", "the arguments: JSON"},
		{[]string{"double-release", "tensor.manualSeed"}, "status [0 2]", "", "is not one the program holds (never given, or released)"},
		{[]string{"not-cleared"}, "", "tensor.nonesuch", ""},
		{[]string{"not-cleared-at-end"}, "", "did not clear", ""},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, stderr, err := runProgram(t, context.Background(), prog, 1, wasm.Config{}, c.args...)
			if c.err == "" {
				if err != nil {
					t.Fatalf("%v\n%s", err, stderr)
				}
			} else if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one with %q\n%s%s", err, c.err, out, stderr)
			}
			if !strings.Contains(out, c.out) || strings.Contains(out, "still running") {
				t.Fatalf("output %q, want %q", out, c.out)
			}
			if c.message != "" && (!strings.Contains(out, c.message) || !strings.Contains(out, "then: <nil>")) {
				t.Fatalf("output %q, want the message %q and the next call working", out, c.message)
			}
		})
	}
}

// TestProgramNamesAndOptions: a name not in the API suggests the one
// meant; an option the API does not take is the scripts' own error.
func TestProgramNamesAndOptions(t *testing.T) {
	skipShortPrograms(t)
	prog := hookbuild.ProgramSource(t, `package main

import (
	"fmt"

	ze "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

func main() {
	_, err := ze.Call("tensor.randm", []int{2})
	fmt.Println("1:", err)
	lin := ze.Must(ze.O("nn.Linear", 2, 2))
	params := ze.Must(lin.Method("parameters"))
	_, err = ze.Call("optim.SGD", params, map[string]any{"lr": 0.1, "momentun": 0.9})
	fmt.Println("2:", err)
	big := ze.Must(ze.T("tensor.arange", 3000))
	v := ze.Must(big.Method("toArray"))
	fmt.Println("3:", len(v.([]any)))
}
`)
	out, stderr, err := runProgram(t, context.Background(), prog, 1, wasm.Config{})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"1: ", "did you mean rand?", "2: ", "momentun", "did you mean momentum", "3: 3000"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output %q, want %q", out, want)
		}
	}
}

// TestProgramExitAndInterrupt: a program's exit status is the rank's, and
// a program that loops forever stops when the job is interrupted.
func TestProgramExitAndInterrupt(t *testing.T) {
	skipShortPrograms(t)
	prog := hookbuild.ProgramSource(t, `package main

import (
	"os"

	_ "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

func main() {
	if os.Args[1] == "exit" {
		os.Exit(3)
	}
	n := 0
	for {
		n++
	}
}
`)
	_, _, err := runProgram(t, context.Background(), prog, 2, wasm.Config{}, "exit")
	var se *Error
	if !errors.As(err, &se) || se.Exit == nil || se.Exit.Code != 3 {
		t.Fatalf("error %v, want exit status 3", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = runProgram(t, ctx, prog, 2, wasm.Config{}, "loop")
	if !errors.As(err, &se) || !se.Interrupted || time.Since(start) > 10*time.Second {
		t.Fatalf("error %v after %v, want an interruption", err, time.Since(start))
	}
}

// TestProgramTrapNamesTheFunction: a trap in the program names the
// function it happened in (from the name section) and the rank.
func TestProgramTrapNamesTheFunction(t *testing.T) {
	skipShortPrograms(t)
	prog := hookbuild.WAT(t, `(module
  (memory (export "memory") 1)
  (func (export "zeroeng_program_abi_v1"))
  (func $divide_by_zero (result i32) (i32.div_s (i32.const 1) (i32.const 0)))
  (func (export "_start") (drop (call $divide_by_zero))))`)
	_, _, err := runProgram(t, context.Background(), prog, 2, wasm.Config{})
	if err == nil || !strings.Contains(err.Error(), "divide_by_zero") || !strings.Contains(err.Error(), "rank") {
		t.Fatalf("error %v, want one naming the function and the rank", err)
	}
}
