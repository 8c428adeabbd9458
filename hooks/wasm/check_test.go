package wasm

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// TestCheck: modules that break the ABI are refused before anything runs,
// each with the reason; valid ones list their exports and imports.
func TestCheck(t *testing.T) {
	const marker = `(func (export "zeroeng_hook_abi_v1"))`
	const memory = `(memory (export "memory") 1)`
	const onBucket = `(func (export "on_bucket") (param i32) (result i32) (i32.const 0))`
	cases := []struct {
		name string
		wat  string
		want []string // problems; none for a valid module
	}{
		{"minimal", memory + marker + onBucket, nil},
		{"no marker", memory + onBucket, []string{"no ABI marker"}},
		{"a later ABI", memory + onBucket + `(func (export "zeroeng_hook_abi_v2"))`, []string{"built for the hook ABI v2; this zeroeng implements v1"}},
		{"two markers", memory + onBucket + marker + `(func (export "zeroeng_hook_abi_v2"))`, []string{"several ABI markers (zeroeng_hook_abi_v1, zeroeng_hook_abi_v2)"}},
		{"no on_bucket", memory + marker, []string{"missing export on_bucket (i32) -> (i32)"}},
		{"no memory", marker + onBucket, []string{`no exported memory named "memory"`}},
		{"on_bucket of the wrong type", memory + marker + `(func (export "on_bucket") (param i64) (result i32) (i32.const 0))`,
			[]string{"export on_bucket has type (i64) -> (i32), want (i32) -> (i32)"}},
		{"a command", memory + marker + onBucket + `(func (export "_start"))`, []string{"exports _start"}},
		{"configure without alloc", memory + marker + onBucket + `(func (export "configure") (param i32 i32) (result i32) (i32.const 0))`,
			[]string{"exports configure but not alloc"}},
		{"an import from elsewhere", `(import "env" "abort" (func))` + memory + marker + onBucket,
			[]string{`imports env.abort: a hook may import only from "zeroeng" and "wasi_snapshot_preview1"`}},
		{"a host function that does not exist", `(import "zeroeng" "fopen" (func (param i32) (result i32)))` + memory + marker + onBucket,
			[]string{"imports zeroeng.fopen, which this host does not provide"}},
		{"a host function of the wrong type", `(import "zeroeng" "all_reduce" (func (param i32) (result i32)))` + memory + marker + onBucket,
			[]string{"imports zeroeng.all_reduce with type (i32) -> (i32), want (i32, i32) -> (i32)"}},
		{"a WASI function that does not exist", `(import "wasi_snapshot_preview1" "sock_open" (func (param i32) (result i32)))` + memory + marker + onBucket,
			[]string{"imports wasi_snapshot_preview1.sock_open, which is not a WASI preview 1 function"}},
		{"WASI fd_write of the wrong type", `(import "wasi_snapshot_preview1" "fd_write" (func (param i32) (result i32)))` + memory + marker + onBucket,
			[]string{"imports wasi_snapshot_preview1.fd_write with type (i32) -> (i32), want (i32, i32, i32, i32) -> (i32)"}},
		{"an imported memory", `(import "env" "memory" (memory 1))` + marker + onBucket,
			[]string{"imports memory env.memory", `no exported memory named "memory"`}},
		{"a start function", memory + marker + onBucket + `(func $spin (loop $l (br $l))) (start $spin)`,
			[]string{"has a start function (a WebAssembly start section), which would run as each rank instantiates the module"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info, err := Check(c.name+".wasm", hookbuild.WAT(t, "(module "+c.wat+")"))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(info.Problems, "\n")
			if len(c.want) == 0 && got != "" {
				t.Fatalf("problems in a valid module:\n%s", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("problems\n%s\ndo not mention %q", got, w)
				}
			}
			_, cerr := Compile(c.name+".wasm", hookbuild.WAT(t, "(module "+c.wat+")"), Config{})
			if (cerr == nil) != (len(c.want) == 0) {
				t.Errorf("Compile: %v", cerr)
			}
			if cerr != nil && !strings.Contains(cerr.Error(), "wasm hook "+c.name+".wasm does not follow the zeroeng hook ABI v1") {
				t.Errorf("Compile's error does not name the module: %v", cerr)
			}
		})
	}
}

// TestNotWasm: bytes that are not WebAssembly, or broken WebAssembly, are
// an error naming the module, not a panic.
func TestNotWasm(t *testing.T) {
	for _, c := range []struct{ name, data, want string }{
		{"empty", "", "not a WebAssembly module"},
		{"text", "(module)", "not a WebAssembly module"},
		{"an ELF file", "\x7fELF\x02\x01\x01", "not a WebAssembly module"},
		{"a truncated header", "\x00asm\x01\x00", "invalid WebAssembly"},
		{"a bad section", "\x00asm\x01\x00\x00\x00\x01\xff\xff\xff\xff\x0f", "invalid WebAssembly"},
	} {
		_, err := Check(c.name, []byte(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "wasm hook "+c.name) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// FuzzCheck: no input makes the loader panic.
func FuzzCheck(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(hookbuild.WAT(f, "(module "+`(memory (export "memory") 1)(func (export "zeroeng_hook_abi_v1"))(func (export "on_bucket") (param i32) (result i32) (i32.const 0))`+")"))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := Check("fuzz.wasm", data)
		if err == nil && info == nil {
			t.Fatal("no info and no error")
		}
	})
}

// TestLoadRefusesEndlessFiles: a device or a FIFO named as a module is
// an error at once (hook check and --hook read through Load's reader).
func TestLoadRefusesEndlessFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "hook.wasm")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/dev/zero", fifo} {
		_, err := Load(path, Config{})
		if err == nil || !strings.Contains(err.Error(), path+": not a regular file") {
			t.Errorf("Load(%s): %v", path, err)
		}
	}
}
