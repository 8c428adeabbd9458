package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/trace"
)

// --trace writes one Chrome trace for all ranks when the job ends, also
// when it fails; ZEROENG_TRACE does the same.
func TestTraceFlag(t *testing.T) {
	dir := scriptDir(t, map[string]string{
		"ok.js": `const { tensor, nn, optim, dist, trace } = require("zeroeng");
const net = nn.parallel.DistributedDataParallel(nn.Linear(8, 8));
const opt = optim.SGD(net.parameters(), { lr: 0.1 });
for (let i = 0; i < 2; i++) {
  trace.span("step", () => { opt.zeroGrad(); net.forward(tensor.ones([4, 8])).sum().backward(); opt.step(); });
}
`,
		"fail.js": `const { tensor, dist, trace } = require("zeroeng");
trace.span("before the failure", () => dist.allReduce(tensor.ones([3])).wait());
if (dist.rank === 1) throw new Error("boom");
dist.barrier().wait();
`,
	})
	out := t.TempDir()
	read := func(path string) *trace.File {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := trace.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Check(); err != nil {
			t.Fatal(err)
		}
		return f
	}

	path := filepath.Join(out, "ok.json")
	if r := zeroeng(t, dir, nil, "run", "--quiet", "--nproc", "2", "--trace", path, "ok.js"); r.code != 0 {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	f := read(path)
	if f.OtherData["status"] != "ok" || f.OtherData["ranks"] != 2.0 || f.OtherData["script"] != "ok.js" {
		t.Errorf("otherData %v", f.OtherData)
	}
	for rank := range 2 {
		for _, c := range []struct {
			lane, name string
			n          int
		}{{"user", "step", 2}, {"compute", "forward", 2}, {"compute", "backward", 2}, {"hook", "comm hook", 2}, {"optimizer", "optimizer step", 2}, {"comm", "all_reduce", 2}, {"comm", "broadcast", 2}} {
			if got := len(f.Intervals(rank, c.lane, c.name)); got != c.n {
				t.Errorf("rank %d: %d %q intervals on lane %s, want %d", rank, got, c.name, c.lane, c.n)
			}
		}
	}

	path = filepath.Join(out, "fail.json")
	r := zeroeng(t, dir, []string{"ZEROENG_TRACE=" + path, "ZEROENG_NPROC=2"}, "run", "fail.js")
	if r.code != 1 || !strings.Contains(r.stderr, "boom") {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	f = read(path)
	if f.OtherData["status"] != "error" || len(f.Intervals(0, "user", "before the failure")) != 1 || len(f.Intervals(1, "comm", "all_reduce")) != 1 {
		t.Errorf("the failed job's trace: %v, %d events", f.OtherData, len(f.Events))
	}

	r = zeroeng(t, dir, nil, "run", "--trace", filepath.Join(out, "missing", "t.json"), "ok.js")
	if r.code != 2 || !strings.Contains(r.stderr, "--trace") {
		t.Errorf("a trace in a missing folder: status %d\n%s", r.code, r.stderr)
	}
}
