// Package hostmem says how much memory the process can still take, so that
// an allocation that cannot succeed becomes an error naming what it was
// for, instead of the Go runtime's fatal "out of memory" and its trace.
// It reads Linux's own estimate (MemAvailable in /proc/meminfo) and the
// limit of the process's cgroup (v2, or v1), whichever is tighter.
package hostmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Available is the memory the process can still allocate, in bytes, and
// whether it could be found out (false off Linux, or without /proc).
func Available() (int64, bool) {
	avail, ok := memAvailable()
	if room, limited := cgroupRoom(); limited && (!ok || room < avail) {
		avail, ok = room, true
	}
	return avail, ok
}

// Error is Check's: an allocation larger than the memory available.
type Error struct {
	Need, Available int64
}

func (e *Error) Error() string {
	return fmt.Sprintf("needs %s, more than the %s of memory available", Size(e.Need), Size(e.Available))
}

// Check returns an *Error when bytes exceed the memory available, nil
// otherwise (and when it cannot tell).
func Check(bytes int64) error {
	avail, ok := Available()
	if ok && bytes > avail {
		return &Error{Need: bytes, Available: avail}
	}
	return nil
}

// Size formats a byte count for people: "64 GiB", "1.5 MiB", "12 bytes".
func Size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	f, i := float64(n), -1
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + [...]string{"KiB", "MiB", "GiB", "TiB", "PiB"}[i]
}

func memAvailable() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb * 1024, true
				}
			}
		}
	}
	return 0, false
}

// cgroupRoom is the limit of the process's memory cgroup less what it
// uses, when there is a limit.
func cgroupRoom() (int64, bool) {
	for _, p := range [][2]string{
		{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},                                 // v2
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}, // v1
	} {
		limit, ok1 := readInt(p[0])
		used, ok2 := readInt(p[1])
		// v1 reports "no limit" as a huge number.
		if ok1 && ok2 && limit < 1<<60 {
			return max(0, limit-used), true
		}
	}
	return 0, false
}

func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64) // "max" fails: no limit
	return n, err == nil
}

// ParseSize reads a byte count as people write it: "512MiB", "2 GiB",
// "1.5GB" (powers of 1000: KB, MB, GB, TB), "4096" or "4096B". Units are
// case-insensitive; the result must be a positive whole number of bytes
// below 2^62. A sign is read as one ("-1" is a negative size, not a
// size of unit "-1").
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	neg := strings.HasPrefix(t, "-")
	if neg || strings.HasPrefix(t, "+") {
		t = strings.TrimSpace(t[1:])
	}
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	scale, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)", s, strings.TrimSpace(t[max(i, 0):]))
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("size %q: not a number of bytes (for example 512MiB or 2GiB)", s)
	}
	if neg {
		return 0, fmt.Errorf("size %q is negative: it must be positive (for example 512MiB or 2GiB)", s)
	}
	v := f * scale
	if !(v >= 1) || v >= 1<<62 {
		return 0, fmt.Errorf("size %q: out of range (from 1 byte to 4 EiB)", s)
	}
	if v != float64(int64(v)) {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return int64(v), nil
}

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}
