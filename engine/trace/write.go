package trace

import (
	"bufio"
	"io"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/zeroeng/zeroeng/internal/fileio"
)

// WriteTo writes the trace in the Chrome trace event format (the JSON
// object form): metadata events naming each rank's process ("rank N") and
// its lanes' threads, then one complete event ("ph":"X") per interval with
// ts and dur in microseconds, pid the rank and tid the lane. When events
// were dropped at the cap, a global instant event at the moment the cap
// was reached says how many, and so does "otherData".
func (r *Recorder) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<16)
	if r == nil {
		bw.WriteString(`{"traceEvents":[]}` + "\n")
		err := bw.Flush()
		return cw.n, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := make([]byte, 0, 256)
	b = append(b, `{"displayTimeUnit":"ms","otherData":{"max_events":`...)
	b = strconv.AppendInt(b, int64(r.max), 10)
	b = append(b, `,"events":`...)
	b = strconv.AppendInt(b, int64(r.n), 10)
	b = append(b, `,"dropped_events":`...)
	b = strconv.AppendInt(b, r.dropped, 10)
	for _, kv := range r.info {
		b = append(b, ',')
		b = appendJSONString(b, kv.key)
		b = append(b, ':')
		b = append(b, kv.val...)
	}
	b = append(b, "},\n\"traceEvents\":[\n"...)
	bw.Write(b)

	first := true
	emit := func(b []byte) {
		if !first {
			bw.WriteString(",\n")
		}
		first = false
		bw.Write(b)
	}
	ranks := slices.Clone(r.rankSeen)
	slices.Sort(ranks)
	for _, rank := range ranks {
		b = b[:0]
		b = append(b, `{"name":"process_name","ph":"M","pid":`...)
		b = strconv.AppendInt(b, int64(rank), 10)
		b = append(b, `,"tid":0,"args":{"name":"rank `...)
		b = strconv.AppendInt(b, int64(rank), 10)
		b = append(b, `"}}`...)
		emit(b)
		b = b[:0]
		b = append(b, `{"name":"process_sort_index","ph":"M","pid":`...)
		b = strconv.AppendInt(b, int64(rank), 10)
		b = append(b, `,"tid":0,"args":{"sort_index":`...)
		b = strconv.AppendInt(b, int64(rank), 10)
		b = append(b, `}}`...)
		emit(b)
		var lanes []Lane
		for l := range r.lanesOf[rank] {
			lanes = append(lanes, l)
		}
		slices.Sort(lanes)
		for _, l := range lanes {
			b = b[:0]
			b = append(b, `{"name":"thread_name","ph":"M","pid":`...)
			b = strconv.AppendInt(b, int64(rank), 10)
			b = append(b, `,"tid":`...)
			b = strconv.AppendInt(b, int64(l), 10)
			b = append(b, `,"args":{"name":`...)
			b = appendJSONString(b, l.String())
			b = append(b, `}}`...)
			emit(b)
			b = b[:0]
			b = append(b, `{"name":"thread_sort_index","ph":"M","pid":`...)
			b = strconv.AppendInt(b, int64(rank), 10)
			b = append(b, `,"tid":`...)
			b = strconv.AppendInt(b, int64(l), 10)
			b = append(b, `,"args":{"sort_index":`...)
			b = strconv.AppendInt(b, int64(l), 10)
			b = append(b, `}}`...)
			emit(b)
		}
	}
	for _, e := range r.sortedLocked() {
		b = b[:0]
		b = append(b, `{"name":`...)
		b = appendJSONString(b, e.name)
		b = append(b, `,"cat":`...)
		b = appendJSONString(b, e.lane.String())
		b = append(b, `,"ph":"X","ts":`...)
		b = appendMicros(b, e.ts)
		b = append(b, `,"dur":`...)
		b = appendMicros(b, e.dur)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(e.rank), 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, int64(e.lane), 10)
		if e.args[0].Key != "" || e.args[1].Key != "" {
			b = append(b, `,"args":{`...)
			sep := false
			for _, a := range e.args {
				if a.Key == "" {
					continue
				}
				if sep {
					b = append(b, ',')
				}
				sep = true
				b = appendJSONString(b, a.Key)
				b = append(b, ':')
				b = strconv.AppendInt(b, a.Val, 10)
			}
			b = append(b, '}')
		}
		b = append(b, '}')
		emit(b)
	}
	if r.dropped > 0 {
		b = b[:0]
		b = append(b, `{"name":"trace truncated: `...)
		b = strconv.AppendInt(b, r.dropped, 10)
		b = append(b, ` later events dropped (the trace keeps at most `...)
		b = strconv.AppendInt(b, int64(r.max), 10)
		b = append(b, ` events)","ph":"i","s":"g","ts":`...)
		b = appendMicros(b, r.fullAt)
		b = append(b, `,"pid":0,"tid":0,"args":{"dropped_events":`...)
		b = strconv.AppendInt(b, r.dropped, 10)
		b = append(b, `,"max_events":`...)
		b = strconv.AppendInt(b, int64(r.max), 10)
		b = append(b, `}}`...)
		emit(b)
	}
	bw.WriteString("\n]}\n")
	err := bw.Flush()
	return cw.n, err
}

// WriteFile writes the trace to path atomically: a reader never sees half
// a trace, and a failed write leaves the previous file.
func (r *Recorder) WriteFile(path string) error {
	return fileio.WriteAtomic("trace", path, func(f *os.File) error {
		_, err := r.WriteTo(f)
		return err
	})
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// appendMicros writes ns nanoseconds as microseconds with three decimals.
func appendMicros(b []byte, ns int64) []byte {
	if ns < 0 {
		ns = 0
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	frac := ns % 1000
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return b
}

// appendJSONString writes s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				switch c {
				case '\n':
					b = append(b, '\\', 'n')
				case '\t':
					b = append(b, '\\', 't')
				case '\r':
					b = append(b, '\\', 'r')
				default:
					b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
				}
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
