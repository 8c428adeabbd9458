package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The REPL in a real terminal emulator, tmux, whose screen the test reads
// back with capture-pane: unlike the raw pseudo-terminal of
// TestREPLTerminal, it shows what the cursor moves and clears leave
// visible, which is where a prompt on the bottom row went wrong.

const (
	tmuxRows = 12
	tmuxCols = 120
)

// tmuxREPL is zeroeng repl running in a detached tmux session on a
// private server.
type tmuxREPL struct {
	t      *testing.T
	tmux   string
	socket string
	env    []string
}

func startTmuxREPL(t *testing.T, tmux, bin string, args ...string) *tmuxREPL {
	t.Helper()
	home := t.TempDir()
	// A private configuration: no status line, so that the pane is the
	// whole 12-row window, and a pane that outlives a crashed REPL, so
	// that a failure shows its last screen.
	conf := filepath.Join(home, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g status off\nset -g remain-on-exit on\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range replEnv(t, home, filepath.Join(home, "state")) {
		if k, _, _ := strings.Cut(kv, "="); k != "TMUX" && k != "TMUX_PANE" {
			env = append(env, kv)
		}
	}
	// A short socket path: Unix socket paths are limited to about 100
	// bytes, which a test's temporary directory can exceed.
	dir, err := os.MkdirTemp("", "zt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &tmuxREPL{t: t, tmux: tmux, socket: filepath.Join(dir, "s"), env: env}
	// With more than one argument, tmux runs the command without a shell.
	s.run(slices.Concat([]string{"-f", conf, "new-session", "-d", "-x", fmt.Sprint(tmuxCols), "-y", fmt.Sprint(tmuxRows),
		"--", bin, "repl"}, args)...)
	t.Cleanup(func() { exec.Command(tmux, "-S", s.socket, "kill-server").Run() })
	if got := strings.TrimSpace(s.run("display-message", "-p", "#{pane_height}")); got != fmt.Sprint(tmuxRows) {
		t.Fatalf("the tmux pane has %s rows, want %d", got, tmuxRows)
	}
	return s
}

// run runs a tmux command on the test's server and returns its output.
func (s *tmuxREPL) run(args ...string) string {
	s.t.Helper()
	cmd := exec.Command(s.tmux, append([]string{"-S", s.socket}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is the pane's visible rows, without trailing spaces.
func (s *tmuxREPL) screen() []string {
	s.t.Helper()
	rows := strings.Split(strings.TrimSuffix(s.run("capture-pane", "-p"), "\n"), "\n")
	for i, r := range rows {
		rows[i] = strings.TrimRight(r, " ")
	}
	return rows
}

// enter types a line and Enter.
func (s *tmuxREPL) enter(line string) {
	s.t.Helper()
	s.run("send-keys", "-l", line)
	s.run("send-keys", "Enter")
}

// waitFor waits until the screen shows rows, one after the other, and
// fails the test with what it shows instead.
func (s *tmuxREPL) waitFor(rows ...string) {
	s.t.Helper()
	deadline := time.Now().Add(ptyTimeout)
	for {
		scr := s.screen()
		for i := range len(scr) - len(rows) + 1 {
			if slices.Equal(scr[i:i+len(rows)], rows) {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the screen does not show\n\t%s\nit shows\n\t%s", strings.Join(rows, "\n\t"), strings.Join(scr, "\n\t"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestREPLBottomRow enters expressions once the screen is full, with the
// prompt on the terminal's bottom row, where the redraw of the prompt used
// to move up a row and erase the last line printed.
func TestREPLBottomRow(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is needed to see the REPL's screen as a terminal shows it")
	}
	if testing.Short() {
		t.Skip("drives zeroeng in tmux")
	}
	for _, nproc := range []int{1, 2} {
		t.Run(fmt.Sprintf("nproc %d", nproc), func(t *testing.T) {
			s := startTmuxREPL(t, tmux, binary, "--nproc", fmt.Sprint(nproc))
			// values are what each rank prints for a value v.
			values := func(v string) []string {
				if nproc == 1 {
					return []string{v}
				}
				var rows []string
				for r := range nproc {
					rows = append(rows, fmt.Sprintf("[%d] %s", r, v))
				}
				return rows
			}
			// Fill the screen so that the prompt comes on its bottom row
			// and every later line scrolls it.
			fill := fmt.Sprintf(`for (let i = 0; i < %d; i++) console.log("fill", i); "full"`, 2*tmuxRows)
			s.waitFor(">")
			s.enter(fill)
			// Keys are typed only once the prompt shows: before, the
			// terminal is not yet the editor's and would echo them.
			s.waitFor(append(values(`"full"`), ">")...)
			// Each entry with its values must stay on the screen, and the
			// next prompt must show below them.
			prev := values(`"full"`)
			for range 3 {
				for _, e := range []struct{ in, out string }{{"1 + 100", "101"}, {`"x".repeat(3)`, `"xxx"`}} {
					s.enter(e.in)
					block := append([]string{"> " + e.in}, values(e.out)...)
					s.waitFor(slices.Concat(prev, block, []string{">"})...)
					prev = block
				}
			}
		})
	}
}
