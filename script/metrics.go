package script

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/dop251/goja"
)

// metricsModule is require("zeroeng").metrics: metrics.log({ step, loss })
// appends one JSON object per call to the job's metrics file (--metrics),
// {"rank":0,"time":1726000000.123,"step":10,"loss":0.52}, with the fields
// in the order the script wrote them. Without a metrics file it does
// nothing, so that scripts can log unconditionally at no cost.
func (r *Runtime) metricsModule() *goja.Object {
	m := r.vm.NewObject()
	r.fn(m, "log", func(call goja.FunctionCall) goja.Value {
		if r.opts.Metrics == nil {
			return goja.Undefined()
		}
		line := r.metricsLine(call.Argument(0))
		if _, err := r.opts.Metrics.Write(line); err != nil {
			r.throwf("metrics.log: %v", err)
		}
		return goja.Undefined()
	})
	must(m.Set("enabled", r.opts.Metrics != nil))
	return m
}

// metricsLine encodes one metrics object as a JSON line.
func (r *Runtime) metricsLine(v goja.Value) []byte {
	const fn = "metrics.log"
	obj, ok := v.(*goja.Object)
	if !ok || r.isTensor(v) || r.isArray(v) {
		r.throwf("%s: expects an object of fields ({ step, loss, ... }), got %s", fn, describe(v))
	}
	var b bytes.Buffer
	b.WriteString(`{"rank":`)
	b.WriteString(strconv.Itoa(r.opts.Rank))
	b.WriteString(`,"time":`)
	b.WriteString(unixSeconds(time.Now()))
	for _, k := range obj.Keys() {
		if k == "rank" || k == "time" {
			r.throwf("%s: the field %q is set by zeroeng; choose another name", fn, k)
		}
		val := obj.Get(k)
		if goja.IsUndefined(val) {
			continue // as JSON.stringify does
		}
		b.WriteByte(',')
		key, _ := json.Marshal(k)
		b.Write(key)
		b.WriteByte(':')
		b.WriteString(r.metricsValue(fn, k, val))
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// metricsValue encodes one field: numbers, strings, booleans, null, and
// tensors of one element (their item()).
func (r *Runtime) metricsValue(fn, key string, v goja.Value) string {
	if goja.IsNull(v) {
		return "null"
	}
	if r.isTensor(v) {
		t := r.unwrap(fn, "field "+strconv.Quote(key), v)
		if t.Numel() != 1 {
			r.throwf("%s: field %q is a tensor of shape %v; only one-element tensors can be logged (reduce it first, e.g. .mean())", fn, key, t.Shape())
		}
		x, err := t.Item()
		if err != nil {
			r.throw(err)
		}
		if t.DType().IsFloat() && t.DType().Size() <= 4 {
			// The shortest text that reads back as the same float32
			// (0.16666667, not 0.1666666716337204).
			return jsonNumber32(x)
		}
		return jsonNumber(x)
	}
	switch x := v.Export().(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return jsonNumber(x)
	case bool:
		return strconv.FormatBool(x)
	case string:
		s, _ := json.Marshal(x)
		return string(s)
	}
	r.throwf("%s: field %q must be a number, a string, a boolean or a one-element tensor, got %s", fn, key, describe(v))
	return ""
}

// jsonNumber writes integral values without a fraction and non-finite
// ones as the strings "NaN", "Infinity" and "-Infinity": JSON has no
// spelling for them, and a diverged loss must stay visible.
func jsonNumber(x float64) string {
	switch {
	case math.IsNaN(x):
		return `"NaN"`
	case math.IsInf(x, 1):
		return `"Infinity"`
	case math.IsInf(x, -1):
		return `"-Infinity"`
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

func jsonNumber32(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return jsonNumber(x)
	}
	return strconv.FormatFloat(x, 'g', -1, 32)
}

// unixSeconds is t as seconds since the Unix epoch with millisecond
// precision, the metrics' "time".
func unixSeconds(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1e3, 'f', 3, 64)
}

// LineWriter serialises whole-line writes to one writer (the metrics file
// that every rank of a job shares), so that lines never interleave.
type LineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewLineWriter wraps w. Each Write call must be one or more whole lines.
func NewLineWriter(w io.Writer) *LineWriter { return &LineWriter{w: w} }

func (l *LineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// MetricsSummary is the line the command writes for each rank when the job
// ends: how long it ran, how it ended and the tensor runtime's memory
// counters (after the script's own tensors were given back, so live_* is
// what the engine still holds and peak_bytes the high-water mark).
func (r *Runtime) MetricsSummary(elapsed time.Duration, status string) []byte {
	s := r.rt.Stats()
	var b bytes.Buffer
	b.WriteString(`{"rank":`)
	b.WriteString(strconv.Itoa(r.opts.Rank))
	b.WriteString(`,"time":`)
	b.WriteString(unixSeconds(time.Now()))
	status, _ = marshalString(status)
	fmt.Fprintf(&b, `,"event":"end","status":%s,"elapsed_s":%.3f`, status, elapsed.Seconds())
	fmt.Fprintf(&b, `,"live_tensors":%d,"live_buffers":%d,"live_bytes":%d,"peak_bytes":%d,"pooled_bytes":%d,"allocs":%d,"reuses":%d}`+"\n",
		s.LiveTensors, s.LiveBuffers, s.LiveBytes, s.PeakBytes, s.PooledBytes, s.Allocs, s.Reuses)
	return b.Bytes()
}

func marshalString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}
