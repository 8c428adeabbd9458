package script

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dop251/goja"
)

// How often a progress bar may print: a terminal line is redrawn at most
// ten times a second; a log (output that is not a terminal) gets a plain
// line at most every five seconds, and one at done().
const (
	redrawEvery = 100 * time.Millisecond
	logEvery    = 5 * time.Second
)

// progressModule is require("zeroeng").progress:
//
//	const bar = progress.bar({ total: steps, label: "epoch 1" });
//	bar.update(step, { loss, samples }); // steps done so far, samples seen so far
//	bar.update(step, { loss, samples, mfu: "31.2%" }); // other fields follow the loss: "mfu 31.2%"
//	bar.done();
//
// Fields other than loss and samples are shown as "name value", in the
// order given: strings as they are, numbers with four significant digits,
// one-element tensors by their value.
// Only rank 0 prints, on stderr, so that the script's own output on stdout
// stays clean. On other ranks and with --quiet the methods do nothing.
func (r *Runtime) progressModule() *goja.Object {
	m := r.vm.NewObject()
	r.method(m, "bar", func(call goja.FunctionCall) goja.Value {
		const fn = "progress.bar"
		o := r.optionsOf(fn, call, 0, "total", "label")
		if !isMissing(call.Argument(0)) && o == nil {
			r.throwf("%s: expects an options object ({ total, label }), got %s", fn, describe(call.Argument(0)))
		}
		b := &progressBar{
			r:           r,
			w:           r.opts.Stderr,
			label:       optString(o, "label", ""),
			total:       r.optInt(fn, o, "total", 0),
			interactive: r.opts.Interactive,
			start:       time.Now(),
		}
		b.last = b.start
		b.every = logEvery
		if b.interactive {
			b.every = redrawEvery
		}
		return b.object(r.opts.Quiet || r.opts.Rank != 0)
	})
	return m
}

// progressBar is one bar. update only stores its arguments and looks at the
// clock: it reads the metrics and formats a line only when one is printed,
// so that a training loop can call it every step at no measurable cost.
type progressBar struct {
	r           *Runtime
	w           io.Writer
	label       string
	total       int
	interactive bool
	every       time.Duration

	start, last time.Time
	n, lastN    int64
	metrics     goja.Value // the latest update's { loss, samples }
	samples     float64    // samples at the last print (-1: not given)
	rate        float64    // smoothed samples (or steps) per second
	stepRate    float64    // smoothed steps per second, for the ETA
	printed     bool       // a line was printed (the rates are primed)
	finished    bool
}

// object is the bar as the script sees it; silent bars have methods that
// do nothing.
func (b *progressBar) object(silent bool) *goja.Object {
	r := b.r
	obj := r.vm.NewObject()
	if silent {
		noop := func(goja.FunctionCall) goja.Value { return goja.Undefined() }
		r.method(obj, "update", noop)
		r.method(obj, "done", noop)
		return obj
	}
	r.method(obj, "update", func(call goja.FunctionCall) goja.Value {
		if b.finished {
			return goja.Undefined()
		}
		b.n = call.Argument(0).ToInteger()
		b.metrics = call.Argument(1)
		if now := time.Now(); now.Sub(b.last) >= b.every {
			b.print(now, false)
		}
		return goja.Undefined()
	})
	r.method(obj, "done", func(call goja.FunctionCall) goja.Value {
		if b.finished {
			return goja.Undefined()
		}
		if len(call.Arguments) > 0 { // done(n, metrics) is a last update
			b.n = call.Argument(0).ToInteger()
			b.metrics = call.Argument(1)
		}
		b.print(time.Now(), true)
		b.finished = true
		return goja.Undefined()
	})
	return obj
}

// readMetrics returns the loss (NaN when absent or no longer readable),
// samples (-1 when absent) and the other fields, formatted as " name
// value", of the latest update.
func (b *progressBar) readMetrics() (loss, samples float64, extra string) {
	loss, samples = math.NaN(), -1
	o, ok := b.metrics.(*goja.Object)
	if !ok || b.metrics == nil {
		return
	}
	if v := o.Get("loss"); v != nil && !isMissing(v) {
		loss = barNumber(v)
	}
	if v := o.Get("samples"); v != nil && !isMissing(v) {
		samples = v.ToFloat()
	}
	var s strings.Builder
	for _, k := range o.Keys() {
		if k == "loss" || k == "samples" {
			continue
		}
		v := o.Get(k)
		if v == nil || isMissing(v) {
			continue
		}
		var text string
		if x, ok := stringOf(v); ok {
			text = x
		} else if x := barNumber(v); !math.IsNaN(x) {
			text = strconv.FormatFloat(x, 'g', 4, 64)
		} else {
			continue
		}
		s.WriteString("  " + k + " " + text)
	}
	return loss, samples, s.String()
}

// barNumber reads a number or a one-element tensor; NaN for anything
// else. A tensor may have been released since the update (a scope ended):
// the bar then leaves it out rather than failing the script.
func barNumber(v goja.Value) float64 {
	switch x := v.Export().(type) {
	case *jsTensor:
		if x.released == "" && !x.t.Released() && x.t.Numel() == 1 {
			if f, err := x.t.Item(); err == nil {
				return f
			}
		}
	case float64:
		return x
	case int64:
		return float64(x)
	}
	return math.NaN()
}

// print writes the bar's state: a redrawn line on a terminal, a plain line
// otherwise. final adds the total time and ends the line.
func (b *progressBar) print(now time.Time, final bool) {
	loss, samples, extra := b.readMetrics()
	dt := now.Sub(b.last).Seconds()
	if dt > 0 {
		// Rates over the interval since the last print, smoothed so that a
		// terminal line redrawn ten times a second does not flicker.
		steps := float64(b.n-b.lastN) / dt
		cur := steps
		if samples >= 0 {
			prev := b.samples
			if !b.printed || prev < 0 {
				prev = 0
			}
			cur = (samples - prev) / dt
		}
		if b.printed && b.interactive {
			b.rate = 0.7*b.rate + 0.3*cur
			b.stepRate = 0.7*b.stepRate + 0.3*steps
		} else {
			b.rate, b.stepRate = cur, steps
		}
	}
	elapsed := now.Sub(b.start)
	if final && elapsed > 0 {
		// The closing line reports averages over the whole bar.
		b.stepRate = float64(b.n) / elapsed.Seconds()
		b.rate = b.stepRate
		if samples >= 0 {
			b.rate = samples / elapsed.Seconds()
		}
	}
	b.last, b.lastN, b.samples, b.printed = now, b.n, samples, true

	var s strings.Builder
	if b.interactive {
		s.WriteString("\r")
	}
	if b.label != "" {
		s.WriteString(b.label)
		s.WriteString("  ")
	}
	if b.total > 0 {
		frac := min(1, max(0, float64(b.n)/float64(b.total)))
		if b.interactive {
			const width = 20
			full := int(frac * width)
			s.WriteString("[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "] ")
		}
		fmt.Fprintf(&s, "%d/%d %3.0f%%", b.n, b.total, 100*frac)
	} else {
		fmt.Fprintf(&s, "%d", b.n)
	}
	if !math.IsNaN(loss) {
		s.WriteString("  loss ")
		s.WriteString(strconv.FormatFloat(loss, 'g', 4, 64))
	}
	s.WriteString(extra)
	if b.rate > 0 {
		unit := "steps/s"
		if samples >= 0 {
			unit = "samples/s"
		}
		s.WriteString("  " + formatRate(b.rate) + " " + unit)
	}
	switch {
	case final:
		s.WriteString("  " + formatDuration(elapsed))
	case b.total > 0 && b.stepRate > 0:
		s.WriteString("  ETA " + formatDuration(time.Duration(float64(int64(b.total)-b.n)/b.stepRate*float64(time.Second))))
	}
	if b.interactive {
		s.WriteString("\x1b[K") // clear what a longer previous line left
		if final {
			s.WriteString("\n")
		}
	} else {
		s.WriteString("\n")
	}
	outputMu.Lock()
	if b.interactive {
		// The bar is the status line: redrawn in place, and cleared and
		// drawn again below whatever else is printed while it is up.
		io.WriteString(b.w, s.String())
		statusLine.w, statusLine.text, statusLine.owner = b.w, s.String(), b.r
		if final {
			statusLine.w, statusLine.owner = nil, nil
		}
	} else {
		writeOutput(b.w, s.String())
	}
	outputMu.Unlock()
}

func formatRate(x float64) string {
	if x >= 100 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}

// formatDuration prints 0.25s under a second, 4.2s under a minute, then
// m:ss and h:mm:ss.
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Second {
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	}
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	s := int64(d.Round(time.Second) / time.Second)
	if s < 3600 {
		return fmt.Sprintf("%d:%02d", s/60, s%60)
	}
	return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
}
