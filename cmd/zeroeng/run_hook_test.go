package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// configurableHook is a comm hook that takes a configuration and averages
// the gradients.
const configurableHook = `(module
  (import "zeroeng" "all_reduce" (func $all_reduce (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "zeroeng_hook_abi_v1"))
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "configure") (param i32 i32) (result i32) (i32.const 0))
  (func (export "on_bucket") (param $b i32) (result i32)
    (call $all_reduce (local.get $b) (i32.const 0))))`

// hookLines are the lines of stderr that name the comm hook.
func hookLines(stderr string) []string {
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "comm hook") {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestRunNamesHook: a run with --hook says, once for the job, which hook
// reduces the gradients and with what configuration.
func TestRunNamesHook(t *testing.T) {
	dir := scriptDir(t, map[string]string{
		"ddp.js": `const { tensor, nn } = require("zeroeng");
const model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2));
model.forward(tensor.ones([2, 4])).sum().backward();
console.log("ok");`,
		"plain.js": `console.log("ok");`,
	})
	if err := os.WriteFile(filepath.Join(dir, "avg.wasm"), hookbuild.WAT(t, configurableHook), 0o644); err != nil {
		t.Fatal(err)
	}
	const uses = " reduces the gradients of every DistributedDataParallel"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--nproc", "2", "--hook", "avg.wasm", "ddp.js"}, "zeroeng: comm hook avg.wasm (no config)" + uses},
		{[]string{"run", "--quiet", "--nproc", "2", "--hook", "avg.wasm", "--hook-config", `{"ratio":0.5}`, "ddp.js"}, `zeroeng: comm hook avg.wasm (config {"ratio":0.5})` + uses},
		// A configuration that would drive the terminal is quoted.
		{[]string{"run", "--hook", "avg.wasm", "--hook-config", "a\x1b[2Jb", "ddp.js"}, `zeroeng: comm hook avg.wasm (config "a\x1b[2Jb")` + uses},
		// A job of processes: rank 0 says it, for all.
		{[]string{"launch", "--nproc-per-node", "2", "--spawn", "direct", "--hook", "avg.wasm", "plain.js"}, "[0] zeroeng: comm hook avg.wasm (no config)" + uses},
	} {
		r := zeroeng(t, dir, nil, c.args...)
		if r.code != 0 {
			t.Errorf("%q: status %d\n%s", c.args, r.code, r.stderr)
			continue
		}
		if got := hookLines(r.stderr); len(got) != 1 || got[0] != c.want {
			t.Errorf("%q: the lines naming the hook are %q, want %q\n%s", c.args, got, c.want, r.stderr)
		}
	}

	r := zeroeng(t, dir, nil, "run", "--log-format", "json", "--hook", "avg.wasm", "--hook-config", "k=1", "ddp.js")
	got := hookLines(r.stderr)
	var m struct{ Level, Msg, Hook string }
	if r.code != 0 || len(got) != 1 || json.Unmarshal([]byte(got[0]), &m) != nil {
		t.Fatalf("--log-format json: status %d, lines %q\n%s", r.code, got, r.stderr)
	}
	if m.Level != "info" || m.Hook != "avg.wasm" || !strings.Contains(m.Msg, "comm hook avg.wasm (config k=1)") {
		t.Errorf("--log-format json: %s", got[0])
	}
	var attrs map[string]any
	json.Unmarshal([]byte(got[0]), &attrs)
	if attrs["hook_config"] != "k=1" {
		t.Errorf("--log-format json: hook_config %v, want k=1: %s", attrs["hook_config"], got[0])
	}
}
