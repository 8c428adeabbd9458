package npy

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// allocated returns the bytes fn allocates on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// allocLimit is what reading n bytes may allocate: widening int8 to int32
// quadruples the data and a Fortran-order array is copied once more, plus a
// constant for the first read chunk.
func allocLimit(n int) uint64 { return 16*uint64(n) + 256<<10 }

// FuzzParse checks that Parse and Read never panic, never allocate much more
// than the input, agree with each other, and that whatever parses
// re-serialises to a file that parses to the same array.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.npy")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(append(bytes.Clone(b), 0))
		c := bytes.Clone(b)
		c[8] ^= 0x10 // header length off
		f.Add(c)
	}
	f.Add(npyFile(1, h("'|u1'", "False", "(1000000000000,)"), 100))
	f.Add(npyFile(2, h("'>i2'", "True", "(2, 2, 2)"), 16))
	f.Add(npyFile(3, h("'<i1'", "True", "(3, 2)"), 6))
	for _, tc := range badInputs() {
		f.Add(tc.input)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		var arr *Array
		var err error
		if n := allocated(func() { arr, err = Parse(data) }); n > allocLimit(len(data)) {
			t.Fatalf("Parse of %d bytes allocated %d bytes", len(data), n)
		}
		var sarr *Array
		var serr error
		if n := allocated(func() { sarr, serr = Read(bytes.NewReader(data)) }); n > allocLimit(len(data))+2*uint64(len(data)) {
			t.Fatalf("Read of %d bytes allocated %d bytes", len(data), n)
		}
		if err != nil {
			return
		}
		// Read stops after the data, so it may accept what Parse rejects
		// for trailing bytes, never the other way round.
		if serr != nil || !sameArray(arr, sarr) {
			t.Fatalf("Parse succeeded, Read: %v", serr)
		}
		var buf bytes.Buffer
		if err := Write(&buf, arr); err != nil {
			t.Fatalf("parsed array does not write: %v", err)
		}
		again, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatalf("written array does not parse: %v", err)
		}
		if !sameArray(again, arr) {
			t.Fatalf("round trip changed the array")
		}
	})
}
