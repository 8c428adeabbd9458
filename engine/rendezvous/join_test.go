package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// joinAll joins the members concurrently, as separate processes would
// (each with its own client), and returns what each Join returned.
func joinAll(addr string, ms []Member, timeout time.Duration, serve bool) ([]*Rendezvous, []error) {
	rs := make([]*Rendezvous, len(ms))
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			rs[i], errs[i] = Join(context.Background(), addr, m, timeout, serve)
		})
	}
	wg.Wait()
	return rs, errs
}

func closeAll(t *testing.T, rs []*Rendezvous) {
	t.Helper()
	var wg sync.WaitGroup
	for _, r := range rs {
		if r != nil {
			wg.Go(func() {
				if err := r.Close(); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
}

func members(size int, ranks ...int) []Member {
	var ms []Member
	for _, r := range ranks {
		host := "host-a"
		if r >= 2 {
			host = "host-b"
		}
		ms = append(ms, Member{Rank: r, Size: size, Host: host, PID: 100 + r})
	}
	return ms
}

func TestJoin(t *testing.T) {
	addr := freePort(t)
	ms := members(4, 3, 1, 0, 2) // start order does not matter
	rs, errs := joinAll(addr, ms, 10*time.Second, true)
	defer closeAll(t, rs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", ms[i].Rank, err)
		}
	}
	want := members(4, 0, 1, 2, 3)
	for i, r := range rs {
		got := r.Members()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rank %d: Members() = %v, want %v", ms[i].Rank, got, want)
		}
		if (r.Server() != nil) != (ms[i].Rank == 0) {
			t.Fatalf("rank %d: Server() = %v", ms[i].Rank, r.Server())
		}
	}
	// The NCCL unique id travels from rank 0 to the others.
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			if ms[i].Rank == 0 {
				if err := r.Client().Set("nccl/id", []byte("unique-id")); err != nil {
					t.Error(err)
				}
			} else if v, err := r.Client().Get("nccl/id"); err != nil || string(v) != "unique-id" {
				t.Errorf("rank %d: Get = %q, %v", ms[i].Rank, v, err)
			}
			for range 3 {
				if err := r.Barrier(context.Background(), "step", 5*time.Second); err != nil {
					t.Errorf("rank %d: %v", ms[i].Rank, err)
				}
			}
		})
	}
	wg.Wait()
}

func TestJoinFailures(t *testing.T) {
	tests := []struct {
		name    string
		ms      []Member
		timeout time.Duration
		serve   bool
		want    map[int]string // by rank: what its error contains ("" means it succeeds)
		within  time.Duration  // every Join returns within this
	}{
		{
			name: "missing rank", ms: members(4, 0, 1, 3), timeout: 300 * time.Millisecond, serve: true,
			want: map[int]string{
				0: "rendezvous: rank 2 of 4 did not join within 300ms (arrived: 0 on host-a pid 100, 1 on host-a pid 101, 3 on host-b pid 103)",
				1: "rank 2 of 4 did not join", 3: "rank 2 of 4 did not join",
			},
			within: 3 * time.Second,
		},
		{
			name: "missing ranks", ms: members(4, 0, 1), timeout: 300 * time.Millisecond, serve: true,
			want: map[int]string{
				0: "rendezvous: ranks 2, 3 of 4 did not join within 300ms (arrived: 0 on host-a pid 100, 1 on host-a pid 101)",
				1: "ranks 2, 3 of 4 did not join",
			},
			within: 3 * time.Second,
		},
		{
			name: "mismatched sizes",
			ms: append(members(4, 0, 1),
				Member{Rank: 2, Size: 3, Host: "host-b", PID: 102}),
			timeout: 20 * time.Second, serve: true,
			want: map[int]string{
				0: "rendezvous: rank 2 (host-b pid 102) has WORLD_SIZE 3 but rank 0 (host-a pid 100) started a job of 4",
				1: "rank 2 (host-b pid 102) has WORLD_SIZE 3",
				2: "rendezvous: this process has WORLD_SIZE 3 but rank 0 (host-a pid 100) started a job of 4",
			},
			within: 3 * time.Second,
		},
		{
			name: "duplicate rank",
			ms: append(members(3, 0, 1),
				Member{Rank: 1, Size: 3, Host: "host-a", PID: 111}),
			timeout: 20 * time.Second, serve: true,
			want: map[int]string{
				0: "rendezvous: rank 1 joined twice (host-a pid 1", // the order depends on who claimed first
				1: "rendezvous: rank 1 joined twice (host-a pid 1",
			},
			within: 3 * time.Second,
		},
		{
			name: "another job's store",
			ms: []Member{
				{Rank: 0, Size: 2, Host: "host-a", PID: 100, JobID: "job-1"},
				{Rank: 1, Size: 2, Host: "host-a", PID: 101, JobID: "job-2"},
			},
			timeout: 500 * time.Millisecond, serve: true,
			want: map[int]string{
				0: "rank 1 of 2 did not join",
				1: `serves job "job-1" (rank 0 on host-a pid 100), not this job "job-2"`,
			},
			within: 3 * time.Second,
		},
		{
			name: "no rank 0", ms: members(2, 1), timeout: 300 * time.Millisecond, serve: false,
			want: map[int]string{
				1: "rendezvous: rank 0 did not join within",
			},
			within: 3 * time.Second,
		},
		{
			name: "rank out of range", ms: []Member{{Rank: 4, Size: 4}}, timeout: time.Second,
			want:   map[int]string{4: "rendezvous: RANK 4 is out of range for WORLD_SIZE 4 (0 to 3)"},
			within: time.Second,
		},
		{
			name: "negative rank", ms: []Member{{Rank: -1, Size: 4}}, timeout: time.Second,
			want:   map[int]string{-1: "out of range"},
			within: time.Second,
		},
		{
			name: "size 0", ms: []Member{{Rank: 0, Size: 0}}, timeout: time.Second,
			want:   map[int]string{0: "rendezvous: WORLD_SIZE is 0; it must be at least 1"},
			within: time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := freePort(t)
			if !tt.serve {
				srv, err := Listen(addr)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
			}
			start := time.Now()
			rs, errs := joinAll(addr, tt.ms, tt.timeout, tt.serve)
			elapsed := time.Since(start)
			for i, err := range errs {
				if rs[i] != nil {
					rs[i].Close()
				}
				want, ok := tt.want[tt.ms[i].Rank]
				if !ok {
					t.Fatalf("the test has no expectation for rank %d", tt.ms[i].Rank)
				}
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d: error %v, want one containing %q", tt.ms[i].Rank, err, want)
				}
			}
			if elapsed > tt.within {
				t.Errorf("Join took %v, want at most %v", elapsed, tt.within)
			}
		})
	}
}

// TestJoinExternalStore joins on a store that rank 0 did not start, twice:
// rank 0's Close leaves the store ready for the next job.
func TestJoinExternalStore(t *testing.T) {
	srv, c := newStore(t)
	for job := range 2 {
		rs, errs := joinAll(srv.Addr(), members(2, 0, 1), 5*time.Second, false)
		for _, err := range errs {
			if err != nil {
				t.Fatalf("job %d: %v", job, err)
			}
		}
		closeAll(t, rs)
	}
	if ok, err := c.Check([]string{jobKey}); err != nil || ok {
		t.Fatalf("the job record is still there (%v, %v)", ok, err)
	}
}

func TestFailAndBarrier(t *testing.T) {
	addr := freePort(t)
	rs, errs := joinAll(addr, members(3, 0, 1, 2), 5*time.Second, true)
	defer closeAll(t, rs)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A barrier that rank 2 never reaches names it.
	var wg sync.WaitGroup
	for _, r := range rs[:2] {
		wg.Go(func() {
			err := r.Barrier(context.Background(), "b", 100*time.Millisecond)
			if want := `rendezvous: barrier "b" timed out after 100ms waiting for rank 2 of 3`; err == nil || err.Error() != want {
				t.Errorf("error %v, want %q", err, want)
			}
		})
	}
	wg.Wait()

	// A rank's failure reaches the others' Failed and ends their barriers.
	failed := rs[0].Failed()
	barrier := make(chan error, 1)
	go func() { barrier <- rs[1].Barrier(context.Background(), "c", 10*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	if err := rs[2].Fail("out of memory"); err != nil {
		t.Fatal(err)
	}
	want := "rank 2 (host-b pid 102) failed: out of memory"
	select {
	case msg := <-failed:
		if msg != want {
			t.Fatalf("Failed() gave %q, want %q", msg, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the failure did not arrive")
	}
	if err := <-barrier; err == nil || err.Error() != `rendezvous: barrier "c": `+want {
		t.Fatalf("barrier error %v", err)
	}
	// A second failure does not replace the first.
	if err := rs[1].Fail("later"); err != nil {
		t.Fatal(err)
	}
	if msg := <-rs[1].Failed(); msg != want {
		t.Fatalf("Failed() gave %q, want %q", msg, want)
	}
}

// TestCloseWaitsForRanks checks that rank 0 keeps the store up until the
// other ranks have closed, and that the watch of a rank ends with the store.
func TestCloseWaitsForRanks(t *testing.T) {
	addr := freePort(t)
	rs, errs := joinAll(addr, members(2, 0, 1), 5*time.Second, true)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- rs[0].Close() }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-closed:
		t.Fatalf("rank 0 closed (%v) before rank 1", err)
	default:
	}
	// Rank 1 still reads from the store.
	if err := rs[1].Client().Set("late", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := rs[1].Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rank 0 did not close after rank 1")
	}
}

func TestCloseTimesOut(t *testing.T) {
	addr := freePort(t)
	rs, errs := joinAll(addr, members(2, 0, 1), 200*time.Millisecond, true)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	failed := rs[1].Failed()
	err := rs[0].Close() // rank 1 never closes
	if want := "rendezvous: rank 1 of 2 did not close within 200ms; closed the store anyway"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	// An orderly shutdown is no failure: the watch ends without one.
	select {
	case msg, ok := <-failed:
		if ok {
			t.Fatalf("Failed() gave %q", msg)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not end when the store shut down")
	}
	if _, err := rs[1].Client().Get("x"); !errors.Is(err, ErrLost) {
		t.Fatalf("Get: %v, want ErrLost", err)
	}
	rs[1].Close()
}

// TestLostRankIsAFailure: a rank whose connection ends without Close (its
// process was killed) is reported to the others as failed, naming it; a
// rank that closes is not.
func TestLostRankIsAFailure(t *testing.T) {
	addr := freePort(t)
	rs, errs := joinAll(addr, members(3, 0, 1, 2), 10*time.Second, true)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	failed := rs[0].Failed()
	// Rank 2 leaves properly, then rank 1 dies: only rank 1 is reported.
	if err := rs[2].client.OnDrop("", nil); err != nil {
		t.Fatal(err)
	}
	rs[2].client.Close()
	rs[1].client.Close()
	select {
	case msg := <-failed:
		want := "rank 1 (host-a pid 101) failed: it lost its connection to the store"
		if !strings.HasPrefix(msg, want) {
			t.Fatalf("got %q, want it to start with %q", msg, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rank 0 did not learn that rank 1 was lost")
	}
	rs[0].Close()
}

func TestClosedRankIsNotAFailure(t *testing.T) {
	addr := freePort(t)
	rs, errs := joinAll(addr, members(2, 0, 1), 10*time.Second, true)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	failed := rs[0].Failed()
	if err := rs[1].Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-failed:
		t.Fatalf("a rank that closed was reported: %q", msg)
	case <-time.After(300 * time.Millisecond):
	}
	if err := rs[0].Close(); err != nil {
		t.Fatal(err)
	}
}
