package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// The REPL's terminal front-end, tested as a user meets it: the zeroeng
// binary runs on a pseudo-terminal and the test types keys and reads the
// screen. The REPL's semantics are tested without a terminal in
// script/repl_test.go.

const ptyTimeout = 30 * time.Second

// buildZeroeng builds the command into dir.
func buildZeroeng(t *testing.T, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is needed to build zeroeng: %v", err)
	}
	bin := filepath.Join(dir, "zeroeng")
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// replEnv is a hermetic environment for the REPL: home and state in the
// test's directories and an empty inputrc.
func replEnv(t *testing.T, home, state string) []string {
	t.Helper()
	inputrc := filepath.Join(home, "inputrc")
	if err := os.WriteFile(inputrc, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "HOME", k == "XDG_STATE_HOME", k == "TERM", k == "INPUTRC", strings.HasPrefix(k, "ZEROENG_"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "XDG_STATE_HOME="+state, "TERM=xterm", "INPUTRC="+inputrc)
}

// terminal is zeroeng running on a pseudo-terminal.
type terminal struct {
	t      *testing.T
	cmd    *exec.Cmd
	pty    *os.File
	exited chan struct{}

	mu   sync.Mutex
	raw  bytes.Buffer // everything the program wrote
	seen int          // how much of the screen text expect has consumed
}

func startTerminal(t *testing.T, bin string, env []string, args ...string) *terminal {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"repl"}, args...)...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Skipf("cannot start a program on a pseudo-terminal: %v", err)
	}
	term := &terminal{t: t, cmd: cmd, pty: f, exited: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			term.mu.Lock()
			term.raw.Write(buf[:n])
			term.mu.Unlock()
			if err != nil { // EIO once the program has exited
				return
			}
		}
	}()
	go func() {
		cmd.Wait()
		close(term.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-term.exited:
		default:
			cmd.Process.Kill()
			<-term.exited
		}
		f.Close()
	})
	return term
}

// ansi matches the terminal control sequences the line editor writes:
// CSI sequences (cursor moves, colours, clearing) and OSC strings.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\r`)

// screen is the program's output so far without control sequences.
func (term *terminal) screen() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return ansi.ReplaceAllString(term.raw.String(), "")
}

// expect waits until want appears in the output after what earlier
// expects consumed, and consumes it.
func (term *terminal) expect(want string) {
	term.t.Helper()
	if !term.tryExpect(want, ptyTimeout) {
		s := term.screen()
		term.t.Fatalf("timed out waiting for %q; the terminal shows after the last match:\n%s", want, s[min(term.seen, len(s)):])
	}
}

func (term *terminal) tryExpect(want string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		s := term.screen()
		if i := strings.Index(s[term.seen:], want); i >= 0 {
			term.seen += i + len(want)
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// expectAll is expect for several strings in any order.
func (term *terminal) expectAll(wants ...string) {
	term.t.Helper()
	for deadline := time.Now().Add(ptyTimeout); ; {
		s := term.screen()[term.seen:]
		end, all := 0, true
		for _, w := range wants {
			i := strings.Index(s, w)
			if i < 0 {
				all = false
				break
			}
			end = max(end, i+len(w))
		}
		if all {
			term.seen += end
			return
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("timed out waiting for %q; the terminal shows after the last match:\n%s", wants, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// send types keys.
func (term *terminal) send(keys string) {
	term.t.Helper()
	if _, err := term.pty.Write([]byte(keys)); err != nil {
		term.t.Fatalf("typing %q: %v", keys, err)
	}
}

// enter types a line and Enter (a carriage return, as a terminal sends).
func (term *terminal) enter(line string) { term.send(line + "\r") }

// prompt waits for the next primary prompt. A new prompt starts a line;
// the editor's redraws of the line being typed do not.
func (term *terminal) prompt() {
	term.t.Helper()
	for deadline := time.Now().Add(ptyTimeout); ; {
		s := term.screen()
		if term.seen == 0 || s[term.seen-1] == '\n' {
			if strings.HasPrefix(s[term.seen:], "> ") {
				term.seen += len("> ")
				return
			}
		}
		if i := strings.Index(s[term.seen:], "\n> "); i >= 0 {
			term.seen += i + len("\n> ")
			return
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("timed out waiting for the prompt; the terminal shows after the last match:\n%s", s[term.seen:])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait waits for the program to exit and checks its status.
func (term *terminal) wait(status int) {
	term.t.Helper()
	select {
	case <-term.exited:
	case <-time.After(ptyTimeout):
		term.t.Fatalf("zeroeng repl did not exit; the terminal shows:\n%s", term.screen())
	}
	if got := term.cmd.ProcessState.ExitCode(); got != status {
		term.t.Errorf("exit status %d, want %d; the terminal shows:\n%s", got, status, term.screen())
	}
}

func TestREPLTerminal(t *testing.T) {
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skipf("no pseudo-terminals on this machine (/dev/ptmx: %v)", err)
	}
	if testing.Short() {
		t.Skip("builds zeroeng and drives it through a pseudo-terminal")
	}
	bin := buildZeroeng(t, t.TempDir())
	session := func(t *testing.T, args ...string) *terminal {
		home := t.TempDir()
		return startTerminal(t, bin, replEnv(t, home, filepath.Join(home, "state")), args...)
	}

	t.Run("expression", func(t *testing.T) {
		term := session(t)
		term.prompt()
		term.enter("6 * 7")
		term.expect("\n42\n")
		term.prompt()
		term.enter("tensor.fromArray([[1, 2], [3, 4]]).sum()")
		term.expect("\ntensor(10)\n")
		term.prompt()
		term.enter("undefinedName")
		term.expect("REPL3:1:1: ReferenceError: undefinedName is not defined")
		term.prompt()
		term.enter(".exit")
		term.wait(0)
	})

	t.Run("multi-line function", func(t *testing.T) {
		term := session(t)
		term.prompt()
		term.enter("function sq(x) {")
		term.expect("\n... ")
		term.enter("  return x * x")
		term.expect("\n... ")
		term.enter("}")
		term.prompt()
		term.enter("sq(12)")
		term.expect("\n144\n")
		term.prompt()
		term.enter("let v = 1")
		term.prompt()
		term.enter("let v = 2") // redeclared
		term.prompt()
		term.enter("v + 40")
		term.expect("\n42\n")
		term.prompt()
		term.send("\x04") // Ctrl-D
		term.wait(0)
	})

	t.Run("history", func(t *testing.T) {
		home := t.TempDir()
		state := filepath.Join(home, "state")
		env := replEnv(t, home, state)

		first := startTerminal(t, bin, env)
		first.prompt()
		first.enter("1234 + 1")
		first.expect("\n1235\n")
		first.prompt()
		first.send("\x1b[A") // Up recalls the line...
		first.expect("1234 + 1")
		first.send("\r") // ...and Enter runs it again.
		first.expect("\n1235\n")
		first.prompt()
		first.send("\x04")
		first.wait(0)

		file := filepath.Join(state, "zeroeng", "history")
		b, err := os.ReadFile(file)
		if err != nil || !strings.Contains(string(b), "1234 + 1") {
			t.Fatalf("history file %s: %v\n%s", file, err, b)
		}

		second := startTerminal(t, bin, env)
		second.prompt()
		second.send("\x1b[A") // the previous session's line
		second.expect("1234 + 1")
		second.send("\r")
		second.expect("\n1235\n")
		second.prompt()
		second.enter(".exit")
		second.wait(0)
	})

	t.Run("unwritable history", func(t *testing.T) {
		home := t.TempDir()
		notDir := filepath.Join(home, "file")
		if err := os.WriteFile(notDir, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		term := startTerminal(t, bin, replEnv(t, home, notDir))
		term.expect("warning: the history will not be saved")
		term.prompt()
		term.enter("2 ** 10")
		term.expect("\n1024\n")
		term.prompt()
		term.enter(".exit")
		term.wait(0)
	})

	t.Run("completion", func(t *testing.T) {
		term := session(t)
		term.prompt()
		// Several candidates: Tab inserts what they share ("rand") and
		// lists them.
		term.send("tensor.ra\t")
		term.expect("randint")
		term.expect("randperm")
		// Typing goes on from the inserted prefix.
		term.enter("n([3, 2], { seed: 1 }).shape")
		term.expect("\n[ 3, 2 ]\n")
		term.prompt()
		// One candidate: Tab completes it.
		term.send("nn.Li\t")
		term.expect("nn.Linear")
		term.enter("(4, 5).weight.shape")
		term.expect("\n[ 5, 4 ]\n")
		term.prompt()
		term.enter(".exit")
		term.wait(0)
	})

	t.Run("ctrl-c", func(t *testing.T) {
		term := session(t)
		term.prompt()
		term.enter("while (true) {}")
		// Ctrl-C is SIGINT once the editor has handed the terminal back
		// (cooked mode) for the evaluation; a key typed before that would
		// be read as data, so press again until the loop stops.
		interrupted := false
		for range 10 {
			time.Sleep(300 * time.Millisecond)
			term.send("\x03")
			if term.tryExpect("interrupted", 3*time.Second) {
				interrupted = true
				break
			}
		}
		if !interrupted {
			t.Fatalf("Ctrl-C did not interrupt the loop; the terminal shows:\n%s", term.screen())
		}
		term.prompt()
		term.enter("1 + 2")
		term.expect("\n3\n")
		term.prompt()
		// Ctrl-C clears the line being typed...
		term.send("garbage")
		term.expect("garbage")
		term.send("\x03")
		term.expect("^C")
		term.prompt()
		term.enter("6 * 7")
		term.expect("\n42\n")
		term.prompt()
		// ...and abandons a multi-line entry.
		term.enter("function f() {")
		term.expect("\n... ")
		term.send("\x03")
		term.expect("^C")
		term.prompt()
		term.enter("5 * 5")
		term.expect("\n25\n")
		term.prompt()
		term.enter(".exit")
		term.wait(0)
	})

	t.Run("sigterm", func(t *testing.T) {
		// SIGTERM while the editor holds the terminal in raw mode: the
		// terminal is given back and the status says why.
		term := session(t)
		term.prompt()
		term.send("unfinished")
		term.expect("unfinished")
		if err := term.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		term.wait(143)
	})

	t.Run("ranks", func(t *testing.T) {
		term := session(t, "--nproc", "2")
		term.prompt()
		term.enter("dist.rank * 10 + 5")
		term.expect("\n[0] 5\n[1] 15\n")
		term.prompt()
		term.enter("console.log('hello from', dist.rank)")
		// The ranks print concurrently, each line whole.
		term.expectAll("\n[0] hello from 0\n", "\n[1] hello from 1\n")
		term.prompt()
		term.enter(".exit")
		term.wait(0)
	})
}

// TestREPLPipe runs the REPL with stdin from a pipe: no editor, no prompts,
// only values and errors.
func TestREPLPipe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds zeroeng")
	}
	bin := buildZeroeng(t, t.TempDir())
	home := t.TempDir()
	tests := []struct {
		args           []string
		in             string
		stdout, stderr string
	}{
		{nil, "1+1\n", "2\n", ""},
		{nil, "let x = 3\nfunction f(v) {\n  return v * x\n}\nf(2)\nlet x = 4\nf(2)", "6\n8\n", ""},
		{nil, "nope\n7\n", "7\n", "REPL1:1:1: ReferenceError: nope is not defined"},
		{[]string{"--nproc", "2"}, "dist.rank\n.exit\n99\n", "[0] 0\n[1] 1\n", ""},
		{[]string{"--nproc", "2", "--dist-timeout", "200ms"}, "const x = tensor.ones([1])\nif (dist.rank === 0) dist.barrier().wait()\ndist.allReduce(x).wait()\n", "[1] undefined\n[0] tensor([2.])\n[1] tensor([2.])\n", "rank 1 did not call it"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args, tt.in), func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"repl"}, tt.args...)...)
			cmd.Env = replEnv(t, home, filepath.Join(home, "state"))
			cmd.Stdin = strings.NewReader(tt.in)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatal(err)
				}
				t.Errorf("exit status %d, want 0; stderr:\n%s", ee.ExitCode(), stderr.String())
			}
			if stdout.String() != tt.stdout {
				t.Errorf("stdout = %q, want %q", stdout.String(), tt.stdout)
			}
			if (tt.stderr == "") != (stderr.Len() == 0) || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr = %q, want %q", stderr.String(), tt.stderr)
			}
		})
	}
}
