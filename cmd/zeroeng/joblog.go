package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/zeroeng/zeroeng/script"
)

// jobLog prints the job's own messages (errors, interruptions, the
// summary) as text for people or, with --log-format json, as one JSON
// object per line with level, msg, rank and time for log collectors. The
// script's console output is not routed through it.
type jobLog struct {
	w     io.Writer
	json  *slog.Logger // nil for text
	quiet bool         // no summary (errors are always printed)
	// process is this process's rank in a job of several processes
	// (-1 otherwise): its messages are about that rank, and in text
	// each line starts with "[rank] " unless zeroeng launch adds it.
	process int
	prefix  string
}

func newJobLog(w io.Writer, format string, quiet bool) *jobLog {
	l := &jobLog{w: w, quiet: quiet, process: -1}
	if format == "json" {
		l.json = slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
			Level: slog.LevelDebug,
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if a.Key == slog.LevelKey && len(groups) == 0 {
					return slog.String(slog.LevelKey, strings.ToLower(a.Value.String()))
				}
				return a
			},
		}))
	}
	return l
}

// log prints one message; rank < 0 marks a message about the whole job
// (rank null in JSON). stack holds JavaScript frames: "    at" lines in
// text, the array "stack" in JSON. Text has no level: errors and warnings
// read the same to a person, and the exit status tells them apart.
func (l *jobLog) log(level slog.Level, rank int, msg string, stack []string, attrs ...slog.Attr) {
	if rank < 0 {
		rank = l.process
	}
	if l.json != nil {
		var r any
		if rank >= 0 {
			r = rank
		}
		attrs = append([]slog.Attr{slog.Any("rank", r)}, attrs...)
		if len(stack) > 0 {
			attrs = append(attrs, slog.Any("stack", stack))
		}
		l.json.LogAttrs(context.Background(), level, msg, attrs...)
		return
	}
	l.logText("zeroeng: "+msg, stack)
}

// summary reports a job that finished.
func (l *jobLog) summary(msg string, attrs ...slog.Attr) {
	if l.quiet {
		return
	}
	l.log(slog.LevelInfo, -1, msg, nil, attrs...)
}

// scriptFailure prints a job's failure as one message: "rank 1: " when the
// job has several ranks, the script position, the message (for engine
// errors the op and shapes), then the JavaScript stack.
func (l *jobLog) scriptFailure(err error) {
	rank, ranks := -1, 1
	var re *script.RankError
	if errors.As(err, &re) {
		rank, ranks = re.Rank, re.Ranks
	}
	msg, stack := err.Error(), []string(nil)
	var se *script.Error
	if errors.As(err, &se) {
		msg = se.Message
		if se.Position != "" {
			msg = relPath(se.Position) + ": " + msg
		}
		for _, f := range se.Stack {
			stack = append(stack, relPath(f))
		}
	}
	if l.json != nil {
		l.log(slog.LevelError, rank, msg, stack)
		return
	}
	if ranks > 1 && rank >= 0 && l.process < 0 { // a process of a job: its lines carry "[rank] "
		msg = fmt.Sprintf("rank %d: %s", rank, msg)
	}
	l.logText(msg, stack)
}

// logText prints a script error without the "zeroeng: " prefix: it starts
// with the script position, as compilers print errors.
func (l *jobLog) logText(msg string, stack []string) {
	var b strings.Builder
	b.WriteString(l.prefix)
	b.WriteString(msg)
	for _, f := range stack {
		b.WriteString("\n" + l.prefix + "    at ")
		b.WriteString(f)
	}
	b.WriteByte('\n')
	io.WriteString(l.w, b.String())
}

// relPath shortens absolute paths under the working directory in a
// position or stack frame ("/home/u/proj/train.js:3:7" -> "train.js:3:7"):
// scripts are loaded by absolute path, but users name them relatively.
func relPath(s string) string {
	wd, err := os.Getwd()
	if err != nil || wd == "/" {
		return s
	}
	return strings.ReplaceAll(s, wd+string(filepath.Separator), "")
}
