package hostmem

import (
	"errors"
	"strconv"
	"strings"
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

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  string
	}{
		{"4096", 4096, ""},
		{"4096B", 4096, ""},
		{"512MiB", 512 << 20, ""},
		{"2 GiB", 2 << 30, ""},
		{"1.5gib", 3 << 29, ""},
		{"2g", 2 << 30, ""},
		{"1.5GB", 1500000000, ""},
		{"3TB", 3e12, ""},
		{"", 0, "not a number"},
		{"GiB", 0, "not a number"},
		{"2 parsecs", 0, `unknown unit "parsecs"`},
		{"0", 0, "out of range"},
		// A negative size is named as one, not as a unit "-1".
		{"-1", 0, `size "-1" is negative`},
		{"-1GiB", 0, `size "-1GiB" is negative`},
		{" -0.5 MiB", 0, "is negative"},
		{"-GiB", 0, "not a number"},
		{"+2MiB", 2 << 20, ""},
		{"1.5", 0, "not a whole number"},
		{"1e3", 0, `unknown unit "e3"`},
		{"9999999TiB", 0, "out of range"},
		{"1..5GiB", 0, "not a number"},
	} {
		got, err := ParseSize(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseSize(%q) = %d, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

// FuzzParseSize: any text gives a size in range or an error naming it,
// never a panic; a size printed by Size reads back within its rounding.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512MiB", "2 GiB", "1.5GB", "4096", "0", "-3", "1e9", "NaN", "Inf GiB", "9e99TB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Errorf("error %q does not quote the input", err)
			}
			return
		}
		if n < 1 || n >= 1<<62 {
			t.Errorf("ParseSize(%q) = %d, out of range", s, n)
		}
	})
}
