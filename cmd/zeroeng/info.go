package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/cpu"

	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/gpu"
	"github.com/zeroeng/zeroeng/gpu/libs"
	"github.com/zeroeng/zeroeng/mpi"
	"github.com/zeroeng/zeroeng/nccl"
)

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
	writeGPUInfo(w)
}

// writeGPUInfo prints the GPUs and the NVIDIA libraries: for each library
// its version and where it was found, or why it was not (every folder
// tried, and what was wrong with what was there).
func writeGPUInfo(w io.Writer) {
	r := gpu.Probe()
	fmt.Fprintf(w, "cuda driver:    %s\n", r.Driver)
	if r.DevicesErr != nil {
		fmt.Fprintf(w, "gpus:           none: %v\n", r.DevicesErr)
	} else {
		for i, d := range r.Devices {
			label := "gpus:          "
			if i > 0 {
				label = "               "
			}
			fmt.Fprintf(w, "%s %s\n", label, gpu.DeviceLine(d))
		}
	}
	fmt.Fprintf(w, "nvrtc:          %s\n", r.NVRTC)
	fmt.Fprintf(w, "cublas:         %s\n", r.CUBLAS)
	if l, err := nccl.Load(); err != nil {
		fmt.Fprintf(w, "nccl:           missing: %v\n", err)
	} else {
		fmt.Fprintf(w, "nccl:           %s (%s, via %s)\n", ncclVersion(l.Version), l.Lib.Path, l.Lib.Source)
	}
	// Open MPI carries the CPU's collectives between processes.
	if l, err := mpi.Load(); err != nil {
		fmt.Fprintf(w, "mpi:            missing: %v\n", err)
	} else {
		run := "mpirun not on the PATH"
		if p, err := exec.LookPath("mpirun"); err == nil {
			run = "mpirun " + p
		}
		fmt.Fprintf(w, "mpi:            %s (%s; %s)\n", l.Version, l.Path, run)
	}
	fmt.Fprintf(w, "gpu libraries:  searched in $%s, the loader's path, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, site-packages/nvidia/*/lib\n", libs.EnvVar)
}

// ncclVersion formats NCCL_VERSION_CODE: 10000·major + 100·minor + patch
// since 2.9, 1000·major + 100·minor + patch before.
func ncclVersion(v int) string {
	if v >= 10000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
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
