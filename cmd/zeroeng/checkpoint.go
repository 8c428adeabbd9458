package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/zeroeng/zeroeng/engine/checkpoint"
)

func checkpointCommand() *cli.Command {
	return &cli.Command{
		Name:         "checkpoint",
		Usage:        "inspect and verify checkpoints (checkpoint.save, samples/gpt.js --checkpoint)",
		OnUsageError: onUsageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("checkpoint", "checkpoint: unknown subcommand %q (verify)", c.Args().First())
			}
			return cli.ShowSubcommandHelp(c)
		},
		Subcommands: []*cli.Command{{
			Name:      "verify",
			Usage:     "check a checkpoint's files and print what it holds",
			ArgsUsage: "DIR",
			Description: `DIR is a checkpoint directory (its newest checkpoint, the one "latest"
names, is checked) or one step's folder. Every file the manifest lists is read
and checked (size, CRC-32C, safetensors structure) without loading it; then the
step, the world size, the files, the optimizers and the saved state's keys are
printed. Exits 0 when the checkpoint is intact, 1 naming the first damaged file.`,
			OnUsageError: onUsageError,
			Action:       checkpointVerify,
		}},
	}
}

func checkpointVerify(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("checkpoint verify", "checkpoint verify: name one checkpoint directory")
	}
	path, err := checkpoint.Latest(c.Args().First())
	if err != nil {
		return err
	}
	if path == "" {
		return fmt.Errorf("checkpoint verify: %s holds no checkpoint", c.Args().First())
	}
	m, err := checkpoint.Verify(path)
	if err != nil {
		return err
	}
	w := c.App.Writer
	fmt.Fprintf(w, "%s: step %d, %d ranks, saved %s\n", path, m.Step, m.WorldSize, m.Time)
	var total int64
	for _, f := range m.Files {
		fmt.Fprintf(w, "  %-45s %12d bytes  crc32c %08x\n", f.Name, f.Bytes, f.CRC32C)
		total += f.Bytes
	}
	fmt.Fprintf(w, "  %-45s %12d bytes\n", "total", total)
	if len(m.Modules) > 0 {
		fmt.Fprintf(w, "modules: %s\n", strings.Join(m.Modules, ", "))
	}
	for _, o := range m.Optimizers {
		how := "one file"
		if o.Shards > 1 {
			how = fmt.Sprintf("ZeRO stage %d, %s partition, %d shards", o.Stage, o.Partition, o.Shards)
		}
		fmt.Fprintf(w, "optimizer %q: %s (%s)\n", o.Key, o.Kind, how)
	}
	var keys []string
	for k := range m.State {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > 0 {
		fmt.Fprintf(w, "state: %s\n", strings.Join(keys, ", "))
	}
	fmt.Fprintln(w, "ok")
	return nil
}
