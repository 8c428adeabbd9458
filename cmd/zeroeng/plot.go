package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/zeroeng/zeroeng/internal/fileio"
	"github.com/zeroeng/zeroeng/internal/plot"
)

func plotCommand() *cli.Command {
	return &cli.Command{
		Name:      "plot",
		Usage:     "draw the loss and throughput curves of metrics files (zeroeng run --metrics) as an SVG",
		ArgsUsage: "metrics.jsonl... -o loss.svg",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "the SVG file to write (required; before or after the files)"},
			&cli.StringFlag{Name: "title", Usage: "the chart's title (default: the metrics files' names)"},
		},
		OnUsageError: onUsageError,
		Action: func(c *cli.Context) error {
			// The flags may also follow the files (zeroeng plot m.jsonl -o
			// loss.svg), which the flag parser leaves among the arguments.
			out, title := c.String("output"), c.String("title")
			var files []string
			args := c.Args().Slice()
			for i := 0; i < len(args); i++ {
				switch a := args[i]; {
				case a == "-o" || a == "--output" || a == "-title" || a == "--title":
					if i+1 == len(args) {
						return usagef("plot", "plot: %s needs a value", a)
					}
					if strings.HasSuffix(a, "title") {
						title = args[i+1]
					} else {
						out = args[i+1]
					}
					i++
				case strings.HasPrefix(a, "-o="), strings.HasPrefix(a, "--output="):
					out = a[strings.Index(a, "=")+1:]
				default:
					files = append(files, a)
				}
			}
			if len(files) == 0 {
				return usagef("plot", "plot: name one or more metrics files (JSON lines, as zeroeng run --metrics writes)")
			}
			if out == "" {
				return usagef("plot", "plot: -o FILE.svg is required")
			}
			panels, err := plot.Files(files)
			if err != nil {
				return err
			}
			if title == "" {
				var names []string
				for _, p := range files {
					names = append(names, filepath.Base(p))
				}
				title = strings.Join(names, ", ")
			}
			if err := fileio.WriteAtomic("plot", out, func(f *os.File) error { return plot.SVG(f, title, panels) }); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "zeroeng: wrote %s\n", out)
			return nil
		},
	}
}
