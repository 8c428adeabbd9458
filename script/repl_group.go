package script

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// replGroup is a REPL rank's handle on the group of all ranks. It forwards
// to the handle of the REPL's current world, so that when a collective
// fails (a rank never called it and the timeout expired, or Ctrl-C stopped
// it) the REPL can replace the aborted world with a fresh one and the
// session goes on: variables, tensors and the objects made on the group
// (dist itself, DDP, ZeRO optimizers) keep working. Subgroups made with
// newGroup belong to the world they were made in and must be made again.
type replGroup struct {
	cur atomic.Pointer[dist.ProcessGroup]
}

func newREPLGroup(pg dist.ProcessGroup) *replGroup {
	g := &replGroup{}
	g.set(pg)
	return g
}

func (g *replGroup) set(pg dist.ProcessGroup) { g.cur.Store(&pg) }
func (g *replGroup) pg() dist.ProcessGroup    { return *g.cur.Load() }

func (g *replGroup) Rank() int { return g.pg().Rank() }
func (g *replGroup) Size() int { return g.pg().Size() }
func (g *replGroup) AllReduce(t *tensor.Tensor, op dist.ReduceOp) *dist.Work {
	return g.pg().AllReduce(t, op)
}
func (g *replGroup) Broadcast(t *tensor.Tensor, root int) *dist.Work {
	return g.pg().Broadcast(t, root)
}
func (g *replGroup) ReduceScatter(out, in *tensor.Tensor, op dist.ReduceOp) *dist.Work {
	return g.pg().ReduceScatter(out, in, op)
}
func (g *replGroup) AllGather(out, in *tensor.Tensor) *dist.Work { return g.pg().AllGather(out, in) }
func (g *replGroup) AllGatherInto(outs []*tensor.Tensor, in *tensor.Tensor) *dist.Work {
	return g.pg().AllGatherInto(outs, in)
}
func (g *replGroup) AllToAll(out, in *tensor.Tensor) *dist.Work { return g.pg().AllToAll(out, in) }
func (g *replGroup) Barrier() *dist.Work                        { return g.pg().Barrier() }
func (g *replGroup) Send(t *tensor.Tensor, dst int) *dist.Work  { return g.pg().Send(t, dst) }
func (g *replGroup) Recv(t *tensor.Tensor, src int) *dist.Work  { return g.pg().Recv(t, src) }
func (g *replGroup) BroadcastObject(payload []byte, root int) ([]byte, error) {
	return g.pg().BroadcastObject(payload, root)
}
func (g *replGroup) GatherObject(payload []byte, root int) ([][]byte, error) {
	return g.pg().GatherObject(payload, root)
}
func (g *replGroup) NewGroup(ranks []int) (dist.ProcessGroup, error) {
	return g.pg().NewGroup(ranks)
}

// AllReduceCoalesced is the current world's (dist.CoalescedAllReducer: a
// REPL's worlds are in-process ones, which have it), so that DDP reduces
// in place in the REPL as under `zeroeng run`.
func (g *replGroup) AllReduceCoalesced(ts []*tensor.Tensor, op dist.ReduceOp, preMul float64) *dist.Work {
	c, ok := g.pg().(dist.CoalescedAllReducer)
	if !ok {
		return dist.Failed(fmt.Errorf("dist: allReduce: the REPL's process group %T cannot reduce a list of tensors in place", g.pg()))
	}
	return c.AllReduceCoalesced(ts, op, preMul)
}

// CommTime is the current world's (dist.commTime() starts again from zero
// after a reset).
func (g *replGroup) CommTime() time.Duration {
	if c, ok := g.pg().(dist.CommTimer); ok {
		return c.CommTime()
	}
	return 0
}
