package disttest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dist/disttest"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The suite itself runs on the in-process backend in package dist
// (TestConformance); the tests here check that it catches broken
// backends, and that a failing case ends on every rank.

func TestCases(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range disttest.Cases() {
		if c.Name == "" || c.Run == nil || seen[c.Name] {
			t.Errorf("case %q: empty, without Run or listed twice", c.Name)
		}
		seen[c.Name] = true
		if strings.HasPrefix(c.Name, "subgroups") != c.Subgroups {
			t.Errorf("case %q: Subgroups is %v", c.Name, c.Subgroups)
		}
	}
}

// faulty is a process group with one fault.
type faulty struct {
	dist.ProcessGroup
	fault string
}

func (f *faulty) AllReduce(t *tensor.Tensor, op dist.ReduceOp) *dist.Work {
	if f.fault == "avg is sum" && op == dist.Avg {
		op = dist.Sum
	}
	w := f.ProcessGroup.AllReduce(t, op)
	if f.fault == "all-reduces complete late" {
		late, complete := dist.NewWork()
		go func() {
			err := w.Wait()
			time.Sleep(time.Millisecond)
			complete(err)
		}()
		return late
	}
	return w
}

func (f *faulty) Broadcast(t *tensor.Tensor, root int) *dist.Work {
	switch {
	case f.fault == "broadcast from rank 0" && root >= 0 && root < f.Size():
		root = 0
	case f.fault == "broadcast accepts any root" && (root < 0 || root >= f.Size()):
		return dist.Failed(nil)
	}
	return f.ProcessGroup.Broadcast(t, root)
}

func (f *faulty) Send(t *tensor.Tensor, dst int) *dist.Work {
	if f.fault == "send sends zeros" {
		t = t.Runtime().Zeros(t.DType(), t.Shape()...)
	}
	return f.ProcessGroup.Send(t, dst)
}

func (f *faulty) Barrier() *dist.Work {
	if f.fault == "barrier does not wait" {
		return dist.Failed(nil)
	}
	return f.ProcessGroup.Barrier()
}

func (f *faulty) GatherObject(payload []byte, root int) ([][]byte, error) {
	all, err := f.ProcessGroup.GatherObject(payload, root)
	if f.fault == "gatherObject in reverse" {
		slices.Reverse(all)
	}
	return all, err
}

func (f *faulty) NewGroup(ranks []int) (dist.ProcessGroup, error) {
	if f.fault == "newGroup of every rank" {
		ranks = make([]int, f.Size())
		for r := range ranks {
			ranks[r] = r
		}
	}
	return f.ProcessGroup.NewGroup(ranks)
}

func TestTheSuiteCatchesFaults(t *testing.T) {
	for _, c := range []struct {
		fault, cases, want string
	}{
		{"avg is sum", "allReduce/float32", "allReduce float32 avg of 1: element 0 is"},
		{"all-reduces complete late", "async/inFlight", "the continuations of 21 collectives in flight ran in the order"},
		{"broadcast from rank 0", "broadcast", "broadcast float32 of 1 from root 1: element 0 is 0, want -3"},
		{"broadcast accepts any root", "invalidArguments", "broadcast from root 3 succeeded"},
		{"send sends zeros", "sendRecv/pairs", "recv 0 of round 0 (float32 of 5) from rank 0: element 1 is 0, want 1"},
		{"barrier does not wait", "barrier", "before rank 2 came to it"},
		{"gatherObject in reverse", "gatherObject", "gatherObject on root 0: rank 0's payload is 10 bytes"},
		{"newGroup of every rank", "subgroups", "ranks outside get nil"},
	} {
		t.Run(c.fault, func(t *testing.T) {
			const n = 3
			w, err := dist.NewWorld(n, dist.Options{Debug: true, Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			ranks := make([]disttest.Rank, n)
			for r := range ranks {
				ranks[r] = disttest.Rank{
					PG:    &faulty{w.Group(r), c.fault},
					RT:    tensor.NewRuntime(cpu.New(cpu.Options{}), 0),
					Leave: func() { w.Leave(r) },
				}
			}
			i := slices.IndexFunc(disttest.Cases(), func(k disttest.Case) bool { return k.Name == c.cases })
			if i < 0 {
				t.Fatalf("no case %q", c.cases)
			}
			var found bool
			for _, err := range disttest.RunRanks(disttest.Cases()[i], ranks) {
				if err != nil {
					t.Log(err)
				}
				found = found || err != nil && strings.Contains(err.Error(), c.want)
			}
			if !found {
				t.Errorf("no rank reported %q", c.want)
			}
		})
	}
}
