package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// commandHelp is what zeroeng CMD --help prints.
func commandHelp(t *testing.T, cmd string) string {
	t.Helper()
	var b strings.Builder
	app := newApp()
	app.Writer = &b
	if err := app.Run([]string{"zeroeng", cmd, "--help"}); err != nil {
		t.Fatalf("zeroeng %s --help: %v", cmd, err)
	}
	return b.String()
}

// words are the words of s, without the backslashes that continue a
// command on the next line.
func words(s string) []string {
	return slices.DeleteFunc(strings.Fields(s), func(w string) bool { return w == `\` })
}

// TestHelpWidth: the help of run, launch and repl fits 80 columns, and
// is broken only between words: each piece of text (the description, the
// usage, each flag's line) is there word for word, in order.
func TestHelpWidth(t *testing.T) {
	for _, cmd := range []string{"run", "launch", "repl"} {
		t.Run(cmd, func(t *testing.T) {
			help := commandHelp(t, cmd)
			for i, line := range strings.Split(help, "\n") {
				if n := textWidth(line); n > 80 {
					t.Errorf("line %d has %d columns:\n%s", i+1, n, line)
				}
			}
			c := newApp().Command(cmd)
			pieces := []string{c.Usage, c.Description}
			for _, f := range c.Flags {
				pieces = append(pieces, cli.FlagStringer(f))
			}
			got := words(help)
			for _, p := range pieces {
				want := words(p)
				found := false
				for i := range len(got) - len(want) + 1 {
					if slices.Equal(got[i:i+len(want)], want) {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("the help does not have, word for word:\n%s\nit is:\n%s", p, help)
				}
			}
		})
	}
}

func TestWrapHelp(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{{
		"lines that fit stay",
		"DESCRIPTION:\n   one two three\n   four five\n",
		"DESCRIPTION:\n   one two three\n   four five\n",
	}, {
		"prose is filled again from its first long line",
		"   aaa bbb\n   ccc ddd eee fff ggg hhh\n   iii\n\n   jjj\n",
		"   aaa bbb\n   ccc ddd eee fff ggg\n   hhh iii\n\n   jjj\n",
	}, {
		"a flag's usage goes on below it",
		"   -f x  one two three four five six\n",
		"   -f x  one two three\n         four five six\n",
	}, {
		"a line of one column goes on two columns in",
		"      aaa bbb ccc ddd eee fff\n",
		"      aaa bbb ccc ddd\n        eee fff\n",
	}, {
		"a command goes on after a backslash, not inside quotes",
		"      zeroeng run --a 'b c d' e\n",
		"      zeroeng run --a \\\n          'b c d' e\n",
	}, {
		"a word longer than the width stays whole",
		"   abcdefghijklmnopqrstuvwxyz\n",
		"   abcdefghijklmnopqrstuvwxyz\n",
	}} {
		t.Run(c.name, func(t *testing.T) {
			if got := wrapHelp(c.in, 24); got != c.want {
				t.Errorf("wrapHelp(%q, 24) =\n%s\nwant\n%s", c.in, got, c.want)
			}
		})
	}
}

// TestFlagVariables: as run's and repl's help say, the variable of each
// flag is ZEROENG_ and the flag's name in capitals with _ for - (run's
// --dir has none).
func TestFlagVariables(t *testing.T) {
	for _, cmd := range []string{"run", "repl"} {
		for _, f := range newApp().Command(cmd).Flags {
			name := f.Names()[0]
			want := []string{"ZEROENG_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
			if cmd == "run" && name == "dir" {
				want = nil
			}
			var got []string
			if e, ok := f.(interface{ GetEnvVars() []string }); ok {
				got = e.GetEnvVars()
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s --%s: variables %q, want %q", cmd, name, got, want)
			}
		}
	}
}
