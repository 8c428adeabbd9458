package wasm

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// residentBytes is the process's resident set, from /proc/self/statm.
func residentBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// TestGuestMemoryCostsWhatItTouches: a guest's memory is reserved at its
// limit (512 MiB by default) but costs only the pages it touches, however
// many instances come and go. In Go's heap, an instance that reused a
// closed one's span had the whole limit cleared first: each start touched
// 512 MiB.
func TestGuestMemoryCostsWhatItTouches(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/statm")
	}
	m, err := Compile("small.wasm", hookbuild.WAT(t, hostile(`(func (export "on_bucket") (param i32) (result i32) (call $average (local.get 0)))`)), Config{})
	if err != nil {
		t.Fatal(err)
	}
	start := residentBytes(t)
	for range 6 {
		noErrors(t, training{n: 2, steps: 1, hook: wasmHook(m, Options{}, nil)}.run(t))
		runtime.GC() // the closed instances' memory is free to reuse
	}
	if grew := residentBytes(t) - start; grew > 256<<20 {
		t.Errorf("12 instances of a hook that touches one page of memory grew the resident set by %d MiB", grew>>20)
	}
}
