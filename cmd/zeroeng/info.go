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
	"github.com/zeroeng/zeroeng/engine/cpu/gemm"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/gpu"
	"github.com/zeroeng/zeroeng/gpu/kernels"
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
		Name:  "info",
		Usage: "print the version, CPU features, kernels and libraries in use, and the GPUs found",
		Description: `--require-gpu (ZEROENG_REQUIRE_GPU=1) makes info exit 1 when there is no usable
GPU or when NVRTC, cuBLAS or NCCL is missing, naming what is; --smoke then runs a
short check on each GPU (memory, a kernel, a cuBLAS product, an NCCL all-reduce,
each against the CPU) and exits 1 at the first failure.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "require-gpu", Usage: "exit 1 unless a GPU and every NVIDIA library zeroeng uses were found", EnvVars: []string{"ZEROENG_REQUIRE_GPU"}},
			&cli.BoolFlag{Name: "smoke", Usage: "run a short end-to-end check on each GPU (implies --require-gpu)"},
		},
		OnUsageError: onUsageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("info", "info: unexpected argument %q", c.Args().First())
			}
			w := c.App.Writer
			r := writeInfo(w)
			if !c.Bool("require-gpu") && !c.Bool("smoke") {
				return nil
			}
			if missing := r.Missing(); len(missing) > 0 {
				return fmt.Errorf("info: a GPU is required (--require-gpu, ZEROENG_REQUIRE_GPU); missing: %s (see above)", strings.Join(missing, ", "))
			}
			if c.Bool("smoke") {
				for _, d := range r.Devices {
					if err := gpuSmoke(w, d.Ordinal); err != nil {
						return fmt.Errorf("info: cuda:%d: %w", d.Ordinal, err)
					}
				}
			}
			return nil
		},
	}
}

// writeInfo prints what a bug report needs: what runs the kernels here and
// why (the BLAS line says which library was found and where from, or why
// none was used). It returns what it found of the GPUs.
func writeInfo(w io.Writer) gpu.Report {
	fmt.Fprintln(w, versionLine())
	if m := cpuModel(); m != "" {
		fmt.Fprintf(w, "cpu:            %s, %d logical cores\n", m, runtime.NumCPU())
	} else {
		fmt.Fprintf(w, "cpu:            %d logical cores\n", runtime.NumCPU())
	}
	fmt.Fprintf(w, "cpu features:   %s\n", cpuFeatures())
	fmt.Fprintf(w, "threads:        %d (--threads, ZEROENG_THREADS)\n", parallel.Threads())
	fmt.Fprintf(w, "vector kernels: %s (ZEROENG_VMATH=avx512|avx2|go overrides)\n", vmath.Implementation())
	fmt.Fprintf(w, "gemm kernels:   %s (ZEROENG_GEMM=avx512|avx2|go overrides)\n", gemm.Kernel())
	fmt.Fprintf(w, "blas:           %s\n", strings.TrimPrefix(blas.Info(), "blas: "))
	return writeGPUInfo(w)
}

// writeGPUInfo prints the GPUs and the NVIDIA libraries: for each library
// its version and where it was found, or why it was not (every folder
// tried, and what was wrong with what was there).
func writeGPUInfo(w io.Writer) gpu.Report {
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
	fmt.Fprintf(w, "kernel cache:   %s (zeroeng kernels build fills it)\n", kernels.DefaultCache().Describe())
	fmt.Fprintf(w, "cublas:         %s\n", r.CUBLAS)
	r.NCCL.Name = nccl.Spec.Name
	if l, err := nccl.Load(); err != nil {
		r.NCCL.Err = err
	} else {
		r.NCCL.Path, r.NCCL.Source, r.NCCL.Version = l.Lib.Path, l.Lib.Source, ncclVersion(l.Version)
	}
	fmt.Fprintf(w, "nccl:           %s\n", r.NCCL)
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
	fmt.Fprintf(w, "gpu libraries:  searched in $%s, then newest version first: the loader's path, /usr/local/nvidia, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, site-packages/nvidia/*/lib (of the python3 on $PATH too)\n", libs.EnvVar)
	return r
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
