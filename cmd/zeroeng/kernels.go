package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/zeroeng/zeroeng/gpu"
	"github.com/zeroeng/zeroeng/gpu/kernels"
	"github.com/zeroeng/zeroeng/gpu/nvrtc"
)

func kernelsCommand() *cli.Command {
	return &cli.Command{
		Name:         "kernels",
		Usage:        "compile the GPU kernels ahead of a job (kernels build)",
		OnUsageError: onUsageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("kernels", "kernels: unknown subcommand %q (build)", c.Args().First())
			}
			return cli.ShowSubcommandHelp(c)
		},
		Subcommands: []*cli.Command{{
			Name:  "build",
			Usage: "compile every kernel family for the given GPU architectures into the kernel cache",
			Description: `A job compiles each kernel family with NVRTC at its first use on a GPU, in
every process, and keeps the result in the kernel cache ($ZEROENG_KERNEL_CACHE,
else the user cache folder's zeroeng/kernels). kernels build fills that cache
beforehand, all families in parallel, so that the ranks of a job (on a shared
file system, or a node image) start without compiling. It needs NVRTC, not a
GPU: --arch names the GPUs (sm_90 for H100 and H200, sm_80 for A100); without
it, the GPUs of this machine. Each compiled kernel's registers are checked
against the block size it is launched with: a kernel that could not launch
makes the command exit 1.`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "arch", Usage: "GPU architectures, comma-separated: sm_90,sm_80 (default: this machine's GPUs)"},
				&cli.StringFlag{Name: "family", Usage: "kernel families, comma-separated (default: all: " + strings.Join(kernels.Families(), ", ") + ")"},
				&cli.IntFlag{Name: "jobs", Usage: "compilations at a time (0: one a core)"},
				&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "list every kernel: registers, block size, stack frame"},
			},
			OnUsageError: onUsageError,
			Action:       kernelsBuild,
		}},
	}
}

func kernelsBuild(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("kernels build", "kernels build: unexpected argument %q", c.Args().First())
	}
	if c.Int("jobs") < 0 {
		return usagef("kernels build", "kernels build: --jobs must be 0 (one a core) or more, got %d", c.Int("jobs"))
	}
	families, err := parseFamilies(c.String("family"))
	if err != nil {
		return usagef("kernels build", "kernels build: --family: %v", err)
	}
	var sms []int
	if c.IsSet("arch") {
		if sms, err = parseArchs(c.String("arch")); err != nil {
			return usagef("kernels build", "kernels build: --arch: %v", err)
		}
	} else {
		r := gpu.Probe()
		if r.DevicesErr != nil {
			return usagef("kernels build", "kernels build: no GPU here (%s): name the GPUs with --arch, e.g. --arch sm_90,sm_80", r.Summary())
		}
		for _, d := range r.Devices {
			if sm := d.Major*10 + d.Minor; !slices.Contains(sms, sm) {
				sms = append(sms, sm)
			}
		}
	}
	cache := kernels.DefaultCache()
	if !cache.Enabled() {
		return fmt.Errorf("kernels build: %s: there is nowhere to keep the kernels", cache.Describe())
	}
	lib, err := nvrtc.Load()
	if err != nil {
		return fmt.Errorf("kernels build: %w", err)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "NVRTC %d.%d (%s); kernel cache %s\n", lib.Major, lib.Minor, lib.Lib.Path, cache.Dir)
	start := time.Now()
	builds := gpu.BuildKernels(lib, sms, families, cache, c.Int("jobs"))
	failed, problems := writeBuilds(w, builds, c.Bool("verbose"))
	fmt.Fprintf(w, "%d families for %s in %.1f s\n", len(builds)/len(sms), archList(sms), time.Since(start).Seconds())
	switch {
	case failed > 0:
		return fmt.Errorf("kernels build: %d of %d compilations failed", failed, len(builds))
	case problems > 0:
		return fmt.Errorf("kernels build: %d kernels would not launch", problems)
	}
	return nil
}

// writeBuilds prints a line a build (and a line a kernel when verbose)
// and counts the failed builds and the kernels that would not launch.
func writeBuilds(w io.Writer, builds []gpu.Build, verbose bool) (failed, problems int) {
	for _, b := range builds {
		if b.Err != nil {
			failed++
			fmt.Fprintf(w, "sm_%d  %-12s FAILED: %v\n", b.SM, b.Family, b.Err)
			continue
		}
		how := fmt.Sprintf("compiled in %.1f s", b.Took.Seconds())
		if b.Cached {
			how = "cached"
		}
		detail := "PTX: the driver compiles it for the GPU"
		if b.Kernels != nil {
			regs, frames := 0, 0
			for _, k := range b.Kernels {
				regs = max(regs, k.Registers)
				if k.FrameBytes > 0 {
					frames++
				}
			}
			detail = fmt.Sprintf("%3d kernels, at most %d registers a thread, %d with a stack frame", len(b.Kernels), regs, frames)
		}
		fmt.Fprintf(w, "sm_%d  %-12s %-10s %-18s %s\n", b.SM, b.Family, b.Target, how, detail)
		if verbose {
			for _, k := range b.Kernels {
				bound := "no bound"
				if k.MaxThreads > 0 {
					bound = fmt.Sprintf("blocks ≤ %d", k.MaxThreads)
				}
				fmt.Fprintf(w, "      %-28s %3d registers  %-13s %4d-byte frame\n", k.Name, k.Registers, bound, k.FrameBytes)
			}
		}
		for _, p := range b.Problems {
			problems++
			fmt.Fprintf(w, "      WILL NOT LAUNCH: %s\n", p)
		}
	}
	return failed, problems
}

// parseArchs reads "sm_90,sm_80" (or compute capabilities: "9.0,8.0")
// into SM numbers, without repeats.
func parseArchs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		sm, err := parseArch(f)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, sm) {
			out = append(out, sm)
		}
	}
	return out, nil
}

func parseArch(f string) (int, error) {
	bad := fmt.Errorf("%q is not a GPU architecture (sm_90, sm_80, or a compute capability such as 9.0)", f)
	if major, minor, ok := strings.Cut(f, "."); ok {
		ma, err1 := strconv.Atoi(major)
		mi, err2 := strconv.Atoi(minor)
		if err1 != nil || err2 != nil || len(minor) != 1 || ma < 1 || ma > 99 || mi < 0 {
			return 0, bad
		}
		return ma*10 + mi, nil
	}
	digits, ok := strings.CutPrefix(f, "sm_")
	if !ok {
		return 0, bad
	}
	sm, err := strconv.Atoi(digits)
	if err != nil || sm < 10 || sm > 999 || strings.HasPrefix(digits, "0") {
		return 0, bad
	}
	return sm, nil
}

// parseFamilies checks "nn,reduce" against the kernel families; "" is all.
func parseFamilies(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	all := kernels.Families()
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(all, f) {
			return nil, fmt.Errorf("no kernel family %q (families: %s)", f, strings.Join(all, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

func archList(sms []int) string {
	names := make([]string, len(sms))
	for i, sm := range sms {
		names[i] = "sm_" + strconv.Itoa(sm)
	}
	return strings.Join(names, ", ")
}
