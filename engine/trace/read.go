package trace

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// File is a trace as WriteTo writes it, read back (by tests and tools).
type File struct {
	OtherData map[string]any `json:"otherData"`
	Events    []FileEvent    `json:"traceEvents"`
}

// FileEvent is one event of a File: ts and dur in microseconds.
type FileEvent struct {
	Name  string         `json:"name"`
	Cat   string         `json:"cat"`
	Phase string         `json:"ph"`
	TS    float64        `json:"ts"`
	Dur   float64        `json:"dur"`
	PID   int            `json:"pid"`
	TID   int            `json:"tid"`
	Scope string         `json:"s"`
	Args  map[string]any `json:"args"`
}

// End is the end of a complete event, in microseconds.
func (e FileEvent) End() float64 { return e.TS + e.Dur }

// Decode reads a trace written by WriteTo.
func Decode(data []byte) (*File, error) {
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	return &f, nil
}

// Intervals returns the complete events of rank on the lane named lane
// whose name starts with prefix, in file order.
func (f *File) Intervals(rank int, lane, prefix string) []FileEvent {
	var out []FileEvent
	for _, e := range f.Events {
		if e.Phase == "X" && e.PID == rank && e.Cat == lane && strings.HasPrefix(e.Name, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// Check verifies what viewers rely on: every rank with events is a
// process named "rank N", every lane a thread named after it, every
// complete event has ts ≥ 0, dur ≥ 0 and a category naming its lane, and
// on each lane but the point-to-point one intervals nest (a viewer
// mis-draws two that partly overlap).
func (f *File) Check() error {
	procs := map[int]string{}
	threads := map[[2]int]string{}
	for _, e := range f.Events {
		if e.Phase != "M" {
			continue
		}
		name, _ := e.Args["name"].(string)
		switch e.Name {
		case "process_name":
			procs[e.PID] = name
		case "thread_name":
			threads[[2]int{e.PID, e.TID}] = name
		}
	}
	lanes := map[[2]int][]FileEvent{}
	for i, e := range f.Events {
		switch e.Phase {
		case "M", "i":
			continue
		case "X":
		default:
			return fmt.Errorf("trace: event %d (%s) has phase %q", i, e.Name, e.Phase)
		}
		if e.TS < 0 || e.Dur < 0 {
			return fmt.Errorf("trace: event %d (%s) has ts %v and dur %v", i, e.Name, e.TS, e.Dur)
		}
		if want := fmt.Sprintf("rank %d", e.PID); procs[e.PID] != want {
			return fmt.Errorf("trace: process %d is named %q, want %q", e.PID, procs[e.PID], want)
		}
		lane := threads[[2]int{e.PID, e.TID}]
		if lane == "" || lane != e.Cat || lane != Lane(e.TID).String() {
			return fmt.Errorf("trace: event %d (%s) on thread %d named %q with category %q", i, e.Name, e.TID, lane, e.Cat)
		}
		if Lane(e.TID) != P2P {
			k := [2]int{e.PID, e.TID}
			lanes[k] = append(lanes[k], e)
		}
	}
	for k, evs := range lanes {
		slices.SortStableFunc(evs, func(a, b FileEvent) int {
			if a.TS != b.TS {
				return cmpFloat(a.TS, b.TS)
			}
			return cmpFloat(b.Dur, a.Dur)
		})
		var open []FileEvent
		for _, e := range evs {
			// eps absorbs the rounding of ts + dur in float64; times are
			// whole nanoseconds (0.001 µs).
			const eps = 1e-6
			for len(open) > 0 && open[len(open)-1].End() <= e.TS+eps {
				open = open[:len(open)-1]
			}
			if n := len(open); n > 0 && e.End() > open[n-1].End()+eps {
				return fmt.Errorf("trace: rank %d lane %s: %s [%v, %v] partly overlaps %s [%v, %v]",
					k[0], Lane(k[1]), e.Name, e.TS, e.End(), open[n-1].Name, open[n-1].TS, open[n-1].End())
			}
			open = append(open, e)
		}
	}
	return nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
