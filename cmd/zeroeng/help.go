package main

import (
	"io"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
)

// helpWidth is the width help is laid out for: a terminal's default
// width, which wider ones show unchanged.
const helpWidth = 80

// urfave/cli prints a command's description as it is written and each
// flag on one line, however long: a terminal then breaks the long lines
// wherever its width falls, in the middle of words. Help goes through
// wrapHelp instead.
func init() {
	cli.HelpPrinter = func(w io.Writer, templ string, data any) {
		var b strings.Builder
		cli.HelpPrinterCustom(&b, templ, data, nil)
		io.WriteString(w, wrapHelp(b.String(), helpWidth))
	}
}

// wrapHelp breaks the lines of help text longer than width at spaces.
//
// Prose (a paragraph of lines at a section's indentation, three spaces,
// with no run of two spaces inside) keeps its line breaks down to its
// first line that is too long; from there to its end the paragraph is
// filled again, so that the words past the width do not make a stub line
// of their own. Any other line (a flag and its usage, a row of a table,
// an example) is continued below its last column, the text after its
// last run of two or more spaces, or two columns in from its own
// indentation. An example command is continued as the shell continues
// one, after a backslash, so that it can still be copied. A word longer
// than the width stays whole.
func wrapHelp(text string, width int) string {
	lines := strings.Split(text, "\n")
	var out []string
	for i := 0; i < len(lines); {
		if !isProse(lines[i]) {
			if isCommand(lines[i]) {
				out = append(out, wrapCommand(lines[i], width)...)
			} else {
				out = append(out, wrapLine(lines[i], width, hangingIndent(lines[i], width), nil)...)
			}
			i++
			continue
		}
		j := i + 1
		for j < len(lines) && isProse(lines[j]) {
			j++
		}
		k := i
		for k < j && textWidth(lines[k]) <= width {
			k++
		}
		out = append(out, lines[i:k]...)
		if k < j {
			var words []string
			for _, l := range lines[k:j] {
				words = append(words, strings.Fields(l)...)
			}
			out = append(out, fill(words, sectionIndent, width)...)
		}
		i = j
	}
	return strings.Join(out, "\n")
}

// sectionIndent is the indentation of the text of each section of help
// (urfave/cli's templates); deeper lines are laid out by hand.
const sectionIndent = "   "

// isProse reports whether line is a line of a paragraph: at the section's
// indentation, with text, and no run of two spaces in it.
func isProse(line string) bool {
	text, ok := strings.CutPrefix(line, sectionIndent)
	text = strings.TrimRight(text, " ")
	return ok && text != "" && text[0] != ' ' && !strings.Contains(text, "  ")
}

// hangingIndent is where the continuations of line start: below the text
// after its last run of two or more spaces, if that is in the left half
// of the width, or else two columns in from its indentation.
func hangingIndent(line string, width int) string {
	lead := len(line) - len(strings.TrimLeft(line, " "))
	col := lead + 2
	for i := lead; i+1 < len(line); i++ {
		if line[i] != ' ' || line[i+1] != ' ' {
			continue
		}
		j := i
		for j < len(line) && line[j] == ' ' {
			j++
		}
		if c := textWidth(line[:j]); j < len(line) && c <= width/2 {
			col = c
		}
		i = j
	}
	return strings.Repeat(" ", col)
}

// isCommand reports whether line is an example command: a line of one
// column that runs zeroeng.
func isCommand(line string) bool {
	text := strings.TrimSpace(line)
	return !strings.Contains(text, "  ") && strings.Contains(" "+text, " zeroeng ")
}

// wrapCommand breaks a command line that is too long at spaces outside
// quotes, ending each piece but the last with a backslash and indenting
// the pieces after the first by four columns.
func wrapCommand(line string, width int) []string {
	lead := len(line) - len(strings.TrimLeft(line, " "))
	inQuote := func(line string, i int) bool {
		var q byte
		for k := 0; k < i; k++ {
			switch {
			case q == 0 && (line[k] == '\'' || line[k] == '"'):
				q = line[k]
			case line[k] == q:
				q = 0
			}
		}
		return q != 0
	}
	pieces := wrapLine(line, width-len(" \\"), strings.Repeat(" ", lead+4), inQuote)
	for i := range pieces[:len(pieces)-1] {
		pieces[i] += " \\"
	}
	return pieces
}

// wrapLine breaks line at the last space that fits width (and that
// quoted does not rule out, if it is not nil), continuing at indent, until
// every piece fits or cannot be broken.
func wrapLine(line string, width int, indent string, quoted func(line string, i int) bool) []string {
	var out []string
	for textWidth(line) > width {
		lead := len(line) - len(strings.TrimLeft(line, " "))
		cut := -1
		for i := lead; i < len(line) && textWidth(line[:i]) <= width; i++ {
			if line[i] == ' ' && (quoted == nil || !quoted(line, i)) {
				cut = i
			}
		}
		if cut < 0 {
			break // a word longer than the line
		}
		rest := strings.TrimLeft(line[cut:], " ")
		if rest == "" {
			break
		}
		out = append(out, strings.TrimRight(line[:cut], " "))
		line = indent + rest
	}
	return append(out, line)
}

// fill lays words out in lines of at most width, each starting with
// indent.
func fill(words []string, indent string, width int) []string {
	var out []string
	line := indent
	for _, w := range words {
		if line != indent && textWidth(line)+1+textWidth(w) > width {
			out = append(out, line)
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += w
	}
	return append(out, line)
}

// textWidth is the number of columns s takes: its characters (the help
// has no wide ones).
func textWidth(s string) int { return utf8.RuneCountInString(s) }
