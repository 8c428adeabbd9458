package torchfile

import (
	"bytes"
	"fmt"
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

// allocLimit is what parsing n bytes may allocate: the storages (at most
// the file), the copies of views (at most 4 times the file), the objects
// of the pickle (each opcode, a byte or more, makes at most one object, a
// stack slot and a memo entry) and the zip directory, plus a constant for
// the buffers.
func allocLimit(n int) uint64 { return 256*uint64(n) + 1<<20 }

// FuzzParse checks that Parse never panics, never allocates much more than
// its input, and that whatever parses writes a file that parses to the
// same object, and writes it again byte for byte.
func FuzzParse(f *testing.F) {
	names, err := filepath.Glob("testdata/*.pt")
	if err != nil || len(names) == 0 {
		f.Fatal("no fixtures", err)
	}
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(b[:len(b)/2])
		if i := bytes.Index(b, []byte("FloatStorage")); i > 0 {
			c := bytes.Clone(b)
			c[i+len("FloatStorage")+2] ^= 0x7f // a storage's key or size
			f.Add(c)
		}
	}
	var buf bytes.Buffer
	if err := Write(&buf, sample()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(pickle(opProto, 2, opEmptyList, opBinPut, 0, opBinGet, 0, opAppend, opStop))
	f.Add(pickle(opProto, 4, opFrame, "\x08\x00\x00\x00\x00\x00\x00\x00", opShortBinUnicode, 1, "a", opMemoize, opStop))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		var obj any
		var err error
		if n := allocated(func() { obj, err = Parse(data) }); n > allocLimit(len(data)) {
			t.Fatalf("Parse of %d bytes allocated %d bytes", len(data), n)
		}
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := Write(&out, obj); err != nil {
			t.Fatalf("a parsed object does not write: %v", err)
		}
		again, err := Parse(out.Bytes())
		if err != nil {
			t.Fatalf("a written file does not parse: %v", err)
		}
		// describe expands what the object shares: only a small expansion
		// is compared (fmt prints maps sorted, and NaN, which JSON cannot).
		if expanded(obj, map[any]int{}) < 10000 {
			a, b := fmt.Sprint(describe(obj)), fmt.Sprint(describe(again))
			if a != b {
				t.Fatalf("read\n%s\nwritten and read again\n%s", a, b)
			}
		}
		var out2 bytes.Buffer
		if err := Write(&out2, again); err != nil || !bytes.Equal(out.Bytes(), out2.Bytes()) {
			t.Fatalf("writing is not stable: %v", err)
		}
	})
}

// expanded is how many values v has once what it shares is expanded as a
// tree, counted up to about 10000.
func expanded(v any, memo map[any]int) int {
	var items []any
	switch x := v.(type) {
	case *Dict:
		for _, it := range x.Items {
			items = append(items, it.Value)
		}
	case *List:
		items = x.Items
	default:
		return 1
	}
	if n, ok := memo[v]; ok {
		return n
	}
	n := 1
	for _, c := range items {
		n = min(n+expanded(c, memo), 10000)
	}
	memo[v] = n
	return n
}
