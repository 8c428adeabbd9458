package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path string
		limit      int64
		want       string // "" : the contents
		is         error
	}{
		{"regular", small, 5, "", nil},
		{"through a link", link, 5, "", nil},
		{"too large", small, 4, "5 bytes or more, over the limit of 4", ErrTooLarge},
		{"FIFO", fifo, 100, "not a regular file (a FIFO)", ErrNotRegular},
		{"directory", dir, 100, "not a regular file (a directory)", ErrNotRegular},
		{"endless device", "/dev/zero", 100, "not a regular file (a character device)", ErrNotRegular},
		{"missing", filepath.Join(dir, "none"), 100, "no such file", os.ErrNotExist},
	} {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			var b []byte
			var err error
			go func() { b, err = ReadFile(tt.path, tt.limit); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("ReadFile blocked")
			}
			if tt.want == "" {
				if err != nil || string(b) != "hello" {
					t.Fatalf("%q, %v", b, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.path) || !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want %q naming %s", err, tt.want, tt.path)
			}
		})
	}
}
