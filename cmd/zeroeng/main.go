// Command zeroeng is the zeroeng training engine's command line. This
// package only wires commands and exit statuses; the engine lives under
// engine/ and the scripting host under script/.
//
// Exit statuses: 0 success, 1 a script or engine error, 2 a usage error
// (unknown flag or command, missing script, bad flag value), the code a
// script passes to process.exit, and 130/143 after SIGINT/SIGTERM.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/zeroeng/zeroeng/bench"
	"github.com/zeroeng/zeroeng/engine/cpu/gemm"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/jobenv"
	"github.com/zeroeng/zeroeng/internal/suggest"
	"github.com/zeroeng/zeroeng/script"
)

// version is set at link time (-ldflags "-X main.version=..."); otherwise
// it comes from what the Go toolchain recorded in the binary (buildVersion).
var version = "dev"

func init() {
	if version == "dev" {
		version = buildVersion()
	}
}

// buildVersion is the module's version when the binary was built from a
// released module (go install ...@v1.2.3), else "dev-" and the git commit
// it was built from, with "+modified" when the tree had changes.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, modified := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	v := "dev-" + rev[:min(12, len(rev))]
	if modified {
		v += "+modified"
	}
	return v
}

// usageError marks errors that exit with status 2; cmd names the command
// whose help the message points to ("" for the top level).
type usageError struct {
	error
	cmd string
}

func usagef(cmd, format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...), cmd}
}

// exitStatus ends the process with code after the message (if any) was
// printed: script errors, process.exit and signals.
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// onUsageError turns urfave/cli's flag errors (unknown flag, bad value,
// bad environment variable) into usage errors.
func onUsageError(c *cli.Context, err error, isSubcommand bool) error {
	cmd := ""
	if isSubcommand && c.Command != nil {
		cmd = c.Command.Name
	}
	// "flag provided but not defined: -nprc": name the flag meant.
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
		var known []string
		flags := c.App.Flags
		if c.Command != nil && len(c.Command.Flags) > 0 {
			flags = c.Command.Flags
		}
		for _, f := range flags {
			known = append(known, f.Names()...)
		}
		if s := suggest.Closest(strings.TrimLeft(name, "-"), known); s != "" {
			err = fmt.Errorf("%w (did you mean --%s?)", err, s)
		}
	}
	return usageError{err, cmd}
}

func main() {
	script.Version = version
	os.Exit(run(os.Args))
}

// run runs the command line and returns the exit status.
func run(args []string) int {
	app := newApp()
	err := app.Run(args)
	var st exitStatus
	var u usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &st):
		return st.code
	case errors.As(err, &u):
		fmt.Fprintln(os.Stderr, "zeroeng:", err)
		if u.cmd != "" {
			fmt.Fprintf(os.Stderr, "Run 'zeroeng %s --help' for usage.\n", u.cmd)
		} else {
			fmt.Fprintln(os.Stderr, "Run 'zeroeng --help' for usage.")
		}
		return 2
	}
	fmt.Fprintln(os.Stderr, "zeroeng:", err)
	return 1
}

func newApp() *cli.App {
	return &cli.App{
		Name:    "zeroeng",
		Usage:   "a training engine with ZeRO sharding, scripted in JavaScript",
		Version: version,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "threads", Usage: "CPU threads for kernels (0: all cores)", EnvVars: []string{"ZEROENG_THREADS"}},
		},
		Before: func(c *cli.Context) error {
			if err := checkEnvironment(os.Environ(), knownVariables(c.App)); err != nil {
				return usagef("", "%v", err)
			}
			if c.Int("threads") < 0 {
				return usagef("", "--threads must be 0 (all cores) or more, got %d", c.Int("threads"))
			}
			parallel.SetThreads(c.Int("threads"))
			// A kernel override that names no kernel of this CPU would
			// leave a comparison running the default unnoticed.
			if err := errors.Join(gemm.EnvError(), vmath.EnvError()); err != nil {
				return usagef("", "%v", err)
			}
			return nil
		},
		// The process's exit status is decided in run, never inside cli.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("", "unknown command %q", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		Commands: commands(),
	}
}

// commands lists the subcommands.
func commands() []*cli.Command {
	return []*cli.Command{
		runCommand(),
		launchCommand(),
		replCommand(),
		{
			Name:         "bench",
			Usage:        "run a side-by-side benchmark workload and print one JSON line (as bench/torch_cpu.py); ddp2 and its variants also as ranks of an MPI job (mpirun -np 2 zeroeng bench ddp2)",
			ArgsUsage:    strings.Join(bench.Workloads, "|"),
			OnUsageError: onUsageError,
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usagef("bench", "bench: name one workload (%s)", strings.Join(bench.Workloads, ", "))
				}
				if place, ok, err := jobenv.FromEnv(os.Getenv); err != nil {
					return usagef("bench", "bench: %v", err)
				} else if ok && place.Size > 1 {
					return benchProcess(c.Args().First(), place)
				}
				r, err := bench.Run(c.Args().First())
				if err != nil {
					return err
				}
				return json.NewEncoder(os.Stdout).Encode(r)
			},
		},
		hookCommand(),
		checkCommand(),
		checkpointCommand(),
		plotCommand(),
		kernelsCommand(),
		infoCommand(),
		versionCommand(),
	}
}
