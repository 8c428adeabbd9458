package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/cpu"

	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
)

// gpuInfo says why no GPU is listed; it changes when the CUDA back end
// (loaded at run time with purego) joins the build.
const gpuInfo = "none: the CUDA backend is not part of this build"

func versionLine() string {
	return fmt.Sprintf("zeroeng %s (%s, %s/%s)", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:         "version",
		Usage:        "print the version",
		OnUsageError: onUsageError,
		Action: func(c *cli.Context) error {
			fmt.Println(versionLine())
			return nil
		},
	}
}

func infoCommand() *cli.Command {
	return &cli.Command{
		Name:         "info",
		Usage:        "print the version, CPU features, kernels and libraries in use, and the GPUs found",
		OnUsageError: onUsageError,
		Action: func(c *cli.Context) error {
			writeInfo(os.Stdout)
			return nil
		},
	}
}

// writeInfo prints what a bug report needs: what runs the kernels here and
// why (the BLAS line says which library was found and where from, or why
// none was used).
func writeInfo(w io.Writer) {
	fmt.Fprintln(w, versionLine())
	if m := cpuModel(); m != "" {
		fmt.Fprintf(w, "cpu:            %s, %d logical cores\n", m, runtime.NumCPU())
	} else {
		fmt.Fprintf(w, "cpu:            %d logical cores\n", runtime.NumCPU())
	}
	fmt.Fprintf(w, "cpu features:   %s\n", cpuFeatures())
	fmt.Fprintf(w, "threads:        %d (--threads, ZEROENG_THREADS)\n", parallel.Threads())
	fmt.Fprintf(w, "vector kernels: %s (ZEROENG_VMATH=avx512|avx2|go overrides)\n", vmath.Implementation())
	fmt.Fprintf(w, "blas:           %s\n", strings.TrimPrefix(blas.Info(), "blas: "))
	fmt.Fprintf(w, "gpus:           %s\n", gpuInfo)
}

// cpuFeatures lists the x86 features the kernels choose between.
func cpuFeatures() string {
	if runtime.GOARCH != "amd64" {
		return "none checked on " + runtime.GOARCH + " (the vector kernels are amd64 only)"
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	return fmt.Sprintf("AVX2 %s, AVX-512F %s, FMA %s", yes(cpu.X86.HasAVX2), yes(cpu.X86.HasAVX512F), yes(cpu.X86.HasFMA))
}

// cpuModel reads the model name from /proc/cpuinfo (Linux); "" elsewhere.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
