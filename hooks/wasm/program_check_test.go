package wasm

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// TestCheckProgramExports: the exports the program ABI gives a meaning to
// are checked with their types — the marker (one), _start, the optional
// zeroeng_callback (the program's functions) and _initialize (a WASI
// reactor's) — and a good program has no problems.
func TestCheckProgramExports(t *testing.T) {
	const marker = `(func (export "zeroeng_program_abi_v1"))`
	for _, c := range []struct {
		name, exports, want string
	}{
		{"a command", `(func (export "_start"))`, ""},
		{"a reactor with functions", `(func (export "_start")) (func (export "_initialize")) (func (export "zeroeng_callback") (param i32 i32) (result i32) (i32.const 0))`, ""},
		{"_start with a result", `(func (export "_start") (result i32) (i32.const 0))`, "export _start has type () -> (i32), want () -> ()"},
		{"zeroeng_callback of the wrong type", `(func (export "_start")) (func (export "zeroeng_callback") (param i32))`, "export zeroeng_callback has type (i32) -> (), want (i32, i32) -> i32"},
		{"_initialize of the wrong type", `(func (export "_start")) (func (export "_initialize") (param i32))`, "export _initialize has type (i32) -> (), want () -> ()"},
		{"no _start", ``, "no _start export"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wasm := hookbuild.WAT(t, `(module (memory (export "memory") 1) `+marker+` `+c.exports+`)`)
			info, err := CheckProgram("prog.wasm", wasm)
			if err != nil {
				t.Fatal(err)
			}
			got := info.ProgramErr()
			switch {
			case c.want == "" && got != nil:
				t.Fatalf("problems: %v", got)
			case c.want != "" && (got == nil || !strings.Contains(got.Error(), c.want)):
				t.Fatalf("problems %v, want %q", got, c.want)
			}
		})
	}
}
