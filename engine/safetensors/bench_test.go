package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// benchTensors are 100 MiB of float32 tensors, 2 MiB each, as in a checkpoint
// of a small model.
func benchTensors() []Tensor {
	ts := make([]Tensor, 50)
	for i := range ts {
		data := make([]byte, 2<<20)
		for j := range data {
			data[j] = byte(i + j)
		}
		ts[i] = Tensor{Name: "layers." + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".weight", DType: dtype.Float32, Shape: []int{512, 1024}, Data: data}
	}
	return ts
}

func benchFile(b *testing.B) (string, int64) {
	path := filepath.Join(b.TempDir(), "bench.safetensors")
	if err := WriteFile(path, benchTensors(), map[string]string{"format": "pt"}); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return path, fi.Size()
}

// BenchmarkReadFile100MB reads a 100 MiB file that is in the page cache.
func BenchmarkReadFile100MB(b *testing.B) {
	path, size := benchFile(b)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadFile(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOSReadFile100MB is the baseline for ReadFile: os.ReadFile of the
// same file, without parsing.
func BenchmarkOSReadFile100MB(b *testing.B) {
	path, size := benchFile(b)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := os.ReadFile(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse100MB parses a file held in memory: the header only, since
// the tensors alias the buffer.
func BenchmarkParse100MB(b *testing.B) {
	var buf bytes.Buffer
	if err := Write(&buf, benchTensors(), nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(buf.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrite100MB serialises into a reused in-memory buffer.
func BenchmarkWrite100MB(b *testing.B) {
	ts := benchTensors()
	var buf bytes.Buffer
	Write(&buf, ts, nil)
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := Write(&buf, ts, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteFile100MB writes a 100 MiB file atomically, fsync included,
// so it measures the disk as much as the code.
func BenchmarkWriteFile100MB(b *testing.B) {
	ts := benchTensors()
	path := filepath.Join(b.TempDir(), "bench.safetensors")
	var size int64
	for _, t := range ts {
		size += int64(len(t.Data))
	}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteFile(path, ts, nil); err != nil {
			b.Fatal(err)
		}
	}
}
