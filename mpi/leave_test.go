package mpi

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dist/disttest"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// waitErr is work's error, or a line that says it did not complete
// within d.
func waitErr(work *dist.Work, d time.Duration) string {
	select {
	case <-work.Done():
		return fmt.Sprint(work.Err())
	case <-time.After(d):
		return fmt.Sprintf("did not complete within %v", d)
	}
}

// readBack is t's values, or the error reading them.
func readBack(t *tensor.Tensor) string {
	v, err := disttest.ReadBack(t)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(v)
}

// TestLeave has rank 1 finish its script (Leave, then Close) while the
// others wait for it in an all-reduce: theirs fails at once with an
// error that names it, and so do the world's later collectives and the
// messages to and from it, while a subgroup without it and the messages
// between the others go on. A work that completed before is unaffected;
// the all-reduce was in flight, so Close leaves MPI as it is.
func TestLeave(t *testing.T) {
	if isChild() {
		leaveRank(t)
		return
	}
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			res := failureJob(t, np, timeoutEnv+"=30s")
			if res[1] != "left" {
				t.Errorf("rank 1: %s", res[1])
			}
			for _, r := range []int{0, 2} {
				if r >= np {
					continue
				}
				gone := func(what, kind string) string {
					return fmt.Sprintf("mpi: %s on rank %d: rank 1 has finished its script; this %s can never complete", what, r, kind)
				}
				failed := gone("AllReduce of 4 float32", "collective")
				want := []string{
					failed,
					"(took)",
					gone("Barrier", "collective"),
					gone("Recv of 2 float32 from rank 1", "message"),
					gone("Send of 2 float32 to rank 1", "message"),
				}
				if np == 3 {
					peer := 2 - r
					want = append(want, "<nil> [2 2 2]", fmt.Sprintf("<nil> <nil> [%d %d]", peer, peer))
				}
				want = append(want, fmt.Sprintf("<nil> [%d %d %d %d]", np, np, np, np), failed,
					fmt.Sprintf("mpi: closing rank %d: MPI_Finalize was not called, since MPI cannot cancel a work that can never complete: %s", r, failed))
				got := strings.Split(res[r], "\n")
				if len(got) != len(want) {
					t.Errorf("rank %d:\n%s\nwant\n%s", r, res[r], strings.Join(want, "\n"))
					continue
				}
				for i := range want {
					if i == 1 {
						if d, err := time.ParseDuration(got[i]); err != nil || d > 3*time.Second {
							t.Errorf("rank %d: the all-reduce failed after %s, not at once", r, got[i])
						}
						continue
					}
					if got[i] != want[i] {
						t.Errorf("rank %d, line %d:\n got %s\nwant %s", r, i, got[i], want[i])
					}
				}
			}
		})
	}
}

func leaveRank(t *testing.T) {
	w := childWorld(t)
	pg := w.Group(0)
	rt := newRuntime()
	n, r := w.Size(), w.Rank()
	var sub dist.ProcessGroup
	if n == 3 {
		var err error
		if sub, err = pg.NewGroup([]int{0, 2}); err != nil {
			leave(w, "NewGroup: "+err.Error())
		}
	}
	// A work that completes before rank 1 leaves.
	x := rt.Full(dtype.Float32, 1, 4)
	before := pg.AllReduce(x, dist.Sum)
	if err := before.Wait(); err != nil {
		leave(w, "the first all-reduce: "+err.Error())
	}
	if r == 1 {
		time.Sleep(300 * time.Millisecond) // the others wait in their all-reduce meanwhile
		w.Leave(0)
		note(w, "left")
		// MPI_Finalize: Open MPI's waits for the others, which exit
		// without it, and mpirun then ends this process.
		err := w.Close()
		os.WriteFile(filepath.Join(os.Getenv(dirEnv), "rank1.closed"), []byte(fmt.Sprint(err)), 0o644)
		leave(w, "left")
	}
	var got []string
	start := time.Now()
	got = append(got, waitErr(pg.AllReduce(rt.Full(dtype.Float32, 1, 4), dist.Sum), 20*time.Second))
	got = append(got, time.Since(start).Round(time.Millisecond).String())
	// Later works that need rank 1 fail at once.
	got = append(got, waitErr(pg.Barrier(), time.Second))
	got = append(got, waitErr(pg.Recv(rt.Zeros(dtype.Float32, 2), 1), time.Second))
	got = append(got, waitErr(pg.Send(rt.Zeros(dtype.Float32, 2), 1), time.Second))
	if n == 3 {
		// Those between the others go on.
		y := rt.Full(dtype.Float32, 1, 3)
		got = append(got, waitErr(sub.AllReduce(y, dist.Sum), 10*time.Second)+" "+readBack(y))
		peer := 2 - r
		in := rt.Zeros(dtype.Float32, 2)
		send := pg.Send(rt.Full(dtype.Float32, float64(r), 2), peer)
		recv := pg.Recv(in, peer)
		got = append(got, waitErr(send, 10*time.Second)+" "+waitErr(recv, 10*time.Second)+" "+readBack(in))
	}
	got = append(got, fmt.Sprint(before.Err())+" "+readBack(x))
	got = append(got, fmt.Sprint(w.Err()))
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case err := <-closed:
		got = append(got, fmt.Sprint(err))
	case <-time.After(5 * time.Second):
		got = append(got, "Close did not return")
	}
	leave(w, strings.Join(got, "\n"))
}

// TestAllLeave has every rank finish its script: rank 1 first, right
// after a broadcast from it and a message to rank 0, which complete on
// the others although its notice reaches them first (it issued them);
// then the others. The job ends at once, every rank finalising MPI.
func TestAllLeave(t *testing.T) {
	if isChild() {
		w := childWorld(t)
		if err := allLeave(w); err != nil {
			t.Fatalf("rank %d of %d: %v", w.Rank(), w.Size(), err)
		}
		return
	}
	needMPI(t)
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			start := time.Now()
			out, err := job{np: np, test: "TestAllLeave", env: []string{timeoutEnv + "=30s"}}.run(t, 60*time.Second)
			if err != nil || !strings.Contains(out, "PASS") {
				t.Fatalf("%v\n%s", err, out)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("the job took %v", d)
			}
			if strings.Contains(out, "MPI_Finalize") || strings.Contains(out, "Close:") {
				t.Errorf("output:\n%s", out)
			}
		})
	}
}

func allLeave(w *World) error {
	pg := w.Group(0)
	rt := newRuntime()
	n, r := w.Size(), w.Rank()
	x := rt.Full(dtype.Float32, float64(r+1), 5)
	before := pg.AllReduce(x, dist.Sum)
	if err := before.Wait(); err != nil {
		return err
	}
	// With 3 ranks, a subgroup of ranks 1 and 2, and one of that one's
	// (of the same ranks): Leave notices name groups alike on every
	// rank.
	var nested dist.ProcessGroup
	if n == 3 {
		sub, err := pg.NewGroup([]int{1, 2})
		if err != nil {
			return err
		}
		if sub != nil {
			if nested, err = sub.NewGroup([]int{0, 1}); err != nil {
				return err
			}
		}
	}
	b := rt.Zeros(dtype.Float32, 3)
	c := rt.Zeros(dtype.Float32, 2)
	if r == 1 {
		b = rt.Full(dtype.Float32, 7, 3)
		c = rt.Full(dtype.Float32, 5, 2)
		// A root's broadcast and a small message complete here without
		// the others.
		works := []*dist.Work{pg.Broadcast(b, 1), pg.Send(rt.Full(dtype.Int64, 9, 2), 0)}
		if nested != nil {
			works = append(works, nested.Broadcast(c, 0))
		}
		for _, work := range works {
			if err := work.Wait(); err != nil {
				return err
			}
		}
		w.Leave(0)
		return nil // TestMain closes the world
	}
	time.Sleep(300 * time.Millisecond) // rank 1 has left meanwhile
	bcast := pg.Broadcast(b, 1)
	if err := bcast.Wait(); err != nil {
		return fmt.Errorf("the broadcast rank 1 issued before it left: %w", err)
	}
	if got := readBack(b); got != "[7 7 7]" {
		return fmt.Errorf("the broadcast brought %s", got)
	}
	if nested != nil {
		if err := nested.Broadcast(c, 0).Wait(); err != nil {
			return fmt.Errorf("the broadcast rank 1 issued in a subgroup before it left: %w", err)
		}
		if got := readBack(c); got != "[5 5]" {
			return fmt.Errorf("the subgroup's broadcast brought %s", got)
		}
	}
	if r == 0 {
		in := rt.Zeros(dtype.Int64, 2)
		if err := pg.Recv(in, 1).Wait(); err != nil {
			return fmt.Errorf("the message rank 1 sent before it left: %w", err)
		}
		if got := readBack(in); got != "[9 9]" {
			return fmt.Errorf("the message brought %s", got)
		}
	}
	if err := before.Err(); err != nil {
		return fmt.Errorf("a work completed before rank 1 left now fails: %w", err)
	}
	want := make([]float64, 5)
	for i := range want {
		want[i] = float64(n * (n + 1) / 2)
	}
	if got := readBack(x); got != fmt.Sprint(want) {
		return fmt.Errorf("the first all-reduce brought %s, want %v", got, want)
	}
	if err := w.Err(); err != nil {
		return err
	}
	w.Leave(0)
	return nil
}
