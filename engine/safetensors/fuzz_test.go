package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"runtime"
	"testing"
	"unsafe"
)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// allocated returns the bytes fn allocates on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// allocLimit is what parsing n bytes may allocate: a small multiple of the
// input, plus a constant for the JSON decoder and the first read chunk.
func allocLimit(n int) uint64 { return 16*uint64(n) + 256<<10 }

// FuzzParse checks that Parse and Read never panic, never allocate much more
// than the input, agree with each other, and that whatever parses
// re-serialises to a file that parses to the same tensors.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/torch.safetensors", "testdata/unordered.safetensors", "testdata/go_written.safetensors"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])                               // truncated data
		f.Add(append(bytes.Clone(b), 0))                  // trailing byte
		f.Add(b[:8+int(binary.LittleEndian.Uint64(b))/2]) // truncated header
		c := bytes.Clone(b)
		c[0] ^= 0x40 // header length off
		f.Add(c)
		c = bytes.Clone(b)
		c[7] = 0x80 // huge header length
		f.Add(c)
		c = bytes.Clone(b)
		if i := bytes.Index(c, []byte(`[0,32]`)); i > 0 {
			copy(c[i:], `[0,99]`) // offsets that do not match
		}
		f.Add(c)
	}
	f.Add(mk(`{"t":{"dtype":"U8","shape":[1000000000000],"data_offsets":[0,1000000000000]}}`, 100))
	f.Add(mk(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}}`, 8))
	f.Add(mk(`{"__metadata__":{"a":"b"}}`, 0))
	f.Add([]byte{})
	for _, tc := range badInputs() {
		f.Add(tc.input)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		var file *File
		var err error
		if n := allocated(func() { file, err = Parse(data) }); n > allocLimit(len(data)) {
			t.Fatalf("Parse of %d bytes allocated %d bytes", len(data), n)
		}
		var sfile *File
		var serr error
		if n := allocated(func() { sfile, serr = Read(bytes.NewReader(data)) }); n > allocLimit(len(data))+2*uint64(len(data)) {
			t.Fatalf("Read of %d bytes allocated %d bytes", len(data), n)
		}
		if (err == nil) != (serr == nil) {
			t.Fatalf("Parse and Read disagree: %v / %v", err, serr)
		}
		if err != nil {
			return
		}
		sameTensors(t, sfile.Tensors, file.Tensors)
		var buf bytes.Buffer
		if err := Write(&buf, file.Tensors, file.Metadata); err != nil {
			t.Fatalf("parsed file does not write: %v", err)
		}
		again, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatalf("written file does not parse: %v", err)
		}
		sameTensors(t, again.Tensors, file.Tensors)
		if !sameMeta(again.Metadata, file.Metadata) {
			t.Fatalf("metadata %v became %v", file.Metadata, again.Metadata)
		}
		var buf2 bytes.Buffer
		if err := Write(&buf2, again.Tensors, again.Metadata); err != nil || !bytes.Equal(buf.Bytes(), buf2.Bytes()) {
			t.Fatalf("writing is not stable: %v", err)
		}
	})
}
