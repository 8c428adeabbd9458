package hostmem

import (
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	avail, ok := Available()
	if !ok {
		t.Skip("no /proc/meminfo here: the check cannot tell and lets every allocation through")
	}
	if avail <= 0 {
		t.Fatalf("available %d", avail)
	}
	if err := Check(1 << 20); err != nil {
		t.Errorf("1 MiB: %v", err)
	}
	err := Check(1 << 62)
	var e *Error
	if !errors.As(err, &e) || e.Need != 1<<62 || e.Available != avail && e.Available <= 0 {
		t.Fatalf("4 EiB: %v", err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 bytes", 1023: "1023 bytes", 1024: "1 KiB", 1536: "1.5 KiB", 64 << 30: "64 GiB", 3 << 40: "3 TiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
