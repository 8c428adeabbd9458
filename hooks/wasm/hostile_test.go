package wasm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// hostileHeader declares what the hostile modules below share: the host
// functions they call, one page of memory and the ABI marker.
const hostileHeader = `
  (import "zeroeng" "scale" (func $scale (param i32 f64) (result i32)))
  (import "zeroeng" "all_reduce" (func $all_reduce (param i32 i32) (result i32)))
  (import "zeroeng" "bucket_info" (func $bucket_info (param i32 i32) (result i32)))
  (import "zeroeng" "tensor_read" (func $tensor_read (param i32 i64 i32 i32) (result i32)))
  (import "zeroeng" "tensor_write" (func $tensor_write (param i32 i64 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $rank (mut i32) (i32.const 0))
  (global $world (mut f64) (f64.const 1))
  (func (export "zeroeng_hook_abi_v1"))
  (func (export "init") (param $rank i32) (param $world i32) (result i32)
    (global.set $rank (local.get $rank))
    (global.set $world (f64.convert_i32_u (local.get $world)))
    (i32.const 0))
  ;; $average is the built-in hook: scale by 1/world, then sum.
  (func $average (param $b i32) (result i32)
    (local $s i32)
    (local.set $s (call $scale (local.get $b) (f64.div (f64.const 1) (global.get $world))))
    (if (local.get $s) (then (return (local.get $s))))
    (call $all_reduce (local.get $b) (i32.const 0)))
`

func hostile(body string) string { return "(module" + hostileHeader + body + ")" }

// TestHostileModules: every way a module can misbehave while running ends
// in the documented error, names the module, the export, the rank and the
// step; under the fallback policy the run instead goes on with the
// built-in all-reduce and ends with exactly its parameters.
func TestHostileModules(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		cfg     Config
		want    []string // in the abort error
		skipInt bool     // too slow for -short
	}{
		{
			name: "trap",
			body: `(func (export "on_bucket") (param $b i32) (result i32) unreachable)`,
			want: []string{"on_bucket (rank 0, step 0, bucket 0)", "trap: wasm error: unreachable"},
		},
		{
			name: "division by zero in the second step",
			body: `(global $calls (mut i32) (i32.const 0))
				(func (export "on_bucket") (param $b i32) (result i32)
				  (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
				  (drop (i32.div_u (i32.const 1) (i32.sub (i32.const 5) (global.get $calls))))
				  (call $average (local.get $b)))`,
			// The fifth call: step 0 has one bucket, step 1 four.
			want: []string{"on_bucket (rank 0, step 1, bucket 3)", "integer divide by zero"},
		},
		{
			name: "infinite loop under a time limit",
			body: `(func (export "on_bucket") (param $b i32) (result i32) (loop $forever (br $forever)) (i32.const 0))`,
			cfg:  Config{Timeout: 200 * time.Millisecond},
			want: []string{"on_bucket (rank 0, step 0, bucket 0)", "ran past its time limit of 200ms"},
		},
		{
			name: "unbounded memory growth",
			body: `(func (export "on_bucket") (param $b i32) (result i32)
				  (loop $more (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
				  unreachable)`,
			cfg:  Config{MemoryLimitMB: 16},
			want: []string{"trap: wasm error: unreachable", "MiB of its 16 MiB limit"},
		},
		{
			name: "out-of-bounds pointer",
			body: `(func (export "on_bucket") (param $b i32) (result i32)
				  (drop (call $bucket_info (local.get $b) (i32.const 65530)))
				  (i32.const 0))`,
			want: []string{"host call bucket_info: ERR_BOUNDS: guest range [65530, 65570) is outside the 65536 bytes of memory"},
		},
		{
			name: "a read past the bucket",
			body: `(func (export "on_bucket") (param $b i32) (result i32)
				  (call $tensor_read (local.get $b) (i64.const 1000000) (i32.const 0) (i32.const 8)))`,
			want: []string{"host call tensor_read: ERR_BOUNDS: 8 bytes at offset 1000000 are outside the tensor's"},
		},
		{
			name: "a read at an offset near 2^63",
			body: `(func (export "on_bucket") (param $b i32) (result i32)
				  (call $tensor_read (local.get $b) (i64.const 9223372036854775807) (i32.const 0) (i32.const 8)))`,
			want: []string{"host call tensor_read: ERR_BOUNDS: 8 bytes at offset 9223372036854775807 are outside the tensor's"},
		},
		{
			name: "a handle it never had",
			body: `(func (export "on_bucket") (param $b i32) (result i32)
				  (call $all_reduce (i32.const 4242) (i32.const 0)))`,
			want: []string{"host call all_reduce: ERR_HANDLE: 4242 is not a live handle"},
		},
		{
			name: "an unknown reduce op",
			body: `(func (export "on_bucket") (param $b i32) (result i32)
				  (call $all_reduce (local.get $b) (i32.const 9)))`,
			want: []string{"host call all_reduce: ERR_INVALID: unknown reduce op 9"},
		},
		{
			name: "a failure status of its own",
			body: `(func (export "on_bucket") (param $b i32) (result i32) (i32.const 77))`,
			want: []string{"on_bucket (rank 0, step 0, bucket 0): returned status 77"},
		},
		{
			name: "garbage written over the bucket, then a trap",
			body: `(func (export "on_bucket") (param $b i32) (result i32)
				  (memory.fill (i32.const 0) (i32.const 255) (i32.const 64))
				  (drop (call $tensor_write (local.get $b) (i64.const 0) (i32.const 0) (i32.const 64)))
				  unreachable)`,
			want: []string{"trap: wasm error: unreachable"},
		},
	}
	plain := training{n: 2}.run(t)
	noErrors(t, plain)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Compile(c.name+".wasm", hookbuild.WAT(t, hostile(c.body)), c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			// Abort: every rank fails with the error, none hangs.
			res := training{n: 2, hook: wasmHook(m, Options{}, nil)}.run(t)
			err = res.errs[0]
			var he *Error
			if !errors.As(err, &he) {
				t.Fatalf("rank 0: want a *wasm.Error, got %v", err)
			}
			for _, w := range append(c.want, "wasm hook "+c.name+".wasm: ") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if res.errs[1] == nil {
				t.Errorf("rank 1 went on after the hook failed")
			}

			// Fallback: a warning, and the parameters of the built-in
			// all-reduce, to the bit, on every rank.
			var log syncBuffer
			hooks := make([]*Hook, 2)
			res = training{n: 2, hook: wasmHook(m, Options{OnError: Fallback, Stderr: &log}, hooks)}.run(t)
			noErrors(t, res)
			equalRuns(t, res, plain, 0)
			if !strings.Contains(log.String(), "warning: wasm hook "+c.name+".wasm failed") || !hooks[0].FellBack() || !hooks[1].FellBack() {
				t.Errorf("no fallback warning: %q", log.String())
			}
		})
	}
}

// TestFailureOnOneRank: a hook that fails on rank 1 only, after rank 0
// issued a collective for the bucket, cannot be repaired by falling back;
// the ranks end with errors instead of hanging or mixing buckets.
func TestFailureOnOneRank(t *testing.T) {
	m, err := Compile("lopsided.wasm", hookbuild.WAT(t, hostile(`
		(func (export "on_bucket") (param $b i32) (result i32)
		  (if (i32.eq (global.get $rank) (i32.const 1)) (then unreachable))
		  (call $average (local.get $b)))`)), Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []Policy{Abort, Fallback} {
		done := make(chan trained)
		go func() {
			done <- training{n: 2, hook: wasmHook(m, Options{OnError: policy, Stderr: &syncBuffer{}}, nil)}.run(t)
		}()
		select {
		case res := <-done:
			if res.errs[0] == nil || res.errs[1] == nil {
				t.Fatalf("%v: want both ranks to fail, got %v and %v", policy, res.errs[0], res.errs[1])
			}
			// Rank 1's own failure, at its step: the trap, not the vote
			// that its failure made fail.
			if e := res.errs[1].Error(); !strings.Contains(e, "on_bucket (rank 1, step 0, bucket 0)") || !strings.Contains(e, "unreachable") {
				t.Errorf("%v: rank 1's error does not name the trap and its step: %v", policy, res.errs[1])
			}
		case <-time.After(time.Minute):
			t.Fatalf("%v: the ranks hang", policy)
		}
	}
}
