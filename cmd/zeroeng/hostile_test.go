package main

import (
	"bytes"
	"context"
	enc "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
	"github.com/zeroeng/zeroeng/internal/hostmem"
)

// The hostile-input suite: files, modules, scripts and peers that a
// careless or malicious user could hand zeroeng, each run through the
// binary as a user would, within a time bound, with the error it must
// give — and never a Go trace (a panic, a fatal error, goroutine dumps).
// The fixtures are made by the Go code of each case, so the suite holds
// its own inputs. Each package's own tests go further on each mechanism;
// this is the end-to-end check that none of it regressed.

// hostileCase is one input and what zeroeng must say about it.
type hostileCase struct {
	name  string
	setup func(t *testing.T, dir string) []string // writes the fixtures; returns the command line
	env   []string
	limit time.Duration // the run must end within it
	want  []string      // in the output
	deny  []string      // never in the output (a secret, a file's content)
	ok    bool          // the run succeeds (the input is made harmless, not refused)
}

func TestHostileInputs(t *testing.T) {
	// script runs src as s.js, with run's flags before it.
	script := func(src string, flags ...string) func(*testing.T, string) []string {
		return func(t *testing.T, dir string) []string {
			writeFile(t, filepath.Join(dir, "s.js"), src)
			return append(append([]string{"run"}, flags...), "s.js")
		}
	}
	secret := "root:x:0:0:secret-content-of-a-file"
	cases := []hostileCase{
		{name: "latest links to a file outside the folder", setup: func(t *testing.T, dir string) []string {
			ckpt := filepath.Join(dir, "ckpt")
			os.MkdirAll(ckpt, 0o755)
			writeFile(t, filepath.Join(dir, "passwd"), secret)
			os.Symlink(filepath.Join(dir, "passwd"), filepath.Join(ckpt, "latest"))
			return []string{"checkpoint", "verify", "ckpt"}
		}, want: []string{"latest is a symbolic link"}, deny: []string{secret}},
		{name: "latest is a FIFO", setup: func(t *testing.T, dir string) []string {
			ckpt := filepath.Join(dir, "ckpt")
			os.MkdirAll(ckpt, 0o755)
			mkfifo(t, filepath.Join(ckpt, "latest"))
			return []string{"checkpoint", "verify", "ckpt"}
		}, want: []string{"not a regular file (a FIFO)"}},
		{name: "a FIFO as the manifest", setup: func(t *testing.T, dir string) []string {
			step := filepath.Join(dir, "ckpt", "step-00000001")
			os.MkdirAll(step, 0o755)
			writeFile(t, filepath.Join(dir, "ckpt", "latest"), "step-00000001\n")
			mkfifo(t, filepath.Join(step, "manifest.json"))
			return []string{"checkpoint", "verify", "ckpt"}
		}, want: []string{"manifest.json: not a regular file (a FIFO)"}},
		{name: "a FIFO as the hook", setup: func(t *testing.T, dir string) []string {
			mkfifo(t, filepath.Join(dir, "hook.wasm"))
			return []string{"hook", "check", "hook.wasm"}
		}, want: []string{"hook.wasm: not a regular file (a FIFO)"}},
		{name: "an endless device as the hook", setup: func(t *testing.T, dir string) []string {
			return []string{"hook", "check", "/dev/zero"}
		}, want: []string{"/dev/zero: not a regular file (a character device)"}},
		{name: "an endless device as token data", setup: script(`const { data } = require("zeroeng");
data.loadTokens("/dev/zero");`), want: []string{"s.js:2:", "/dev/zero: not a regular file"}},
		{name: "a FIFO as the script", setup: func(t *testing.T, dir string) []string {
			mkfifo(t, filepath.Join(dir, "s.js"))
			return []string{"run", "s.js"}
		}, want: []string{"s.js: not a regular file (a FIFO)"}},
		{name: "a tensor larger than the machine", setup: func(t *testing.T, dir string) []string {
			avail, ok := hostmem.Available()
			if !ok {
				t.Skip("the memory available is unknown here")
			}
			return script(fmt.Sprintf(`const { tensor } = require("zeroeng");
tensor.zeros([%d, 4]);`, (avail+1<<30)/16+1))(t, dir)
		}, want: []string{"s.js:2:", "of memory available"}},
		{name: "a safetensors file larger than the machine, sparse, with an honest header", setup: func(t *testing.T, dir string) []string {
			avail, ok := hostmem.Available()
			if !ok {
				t.Skip("the memory available is unknown here")
			}
			elems := (avail + 1<<30) / 4
			hdr := fmt.Sprintf(`{"w":{"dtype":"F32","shape":[%d],"data_offsets":[0,%d]}}`, elems, 4*elems)
			hdr += strings.Repeat(" ", (8-len(hdr)%8)%8)
			f, err := os.Create(filepath.Join(dir, "big.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			enc.Write(f, enc.LittleEndian, uint64(len(hdr)))
			f.WriteString(hdr)
			if err := f.Truncate(int64(8+len(hdr)) + 4*elems); err != nil {
				t.Skipf("no sparse file here: %v", err)
			}
			f.Close()
			return script(`const { io } = require("zeroeng");
io.loadSafetensors("big.safetensors");`)(t, dir)
		}, want: []string{"big.safetensors", "of memory available"}},
		{name: "a recursion without end", setup: script(`function f(n) { return f(n + 1) + 1; }
f(0);`), want: []string{"s.js:1:", "maximum call stack size exceeded"}},
		{name: "a hook time limit that is not a number", setup: script(`const { nn, hooks } = require("zeroeng");
nn.parallel.DistributedDataParallel(nn.Linear(2, 2)).registerCommHook(hooks.wasm("x.wasm", { timeoutMs: NaN }));`),
			want: []string{"timeoutMs must be a number of milliseconds", "got NaN"}},
		{name: "a module with a start function", setup: func(t *testing.T, dir string) []string {
			os.WriteFile(filepath.Join(dir, "start.wasm"), hookbuild.WAT(t, `(module (memory (export "memory") 1)
  (func (export "zeroeng_hook_abi_v1")) (func (export "on_bucket") (param i32) (result i32) (i32.const 0))
  (func $spin (loop $l (br $l))) (start $spin))`), 0o644)
			return []string{"hook", "check", "start.wasm"}
		}, want: []string{"has a start function"}},
		{name: "a memory bomb", setup: func(t *testing.T, dir string) []string {
			os.WriteFile(filepath.Join(dir, "bomb.wasm"), hookbuild.WAT(t, `(module (memory (export "memory") 1)
  (func (export "zeroeng_hook_abi_v1"))
  (func (export "on_bucket") (param i32) (result i32)
    (loop $more (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) unreachable))`), 0o644)
			writeFile(t, filepath.Join(dir, "s.js"), `const { tensor, nn } = require("zeroeng");
const model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2));
model.forward(tensor.ones([2, 4])).sum().backward();`)
			return []string{"run", "--nproc", "2", "--hook-memory-mb", "64", "--hook", "bomb.wasm", "s.js"}
		}, want: []string{"bomb.wasm: on_bucket", "of its 64 MiB limit"}},
		{name: "guest log lines that drive the terminal", setup: func(t *testing.T, dir string) []string {
			os.WriteFile(filepath.Join(dir, "esc.wasm"), hookbuild.WAT(t, `(module
  (import "zeroeng" "log" (func $log (param i32 i32) (result i32)))
  (import "zeroeng" "all_reduce" (func $all_reduce (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\1b[2J\00cleared")
  (func (export "zeroeng_hook_abi_v1"))
  (func (export "on_bucket") (param $b i32) (result i32)
    (drop (call $log (i32.const 0) (i32.const 12)))
    (call $all_reduce (local.get $b) (i32.const 0))))`), 0o644)
			writeFile(t, filepath.Join(dir, "s.js"), `const { tensor, nn } = require("zeroeng");
const model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2));
model.forward(tensor.ones([2, 4])).sum().backward();`)
			return []string{"run", "--hook", "esc.wasm", "s.js"}
		}, ok: true, want: []string{`esc.wasm: \x1b[2J\x00cleared`}, deny: []string{"\x1b[2J"}},
		{name: "a checkpoint whose manifest lists no files", setup: func(t *testing.T, dir string) []string {
			writeFile(t, filepath.Join(dir, "s.js"), `const { nn, checkpoint } = require("zeroeng");
checkpoint.Manager("ckpt", { state: { model: nn.Linear(2, 2) } }).save(1, { force: true });`)
			if r := zeroeng(t, dir, nil, "run", "s.js"); r.code != 0 {
				t.Fatalf("saving: %s", r.stderr)
			}
			manifest := filepath.Join(dir, "ckpt", "step-00000001", "manifest.json")
			b, _ := os.ReadFile(manifest)
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m["files"] = []any{}
			b, _ = json.Marshal(m)
			os.WriteFile(manifest, b, 0o644)
			return []string{"checkpoint", "verify", "ckpt"}
		}, want: []string{`lists no file model.safetensors, which module "model" needs`}},
		{name: "process.exit(0) on one rank mid-training", setup: script(`const { tensor, dist } = require("zeroeng");
if (dist.rank === 1) process.exit(0);
for (let i = 0; i < 3; i++) dist.allReduce(tensor.ones([2])).wait();`, "--nproc", "2"),
			want: []string{"rank 1 ended its program without calling allReduce"}},
		// Numbers that size what the host allocates, and options of the
		// wrong type.
		{name: "a batch size larger than the dataset", setup: script(`const { tensor, data } = require("zeroeng");
const ds = data.TensorDataset(tensor.arange(10));
for (const [x] of data.DataLoader(ds, { batchSize: 1e12 })) console.log("batch of", x.shape[0]);`),
			ok: true, want: []string{"batch of 10"}},
		{name: "a dataset too long to shuffle", setup: script(`const { data } = require("zeroeng");
const ds = { length: 1e15, get(i) { return i; } };
for (const x of data.DataLoader(ds, { batchSize: 4, shuffle: true })) break;`),
			want: []string{"s.js:3:", "shuffle: the permutation of a dataset of 1000000000000000 samples needs 7.1 PiB"}, deny: []string{"internal error"}},
		{name: "a batch too large for the memory", setup: script(`const { data } = require("zeroeng");
const ds = { length: 1e15, get(i) { return i; } };
for (const x of data.DataLoader(ds, { batchSize: 1e12 })) break;`),
			want: []string{"s.js:3:", "a batch of 1000000000000 samples (batchSize 1000000000000) needs"}},
		{name: "a permutation larger than the machine", setup: func(t *testing.T, dir string) []string {
			avail, ok := hostmem.Available()
			if !ok || avail >= 8e11 {
				t.Skip("the memory available is unknown here, or 800 GB")
			}
			return script(`const { tensor } = require("zeroeng");
tensor.randperm(1e11);`)(t, dir)
		}, want: []string{"s.js:2:", "tensor.randperm: a permutation of 100000000000 values needs 745.1 GiB, more than the"}},
		{name: "an array whose length holds nothing", setup: script(`const { tensor } = require("zeroeng");
const a = []; a.length = 2 ** 32 - 1;
tensor.ones([2]).add(a);`), want: []string{"s.js:3:", "tensor.add: argument must be a number, got an array"}},
		{name: "an integer option as a string", setup: script(`const { tensor, data } = require("zeroeng");
data.DataLoader(data.TensorDataset(tensor.arange(10)), { batchSize: "3" });`),
			want: []string{"s.js:2:", `option batchSize must be an integer, got a string ("3")`}},
		{name: "a boolean option as a string", setup: script(`const { amp } = require("zeroeng");
amp.autocast({ enabled: "no" }, () => 1);`),
			want: []string{"s.js:2:", `option enabled must be a boolean (true or false), got a string ("no")`}},
		{name: "a negative --max-memory", setup: script(`console.log("the script ran");`, "--max-memory", "-1"),
			want: []string{`--max-memory: size "-1" is negative`}, deny: []string{"unknown unit", "the script ran"}},
		{name: "a loop that keeps every tensor", setup: script(`const { tensor, nn } = require("zeroeng");
const model = nn.Linear(64, 64);
for (let i = 0; i < 100000; i++) tensor.noGrad(() => model.forward(tensor.randn([256, 64])));`, "--max-memory", "16MiB"),
			want: []string{"s.js:3:", "out of memory", "tensors made outside any tensor.scope before the first backward() are alive",
				`run its body in tensor.scope(() => ...) or give them back with t.release(): see "Tensor lifetimes" in the README`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := c.setup(t, dir)
			limit := c.limit
			if limit == 0 {
				limit = 20 * time.Second
			}
			r, timedOut := zeroengWithin(t, limit, dir, c.env, args...)
			if timedOut {
				t.Fatalf("still running after %v\n%s", limit, r.stderr)
			}
			if c.ok != (r.code == 0) {
				t.Errorf("status %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			checkHostileResult(t, r, c.want, c.deny)
		})
	}
}

// TestStrangerAtTheStore: a process on 127.0.0.1 without the job's
// secret connects to rank 0's rendezvous store while it waits for rank 1,
// writes the job's failure key and tries to claim rank 1; the job then
// starts anyway when the real rank 1 arrives, and succeeds.
func TestStrangerAtTheStore(t *testing.T) {
	dir := scriptDir(t, map[string]string{"s.js": `const { tensor, dist } = require("zeroeng");
console.log("rank", dist.rank, "of", dist.worldSize);`})
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	env := func(rank int) []string {
		return []string{"RANK=" + strconv.Itoa(rank), "WORLD_SIZE=2", "LOCAL_RANK=" + strconv.Itoa(rank), "LOCAL_WORLD_SIZE=2",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port), "ZEROENG_JOB_TOKEN=the-job-secret-0123456789"}
	}
	s0 := start(t, dir, env(0), "run", "s.js")
	s0.drain()
	// The stranger: a hello, then the failure key and a rank claim, on
	// connections of its own.
	var conn net.Conn
	for i := 0; i < 100; i++ {
		if conn, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("rank 0 serves no store: %v", err)
	}
	hello := frameBytes(1, []byte("zeroeng-rendezvous"), []byte{2})
	for _, attack := range [][]byte{
		append(hello, frameBytes(2, []byte("failed"), []byte("killed by a stranger"))...),
		frameBytes(2, []byte("rdzv/rank/1"), []byte(`{"rank":1}`)),
	} {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		c.Write(attack)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		var buf [4096]byte
		for {
			if _, err := c.Read(buf[:]); err != nil {
				break
			}
		}
		c.Close()
	}
	conn.Close()
	r1, timedOut := zeroengWithin(t, 30*time.Second, dir, env(1), "run", "s.js")
	if timedOut || r1.code != 0 {
		t.Fatalf("rank 1: status %d (timed out: %v)\n%s", r1.code, timedOut, r1.stderr)
	}
	if err := s0.cmd.Wait(); err != nil {
		t.Fatalf("rank 0: %v\n%s", err, s0.stderr)
	}
	if strings.Contains(s0.stderr.String(), "killed by a stranger") {
		t.Errorf("the stranger's failure key reached rank 0:\n%s", s0.stderr)
	}
	// Rank 0 reports at exit what its store refused.
	if !strings.Contains(s0.stderr.String(), "the rendezvous store refused") {
		t.Errorf("rank 0 did not report the refused connections:\n%s", s0.stderr)
	}
	checkHostileResult(t, r1, nil, []string{"the-job-secret-0123456789"})
}

// frameBytes encodes one rendezvous frame (engine/rendezvous/frame.go)
// as a stranger would write it by hand.
func frameBytes(op byte, fields ...[]byte) []byte {
	body := []byte{op, 0, 0, 0, 1}
	for _, f := range fields {
		body = enc.BigEndian.AppendUint32(body, uint32(len(f)))
		body = append(body, f...)
	}
	return append(enc.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// checkHostileResult: the output has each of want, none of deny, and no
// Go trace.
func checkHostileResult(t *testing.T, r result, want, deny []string) {
	t.Helper()
	out := r.stdout + r.stderr
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the output lacks %q:\n%s", w, out)
		}
	}
	for _, d := range deny {
		if strings.Contains(out, d) {
			t.Errorf("the output shows %q:\n%s", d, out)
		}
	}
	for _, trace := range []string{"goroutine ", "panic:", "fatal error:", "runtime.", ".go:"} {
		if strings.Contains(out, trace) {
			t.Errorf("the output has a Go trace (%q):\n%s", trace, out)
			break
		}
	}
}

// zeroengWithin runs the binary as zeroeng does, killing it after limit.
func zeroengWithin(t *testing.T, limit time.Duration, dir string, env []string, args ...string) (result, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	}
	return r, ctx.Err() != nil
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
}
