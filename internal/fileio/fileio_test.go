package fileio

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteAtomicKeepsTargetOnFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bin")
	if err := WriteAtomic("test", path, func(f *os.File) error { _, err := f.Write([]byte("v1")); return err }); err != nil {
		t.Fatal(err)
	}
	err := WriteAtomic("test", path, func(f *os.File) error {
		f.Write([]byte("partial"))
		return errors.New("injected")
	})
	if err == nil || err.Error() != "injected" {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "v1" {
		t.Fatalf("target is %q after a failed write", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary file left behind: %v", entries)
	}
	if err := WriteAtomic("test", filepath.Join(dir, "no", "such", "dir"), func(*os.File) error { return nil }); err == nil || !strings.HasPrefix(err.Error(), "test: ") {
		t.Fatalf("err = %v", err)
	}
}

func TestReadExact(t *testing.T) {
	data := bytes.Repeat([]byte{7}, 200_000)
	for _, trusted := range []bool{true, false} {
		got, err := ReadExact(bytes.NewReader(data), len(data), trusted)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("trusted=%v: %d bytes, %v", trusted, len(got), err)
		}
		got, err = ReadExact(bytes.NewReader(data[:10]), 1<<40, false)
		if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != 10 || cap(got) > 2*readChunk {
			t.Fatalf("short untrusted read: %d bytes (cap %d), %v", len(got), cap(got), err)
		}
	}
}
