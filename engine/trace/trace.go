// Package trace records what each rank of a job does over time — its
// forward and backward passes, DDP's comm hooks, optimizer steps, the
// collectives of its communication queue and the script's own spans — as
// intervals on lanes, and writes them in the Chrome trace event format,
// which chrome://tracing and https://ui.perfetto.dev open: one process per
// rank ("rank 0"), one thread per lane ("compute", "comm", ...).
//
// A nil *Recorder is a valid recorder that records nothing: every method
// returns at once and allocates nothing, so the engine keeps one pointer
// per rank and calls it unconditionally. A Recorder is safe for concurrent
// use (ranks and their communication goroutines record at the same time).
// It keeps at most MaxEvents events; the later ones are counted and noted
// in the written trace instead of being kept.
package trace

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Lane is one row of a rank in the trace (a thread, in the format's terms).
type Lane int32

const (
	// Compute holds forward passes (from the first op recorded for
	// autograd to the last one before backward) and backward passes.
	Compute Lane = iota
	// Hook holds DDP's comm hook calls, one per bucket, and the waits for
	// their results when gradients are read.
	Hook
	// Optimizer holds optimizer steps and ZeRO's per-bucket updates
	// inside backward (the overlap hooks).
	Optimizer
	// Comm holds the collectives of the rank's communication queue for
	// the group of all ranks, each from the moment the queue starts it
	// (waiting for the other ranks included) until it completes.
	Comm
	// P2P holds point-to-point messages (send, recv), which bypass the
	// queue; concurrent messages may overlap on it.
	P2P
	// User holds the script's spans (trace.span(name, fn)) and its
	// checkpoint saves and loads.
	User
	// Units holds ZeRO stage 3's units: each unit's forward and backward,
	// from the moment its parameters are gathered, so that the all-gathers
	// prefetched on the comm lane show against the units computing, and
	// each prefetch's issue ("unit k prefetch"), which the comm queue runs
	// when it gets a core.
	Units
	// Schedule holds a ZeRO step schedule's events (each handler's call)
	// and, inside them, its actions (wait, step, broadcast of a bucket).
	Schedule
	// Subgroup collectives go to CommLane(group), after the named lanes.
	firstSubgroup
)

var laneNames = [...]string{Compute: "compute", Hook: "hook", Optimizer: "optimizer", Comm: "comm", P2P: "p2p", User: "user", Units: "zero units", Schedule: "schedule"}

// CommLane is the lane of the communication queue of process group id (0
// is the group of all ranks; subgroups have queues of their own).
func CommLane(group int) Lane {
	if group <= 0 {
		return Comm
	}
	return firstSubgroup + Lane(group-1)
}

// String is the lane's name in the trace.
func (l Lane) String() string {
	if l >= 0 && int(l) < len(laneNames) {
		return laneNames[l]
	}
	if l >= firstSubgroup {
		return "comm group " + strconv.Itoa(int(l-firstSubgroup)+1)
	}
	return "lane " + strconv.Itoa(int(l))
}

// Arg is a numeric argument of an event ({"bytes": 4096}); an empty Key
// is no argument.
type Arg struct {
	Key string
	Val int64
}

// Event is one interval of one rank.
type Event struct {
	Rank       int
	Lane       Lane
	Name       string
	Start, End time.Time
	Args       [2]Arg
}

// DefaultMaxEvents bounds a recorder's memory (about 90 bytes an event,
// 45 MB) and its file (about 60 MB) unless Options say otherwise.
const DefaultMaxEvents = 500_000

// Options configure a Recorder.
type Options struct {
	// MaxEvents is the most events kept (DefaultMaxEvents when zero);
	// the events after it are counted and dropped.
	MaxEvents int
}

// Recorder collects the events of every rank of a job.
type Recorder struct {
	start time.Time
	max   int

	mu       sync.Mutex
	chunks   [][]event
	n        int
	dropped  int64
	fullAt   int64 // when the cap was reached, ns after start
	info     []kv
	lanesOf  map[int32]map[Lane]bool
	rankSeen []int32
}

type kv struct {
	key string
	val string // JSON text
}

// event is an Event as kept: times as nanoseconds after the recorder's
// start.
type event struct {
	rank    int32
	lane    Lane
	name    string
	ts, dur int64
	args    [2]Arg
}

const chunkSize = 4096

// New makes a recorder whose time zero is now.
func New(opts Options) *Recorder {
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	return &Recorder{start: time.Now(), max: opts.MaxEvents, lanesOf: map[int32]map[Lane]bool{}}
}

// Enabled reports whether r records (r is not nil).
func (r *Recorder) Enabled() bool { return r != nil }

// Now is time.Now() when r records and the zero time otherwise, so that a
// disabled recorder does not even read the clock:
//
//	start := rec.Now()
//	...
//	rec.Add(trace.Event{..., Start: start, End: rec.Now()})
func (r *Recorder) Now() time.Time {
	if r == nil {
		return time.Time{}
	}
	return time.Now()
}

// Add records e. An End before Start records a zero-length interval.
func (r *Recorder) Add(e Event) {
	if r == nil {
		return
	}
	ts := e.Start.Sub(r.start).Nanoseconds()
	dur := max(0, e.End.Sub(e.Start).Nanoseconds())
	if ts < 0 { // began before the recorder: clip at its start
		dur = max(0, dur+ts)
		ts = 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n >= r.max {
		if r.dropped == 0 {
			r.fullAt = time.Since(r.start).Nanoseconds()
		}
		r.dropped++
		return
	}
	k := len(r.chunks) - 1
	if k < 0 || len(r.chunks[k]) == cap(r.chunks[k]) {
		r.chunks = append(r.chunks, make([]event, 0, min(chunkSize, r.max-r.n)))
		k++
	}
	rank := int32(e.Rank)
	r.chunks[k] = append(r.chunks[k], event{rank: rank, lane: e.Lane, name: e.Name, ts: ts, dur: dur, args: e.Args})
	r.n++
	lanes := r.lanesOf[rank]
	if lanes == nil {
		lanes = map[Lane]bool{}
		r.lanesOf[rank] = lanes
		r.rankSeen = append(r.rankSeen, rank)
	}
	lanes[e.Lane] = true
}

// SetInfo adds key to the trace's "otherData" (the command, the number of
// ranks): value is a string or a number.
func (r *Recorder) SetInfo(key string, value any) {
	if r == nil {
		return
	}
	var v string
	switch x := value.(type) {
	case string:
		v = string(appendJSONString(nil, x))
	case int:
		v = strconv.Itoa(x)
	case int64:
		v = strconv.FormatInt(x, 10)
	case float64:
		v = strconv.FormatFloat(x, 'g', -1, 64)
	default:
		v = string(appendJSONString(nil, fmt.Sprint(x)))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.info {
		if r.info[i].key == key {
			r.info[i].val = v
			return
		}
	}
	r.info = append(r.info, kv{key, v})
}

// Len returns the number of events kept and the number dropped at the cap.
func (r *Recorder) Len() (kept int, dropped int64) {
	if r == nil {
		return 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, r.dropped
}

// Events returns a copy of the events kept, in the order of their start
// (for tests and tools; the trace file is written by WriteTo).
func (r *Recorder) Events() []Event {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, c := range r.chunks {
		for _, e := range c {
			s := r.start.Add(time.Duration(e.ts))
			out = append(out, Event{Rank: int(e.rank), Lane: e.lane, Name: e.name, Start: s, End: s.Add(time.Duration(e.dur)), Args: e.args})
		}
	}
	slices.SortStableFunc(out, func(a, b Event) int { return a.Start.Compare(b.Start) })
	return out
}

// sortedLocked returns the events in the order the format's viewers nest
// them: by start, and the longer first when two start together.
func (r *Recorder) sortedLocked() []*event {
	out := make([]*event, 0, r.n)
	for _, c := range r.chunks {
		for i := range c {
			out = append(out, &c[i])
		}
	}
	slices.SortStableFunc(out, func(a, b *event) int {
		if c := cmp.Compare(a.ts, b.ts); c != 0 {
			return c
		}
		return cmp.Compare(b.dur, a.dur)
	})
	return out
}
