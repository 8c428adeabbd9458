package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/zeroeng/zeroeng/internal/suggest"
)

// otherVariables are the ZEROENG_ environment variables that are not a
// flag's: the engine's and the test harness's. A variable of the prefix
// that is neither is refused (checkEnvironment), as an unknown flag is:
// ZEROENG_THREDS=1 would otherwise run on every core unnoticed.
// TestEveryVariableIsKnown keeps the list whole.
var otherVariables = []string{
	// The engine: libraries, kernels, caches, data.
	"ZEROENG_BLAS", "ZEROENG_GEMM", "ZEROENG_VMATH", "ZEROENG_CUDA_LIBS", "ZEROENG_MPI_LIB",
	"ZEROENG_KERNEL_CACHE", "ZEROENG_WASM_CACHE", "ZEROENG_FMNIST_DIR", "ZEROENG_RUSTC",
	// Set by zeroeng for the processes of its own jobs.
	jobTokenEnv, launchedEnv,
	// The test suites' switches (make test-all, CI).
	"ZEROENG_REQUIRE_GPU", "ZEROENG_REQUIRE_NVRTC", "ZEROENG_REQUIRE_PROGRAMS", "ZEROENG_CONFORMANCE_CHILD",
	"ZEROENG_MPI_BENCH", "ZEROENG_MPI_BENCH_NP", "ZEROENG_MPI_TEST_CHILD", "ZEROENG_MPI_TEST_CHUNK",
	"ZEROENG_MPI_TEST_DEBUG", "ZEROENG_MPI_TEST_DIR", "ZEROENG_MPI_TEST_TIMEOUT", "ZEROENG_MPI_TEST_TRACE",
	"ZEROENG_TOKENS_BENCH_COLD", "ZEROENG_TOKENS_BENCH_FILE", "ZEROENG_TOKENS_BENCH_MB",
}

// knownVariables lists every ZEROENG_ variable the program reads: each
// flag's, of every command, and otherVariables.
func knownVariables(app *cli.App) []string {
	known := slices.Clone(otherVariables)
	var walk func(flags []cli.Flag, cmds []*cli.Command)
	walk = func(flags []cli.Flag, cmds []*cli.Command) {
		for _, f := range flags {
			if e, ok := f.(interface{ GetEnvVars() []string }); ok {
				known = append(known, e.GetEnvVars()...)
			}
		}
		for _, c := range cmds {
			walk(c.Flags, c.Subcommands)
		}
	}
	walk(app.Flags, app.Commands)
	slices.Sort(known)
	return slices.Compact(known)
}

// checkEnvironment refuses a ZEROENG_ variable in environ that the program
// does not read, naming it and the closest one it does.
func checkEnvironment(environ []string, known []string) error {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "ZEROENG_") || slices.Contains(known, name) {
			continue
		}
		msg := fmt.Sprintf("environment variable %s is not one of zeroeng's", name)
		if s := suggest.Closest(name, known); s != "" {
			return fmt.Errorf("%s (did you mean %s?)", msg, s)
		}
		return fmt.Errorf("%s ('zeroeng run --help' lists the flags' variables)", msg)
	}
	return nil
}
