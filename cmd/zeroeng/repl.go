package main

// zeroeng repl: the terminal front-end of the REPL core (script.REPL). It
// owns what depends on the terminal: line editing with
// github.com/reeflective/readline, the "> " and "... " prompts, the history
// file, Tab completion and Ctrl-C. When stdin is not a terminal, lines are
// read plainly, so that `echo '1+1' | zeroeng repl` works.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/reeflective/readline"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/script"
)

const replDescription = `Starts an interactive JavaScript session. Every entry runs on every rank;
with --nproc 2 or more, what a rank prints starts with its rank ("[1] "),
which is how to try collectives and sharding by hand. zeroeng and its modules
(tensor, nn, optim, zero, dist, data, io, ...) are predefined; the value of
each entry is printed; an entry continues on the next line ("... ") while it
is incomplete; top-level let, const and class may be declared again.

Keys: Tab completes names (globals, require("zeroeng") and the properties of
the object before a dot: tensor.ra<Tab>); Up and Down walk the history, which
is kept in $XDG_STATE_HOME/zeroeng/history (~/.local/state/zeroeng/history);
Ctrl-C stops a running entry or clears the line; Ctrl-D or .exit leaves.
.help lists the REPL commands (.load FILE, .break, ...).

Every flag can also be set with an environment variable: ZEROENG_ and the
flag's name in capitals, with _ for - (ZEROENG_DIST_TIMEOUT=30s is
--dist-timeout 30s):

   --nproc 2              two ranks on this host (in-process on the CPU)
   --seed 42              every rank's generator starts as
                          torch.manual_seed(42)
   --dist-timeout 30s     a collective waits this long for the other ranks
                          (default 5s)

A collective that not every rank calls (dist.barrier().wait() on rank 0 only)
fails after --dist-timeout, naming the ranks that did not call it, and Ctrl-C
stops it at once; then the process group is made again and the session goes
on with its variables.

When stdin is not a terminal, lines are read as they come and only the values
and errors are printed:

   echo 'tensor.ones([2]).sum()' | zeroeng repl`

func replCommand() *cli.Command {
	return &cli.Command{
		Name:         "repl",
		Usage:        "an interactive JavaScript session on one or more ranks",
		ArgsUsage:    " ",
		Description:  replDescription,
		OnUsageError: onUsageError,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nproc", Value: 1, Usage: "number of ranks on this host; every entry runs on each", EnvVars: []string{"ZEROENG_NPROC"}},
			&cli.Uint64Flag{Name: "seed", Value: 0, Usage: "seed of every rank's random generator", EnvVars: []string{"ZEROENG_SEED"}},
			&cli.DurationFlag{Name: "dist-timeout", Value: script.DefaultREPLTimeout, Usage: "how long a collective waits for the other ranks", EnvVars: []string{"ZEROENG_DIST_TIMEOUT"}},
		},
		Action: replAction,
	}
}

func replAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("repl", "repl: unexpected argument %q (to run a script: zeroeng run %s)", c.Args().First(), c.Args().First())
	}
	nproc := c.Int("nproc")
	if nproc < 1 {
		return usagef("repl", "repl: --nproc must be 1 or more, got %d", nproc)
	}
	if c.Duration("dist-timeout") <= 0 {
		return usagef("repl", "repl: --dist-timeout must be positive, got %v", c.Duration("dist-timeout"))
	}
	editor := term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd()))
	repl, err := script.NewREPL(script.REPLOptions{
		Ranks: nproc,
		Rank: script.Options{
			Seed:        c.Uint64("seed"),
			Stdout:      os.Stdout,
			Stderr:      os.Stderr,
			Interactive: editor,
		},
		Dist: dist.Options{Timeout: c.Duration("dist-timeout")},
	})
	if err != nil {
		return err
	}
	defer repl.Close()

	// SIGINT reaches the process only while the terminal is not in raw
	// mode, that is while an entry runs (the editor reads Ctrl-C as a key),
	// or always when stdin is not a terminal.
	sigint := make(chan os.Signal, 1)
	signal.Notify(sigint, os.Interrupt)
	defer signal.Stop(sigint)
	idle := make(chan struct{}, 1)
	go func() {
		for range sigint {
			if !repl.Interrupt() {
				select {
				case idle <- struct{}{}:
				default:
				}
			}
		}
	}()

	if editor {
		return runEditor(repl)
	}
	return runPlain(repl, os.Stdin, idle)
}

// runPlain reads lines from a pipe or file. Ctrl-C stops a running entry;
// between entries it ends the session (status 130), as for any command
// reading a pipe.
func runPlain(repl *script.REPL, in io.Reader, idle <-chan struct{}) error {
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(in)
		for {
			line, err := r.ReadString('\n')
			if line != "" || err == nil {
				lines <- strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-idle:
			return exitStatus{130}
		case line, ok := <-lines:
			if !ok {
				return nil
			}
			res, err := repl.Submit(line)
			if err != nil {
				return err
			}
			if res.Exit {
				return nil
			}
		}
	}
}

// runEditor reads lines with the line editor.
func runEditor(repl *script.REPL) error {
	// SIGTERM or SIGHUP would end the process with the terminal still in
	// the editor's raw mode: give the terminal back first.
	fd := int(os.Stdin.Fd())
	if saved, err := term.GetState(fd); err == nil {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGHUP)
		defer signal.Stop(stop)
		go func() {
			s := <-stop
			term.Restore(fd, saved)
			os.Exit(128 + int(s.(syscall.Signal)))
		}()
	}

	rl := readline.NewShell()
	// The editor would otherwise ask the terminal where the cursor is
	// ("ESC[6n") before every prompt and wait for the answer, which some
	// terminals and pipes-as-terminals never send; our prompt always
	// starts a line, where the fallback is exact but on the bottom row
	// (see the loop below).
	_ = rl.Config.Set("cursor-position-probe", false)
	// Tab as in bash and Node: the first press inserts what the candidates
	// share and lists them, the next ones cycle through them (the
	// library's default inserts the first candidate without a list).
	_ = rl.Config.Set("menu-complete-display-prefix", true)
	for _, km := range []string{"emacs", "vi-insert"} {
		if b, ok := rl.Config.Binds[km]["\t"]; !ok || b.Action == "complete" {
			_ = rl.Config.Bind(km, "\t", "menu-complete", false)
		}
	}
	rl.Prompt.Primary(func() string {
		if repl.Pending() {
			return "... "
		}
		return "> "
	})
	rl.Completer = func(line []rune, cursor int) readline.Completions {
		return completions(repl, string(line[:cursor]))
	}
	if path, err := historyPath(); err != nil {
		fmt.Fprintf(os.Stderr, "zeroeng: warning: the history will not be saved: %v\n", err)
	} else {
		rl.History.AddFromFile("history", path)
	}

	interrupted := false // the last key was Ctrl-C on an empty line
	for {
		// Keep the prompt off the terminal's bottom row. Without the
		// cursor-position probe the editor cannot tell that it is there,
		// and each redraw clears the row below the input by moving the
		// cursor down one row, which the terminal refuses on the bottom
		// row, and back up one, which it does not: the prompt then lands
		// on the last line printed and erases it. A line feed scrolls the
		// screen when the cursor is on the bottom row and otherwise only
		// moves down, so with the move back up there is a free row below
		// the prompt either way. (An entry long enough to wrap onto the
		// bottom row still erases the line above it: that needs a fix in
		// the editor.)
		fmt.Print("\n\x1b[A")
		line, err := rl.Readline()
		switch {
		case errors.Is(err, readline.ErrInterrupt):
			// Ctrl-C clears the line and abandons the entry being typed;
			// twice in a row on an empty line it leaves, as in Node.
			if strings.TrimSpace(line) == "" && !repl.Pending() {
				if interrupted {
					return nil
				}
				fmt.Println("(To exit, press Ctrl+C again or Ctrl+D or type .exit)")
				interrupted = true
			}
			repl.Interrupt()
			continue
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
		interrupted = false
		res, err := repl.Submit(line)
		if err != nil {
			return err
		}
		if res.Exit {
			return nil
		}
	}
}

// completions turns the REPL's completions of the text before the cursor
// into the editor's: the candidates replace the whole expression being
// completed (PREFIX), and the menu shows only the part after the last dot.
func completions(repl *script.REPL, before string) readline.Completions {
	word, cands := repl.Complete(before)
	if word == "" || len(cands) == 0 {
		return readline.Completions{}
	}
	vals := make([]readline.Completion, len(cands))
	for i, c := range cands {
		display := c
		if j := strings.LastIndexByte(c, '.'); j > 0 {
			display = c[j+1:]
		}
		vals[i] = readline.Completion{Value: c, Display: display}
	}
	comps := readline.CompleteRaw(vals)
	comps.PREFIX = word
	return comps
}

// historyPath is the history file, $XDG_STATE_HOME/zeroeng/history or
// ~/.local/state/zeroeng/history, made if needed; an error says why it
// cannot be written.
func historyPath() (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(dir) { // the XDG spec ignores relative paths
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".local", "state")
	}
	dir = filepath.Join(dir, "zeroeng")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "history")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return "", err
	}
	return path, f.Close()
}
