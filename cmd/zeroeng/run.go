package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/zeroeng/zeroeng/engine/checkpoint"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/jobenv"
	"github.com/zeroeng/zeroeng/engine/trace"
	"github.com/zeroeng/zeroeng/gpu"
	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/internal/hostmem"
	"github.com/zeroeng/zeroeng/nccl"
	"github.com/zeroeng/zeroeng/script"
)

const runDescription = `Runs a JavaScript training script. Every rank runs the same script in its own
JavaScript runtime (SPMD); require("zeroeng") gives it tensor, nn, optim,
zero, hooks, io, data, dist, progress, metrics, checkpoint, amp, trace,
device and version. Flags go before the script; what follows the script
(after an optional --) reaches it as process.argv.slice(2).

A WebAssembly training program (a WASI command: docs/wasm-program-abi.md)
runs in place of a script, one instance per rank, reaching the same API by
name; what follows it reaches it as its WASI arguments.

Every flag but --dir can also be set with an environment variable: ZEROENG_
and the flag's name in capitals, with _ for - (ZEROENG_LOG_FORMAT=json is
--log-format json, ZEROENG_QUIET=1 is --quiet; OPTIONS names each). A flag
given on the command line wins over the variable, and a ZEROENG_ variable
zeroeng does not read is an error that names it:

   --nproc 4              four ranks on this host (in-process on the CPU)
   --device cuda          auto, cpu or cuda: one GPU per rank, NCCL between
                          them (auto: the CPU for now)
   --seed 42              every rank's generator starts as
                          torch.manual_seed(42)
   --threads 8            CPU threads for the kernels (0: all cores)
   --log-format json      zeroeng's own messages as JSON lines on stderr
   --metrics m.jsonl      metrics.log() lines and a summary per rank
   --quiet                no progress bars and no summary
   --trace t.json         a Chrome trace of every rank's compute, comm hooks,
                          optimizer steps and collectives (chrome://tracing,
                          ui.perfetto.dev)
   --net 10Gbit,20us      collectives last as long as on that link
                          (bus-bandwidth model)
   --dist-timeout 30s     a collective waits this long for the other ranks
                          (default 10m)
   --rdzv-timeout 1m      in a job of several processes, how long the ranks
                          wait for each other (default 5m)
   --max-memory 2GiB      each rank's device memory limit: an allocation past
                          it is an out-of-memory error naming the rank (as on
                          a smaller GPU)
   --dist-debug           check that all ranks call each collective with the
                          same shapes
   --hook topk.wasm       every DistributedDataParallel reduces with this
                          Wasm comm hook (the run names it and its config as
                          it starts)
   --hook-config '{"ratio":0.01}'
                          handed to that hook's configure export
   --hook-memory-mb 256   memory limit of every Wasm hook (default 512)
   --hook-timeout 2s      time limit of every call into a Wasm hook (default
                          none)
   --hook-trusted         compile Wasm hooks without the loop checks: faster
                          loops, but a hook that never returns stalls the
                          process (Ctrl-C too)
   --hook-on-error fallback
                          a failed Wasm hook ends the run (abort) or hands
                          its buckets to the built-in all-reduce
   --zero-schedule lag_k.wasm
                          the Wasm ZeRO step schedule of a
                          zero.hookWithZeroSchedule given none (the
                          --hook-memory-mb, --hook-timeout and --hook-trusted
                          limits apply to it)
   --zero-schedule-config '{"k":2}'
                          handed to that schedule's configure export
   --wasm-memory-mb 1024  memory limit of a WebAssembly training program
                          (default 512)
   --wasm-trusted         compile a training program without the loop checks
   --dir data:/data:ro    a directory a training program may read (:rw: and
                          write)

Examples:

   zeroeng run samples/quickstart.js
   zeroeng run samples/fashion_mnist.js -- \
       --data ~/datasets/fashion-mnist --epochs 1
   zeroeng run --nproc 2 --seed 1 train.js -- --lr 3e-4
   ZEROENG_METRICS=metrics.jsonl ZEROENG_QUIET=1 zeroeng run train.js
   zeroeng run --log-format json train.js 2>job.log
   zeroeng run --nproc 4 --hook samples/hooks/build/topk.wasm \
       samples/fashion_mnist.js

Jobs of several processes, one rank each: zeroeng launch starts them (see
zeroeng launch --help), as do mpirun (-np N zeroeng run train.js: Open MPI
carries the collectives on the CPU), srun and torchrun: zeroeng run reads
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (or Open MPI's,
PMI's and Slurm's variables) and joins the job as that rank. Rank 0 writes
the --metrics and --trace files; rank r writes its own, named with .rankR
before the extension.

Errors print the script position (file:line:column), the message (for engine
errors the op and the shapes) and the JavaScript stack; with several ranks,
the first failing rank's error is printed once, with its rank, and the other
ranks are stopped.

Exit status: 0 on success, 1 when the script fails (syntax error, uncaught
exception, engine error), 2 on a usage error, the code the script passes to
process.exit(code), 130 after Ctrl-C (SIGINT) and 143 after SIGTERM. The
first Ctrl-C stops every rank at its next JavaScript statement; a second one,
a second or more later, exits at once (copies of one signal that come
together, as timeout and Slurm send them, count once). A script that saves
through a checkpoint.Manager turns SIGTERM (a scheduler's preemption) into a
graceful stop: every rank finishes its step, the manager saves a checkpoint
and the run exits 0.`

func runCommand() *cli.Command {
	return &cli.Command{
		Name:         "run",
		Usage:        "run a training script (JavaScript) or program (WebAssembly) on one or more ranks",
		ArgsUsage:    "script.js|program.wasm [-- args...]",
		Description:  runDescription,
		OnUsageError: onUsageError,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nproc", Value: 1, Usage: "number of ranks on this host", EnvVars: []string{"ZEROENG_NPROC"}},
			&cli.StringFlag{Name: "device", Value: "auto", Usage: "where the ranks compute: auto, cpu or cuda", EnvVars: []string{"ZEROENG_DEVICE"}},
			&cli.Uint64Flag{Name: "seed", Value: 0, Usage: "seed of every rank's random generator", EnvVars: []string{"ZEROENG_SEED"}},
			&cli.IntFlag{Name: "threads", Usage: "CPU threads for kernels (0: all cores)", EnvVars: []string{"ZEROENG_THREADS"}},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "format of zeroeng's own messages on stderr: text or json", EnvVars: []string{"ZEROENG_LOG_FORMAT"}},
			&cli.StringFlag{Name: "metrics", Usage: "write metrics as JSON lines to `FILE` (replaced if it exists)", EnvVars: []string{"ZEROENG_METRICS"}},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress output and no job summary", EnvVars: []string{"ZEROENG_QUIET"}},
			&cli.StringFlag{Name: "trace", Usage: "write a Chrome trace event file (JSON) of every rank to `FILE` when the job ends (replaced if it exists)", EnvVars: []string{"ZEROENG_TRACE"}},
			&cli.StringFlag{Name: "net", Value: "none", Usage: "emulate a network link between the ranks: `BANDWIDTH[,LATENCY]`, e.g. 10Gbit,20us", EnvVars: []string{"ZEROENG_NET"}},
			&cli.StringFlag{Name: "max-memory", Usage: "each rank's device memory limit (512MiB, 2GiB, 1.5GB): allocations past it fail naming the rank", EnvVars: []string{"ZEROENG_MAX_MEMORY"}},
			&cli.DurationFlag{Name: "dist-timeout", Value: dist.DefaultTimeout, Usage: "how long a collective waits for the other ranks", EnvVars: []string{"ZEROENG_DIST_TIMEOUT"}},
			&cli.DurationFlag{Name: "rdzv-timeout", Value: 5 * time.Minute, Usage: "in a job of several processes, how long the ranks wait for each other to start", EnvVars: []string{"ZEROENG_RDZV_TIMEOUT"}},
			&cli.BoolFlag{Name: "dist-debug", Usage: "check that every rank calls each collective with the same shapes, and name the calls that differ", EnvVars: []string{"ZEROENG_DIST_DEBUG"}},
			&cli.StringFlag{Name: "hook", Usage: "reduce the gradients of every DistributedDataParallel with the Wasm comm hook `FILE.wasm` (docs/wasm-hook-abi.md)", EnvVars: []string{"ZEROENG_HOOK"}},
			&cli.StringFlag{Name: "hook-config", Usage: "configuration handed to the --hook module's configure export (JSON for the samples)", EnvVars: []string{"ZEROENG_HOOK_CONFIG"}},
			&cli.IntFlag{Name: "hook-memory-mb", Value: wasm.DefaultMemoryLimitMB, Usage: "memory limit of every Wasm hook in MiB (its linear memory, and as much for the host tensors it makes)", EnvVars: []string{"ZEROENG_HOOK_MEMORY_MB"}},
			&cli.DurationFlag{Name: "hook-timeout", Usage: "time limit of every call into a Wasm hook (0: none)", EnvVars: []string{"ZEROENG_HOOK_TIMEOUT"}},
			&cli.BoolFlag{Name: "hook-trusted", Usage: "compile Wasm hooks without the check in every loop that lets them be interrupted: faster loops, but a hook that never returns stalls the whole process, signals included (for hooks you wrote)", EnvVars: []string{"ZEROENG_HOOK_TRUSTED"}},
			&cli.StringFlag{Name: "hook-on-error", Value: "abort", Usage: "when a Wasm hook fails: abort the run, or fallback to the built-in all-reduce for the rest of it", EnvVars: []string{"ZEROENG_HOOK_ON_ERROR"}},
			&cli.StringFlag{Name: "zero-schedule", Usage: "step ZeRO's overlap hooks with the Wasm schedule `FILE.wasm` (docs/wasm-schedule-abi.md) where a script's zero.hookWithZeroSchedule passes none", EnvVars: []string{"ZEROENG_ZERO_SCHEDULE"}},
			&cli.StringFlag{Name: "zero-schedule-config", Usage: "configuration handed to the --zero-schedule module's configure export (JSON for the samples)", EnvVars: []string{"ZEROENG_ZERO_SCHEDULE_CONFIG"}},
			&cli.IntFlag{Name: "wasm-memory-mb", Value: wasm.DefaultMemoryLimitMB, Usage: "memory limit of a WebAssembly training program in MiB (its linear memory; tensors live on the rank's device)", EnvVars: []string{"ZEROENG_WASM_MEMORY_MB"}},
			&cli.StringSliceFlag{Name: "dir", Usage: "a directory a WebAssembly training program may read, as HOST, HOST:GUEST, with :rw to let it write (repeatable; a program has no other files)"},
			&cli.BoolFlag{Name: "wasm-trusted", Usage: "compile a WebAssembly training program without the check in every loop that lets it be interrupted: faster loops, but a program that never returns stalls the whole process, signals included (for programs you wrote)", EnvVars: []string{"ZEROENG_WASM_TRUSTED"}},
		},
		Action: runAction,
	}
}

// runConfig is the checked command line of zeroeng run.
type runConfig struct {
	script    string
	args      []string
	nproc     int
	seed      uint64
	logFormat string
	metrics   string
	trace     string
	quiet     bool
	dist      dist.Options
	hooks     script.WasmHookOptions
	cuda      bool  // one GPU per rank, NCCL between them
	maxMemory int64 // bytes of device memory per rank (0: no bound)

	rdzvTimeout time.Duration // how long a job of several processes waits for its ranks
	program     wasm.Config   // a WebAssembly program's limits
	programDirs []wasm.Dir    // the directories it sees (--dir)
}

// newDevice opens GPU rank for rank under --device cuda; nil means the CPU.
func (cfg runConfig) newDevice() func(rank int) (device.Device, error) {
	if !cfg.cuda {
		return nil
	}
	return func(rank int) (device.Device, error) {
		d, err := gpu.Open(gpu.Options{Ordinal: rank, Index: rank, MaxMemory: cfg.maxMemory})
		if err != nil {
			return nil, fmt.Errorf("--device cuda: %w", err)
		}
		return d, nil
	}
}

// newBackend connects the ranks' GPUs with NCCL under --device cuda; nil
// means the in-process backend. One rank without NCCL still runs: its
// collectives then fail with an error saying they need CPU tensors.
func (cfg runConfig) newBackend() func(devs []device.Device) (script.Backend, error) {
	if !cfg.cuda {
		return nil
	}
	return func(devs []device.Device) (script.Backend, error) {
		lib, err := nccl.Load()
		if err != nil {
			if len(devs) == 1 {
				w, err := dist.NewWorld(1, cfg.dist)
				if err != nil {
					return nil, err
				}
				return w, nil
			}
			return nil, fmt.Errorf("run: --nproc %d --device cuda needs NCCL: %w", len(devs), err)
		}
		nd := make([]nccl.Device, len(devs))
		for i, d := range devs {
			nd[i] = d.(*gpu.Device)
		}
		w, err := nccl.NewWorld(lib, nd, cfg.dist)
		if err != nil {
			return nil, err
		}
		return w, nil
	}
}

func parseRun(c *cli.Context) (runConfig, error) {
	cfg := runConfig{
		nproc:     c.Int("nproc"),
		seed:      c.Uint64("seed"),
		logFormat: c.String("log-format"),
		metrics:   c.String("metrics"),
		trace:     c.String("trace"),
		quiet:     c.Bool("quiet"),
	}
	args := c.Args().Slice()
	if len(args) == 0 {
		return cfg, usagef("run", "run: no script given; try: zeroeng run samples/quickstart.js")
	}
	cfg.script, cfg.args = args[0], args[1:]
	if len(cfg.args) > 0 && cfg.args[0] == "--" {
		cfg.args = cfg.args[1:]
	}
	if cfg.nproc < 1 {
		return cfg, usagef("run", "run: --nproc must be 1 or more, got %d", cfg.nproc)
	}
	switch d := c.String("device"); d {
	case "auto", "cpu":
		// auto stays the CPU until the CUDA back end has passed its
		// validation on a real GPU (docs/gpu-validation.md).
	case "cuda":
		cfg.cuda = true
	default:
		return cfg, usagef("run", "run: --device must be auto, cpu or cuda, got %q", d)
	}
	if t := c.Int("threads"); t < 0 {
		return cfg, usagef("run", "run: --threads must be 0 (all cores) or more, got %d", t)
	} else if c.IsSet("threads") {
		parallel.SetThreads(t)
	}
	net, err := dist.ParseNetModel(c.String("net"))
	if err != nil {
		return cfg, usagef("run", "run: --net: %v", err)
	}
	if s := c.String("max-memory"); s != "" {
		n, err := hostmem.ParseSize(s)
		if err != nil {
			return cfg, usagef("run", "run: --max-memory: %v", err)
		}
		cfg.maxMemory = n
	}
	if c.Duration("dist-timeout") <= 0 {
		return cfg, usagef("run", "run: --dist-timeout must be positive, got %v", c.Duration("dist-timeout"))
	}
	if cfg.rdzvTimeout = c.Duration("rdzv-timeout"); cfg.rdzvTimeout <= 0 {
		return cfg, usagef("run", "run: --rdzv-timeout must be positive, got %v", cfg.rdzvTimeout)
	}
	cfg.dist = dist.Options{Net: net, Timeout: c.Duration("dist-timeout"), Debug: c.Bool("dist-debug")}
	cfg.hooks = script.WasmHookOptions{
		Path:           c.String("hook"),
		Config:         c.String("hook-config"),
		Limits:         wasm.Config{MemoryLimitMB: c.Int("hook-memory-mb"), Timeout: c.Duration("hook-timeout"), Trusted: c.Bool("hook-trusted")},
		Schedule:       c.String("zero-schedule"),
		ScheduleConfig: c.String("zero-schedule-config"),
	}
	if cfg.hooks.Limits.Trusted && cfg.hooks.Limits.Timeout > 0 {
		return cfg, usagef("run", "run: --hook-timeout needs the loop checks that --hook-trusted leaves out: choose one")
	}
	if m := cfg.hooks.Limits.MemoryLimitMB; m < 1 || m > 4096 {
		return cfg, usagef("run", "run: --hook-memory-mb must be between 1 and 4096, got %d", m)
	}
	if cfg.hooks.Limits.Timeout < 0 {
		return cfg, usagef("run", "run: --hook-timeout must not be negative, got %v", cfg.hooks.Limits.Timeout)
	}
	cfg.program = wasm.Config{MemoryLimitMB: c.Int("wasm-memory-mb"), Trusted: c.Bool("wasm-trusted")}
	for _, s := range c.StringSlice("dir") {
		d, err := wasm.ParseDir(s)
		if err != nil {
			return cfg, usagef("run", "run: %v", err)
		}
		cfg.programDirs = append(cfg.programDirs, d)
	}
	if m := cfg.program.MemoryLimitMB; m < 1 || m > 4096 {
		return cfg, usagef("run", "run: --wasm-memory-mb must be between 1 and 4096, got %d", m)
	}
	if cfg.hooks.OnError, err = wasm.ParsePolicy(c.String("hook-on-error")); err != nil {
		return cfg, usagef("run", "run: --hook-on-error must be abort or fallback, got %q", c.String("hook-on-error"))
	}
	if cfg.hooks.Config != "" && cfg.hooks.Path == "" {
		return cfg, usagef("run", "run: --hook-config needs --hook")
	}
	if p := cfg.hooks.Path; p != "" {
		if _, err := os.Stat(p); err != nil {
			return cfg, usagef("run", "run: --hook: %v", err)
		}
	}
	if cfg.hooks.ScheduleConfig != "" && cfg.hooks.Schedule == "" {
		return cfg, usagef("run", "run: --zero-schedule-config needs --zero-schedule")
	}
	if p := cfg.hooks.Schedule; p != "" {
		if _, err := os.Stat(p); err != nil {
			return cfg, usagef("run", "run: --zero-schedule: %v", err)
		}
	}
	if cfg.trace != "" {
		// The trace is written when the job ends: a folder that is not
		// there is better found now than after a long run.
		if st, err := os.Stat(filepath.Dir(cfg.trace)); err != nil || !st.IsDir() {
			return cfg, usagef("run", "run: --trace: no folder %s for %s", filepath.Dir(cfg.trace), cfg.trace)
		}
	}
	if cfg.logFormat != "text" && cfg.logFormat != "json" {
		return cfg, usagef("run", "run: --log-format must be text or json, got %q", cfg.logFormat)
	}
	if st, err := os.Stat(cfg.script); err != nil {
		return cfg, usagef("run", "run: cannot open script: %v", err)
	} else if st.IsDir() {
		return cfg, usagef("run", "run: %s is a directory, not a script", cfg.script)
	}
	if len(cfg.programDirs) > 0 && !script.IsProgram(cfg.script) {
		return cfg, usagef("run", "run: --dir is for WebAssembly training programs; a script reads files through the API (io, data)")
	}
	return cfg, nil
}

func runAction(c *cli.Context) error {
	cfg, err := parseRun(c)
	if err != nil {
		return err
	}
	// The job's messages clear a progress bar and draw it again below.
	logs := newJobLog(script.SharedWriter(os.Stderr), cfg.logFormat, cfg.quiet)

	// In a job of several processes (zeroeng launch, torchrun, mpirun,
	// srun) this process runs one of its ranks.
	place, inJob, err := jobenv.FromEnv(os.Getenv)
	if err != nil {
		return usagef("run", "run: %v", err)
	}
	var proc *processJob
	if inJob && place.Size > 1 {
		if c.IsSet("nproc") && cfg.nproc != 1 {
			return usagef("run", "run: --nproc %d in a job of %d processes (%s variables): each process runs one rank", cfg.nproc, place.Size, place.Source)
		}
		proc = &processJob{place: place, cuda: cfg.cuda, dist: cfg.dist, timeout: cfg.rdzvTimeout, launched: os.Getenv(launchedEnv) != ""}
		logs.process = place.Rank
		if !proc.launched {
			logs.prefix = fmt.Sprintf("[%d] ", place.Rank)
		}
		if place.Rank > 0 {
			// Rank 0 writes the files the flags name; the others their own.
			cfg.metrics = perRankFile(cfg.metrics, place.Rank)
			cfg.trace = perRankFile(cfg.trace, place.Rank)
		}
	}
	ranks := cfg.nproc
	if proc != nil {
		ranks = place.Size
	}
	if cfg.hooks.Path != "" && (proc == nil || place.Rank == 0) {
		// Say what reduces the gradients before the run starts: a hook
		// changes the training (top-k sends a fraction of them), and its
		// config is easily left in an environment variable. Once per
		// job: every rank runs the same hook.
		attrs := []slog.Attr{slog.String("hook", cfg.hooks.Path)}
		config := "no config"
		if cfg.hooks.Config != "" {
			config = "config " + printable(cfg.hooks.Config)
			attrs = append(attrs, slog.String("hook_config", cfg.hooks.Config))
		}
		logs.log(slog.LevelInfo, -1, fmt.Sprintf("comm hook %s (%s) reduces the gradients of every DistributedDataParallel", printable(cfg.hooks.Path), config), nil, attrs...)
	}

	var metrics *os.File
	var metricsW io.Writer
	if cfg.metrics != "" {
		// O_APPEND makes every line one atomic append: the ranks share the
		// file through one locked writer, and a reader tailing it never
		// sees half a line.
		metrics, err = os.OpenFile(cfg.metrics, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
		if err != nil {
			return usagef("run", "run: --metrics: %v", err)
		}
		metricsW = script.NewLineWriter(metrics)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := &script.StopRequest{}
	sig := catchSignals(cancel, stop, logs.prefix)
	defer sig.stop()
	if proc != nil {
		proc.ctx = ctx // a signal ends the wait for the other ranks too
	}

	var rec *trace.Recorder // nil: no trace
	if cfg.trace != "" {
		rec = trace.New(trace.Options{})
		rec.SetInfo("script", cfg.script)
		rec.SetInfo("ranks", ranks)
		rec.SetInfo("zeroeng_version", script.Version)
	}

	var runtimes []*script.Runtime
	start := time.Now()
	jo := script.JobOptions{
		Ranks: cfg.nproc,
		Dist:  cfg.dist,
		Rank: script.Options{
			Seed:        cfg.seed,
			Args:        cfg.args,
			AutoRelease: true,
			Metrics:     metricsW,
			// Progress bars draw on stderr, so that is the stream that
			// must be a terminal for a redrawn status line.
			Interactive: term.IsTerminal(int(os.Stderr.Fd())),
			Quiet:       cfg.quiet,
			Hooks:       cfg.hooks,
			Program:     cfg.program,
			ProgramDirs: cfg.programDirs,
			Stop:        stop,
			Trace:       rec,
		},
		Setup: func(r *script.Runtime) error {
			runtimes = append(runtimes, r) // called in rank order
			return nil
		},
		NewDevice:  cfg.newDevice(),
		MaxMemory:  cfg.maxMemory,
		NewBackend: cfg.newBackend(),
	}
	if proc != nil {
		proc.apply(&jo)
	}
	err = script.RunJob(ctx, cfg.script, jo)
	checkpoint.Finish() // retired checkpoints still being deleted
	if cfg.hooks.Path != "" && len(runtimes) > 0 && !slices.ContainsFunc(runtimes, (*script.Runtime).MadeDDP) {
		logs.log(slog.LevelWarn, -1, fmt.Sprintf("--hook %s: the script made no DistributedDataParallel, so the hook reduced nothing", cfg.hooks.Path), nil)
	}
	elapsed := time.Since(start)
	if proc != nil && proc.stoppedByAnother() {
		time.Sleep(stopDelay) // the failed rank ends first (zeroeng launch names it)
	}
	received := sig.received()
	if sig.graceful.Load() {
		// The script's checkpoint Manager honoured SIGTERM: it saved and
		// ended the run (exit 0), or the run ended on its own.
		received = nil
	}

	var se *script.Error
	var re *script.RankError
	errors.As(err, &se)
	errors.As(err, &re)
	exit := 0
	switch {
	case received != nil:
		exit = 128 + int(received.(syscall.Signal))
	case err == nil:
	case se != nil && se.Exit != nil:
		exit = se.Exit.Code
	default:
		exit = 1
	}

	// status says how the job ended for rank, or for the job as a whole
	// (rank -1), in the metrics' summaries and the trace.
	status := func(rank int) string {
		switch {
		case received != nil:
			return "interrupted"
		case se != nil && se.Exit != nil:
			return "exit"
		case err != nil && (rank < 0 || re != nil && re.Rank == rank):
			return "error"
		case err != nil:
			return "stopped"
		}
		return "ok"
	}
	if metrics != nil {
		for i, r := range runtimes {
			metricsW.Write(r.MetricsSummary(elapsed, status(jo.FirstRank+i)))
		}
		if cerr := metrics.Close(); cerr != nil && exit == 0 {
			logs.log(slog.LevelError, -1, fmt.Sprintf("writing %s: %v", cfg.metrics, cerr), nil)
			exit = 1
		}
	}

	if rec != nil {
		// Written whatever the ending: a failed or interrupted run's trace
		// shows where it was.
		rec.SetInfo("status", status(-1))
		if werr := rec.WriteFile(cfg.trace); werr != nil {
			logs.log(slog.LevelError, -1, fmt.Sprintf("writing the trace: %v", werr), nil)
			if exit == 0 {
				exit = 1
			}
		} else if _, dropped := rec.Len(); dropped > 0 {
			logs.log(slog.LevelWarn, -1, fmt.Sprintf("trace %s: %d events dropped after the first %d", cfg.trace, dropped, trace.DefaultMaxEvents), nil)
		}
	}

	switch {
	case received != nil:
		msg := fmt.Sprintf("interrupted by %s", signalName(received))
		if se != nil && se.Position != "" {
			msg += " at " + relPath(se.Position)
		}
		logs.log(slog.LevelWarn, -1, msg, nil)
	case err == nil:
		if proc == nil || place.Rank == 0 {
			logs.summary(fmt.Sprintf("finished in %.2fs (%s)", elapsed.Seconds(), plural(ranks, "rank")),
				slog.Int("ranks", ranks), slog.Float64("elapsed_s", roundMillis(elapsed)))
		}
	case se != nil && se.Exit != nil:
		// process.exit(code): the script chose its status. In a job of
		// several ranks a failing one ends every rank: say which.
		if ranks > 1 && se.Exit.Code != 0 && re != nil {
			where := ""
			if se.Position != "" {
				where = " at " + relPath(se.Position)
			}
			logs.log(slog.LevelWarn, -1, fmt.Sprintf("rank %d called process.exit(%d)%s, which ends the job", re.Rank, se.Exit.Code, where), nil)
		}
	default:
		logs.scriptFailure(err)
	}
	if exit != 0 {
		return exitStatus{exit}
	}
	return nil
}

// signals turns the first SIGINT or SIGTERM into a cancelled job context
// (every rank is interrupted and the command exits 130 or 143 once they
// have stopped) and a second one into an immediate exit. A SIGTERM that a
// script's checkpoint Manager can honour becomes a stop request instead:
// the ranks finish their step, save a checkpoint and exit 0. A signal
// that comes within sameRequest of the first is the first one again (see
// stopRequests) and changes nothing.
type signals struct {
	ch       chan os.Signal
	done     chan struct{}
	got      chan os.Signal // holds the first signal once it arrived
	graceful atomic.Bool    // the first signal became a stop request
}

// prefix starts each message ("[rank] " in a job of several processes).
func catchSignals(cancel context.CancelFunc, stop *script.StopRequest, prefix string) *signals {
	s := &signals{ch: make(chan os.Signal, 2), done: make(chan struct{}), got: make(chan os.Signal, 1)}
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		var reqs stopRequests
		for {
			select {
			case sig := <-s.ch:
				switch reqs.add(time.Now()) {
				case echoRequest:
					continue
				case secondRequest:
					fmt.Fprintf(os.Stderr, "\n%szeroeng: %s again: exiting without waiting for the ranks\n", prefix, signalName(sig))
					os.Exit(128 + int(sig.(syscall.Signal)))
				}
				s.got <- sig
				if sig == syscall.SIGTERM && stop.Request() {
					s.graceful.Store(true)
					fmt.Fprintf(script.SharedWriter(os.Stderr), "\n%szeroeng: SIGTERM: saving a checkpoint after the current step, then exiting (SIGTERM again exits at once)\n", prefix)
					continue
				}
				cancel()
			case <-s.done:
				return
			}
		}
	}()
	return s
}

// sameRequest is how long after a first SIGINT or SIGTERM another one is
// that request again, come by a second path, rather than a second request
// (which makes zeroeng run exit at once and zeroeng launch kill its
// ranks). One signal often arrives twice: timeout(1) signals its command
// and then its process group; Slurm and systemd signal every process of
// a job step or unit, so a rank has it from them and again from zeroeng
// launch, which passes it on. Such copies come milliseconds apart; a
// person's second Ctrl-C, or a scheduler that escalates, comes seconds
// later. Read as a second request, a copy ended the run before SIGTERM's
// checkpoint was saved (1 run in 5 of zeroeng run under timeout -s TERM).
const sameRequest = time.Second

// stopRequests counts the SIGINTs and SIGTERMs a process receives as
// requests to stop.
type stopRequests struct {
	first time.Time // when the first came; zero before
}

type stopRequest int

const (
	firstRequest  stopRequest = iota // stop
	echoRequest                      // the first again, by another path: ignore it
	secondRequest                    // stop at once
)

// add says what a SIGINT or SIGTERM received at now is. Which of the two
// signals it is does not matter: Open MPI's mpirun answers a rank's exit
// after a SIGINT by sending the other ranks SIGTERM, for instance.
func (r *stopRequests) add(now time.Time) stopRequest {
	switch {
	case r.first.IsZero():
		r.first = now
		return firstRequest
	case now.Sub(r.first) < sameRequest:
		return echoRequest
	}
	return secondRequest
}

// received returns the first signal, or nil.
func (s *signals) received() os.Signal {
	select {
	case sig := <-s.got:
		s.got <- sig
		return sig
	default:
		return nil
	}
}

func (s *signals) stop() {
	signal.Stop(s.ch)
	close(s.done)
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// printable returns s as it is when every character prints, and quoted
// otherwise, so that a flag's value cannot drive the terminal.
func printable(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

func roundMillis(d time.Duration) float64 { return float64(d.Milliseconds()) / 1e3 }
