package hookbuild

import (
	"bytes"
	"testing"
)

// magic is the start of every wasm binary module: "\0asm", version 1.
var magic = []byte("\x00asm\x01\x00\x00\x00")

func TestSamplesBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every sample hook (go, wat2wasm, clang); not with -short")
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := Sample(t, name)
			if !bytes.HasPrefix(b, magic) {
				t.Fatalf("%s: %d bytes that do not start with %q", name, len(b), magic)
			}
			b[0] = 'x' // a copy: the next caller still gets the module
			if again := Sample(t, name); !bytes.HasPrefix(again, magic) {
				t.Fatalf("%s: the second call's bytes do not start with %q", name, magic)
			}
		})
	}
}

func TestWAT(t *testing.T) {
	b := WAT(t, `(module (memory (export "memory") 1) (func (export "zeroeng_hook_abi_v1")))`)
	if !bytes.HasPrefix(b, magic) {
		t.Fatalf("got %q..., want a wasm module", b[:min(len(b), 8)])
	}
}

func TestGoSource(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build; not with -short")
	}
	b := GoSource(t, `package main

import "github.com/zeroeng/zeroeng/samples/hooks/go/hookabi"

func main() {}

//go:wasmexport on_bucket
func onBucket(b hookabi.Handle) int32 { return hookabi.Result(hookabi.AllReduce(b, hookabi.Avg)) }
`)
	if !bytes.HasPrefix(b, magic) {
		t.Fatalf("got %q..., want a wasm module", b[:min(len(b), 8)])
	}
	for _, want := range []string{"zeroeng_hook_abi_v1", "on_bucket", "all_reduce"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the module does not name %s", want)
		}
	}
}
