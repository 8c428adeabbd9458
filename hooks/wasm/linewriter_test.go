package wasm

import (
	"bytes"
	"strings"
	"testing"
)

// TestLineWriter: a guest's output reaches the log as prefixed lines of at
// most maxLine bytes, with what a terminal would act on escaped.
func TestLineWriter(t *testing.T) {
	for _, c := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"lines", []string{"a\nb", "c\n"}, "p: a\np: bc\n"},
		{"escape sequences", []string{"\x1b[2Jcleared\x00\a\tok\n"}, `p: \x1b[2Jcleared\x00\x07` + "\tok\n"},
		{"C1 and bad UTF-8", []string{"\u009b31m \xff é\n"}, `p: \xc2\x9b31m \xff é` + "\n"},
		{"one long write", []string{strings.Repeat("x", 2*maxLine+10) + "\n"},
			"p: " + strings.Repeat("x", maxLine) + "\np: " + strings.Repeat("x", maxLine) + "\np: xxxxxxxxxx\n"},
		{"long in pieces", []string{strings.Repeat("y", maxLine-1), "yy\n"}, "p: " + strings.Repeat("y", maxLine) + "\np: y\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			l := &lineWriter{w: &out, prefix: "p: "}
			for _, w := range c.writes {
				l.Write([]byte(w))
			}
			l.flush()
			if out.String() != c.want {
				t.Errorf("got\n%q\nwant\n%q", out.String(), c.want)
			}
		})
	}
}
