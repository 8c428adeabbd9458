// Package procwatch watches a launcher's child processes through /proc:
// which processes a launcher (mpirun) started, and whether they are still
// running. zeroeng launch and the MPI tests use it to pass signals to the
// ranks and to notice an mpirun that outlives every rank: Open MPI 4.1's
// mpirun can deadlock in its own shutdown (PMIx_server_finalize joins its
// progress thread, which waits on a lock the main thread holds) after
// every rank has exited, and would then never end the job.
package procwatch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Child is a process whose parent is the watched one.
type Child struct {
	PID   int
	State byte // as /proc/PID/stat says: 'R', 'S', 'Z' (exited, not yet reaped), ...
}

// Exited reports whether the process has ended (a zombie waiting for its
// parent to reap it).
func (c Child) Exited() bool { return c.State == 'Z' || c.State == 'X' }

// Children lists the processes whose parent is pid (none where there is
// no /proc).
func Children(pid int) []Child {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []Child
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 || len(fields[0]) != 1 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil && ppid == pid {
			if child, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				kids = append(kids, Child{PID: child, State: fields[0][0]})
			}
		}
	}
	return kids
}

// Running lists the children of pid that have not exited.
func Running(pid int) []int {
	var out []int
	for _, c := range Children(pid) {
		if !c.Exited() {
			out = append(out, c.PID)
		}
	}
	return out
}

// Outlived waits until the launcher pid has had children and all of them
// have exited, then for grace more, and returns true if the launcher has
// not ended by then (its children still unreaped or gone); it returns
// false when ctx ends first (the launcher ended: the caller cancels ctx).
func Outlived(ctx context.Context, pid int, grace time.Duration) bool {
	const poll = 250 * time.Millisecond
	saw := false
	var allGone time.Time
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case now := <-t.C:
			kids := Children(pid)
			running := 0
			for _, c := range kids {
				if !c.Exited() {
					running++
				}
			}
			switch {
			case running > 0:
				saw, allGone = true, time.Time{}
			case !saw:
			case allGone.IsZero():
				allGone = now
			case now.Sub(allGone) >= grace:
				return true
			}
		}
	}
}
