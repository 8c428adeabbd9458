package dist

import (
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// With Options.Trace every collective is an interval of its rank: queued
// ones on the comm lane of their group, from when the queue started them
// until they completed, messages on the p2p lane; CommTime adds up the
// queues' intervals.
func TestTraceAndCommTime(t *testing.T) {
	rec := trace.New(trace.Options{})
	net := NetModel{Latency: 2 * time.Millisecond}
	var commTimes [3]time.Duration
	noErrors(t, runRanks(t, 3, Options{Trace: rec, Net: net}, func(rank int, pg ProcessGroup, rt *tensor.Runtime) error {
		x := rt.Ones(tensor.Float32, 10)
		if err := pg.AllReduce(x, Sum).Wait(); err != nil {
			return err
		}
		out := rt.Zeros(tensor.Float32, 30)
		if err := pg.AllGather(out, x).Wait(); err != nil {
			return err
		}
		if _, err := pg.BroadcastObject([]byte("hello"), 0); err != nil {
			return err
		}
		sub, err := pg.NewGroup([]int{1, 2})
		if err != nil {
			return err
		}
		if sub != nil {
			if err := sub.Barrier().Wait(); err != nil {
				return err
			}
		}
		switch rank {
		case 0:
			err = pg.Send(x, 1).Wait()
		case 1:
			err = pg.Recv(x, 0).Wait()
		}
		commTimes[rank] = pg.(CommTimer).CommTime()
		return err
	}))
	type key struct {
		rank int
		lane trace.Lane
		name string
	}
	got := map[key]trace.Event{}
	for _, e := range rec.Events() {
		k := key{e.Rank, e.Lane, e.Name}
		if _, dup := got[k]; dup {
			t.Errorf("%v recorded twice", k)
		}
		got[k] = e
	}
	arg := func(k string, v int64) trace.Arg { return trace.Arg{Key: k, Val: v} }
	want := map[key][2]trace.Arg{}
	for r := range 3 {
		want[key{r, trace.Comm, "all_reduce"}] = [2]trace.Arg{arg("bytes", 40), arg("seq", 0)}
		want[key{r, trace.Comm, "all_gather"}] = [2]trace.Arg{arg("bytes", 120), arg("seq", 1)}
		want[key{r, trace.Comm, "broadcast_object"}] = [2]trace.Arg{arg("bytes", 5), arg("seq", 2)}
	}
	for r := 1; r < 3; r++ {
		want[key{r, trace.CommLane(1), "barrier"}] = [2]trace.Arg{arg("bytes", 0), arg("seq", 0)}
	}
	want[key{0, trace.P2P, "send"}] = [2]trace.Arg{arg("bytes", 40), arg("peer", 1)}
	want[key{1, trace.P2P, "recv"}] = [2]trace.Arg{arg("bytes", 40), arg("peer", 0)}
	if len(got) != len(want) {
		t.Errorf("%d events, want %d: %v", len(got), len(want), got)
	}
	for k, args := range want {
		e, ok := got[k]
		if !ok {
			t.Errorf("no %v", k)
			continue
		}
		if e.Args != args {
			t.Errorf("%v: args %v, want %v", k, e.Args, args)
		}
		// The emulated link makes every collective but broadcastObject and
		// the messages last its latency at least.
		if d := e.End.Sub(e.Start); d < 0 || (k.lane != trace.P2P && k.name != "broadcast_object" && d < net.Latency) {
			t.Errorf("%v lasted %v", k, d)
		}
	}
	for r, ct := range commTimes {
		var sum time.Duration
		for k, e := range got {
			if k.rank == r && k.lane != trace.P2P {
				sum += e.End.Sub(e.Start)
			}
		}
		// The counter and the trace time the same calls with the same
		// clock reads.
		if ct != sum {
			t.Errorf("rank %d: CommTime %v, trace intervals add up to %v", r, ct, sum)
		}
	}
}
