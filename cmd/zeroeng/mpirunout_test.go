package main

import (
	"strings"
	"testing"
)

const mpiDashes = "--------------------------------------------------------------------------"

// TestMPIRunOutput: Open MPI's banners and log lines are held back, the
// ranks' lines pass, and the end of the job is said in zeroeng's words
// (texts as Open MPI 4.1 prints them).
func TestMPIRunOutput(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     string
		code   int
		passed string // what went through, exactly
		says   []string
		not    []string
	}{
		{
			name: "a rank exits with a status",
			in: "[1] zeroeng: rank 1 called process.exit(3)\n" + mpiDashes + "\nPrimary job  terminated normally, but 1 process returned\na non-zero exit code. Per user-direction, the job has been aborted.\n" + mpiDashes +
				"\n[0] zeroeng: interrupted by SIGTERM\n" + mpiDashes + "\nmpirun detected that one or more processes exited with non-zero status, thus causing\nthe job to be terminated. The first process to do so was:\n\n  Process name: [[4962,1],1]\n  Exit code:    3\n" + mpiDashes + "\n",
			code:   3,
			passed: "[1] zeroeng: rank 1 called process.exit(3)\n[0] zeroeng: interrupted by SIGTERM\n",
			says:   []string{"zeroeng launch: rank 1 exited with status 3; mpirun stopped the other ranks"},
			not:    []string{"Primary job", "---"},
		},
		{
			name:   "a rank is killed",
			in:     "[0] step 1\n" + mpiDashes + "\nmpirun noticed that process rank 1 with PID 4242 on node vm exited on signal 9 (Killed).\n" + mpiDashes + "\n",
			code:   137,
			passed: "[0] step 1\n",
			says:   []string{"zeroeng launch: rank 1 (pid 4242 on vm) was killed by signal 9 (Killed); mpirun stopped the other ranks"},
		},
		{
			name: "a missing component",
			in: "[vm:1] [[1,0],0] ORTE_ERROR_LOG: Out of resource in file show_help.c at line 501\n[vm:2] [[1,0],0] ORTE_ERROR_LOG: Out of resource in file show_help.c at line 501\n" +
				mpiDashes + "\nA requested component was not found, or was unable to be opened.\n\n  Host:      vm\n  Framework: btl\n  Component: nonexistent\n" + mpiDashes + "\n",
			code: 1,
			says: []string{`Open MPI has no btl component named "nonexistent"`, "status 1"},
		},
		{
			name: "an unknown failure is quoted, repeats once",
			in:   "[vm:1] [[1,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer\n[vm:2] [[1,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer\n",
			code: 1,
			says: []string{"Open MPI could not start the ranks (mpirun exited with status 1); it said:\n    [[1,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer"},
			not:  []string{"buffer\n    [[1,0],0]"},
		},
		{
			name: "silence",
			code: 1,
			says: []string{"mpirun exited with status 1 before any rank printed anything, and said nothing"},
		},
		{
			name:   "a success says nothing",
			in:     "[0] done\n[1] done\n",
			passed: "[0] done\n[1] done\n",
		},
		{
			name:   "a rank's own line of dashes is the rank's",
			in:     "[0] " + mpiDashes + "\n",
			passed: "[0] " + mpiDashes + "\n",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var o mpirunOutput
			var w strings.Builder
			o.copy(&w, strings.NewReader(c.in))
			if w.String() != c.passed {
				t.Errorf("passed through %q, want %q", w.String(), c.passed)
			}
			msg := o.explain(c.code)
			if len(c.says) == 0 && msg != "" {
				t.Errorf("says %q, want nothing", msg)
			}
			for _, s := range c.says {
				if !strings.Contains(msg, s) {
					t.Errorf("says %q, want %q in it", msg, s)
				}
			}
			for _, s := range c.not {
				if strings.Contains(msg+w.String(), s) {
					t.Errorf("output holds %q:\n%s%s", s, w.String(), msg)
				}
			}
		})
	}
}
