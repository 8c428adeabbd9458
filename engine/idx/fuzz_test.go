package idx

import (
	"bytes"
	"compress/gzip"
	"io"
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

// allocLimit is what reading n bytes of idx data may allocate: the data read
// as it arrives (at most twice its size), widened to int32 (four times), plus
// a constant for the first read chunk and the gzip decompressor.
func allocLimit(n int) uint64 { return 16*uint64(n) + 512<<10 }

// FuzzParse checks that Parse and Read never panic, never allocate much more
// than the data they are given (for gzip input: than the data it expands
// to), agree with each other, and that whatever parses re-serialises to a
// file that parses to the same array.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.idx*")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(append(bytes.Clone(b), 0))
		c := bytes.Clone(b)
		c[len(c)/2] ^= 0x21
		f.Add(c)
	}
	f.Add(idxFile(0x08, []uint32{1 << 20, 1 << 20}, 100))
	f.Add(gz(idxFile(0x0B, []uint32{1 << 30}, 100)))
	f.Add(gz(idxFile(0x09, []uint32{3, 2}, 6)))
	for _, tc := range badInputs() {
		f.Add(tc.input)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		size := len(data)
		if isGzip(data) {
			// Bound by what the stream really expands to.
			if zr, err := gzip.NewReader(bytes.NewReader(data)); err == nil {
				n, _ := io.Copy(io.Discard, io.LimitReader(zr, 1<<30))
				size += int(n)
			}
		}
		var arr *Array
		var err error
		if n := allocated(func() { arr, err = Parse(data) }); n > allocLimit(size) {
			t.Fatalf("Parse of %d bytes (%d expanded) allocated %d bytes", len(data), size, n)
		}
		var sarr *Array
		var serr error
		if n := allocated(func() { sarr, serr = Read(bytes.NewReader(data)) }); n > allocLimit(size) {
			t.Fatalf("Read of %d bytes (%d expanded) allocated %d bytes", len(data), size, n)
		}
		if (err == nil) != (serr == nil) {
			t.Fatalf("Parse and Read disagree: %v / %v", err, serr)
		}
		if err != nil {
			return
		}
		if !sameArray(arr, sarr) {
			t.Fatal("Parse and Read return different arrays")
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
			t.Fatal("round trip changed the array")
		}
	})
}
