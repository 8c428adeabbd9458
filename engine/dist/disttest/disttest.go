// Package disttest owns the conformance suite of dist.ProcessGroup: the
// checks that every backend (the in-process one of package dist, NCCL,
// MPI, where each rank is a process of its own) must pass, so that DDP,
// ZeRO and the communication hooks behave the same on all of them.
//
// The suite is a list of cases (Cases). A case runs on every rank of a
// group at once, with that rank's group and a tensor runtime on the
// rank's device, and returns an error naming the first wrong value (the
// rank, the collective, the dtype and op, the element). Cases use nothing
// but the ProcessGroup interface and tensors of the rank's runtime: every
// rank computes the values it expects from a formula of ranks and element
// indices, and every rank issues the same collectives in the same order
// (point-to-point messages in orders that NCCL accepts) and goes on
// issuing them after a wrong value, so that a failing case ends on every
// rank instead of leaving the others waiting. A case releases the
// tensors it made before it returns.
//
// They cover every collective of the interface: all-reduce for every
// dtype and op (sizes from 0 to about a million elements, sizes that do
// not divide among the ranks), broadcast from every root, reduce-scatter
// and all-gather (also in place, as ZeRO uses them), all-gather into a
// list, all-to-all, barrier, send and receive (pairs and rings), the
// object collectives with empty and varying payloads, subgroups (nested,
// and used alongside the parent group), several works in flight with
// continuations, memory released while a collective runs, and calls with
// invalid arguments, which must fail on the rank that made them without
// communicating and leave the group usable.
//
// A backend whose ranks are goroutines of one process runs the suite
// with Run (RunInProcess for package dist's in-process backend), which
// makes a new world for each case and reports each case as a subtest:
//
//	func TestConformance(t *testing.T) {
//		disttest.Run(t, 4, disttest.Cases(), func(t *testing.T) []disttest.Rank {
//			w := newWorld(t, 4) // the backend's world, closed by t.Cleanup
//			ranks := make([]disttest.Rank, 4)
//			for r := range ranks {
//				ranks[r] = disttest.Rank{PG: w.Group(r), RT: w.Runtime(r)}
//			}
//			return ranks
//		})
//	}
//
// A backend whose ranks are processes runs the same cases, in the same
// order, in every process, and the launcher fails when any rank reports
// a failure. RunRank does that in one process (the package example
// spells out its loop):
//
//	pg, rt := ... // this process's group and a runtime on its device
//	if err := disttest.RunRank(pg, rt, disttest.Cases()); err != nil {
//		fmt.Fprintln(os.Stderr, err)
//		os.Exit(1)
//	}
//
// Besides what ProcessGroup's comments say, the cases hold a backend to
// what the in-process one does and DDP, ZeRO and the hooks rely on: a
// subgroup numbers its members in increasing order of their rank in the
// parent, whatever the order of NewGroup's list; works of a group
// complete, and run their continuations, in the order they were issued;
// a call with invalid arguments (a nil, strided or mismatched tensor, a
// rank outside the group, an op the dtype does not take) fails without
// communicating, so that the other ranks do not wait for it.
//
// A backend without a feature leaves out the cases that need it (those
// with Subgroups set where NewGroup is not supported), on every rank.
// The subgroup cases stop early, on the ranks where it fails, when
// NewGroup fails. Under go test -short the large all-reduce is smaller.
package disttest

import (
	"errors"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Case is one conformance check, run on every rank of a group at once.
type Case struct {
	Name string
	// MinRanks is the smallest group the case runs on (2 for send and
	// receive); smaller groups skip it.
	MinRanks int
	// Subgroups says that the case calls NewGroup: a backend without
	// subgroups leaves it out.
	Subgroups bool
	// Run is called on every rank, each in its own goroutine or process,
	// with that rank's process group and a runtime on the rank's device.
	// It returns an error describing the first wrong value (naming rank,
	// dtype, op, element index).
	Run func(pg dist.ProcessGroup, rt *tensor.Runtime) error
}

// Fits reports whether c runs on a group of n ranks.
func (c Case) Fits(n int) bool { return n >= c.MinRanks }

// Rank is one rank of a world that runs the suite in one process: its
// process group and a runtime on its device.
type Rank struct {
	PG dist.ProcessGroup
	RT *tensor.Runtime
	// Leave, when set, is called on the rank's goroutine once its Run has
	// returned (dist.World.Leave), so that ranks still waiting for it
	// fail at once instead of at the timeout.
	Leave func()
}

// RunRanks runs c on every rank at once, each on its own goroutine, and
// returns their errors by rank. A panic in a rank's Run is that rank's
// error.
func RunRanks(c Case, ranks []Rank) []error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, rk := range ranks {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d: panic: %v", r, p)
				}
				if rk.Leave != nil {
					rk.Leave()
				}
			}()
			errs[r] = c.Run(rk.PG, rk.RT)
		})
	}
	wg.Wait()
	return errs
}

// Run runs the cases that fit n ranks as subtests of t, each on a new
// world of n ranks that world makes (and closes with t.Cleanup).
func Run(t *testing.T, n int, cases []Case, world func(t *testing.T) []Rank) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if !c.Fits(n) {
				t.Skipf("needs %d ranks", c.MinRanks)
			}
			ranks := world(t)
			if len(ranks) != n {
				t.Fatalf("the world has %d ranks, not %d", len(ranks), n)
			}
			for _, err := range RunRanks(c, ranks) {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// inProcessTimeout bounds every collective of RunInProcess's worlds: a
// case that hangs fails instead.
const inProcessTimeout = 2 * time.Minute

// RunInProcess runs every case on in-process worlds of n ranks (package
// dist's backend, with its debug checks on: a rank whose calls do not
// match the others' fails the case) as subtests of t.
func RunInProcess(t *testing.T, n int) {
	t.Helper()
	Run(t, n, Cases(), func(t *testing.T) []Rank {
		w, err := dist.NewWorld(n, dist.Options{Debug: true, Timeout: inProcessTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		ranks := make([]Rank, n)
		for r := range ranks {
			ranks[r] = Rank{
				PG:    w.Group(r),
				RT:    tensor.NewRuntime(cpu.New(cpu.Options{Index: r}), 0),
				Leave: func() { w.Leave(r) },
			}
		}
		return ranks
	})
}

// RunRank runs the cases that fit pg, in order, on this rank: what each
// process of a multi-process backend calls, every process with the same
// cases. It returns the failures joined, each after its case's name, or
// nil.
func RunRank(pg dist.ProcessGroup, rt *tensor.Runtime, cases []Case) error {
	var errs []error
	for _, c := range cases {
		if !c.Fits(pg.Size()) {
			continue
		}
		if err := c.Run(pg, rt); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	return errors.Join(errs...)
}

// short reports whether this is a test binary run with -short (and not
// some other program that calls the cases).
func short() bool {
	return flag.Lookup("test.short") != nil && flag.Parsed() && testing.Short()
}
