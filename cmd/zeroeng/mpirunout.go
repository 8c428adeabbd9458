package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// mpirunOutput passes the ranks' output of a job that mpirun started
// through as it comes and holds back Open MPI's own messages: its banners
// (text between lines of dashes) and its runtime's log lines ("[host:pid]
// [[job,0],0] ORTE_ERROR_LOG: ..."). When the job ends, explain says what
// they reported in zeroeng's words, so that a failed job ends with one
// message that names the rank and what happened to it, or, for a failure
// launch cannot read, with Open MPI's text quoted rather than lost.
type mpirunOutput struct {
	mu       sync.Mutex
	banners  []string // each banner's text, without the dashes
	logs     []string // Open MPI's runtime log lines
	rankSaid bool     // a rank printed something
}

var (
	dashes           = regexp.MustCompile(`^-{20,}$`)
	openMPILog       = regexp.MustCompile(`^\[[^\]\s]+:\d+\] `)
	exitedRank       = regexp.MustCompile(`Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(\d+)`)
	missingComponent = regexp.MustCompile(`A requested component was not found(?s:.*?)Framework:\s*(\S+)\s*\n\s*Component:\s*(\S+)`)
	signaledRank     = regexp.MustCompile(`process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)(?: \(([^)]+)\))?`)
)

// copy reads lines from r to w until r ends, holding back Open MPI's.
func (o *mpirunOutput) copy(w io.Writer, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var banner []string
	inBanner := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case dashes.MatchString(strings.TrimSpace(line)):
			if inBanner {
				o.addBanner(banner)
				banner = nil
			}
			inBanner = !inBanner
		case inBanner:
			banner = append(banner, line)
		case openMPILog.MatchString(line):
			o.mu.Lock()
			o.logs = append(o.logs, line)
			o.mu.Unlock()
		default:
			o.mu.Lock()
			o.rankSaid = true
			o.mu.Unlock()
			io.WriteString(w, line+"\n")
		}
	}
	if inBanner {
		o.addBanner(banner)
	}
}

func (o *mpirunOutput) addBanner(lines []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.banners = append(o.banners, strings.TrimSpace(strings.Join(lines, "\n")))
}

// rankFailure is the first failed rank as Open MPI's banners reported it:
// its status as a shell reports it (128+n after signal n) and launch's
// sentence about it; ok is false when no banner names one. Called with
// o.mu held.
func (o *mpirunOutput) rankFailure() (status int, said string, ok bool) {
	all := strings.Join(o.banners, "\n")
	if m := signaledRank.FindStringSubmatch(all); m != nil {
		n, _ := strconv.Atoi(m[4])
		name := ""
		if m[5] != "" {
			name = " (" + m[5] + ")"
		}
		return 128 + n, fmt.Sprintf("zeroeng launch: rank %s (pid %s on %s) was killed by signal %s%s; mpirun stopped the other ranks", m[1], m[2], m[3], m[4], name), true
	}
	if m := exitedRank.FindStringSubmatch(all); m != nil {
		n, _ := strconv.Atoi(m[2])
		return n, fmt.Sprintf("zeroeng launch: rank %s exited with status %s; mpirun stopped the other ranks", m[1], m[2]), true
	}
	return 0, "", false
}

// explain returns what launch says once mpirun exited with status code
// (no trailing newline), or "" when there is nothing to say.
func (o *mpirunOutput) explain(code int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, said, ok := o.rankFailure(); ok {
		return said
	}
	if m := missingComponent.FindStringSubmatch(strings.Join(o.banners, "\n")); m != nil && code != 0 {
		return fmt.Sprintf("zeroeng launch: Open MPI has no %s component named %q (is an OMPI_MCA_%s setting or an --mca option misspelled?); mpirun exited with status %d", m[1], m[2], m[1], code)
	}
	said := o.quote()
	switch {
	case code == 0 && said == "":
		return ""
	case code == 0:
		return "zeroeng launch: the job succeeded; Open MPI said:\n" + said
	case said == "" && !o.rankSaid:
		return fmt.Sprintf("zeroeng launch: mpirun exited with status %d before any rank printed anything, and said nothing; check that Open MPI runs here (mpirun -np 2 true)", code)
	case said == "":
		return fmt.Sprintf("zeroeng launch: mpirun exited with status %d", code)
	case !o.rankSaid:
		return fmt.Sprintf("zeroeng launch: Open MPI could not start the ranks (mpirun exited with status %d); it said:\n%s", code, said)
	}
	return fmt.Sprintf("zeroeng launch: mpirun exited with status %d; Open MPI said:\n%s", code, said)
}

// rankStatus is the job's status as Open MPI's messages reported it: the
// first failed rank's exit status (128+n for signal n), or 0.
func (o *mpirunOutput) rankStatus() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	status, _, _ := o.rankFailure()
	return status
}

// quote is Open MPI's held-back text, indented, with repeated log lines
// given once, at most 20 lines.
func (o *mpirunOutput) quote() string {
	var lines []string
	for _, b := range o.banners {
		if strings.HasPrefix(b, "Primary job") {
			continue // the preamble of "mpirun detected that ... exited"
		}
		lines = append(lines, strings.Split(b, "\n")...)
	}
	seen := map[string]bool{}
	for _, l := range o.logs {
		// "[host:pid] [[job,0],0] ORTE_ERROR_LOG: ..." differs only by
		// the prefix from its repeats.
		msg := openMPILog.ReplaceAllString(l, "")
		if !seen[msg] {
			seen[msg] = true
			lines = append(lines, msg)
		}
	}
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("(%d more lines)", len(lines)-20))
	}
	if len(lines) == 0 {
		return ""
	}
	return "    " + strings.Join(lines, "\n    ")
}
