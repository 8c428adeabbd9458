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
				return usagef("checkpoint", "checkpoint: unknown subcommand %q (verify, export)", c.Args().First())
			}
			return cli.ShowSubcommandHelp(c)
		},
		Subcommands: []*cli.Command{{
			Name:      "verify",
			Usage:     "check a checkpoint's files and print what it holds",
			ArgsUsage: "DIR",
			Description: `DIR is a checkpoint directory (its newest checkpoint, the one "latest"
names, is checked) or one step's folder. Every file the manifest lists is read
and checked (size, CRC-32C of the file and of each block, safetensors structure)
without loading it, streamed a few megabytes at a time whatever its size; then
the step, the world size, the files, the optimizers and the saved state's keys
are printed. Exits 0 when the checkpoint is intact, 1 naming the first damaged
file (and its first damaged block).`,
			OnUsageError: onUsageError,
			Action:       checkpointVerify,
		}, {
			Name:      "export",
			Usage:     "write a checkpoint's model as one safetensors file that PyTorch loads",
			ArgsUsage: "DIR [-o model.safetensors] [--module model]",
			Description: `DIR is a checkpoint directory (its newest checkpoint) or one step's folder.
The model is written with its own names and {"format": "pt"}, as a save
without sharding writes it: under ZeRO stage 3 a checkpoint holds each rank's
slices, which export puts together tensor by tensor (reading only a few
megabytes at a time, each part checked against the manifest), with no ranks
running; a checkpoint that has model.safetensors is copied, checked. The file
is replaced atomically.`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "model.safetensors", Usage: "the file to write"},
				&cli.StringFlag{Name: "module", Usage: "the module to export (default: the checkpoint's only one)"},
			},
			OnUsageError: onUsageError,
			Action:       checkpointExport,
		}},
	}
}

func checkpointExport(c *cli.Context) error {
	// The flags may also follow DIR, which the flag parser leaves among
	// the arguments.
	out, module := c.String("output"), c.String("module")
	var dirs []string
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-"):
			dirs = append(dirs, a)
			continue
		case name != "o" && name != "output" && name != "module":
			return usagef("checkpoint export", "checkpoint export: unknown flag %s", a)
		case !hasValue:
			if i+1 == len(args) {
				return usagef("checkpoint export", "checkpoint export: %s needs a value", a)
			}
			i++
			value = args[i]
		}
		if name == "module" {
			module = value
		} else {
			out = value
		}
	}
	if len(dirs) != 1 {
		return usagef("checkpoint export", "checkpoint export: name one checkpoint directory")
	}
	path, err := checkpoint.Latest(dirs[0])
	if err != nil {
		return err
	}
	if path == "" {
		return fmt.Errorf("checkpoint export: %s holds no checkpoint", dirs[0])
	}
	key, err := checkpoint.ExportModule(path, module, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%s: module %q written to %s\n", path, key, out)
	return nil
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
	fmt.Fprintf(w, "%s: step %d, %s, saved %s\n", path, m.Step, plural(m.WorldSize, "rank"), m.Time)
	var total int64
	for _, f := range m.Files {
		fmt.Fprintf(w, "  %-45s %12d bytes  crc32c %08x\n", f.Name, f.Bytes, f.CRC32C)
		total += f.Bytes
	}
	fmt.Fprintf(w, "  %-45s %12d bytes\n", "total", total)
	if len(m.Modules) > 0 {
		fmt.Fprintf(w, "modules: %s\n", strings.Join(m.Modules, ", "))
	}
	for _, sm := range m.Sharded {
		fmt.Fprintf(w, "module %q: ZeRO stage 3, %d slice files (zeroeng checkpoint export writes it whole)\n", sm.Key, sm.Shards)
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
