package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// flagsProgram is a Go training program that reports what zeroeng run's
// flags give it: its rank, the seed's first draw, a collective, a metric
// and a trace span; "comm" all-reduces (a job of processes needs mpirun
// for that on the CPU), "big" allocates 32 MiB of tensors.
const flagsProgram = `package main

import (
	"fmt"
	"os"

	ze "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

func main() {
	rank := ze.Must(ze.Call("dist.rank")).(float64)
	world := ze.Must(ze.Call("dist.worldSize")).(float64)
	if len(os.Args) > 1 && os.Args[1] == "big" {
		lin := ze.Must(ze.O("nn.Linear", 1024, 1024))
		x := ze.Must(ze.T("tensor.randn", []int{4096, 1024}))
		if _, err := lin.M("forward", x); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("done")
		return
	}
	draw := ze.Must(ze.Must(ze.T("tensor.rand", []int{1})).Item())
	t := ze.Must(ze.T("tensor.ones", []int{2}))
	if len(os.Args) > 1 && os.Args[1] == "comm" {
		ze.Must(ze.Must(ze.O("dist.allReduce", t)).Method("wait"))
	}
	sum := ze.Must(ze.Must(t.M("sum")).Item())
	ze.Must(ze.Call("metrics.log", map[string]any{"total": sum}))
	f := ze.Must(ze.Func(func([]any) (any, error) { return nil, nil }))
	ze.Must(ze.Call("trace.span", "program-span", f))
	fmt.Printf("rank %v of %v draw %.6f sum %v args %v\n", rank, world, draw, sum, os.Args[1:])
}
`

// TestProgramFlags: zeroeng run's flags work for a program as for a
// script: launched as processes of a job (zeroeng launch) with the
// rank's prefix, the metrics and trace files of every rank, --seed, the
// program's arguments, and --max-memory failing the allocation past it
// with the out-of-memory error, in the rank's output.
func TestProgramFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program for wasip1: make test-all")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), hookbuild.ProgramSource(t, flagsProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	r := zeroeng(t, dir, nil, "launch", "--spawn", "direct", "--nproc-per-node", "2", "--quiet", "--seed", "7",
		"--metrics", "m.jsonl", "--trace", "t.json", "prog.wasm", "--", "a", "b")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	var draws []string
	for rank := range 2 {
		prefix := fmt.Sprintf("[%d] rank %d of 2 draw ", rank, rank)
		i := strings.Index(r.stdout, prefix)
		if i < 0 || !strings.Contains(r.stdout[i:], "sum 2 args [a b]\n") {
			t.Fatalf("stdout lacks rank %d's line:\n%s", rank, r.stdout)
		}
		draws = append(draws, r.stdout[i+len(prefix):i+len(prefix)+8])
	}
	for _, f := range []string{"m.jsonl", "m.rank1.jsonl", "t.json", "t.rank1.json"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "t.json")); !strings.Contains(string(b), "program-span") {
		t.Errorf("the trace has no program-span:\n%.500s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "m.rank1.jsonl")); !strings.Contains(string(b), `"total":2`) {
		t.Errorf("rank 1's metrics:\n%s", b)
	}
	// In one process, the ranks all-reduce.
	if r := zeroeng(t, dir, nil, "run", "--quiet", "--nproc", "2", "prog.wasm", "--", "comm"); r.code != 0 || strings.Count(r.stdout, "sum 4 args [comm]") != 2 {
		t.Errorf("all-reduce: status %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The same seed draws the same; another seed another.
	again := zeroeng(t, dir, nil, "run", "--quiet", "--seed", "7", "prog.wasm")
	other := zeroeng(t, dir, nil, "run", "--quiet", "--seed", "8", "prog.wasm")
	if !strings.Contains(again.stdout, "draw "+draws[0]) || strings.Contains(other.stdout, "draw "+draws[0]) {
		t.Errorf("--seed: launched %v, run again %q, seed 8 %q", draws, again.stdout, other.stdout)
	}

	big := zeroeng(t, dir, nil, "run", "--quiet", "--nproc", "2", "--max-memory", "24MiB", "prog.wasm", "--", "big")
	if big.code != 1 || !strings.Contains(big.stderr, "out of memory: 16 MiB more would make 36 MiB live, over the device's limit of 24 MiB") ||
		!strings.Contains(big.stderr, "] ") || strings.Contains(big.stdout, "done") {
		t.Errorf("--max-memory: status %d\nstdout:\n%s\nstderr:\n%s", big.code, big.stdout, big.stderr)
	}
}

// TestProgramDirs: a program has no files but the directories --dir
// gives it: read-only by default, writable with :rw; a bad --dir, or one
// given to a script, is a usage error.
func TestProgramDirs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program for wasip1: make test-all")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), hookbuild.ProgramSource(t, `package main

import (
	"fmt"
	"os"

	_ "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

func main() {
	b, err := os.ReadFile("/data/in.txt")
	fmt.Printf("read %q %v\n", b, err != nil)
	err = os.WriteFile("/data/out.txt", []byte("written"), 0o644)
	fmt.Printf("write failed %v\n", err != nil)
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "in.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flags []string
		out   string
		wrote bool
	}{
		{nil, `read "" true` + "\nwrite failed true\n", false},
		{[]string{"--dir", "data:/data"}, `read "hello" false` + "\nwrite failed true\n", false},
		{[]string{"--dir", "data:/data:rw"}, `read "hello" false` + "\nwrite failed false\n", true},
	} {
		os.Remove(filepath.Join(data, "out.txt"))
		r := zeroeng(t, dir, nil, append(append([]string{"run", "--quiet"}, c.flags...), "prog.wasm")...)
		_, err := os.Stat(filepath.Join(data, "out.txt"))
		if r.code != 0 || r.stdout != c.out || (err == nil) != c.wrote {
			t.Errorf("%v: status %d, output %q (want %q), wrote %v\n%s", c.flags, r.code, r.stdout, c.out, err == nil, r.stderr)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "s.js"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want string }{
		{"--dir nonesuch prog.wasm", "is not a directory"},
		{"--dir data:relative prog.wasm", "must be absolute"},
		{"--dir data:/a:/b prog.wasm", "want HOST, HOST:GUEST"},
		{"--dir data s.js", "--dir is for WebAssembly training programs"},
	} {
		if r := zeroeng(t, dir, nil, append([]string{"run"}, strings.Fields(c.args)...)...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("run %s: status %d, want 2 and %q in\n%s", c.args, r.code, c.want, r.stderr)
		}
	}
}

// TestProgramUnderMPI: a program is a rank of a job of processes as a
// script is, collectives included: under mpirun, and under zeroeng
// launch (which starts mpirun on the CPU).
func TestProgramUnderMPI(t *testing.T) {
	needMPI(t)
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.wasm")
	if err := os.WriteFile(prog, hookbuild.ProgramSource(t, flagsProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cmd  []string
	}{
		{"mpirun", append(append([]string{"mpirun"}, mpirunArgs(2)...), "run", "--quiet", prog, "--", "comm")},
		{"launch", []string{binary, "launch", "--nproc-per-node", "2", "--quiet", prog, "--", "comm"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(c.cmd[0], c.cmd[1:]...)
			cmd.Dir, cmd.Env = dir, cleanEnv()
			out, err := cmd.CombinedOutput()
			if err != nil || strings.Count(string(out), "of 2 draw") != 2 || strings.Count(string(out), "sum 4 args [comm]") != 2 {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}
