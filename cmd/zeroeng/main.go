// Command zeroeng is the zeroeng training engine's command line. This file
// only wires commands; the engine lives under engine/.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/zeroeng/zeroeng/bench"
	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

// usageError marks errors that exit with status 2.
type usageError struct{ error }

func main() {
	app := &cli.App{
		Name:    "zeroeng",
		Usage:   "a training engine with ZeRO sharding, scripted in JavaScript",
		Version: version,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "threads", Usage: "CPU threads for kernels (0: all cores)", EnvVars: []string{"ZEROENG_THREADS"}},
		},
		Before: func(c *cli.Context) error {
			parallel.SetThreads(c.Int("threads"))
			return nil
		},
		Commands: []*cli.Command{
			{
				Name:      "run",
				Usage:     "run the embedded default job (Fashion-MNIST MLP on the CPU)",
				ArgsUsage: " ",
				Description: "With no script, trains the Fashion-MNIST MLP (784-256-128-10, Adam 1e-3, batch 128)\n" +
					"on the embedded 3000/1000-image subset. --data points it at the full dataset instead\n" +
					"(Debian's dataset-fashion-mnist installs it in /usr/share/datasets/fashion-mnist).",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "epochs", Value: 5, Usage: "training epochs"},
					&cli.StringFlag{Name: "data", Usage: "directory with the four Fashion-MNIST idx .gz files"},
					&cli.Uint64Flag{Name: "seed", Value: 0, Usage: "random seed (torch.manual_seed)", EnvVars: []string{"ZEROENG_SEED"}},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usageError{fmt.Errorf("run: scripts are not supported by this build yet; run without arguments for the default job")}
					}
					_, err := bench.FashionMNIST(os.Stdout, bench.FashionMNISTOptions{Epochs: c.Int("epochs"), DataDir: c.String("data"), Seed: c.Uint64("seed")})
					return err
				},
			},
			{
				Name:      "bench",
				Usage:     "run a side-by-side benchmark workload and print one JSON line (as shared/bench/torch_cpu.py)",
				ArgsUsage: strings.Join(bench.Workloads, "|"),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usageError{fmt.Errorf("bench: name one workload (%s)", strings.Join(bench.Workloads, ", "))}
					}
					r, err := bench.Run(c.Args().First())
					if err != nil {
						return err
					}
					return json.NewEncoder(os.Stdout).Encode(r)
				},
			},
			{
				Name:  "info",
				Usage: "print the version, CPU features and the libraries found",
				Action: func(c *cli.Context) error {
					fmt.Printf("zeroeng %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
					fmt.Printf("threads: %d\n", parallel.Threads())
					fmt.Printf("vector kernels: %s\n", vmath.Implementation())
					fmt.Printf("blas: %s\n", blas.Info())
					return nil
				},
			},
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "zeroeng:", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
