package main

import (
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/internal/safefile"
)

func hookCommand() *cli.Command {
	return &cli.Command{
		Name:         "hook",
		Usage:        "work with Wasm comm hooks",
		OnUsageError: onUsageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("hook", "hook: unknown subcommand %q (check)", c.Args().First())
			}
			return cli.ShowSubcommandHelp(c)
		},
		Subcommands: []*cli.Command{{
			Name:      "check",
			Usage:     "validate a Wasm comm hook against the ABI (docs/wasm-hook-abi.md) and print its exports and imports",
			ArgsUsage: "FILE.wasm",
			Description: `Compiles the module without running it and checks its ABI marker, exports
(with their types), memory and imports against zeroeng's hook ABI. Exits 0 when
the module is a valid hook, 1 with the reasons when it is not.`,
			OnUsageError: onUsageError,
			Action:       hookCheck,
		}},
	}
}

func hookCheck(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("hook check", "hook check: name one .wasm file")
	}
	path := c.Args().First()
	b, err := safefile.ReadFile(path, wasm.MaxModuleBytes)
	if err != nil {
		return fmt.Errorf("hook check: %w", err)
	}
	info, err := wasm.Check(filepath.Base(path), b)
	if err != nil {
		return err
	}
	return printModule(c, path, "hook", info, info.Err())
}

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "validate a WebAssembly training program against the ABI (docs/wasm-program-abi.md) and print its exports and imports",
		ArgsUsage: "FILE.wasm",
		Description: `Compiles the program without running it and checks its ABI marker, its _start,
memory and imports against zeroeng's program ABI (zeroeng hook check does the same
for comm hooks). Exits 0 when the module is a valid program, 1 with the reasons
when it is not.`,
		OnUsageError: onUsageError,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("check", "check: name one .wasm file")
			}
			path := c.Args().First()
			b, err := safefile.ReadFile(path, wasm.MaxModuleBytes)
			if err != nil {
				return fmt.Errorf("check: %w", err)
			}
			info, err := wasm.CheckProgram(filepath.Base(path), b)
			if err != nil {
				return err
			}
			return printModule(c, path, "program", info, info.ProgramErr())
		},
	}
}

// printModule prints what a check found: the ABI version, the memory, the
// exports and imports, then ok or the problems (problems).
func printModule(c *cli.Context, path, what string, info *wasm.Info, problems error) error {
	w := c.App.Writer
	fmt.Fprintf(w, "%s: ", path)
	if info.ABIVersion > 0 {
		fmt.Fprintf(w, "zeroeng %s ABI v%d\n", what, info.ABIVersion)
	} else {
		fmt.Fprintf(w, "no zeroeng %s ABI marker\n", what)
	}
	if info.Memory != "" {
		fmt.Fprintln(w, info.Memory)
	}
	fmt.Fprintln(w, "exports:")
	for _, e := range info.Exports {
		fmt.Fprintln(w, "  "+e)
	}
	fmt.Fprintln(w, "imports:")
	for _, i := range info.Imports {
		fmt.Fprintln(w, "  "+i)
	}
	if problems != nil {
		return problems
	}
	fmt.Fprintln(w, "ok")
	return nil
}
