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
