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
	w := c.App.Writer
	fmt.Fprintf(w, "%s: ", path)
	if info.ABIVersion > 0 {
		fmt.Fprintf(w, "zeroeng hook ABI v%d\n", info.ABIVersion)
	} else {
		fmt.Fprintln(w, "no zeroeng hook ABI marker")
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
	if err := info.Err(); err != nil {
		return err
	}
	fmt.Fprintln(w, "ok")
	return nil
}
