package script

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestMetricsLog(t *testing.T) {
	var m bytes.Buffer
	out, err := runScript(t, t.TempDir(), "m.js", `const { metrics, tensor } = require("zeroeng");
console.log(metrics.enabled);
metrics.log({ step: 3, loss: tensor.fromArray([[0.25]]), lr: 1e-3, name: "warm \"up\"", ok: false, none: null, skipped: undefined });
metrics.log({ big: 12345678901, acc: tensor.fromArray([0.1], "float64"), n: tensor.fromArray([7]), bad: tensor.fromArray([0]).log() });
`, Options{Rank: 2, WorldSize: 3, Metrics: &m})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out != "true\n" {
		t.Errorf("metrics.enabled printed %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(m.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), m.String())
	}
	// The fields keep the script's order after rank and time.
	const want0 = `,"step":3,"loss":0.25,"lr":0.001,"name":"warm \"up\"","ok":false,"none":null}`
	if !strings.HasPrefix(lines[0], `{"rank":2,"time":`) || !strings.HasSuffix(lines[0], want0) {
		t.Errorf("line %s, want {\"rank\":2,\"time\":…%s", lines[0], want0)
	}
	const want1 = `,"big":12345678901,"acc":0.1,"n":7,"bad":"-Infinity"}`
	if !strings.HasSuffix(lines[1], want1) {
		t.Errorf("line %s, want …%s", lines[1], want1)
	}
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Errorf("not JSON: %s: %v", l, err)
			continue
		}
		ts, ok := v["time"].(float64)
		if now := float64(time.Now().Unix()); !ok || ts < now-60 || ts > now+60 {
			t.Errorf("time %v is not the current Unix time in seconds", v["time"])
		}
	}
}

func TestMetricsLogErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`metrics.log({ w: tensor.ones([2, 3]) })`, `metrics.log: field "w" is a tensor of shape [2 3]; only one-element tensors can be logged`},
		{`metrics.log({ xs: [1, 2] })`, `metrics.log: field "xs" must be a number, a string, a boolean or a one-element tensor, got an array`},
		{`metrics.log({ o: { a: 1 } })`, `field "o" must be a number`},
		{`metrics.log(3)`, `metrics.log: expects an object of fields`},
		{`metrics.log({ rank: 1 })`, `the field "rank" is set by zeroeng`},
		{`const t = tensor.ones([1]); t.release(); metrics.log({ t })`, `the tensor was released`},
	} {
		var m bytes.Buffer
		_, err := runScript(t, t.TempDir(), "bad.js", "const { metrics, tensor } = require('zeroeng');\n"+tc.src+";\n", Options{Metrics: &m})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.js:2:") {
			t.Errorf("%s: error %v, want %q at bad.js:2", tc.src, err, tc.want)
		}
		if m.Len() != 0 {
			t.Errorf("%s: wrote %q", tc.src, m.String())
		}
	}
}

// Without a metrics file, metrics.log does nothing, not even check its
// argument: scripts log unconditionally at no cost.
func TestMetricsLogDisabled(t *testing.T) {
	out, err := runScript(t, t.TempDir(), "m.js", `const { metrics, tensor } = require("zeroeng");
console.log(metrics.enabled);
metrics.log({ loss: tensor.ones([2]) });
`, Options{})
	if err != nil || out != "false\n" {
		t.Errorf("output %q, error %v", out, err)
	}
}

func TestMetricsSummary(t *testing.T) {
	r, err := New(Options{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.RunString("s.js", "require('zeroeng').tensor.ones([256]).keep()"); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	line := r.MetricsSummary(1500*time.Millisecond, "ok")
	if err := json.Unmarshal(line, &v); err != nil || !bytes.HasSuffix(line, []byte("}\n")) {
		t.Fatalf("%s: %v", line, err)
	}
	if v["rank"] != 1.0 || v["event"] != "end" || v["status"] != "ok" || v["elapsed_s"] != 1.5 ||
		v["live_tensors"] != 1.0 || v["live_bytes"].(float64) < 1024 || v["peak_bytes"].(float64) < 1024 {
		t.Errorf("summary %s", line)
	}
}

// TestLineWriter: lines written by many goroutines arrive whole.
func TestLineWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewLineWriter(&b)
	done := make(chan bool)
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; i < 200; i++ {
				w.Write([]byte(strings.Repeat("x", 100) + "\n"))
			}
			done <- true
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if len(l) != 100 {
			t.Fatalf("a line of %d bytes", len(l))
		}
	}
}
