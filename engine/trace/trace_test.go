package trace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A nil recorder does nothing and allocates nothing, so that the engine
// can call it unconditionally.
func TestNilRecorderIsFree(t *testing.T) {
	var r *Recorder
	if r.Enabled() {
		t.Fatal("a nil recorder is enabled")
	}
	allocs := testing.AllocsPerRun(100, func() {
		start := r.Now()
		r.Add(Event{Rank: 1, Lane: Comm, Name: "all_reduce", Start: start, End: r.Now(), Args: [2]Arg{{"bytes", 4096}}})
		r.SetInfo("k", "v")
	})
	if allocs != 0 {
		t.Errorf("a nil recorder allocates %v times per call", allocs)
	}
	if !r.Now().IsZero() {
		t.Error("a nil recorder reads the clock")
	}
	if kept, dropped := r.Len(); kept != 0 || dropped != 0 || r.Events() != nil {
		t.Error("a nil recorder holds events")
	}
	var b bytes.Buffer
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(b.Bytes())
	if err != nil || len(f.Events) != 0 {
		t.Errorf("a nil recorder writes %q (%v)", b.String(), err)
	}
}

func TestLaneNames(t *testing.T) {
	for _, c := range []struct {
		lane Lane
		want string
	}{
		{Compute, "compute"}, {Hook, "hook"}, {Optimizer, "optimizer"}, {Comm, "comm"}, {P2P, "p2p"}, {User, "user"},
		{CommLane(0), "comm"}, {CommLane(1), "comm group 1"}, {CommLane(7), "comm group 7"}, {Lane(-1), "lane -1"},
	} {
		if got := c.lane.String(); got != c.want {
			t.Errorf("lane %d is %q, want %q", int(c.lane), got, c.want)
		}
	}
}

// The file is the Chrome trace event format's JSON object: metadata naming
// each rank's process and lanes, complete events with ts and dur in
// microseconds, pid the rank and tid the lane, sorted by start.
func TestWriteFormat(t *testing.T) {
	r := New(Options{})
	t0 := r.start
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	// Added out of order and from two ranks; the nested one starts with
	// its parent.
	r.Add(Event{Rank: 1, Lane: Comm, Name: "all_reduce", Start: at(30), End: at(45), Args: [2]Arg{{"bytes", 4096}, {"seq", 3}}})
	r.Add(Event{Rank: 0, Lane: Compute, Name: "backward", Start: at(10), End: at(50)})
	r.Add(Event{Rank: 0, Lane: Optimizer, Name: "zero update", Start: at(10), End: at(20), Args: [2]Arg{{}, {"bucket", 2}}})
	r.Add(Event{Rank: 0, Lane: Optimizer, Name: "optimizer step", Start: at(10), End: at(40)})
	r.Add(Event{Rank: 0, Lane: User, Name: "a \"quoted\"\nname\x01", Start: t0.Add(1500 * time.Nanosecond), End: t0.Add(2750 * time.Nanosecond)})
	r.Add(Event{Rank: 0, Lane: Hook, Name: "before the start", Start: t0.Add(-time.Second), End: t0.Add(5 * time.Microsecond)})
	r.Add(Event{Rank: 0, Lane: Hook, Name: "ends before it starts", Start: at(60), End: at(59)})
	r.SetInfo("script", "train.js")
	r.SetInfo("ranks", 2)
	r.SetInfo("ranks", 3) // replaces
	var b bytes.Buffer
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &raw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b.String())
	}
	f, err := Decode(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Error(err)
	}
	if f.OtherData["script"] != "train.js" || f.OtherData["ranks"] != 3.0 || f.OtherData["events"] != 7.0 || f.OtherData["dropped_events"] != 0.0 {
		t.Errorf("otherData %v", f.OtherData)
	}
	var meta []string
	var complete []FileEvent
	for _, e := range f.Events {
		switch e.Phase {
		case "M":
			meta = append(meta, e.Name+" "+strings.TrimSpace(strings.Trim(string(mustJSON(t, e.Args)), "{}")))
		case "X":
			complete = append(complete, e)
		}
	}
	wantMeta := []string{
		`process_name "name":"rank 0"`, `process_sort_index "sort_index":0`,
		`thread_name "name":"compute"`, `thread_sort_index "sort_index":0`,
		`thread_name "name":"hook"`, `thread_sort_index "sort_index":1`,
		`thread_name "name":"optimizer"`, `thread_sort_index "sort_index":2`,
		`thread_name "name":"user"`, `thread_sort_index "sort_index":5`,
		`process_name "name":"rank 1"`, `process_sort_index "sort_index":1`,
		`thread_name "name":"comm"`, `thread_sort_index "sort_index":3`,
	}
	if strings.Join(meta, "\n") != strings.Join(wantMeta, "\n") {
		t.Errorf("metadata\n%s\nwant\n%s", strings.Join(meta, "\n"), strings.Join(wantMeta, "\n"))
	}
	want := []struct {
		name     string
		ts, dur  float64
		pid, tid int
		args     string
	}{
		{"before the start", 0, 5, 0, 1, "null"},
		{"a \"quoted\"\nname\x01", 1.5, 1.25, 0, 5, "null"},
		{"backward", 10, 40, 0, 0, "null"},
		{"optimizer step", 10, 30, 0, 2, "null"},
		{"zero update", 10, 10, 0, 2, `{"bucket":2}`},
		{"all_reduce", 30, 15, 1, 3, `{"bytes":4096,"seq":3}`},
		{"ends before it starts", 60, 0, 0, 1, "null"},
	}
	if len(complete) != len(want) {
		t.Fatalf("%d complete events, want %d:\n%s", len(complete), len(want), b.String())
	}
	for i, w := range want {
		e := complete[i]
		if e.Name != w.name || e.TS != w.ts || e.Dur != w.dur || e.PID != w.pid || e.TID != w.tid || string(mustJSON(t, e.Args)) != w.args {
			t.Errorf("event %d: %q ts %v dur %v pid %d tid %d args %s, want %+v", i, e.Name, e.TS, e.Dur, e.PID, e.TID, mustJSON(t, e.Args), w)
		}
		if e.Cat != Lane(e.TID).String() {
			t.Errorf("event %d: category %q on lane %d", i, e.Cat, e.TID)
		}
	}
	if !strings.Contains(b.String(), `"ts":1.500,"dur":1.250`) {
		t.Errorf("times are not microseconds with nanosecond decimals:\n%s", b.String())
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Check catches what viewers mis-draw, so that the tests that rely on it
// can fail.
func TestCheckFindsMalformedTraces(t *testing.T) {
	meta := `{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}},
{"name":"thread_name","ph":"M","pid":0,"tid":0,"args":{"name":"compute"}},
{"name":"thread_name","ph":"M","pid":0,"tid":4,"args":{"name":"p2p"}},`
	for _, c := range []struct {
		name, events, want string
	}{
		{"good", `{"name":"a","cat":"compute","ph":"X","ts":1,"dur":5,"pid":0,"tid":0},{"name":"b","cat":"compute","ph":"X","ts":2,"dur":4,"pid":0,"tid":0}`, ""},
		{"negative dur", `{"name":"a","cat":"compute","ph":"X","ts":1,"dur":-1,"pid":0,"tid":0}`, "dur -1"},
		{"unnamed rank", `{"name":"a","cat":"compute","ph":"X","ts":1,"dur":1,"pid":1,"tid":0}`, `process 1 is named ""`},
		{"unknown lane", `{"name":"a","cat":"gpu","ph":"X","ts":1,"dur":1,"pid":0,"tid":9}`, "thread 9"},
		{"partial overlap", `{"name":"a","cat":"compute","ph":"X","ts":1,"dur":5,"pid":0,"tid":0},{"name":"b","cat":"compute","ph":"X","ts":3,"dur":5,"pid":0,"tid":0}`, "partly overlaps"},
		{"partial overlap on p2p is allowed", `{"name":"a","cat":"p2p","ph":"X","ts":1,"dur":5,"pid":0,"tid":4},{"name":"b","cat":"p2p","ph":"X","ts":3,"dur":5,"pid":0,"tid":4}`, ""},
		{"unknown phase", `{"name":"a","cat":"compute","ph":"B","ts":1,"pid":0,"tid":0}`, `phase "B"`},
	} {
		f, err := Decode([]byte(`{"traceEvents":[` + meta + c.events + `]}`))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err = f.Check()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: Check() = %v, want %q", c.name, err, c.want)
		}
	}
}

// Past MaxEvents, events are counted, not kept, and the file says so.
func TestCap(t *testing.T) {
	r := New(Options{MaxEvents: 5})
	now := time.Now()
	for i := range 12 {
		r.Add(Event{Rank: 0, Lane: User, Name: "span", Start: now.Add(time.Duration(i) * time.Millisecond), End: now.Add(time.Duration(i)*time.Millisecond + 10)})
	}
	if kept, dropped := r.Len(); kept != 5 || dropped != 7 {
		t.Fatalf("kept %d, dropped %d; want 5 and 7", kept, dropped)
	}
	var b bytes.Buffer
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Error(err)
	}
	if f.OtherData["dropped_events"] != 7.0 || f.OtherData["max_events"] != 5.0 {
		t.Errorf("otherData %v", f.OtherData)
	}
	var note *FileEvent
	spans := 0
	for i, e := range f.Events {
		switch e.Phase {
		case "i":
			note = &f.Events[i]
		case "X":
			spans++
		}
	}
	if spans != 5 || note == nil || note.Scope != "g" || !strings.Contains(note.Name, "7 later events dropped") || note.Args["dropped_events"] != 7.0 {
		t.Errorf("%d spans, note %+v", spans, note)
	}
}

// Ranks and their communication goroutines record at once (run with -race).
func TestConcurrentAdd(t *testing.T) {
	r := New(Options{MaxEvents: 10_000})
	var wg sync.WaitGroup
	const goroutines, each = 8, 2000
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				start := r.Now()
				r.Add(Event{Rank: g % 4, Lane: Lane(g / 4 * int(Comm)), Name: "op", Start: start, End: r.Now(), Args: [2]Arg{{"i", int64(i)}}})
				if i%500 == 0 {
					r.SetInfo("progress", i)
					var b bytes.Buffer
					if _, err := r.WriteTo(&b); err != nil { // writing while others record
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	kept, dropped := r.Len()
	if kept != 10_000 || dropped != goroutines*each-10_000 {
		t.Errorf("kept %d, dropped %d of %d", kept, dropped, goroutines*each)
	}
	if n := len(r.Events()); n != kept {
		t.Errorf("Events returns %d of %d", n, kept)
	}
}

// WriteFile replaces the file atomically.
func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := New(Options{})
	r.Add(Event{Rank: 2, Lane: Compute, Name: "forward", Start: time.Now(), End: time.Now().Add(time.Millisecond)})
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Error(err)
	}
	if evs := f.Intervals(2, "compute", "forward"); len(evs) != 1 || evs[0].Dur < 999 {
		t.Errorf("forward intervals %+v", evs)
	}
	if err := r.WriteFile(filepath.Join(t.TempDir(), "missing", "t.json")); err == nil {
		t.Error("writing into a missing folder succeeded")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// BenchmarkAdd is what one recorded interval costs (two clock reads and
// the locked append); the disabled case is a nil check.
func BenchmarkAdd(b *testing.B) {
	for _, c := range []struct {
		name string
		r    *Recorder
	}{{"off", nil}, {"on", New(Options{MaxEvents: 1 << 30})}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				start := c.r.Now()
				c.r.Add(Event{Rank: 0, Lane: Comm, Name: "all_reduce", Start: start, End: c.r.Now(), Args: [2]Arg{{"bytes", 4096}}})
			}
		})
	}
}
