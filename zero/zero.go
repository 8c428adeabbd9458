// Package zero owns ZeRO sharding: the ZeroRedundancyOptimizer, which
// partitions the optimizer state (stage 1), the gradients (stage 2) and
// the parameters (stage 3) across the ranks of a process group, updates
// only this rank's shard and sends the updated parameters to the others;
// and the DDP comm-hook wrappers that overlap that step with backward
// (overlap.go).
//
// Two partitions exist. "greedy" is PyTorch's: whole parameters, largest
// first, each to the least-loaded rank; updated parameters are broadcast
// from their owners. "flat" (flat.go) is llm.c's and DeepSpeed's: the
// parameters are laid out in flat buckets, each cut into one equal slice
// per rank; each rank updates its slice and the slices are all-gathered.
// Stages 2 and 3 need the flat partition: gradients are reduce-scattered
// into the slices during backward instead of all-reduced, and each rank
// keeps only its gradient slice.
//
// Stage 3 (stage3.go) is FSDP's: each unit's parameters (a block of the
// model, then the model itself) exist whole only while the unit's forward
// or backward runs, gathered from the ranks' slices just before. The
// units are a Plan's (plan.go): Plan.FullyShard marks them, as the
// script's zero.fullyShard does, and Plan.Forward runs a unit's forward
// between its gather and its release, so that a Go program shards a
// model as a script does. What a stage shards is asked by name
// (Options.ShardsGradients, ShardsParameters, Offloads), not by number.
//
// Under stages 2 and 3 the host can keep the master weights and the state
// and run the step (Options.Offload, offload.go), and under stage 2 a
// schedule (schedule.go; Go, JavaScript or WebAssembly) decides when each
// bucket is stepped and sent during backward. The optimizer clips and
// unscales its own gradient slices (clip.go, scaler.go), gives PyTorch's
// state dicts (statedict.go), and hands its shards to engine/checkpoint
// through checkpoint.ShardedOptimizer and checkpoint.ShardedParams, whose
// methods name only the engine's types (shardstate.go): checkpoint does
// not import this package.
//
// The behaviour reproduced is PyTorch's ZeroRedundancyOptimizer and
// FSDP, and DeepSpeed's stages; docs/pytorch-parity.md says where it
// differs.
package zero

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Options configure the optimizer.
type Options struct {
	// Partition is "greedy" (the default for stage 1, PyTorch's) or
	// "flat" (equal slices of flat buckets; the default and the only
	// choice for stage 2).
	Partition string
	// ParametersAsBucketView makes the parameters views of flat buffers:
	// one per rank (greedy; the update is sent as one broadcast per rank)
	// or one per bucket (flat; the all-gather writes the parameters in
	// place, with no copy in or out).
	ParametersAsBucketView bool
	// Stage is 1 (optimizer state sharded; gradients averaged by DDP
	// beforehand), 2 (gradients sharded too: the optimizer reduces them
	// itself, without DDP) or 3 (parameters sharded too: each unit's are
	// gathered just before its forward and backward and freed after,
	// stage3.go). 0 means 1.
	Stage int
	// Units are stage 3's units (zero.fullyShard), the root last. Every
	// parameter of the optimizer must be in exactly one unit.
	Units []UnitSpec
	// Plan, instead of Units, is a plan the units were marked in
	// (Plan.FullyShard); the optimizer made takes them and becomes the
	// plan's (Plan.Optimizer, Plan.Forward). Stage 0 with a plan means 3.
	Plan *Plan
	// LimitAllGathers (stage 3) bounds the units gathered or being
	// gathered at once (those kept from forward to backward aside): while
	// a unit computes, the next one's all-gather is issued (prefetch,
	// forward and backward) when fewer are; 1 turns prefetching off. 0
	// means 2, FSDP's default.
	LimitAllGathers int
	// BucketCapMB caps the flat partition's buckets in MiB (default 25):
	// one reduce-scatter and one all-gather per bucket.
	BucketCapMB float64
	// OverlapWithDDP defers the partition and the step to a DDP comm hook
	// made by HookWithZeroStep or HookWithZeroStepInterleaved: the step
	// runs during backward; Step then only waits for it to finish.
	OverlapWithDDP bool
	// Offload, when set, is the host runtime that keeps the float32
	// master copy of this rank's slices and the optimizer state, and runs
	// the step (stages 2 and 3; offload.go).
	Offload *tensor.Runtime
	// Schedule (stage 2 only) steps this rank's slice of each bucket and
	// all-gathers the slices during backward, as the schedule decides,
	// told of each bucket's reduce-scatter (flatSchedule in schedule.go):
	// AfterBackward, Interleaved, AsReduced or the caller's own. Step then
	// only waits for the all-gathers. The parameters are updated before
	// backward returns, so what needs the whole gradient before the step
	// (ClipGradNorm, UnscaleGrads) is refused. Stage 1 runs a schedule
	// in the DDP comm hook instead (HookWithZeroSchedule); stage 3 keeps
	// its own order.
	Schedule Schedule
	// StrictSchedule makes it an error for Schedule to leave a bucket
	// unstepped or not all-gathered when its last bucket was launched (the
	// engine still does it, so that the ranks stay in step, and Step
	// fails naming the buckets).
	StrictSchedule bool
}

// ErrNoOverlapHook is Step's error under OverlapWithDDP before an overlap
// hook was made over the optimizer: nothing was stepped. PyTorch's
// ZeroRedundancyOptimizer.step warns and returns there; the script API
// does the same.
var ErrNoOverlapHook = errors.New("zero: overlapWithDDP: step() did nothing: the step runs in the DDP comm hook made by zero.hookWithZeroStep (or the interleaved one), and none is registered yet")

// Optimizer is ZeroRedundancyOptimizer: the parameter groups and their
// hyper-parameters are global (schedulers act on them through
// ParamGroups), the state exists only for the parameters (or slices) this
// rank owns.
type Optimizer struct {
	pg       dist.ProcessGroup
	rt       *tensor.Runtime
	kind     optim.Kind
	defaults optim.ParamGroup
	opts     Options

	// Groups are the global parameter groups, every parameter in each.
	Groups []*optim.ParamGroup

	groupOf map[*tensor.Tensor]int // parameter → its group
	index   map[*tensor.Tensor]int // parameter → global index in group order

	// The greedy partition: each parameter's owner and, on its owner, its
	// state. rankBufs are the per-rank flat buffers the parameters view
	// (ParametersAsBucketView).
	owner    map[*tensor.Tensor]int
	state    map[*tensor.Tensor]*optim.State
	rankBufs []*tensor.Tensor

	flat *flatLayout // the flat partition (flat.go)
	ov   *overlap    // the DDP hook doing the step (overlap.go)

	consolidated map[int]*optim.State // ConsolidateStateDict's result, on its target

	// Bytes moved between the device and the host (offload.go); atomic,
	// as the host step runs beside the rank under stage 3.
	toHostBytes, toDeviceBytes atomic.Int64
}

// New makes a ZeroRedundancyOptimizer of kind over params, whose first
// group has the hyper-parameters of defaults, sharded over pg. Every rank
// of pg must call it with the same parameters (in the same order).
func New(pg dist.ProcessGroup, kind optim.Kind, params []*tensor.Tensor, defaults optim.ParamGroup, opts Options) (*Optimizer, error) {
	if opts.Plan != nil {
		switch {
		case opts.Stage == 0:
			opts.Stage = 3
		case !opts.ShardsParameters():
			return nil, fmt.Errorf("zero: a plan of units is stage 3's, not stage %d's", opts.Stage)
		}
		switch {
		case len(opts.Units) > 0:
			return nil, fmt.Errorf("zero: units and a plan: the plan has the units")
		case opts.Plan.z != nil:
			return nil, fmt.Errorf("zero: the plan's units are sharded by an optimizer already: one plan, one stage-3 optimizer")
		}
		opts.Units = opts.Plan.Units()
	}
	switch opts.Stage {
	case 0:
		opts.Stage = 1
	case 1, 2, 3:
	default:
		return nil, fmt.Errorf("zero: stage %d is not supported (1: optimizer state, 2: gradients too, 3: parameters too)", opts.Stage)
	}
	if opts.Offloads() && !opts.ShardsGradients() {
		return nil, fmt.Errorf("zero: offload needs stage 2 or 3 (the host steps this rank's slices of the flat partition)")
	}
	switch {
	case opts.Schedule == nil:
		if opts.StrictSchedule {
			return nil, fmt.Errorf("zero: strictSchedule without a schedule")
		}
	case !opts.ShardsGradients():
		return nil, fmt.Errorf("zero: a schedule under stage 1 runs in the DDP comm hook: make the optimizer with overlapWithDDP and pass the schedule to hookWithZeroSchedule (HookWithZeroSchedule); the schedule option is stage 2's")
	case opts.ShardsParameters():
		return nil, fmt.Errorf("zero: stage 3 keeps its built-in order (each unit is gathered, reduce-scattered and stepped around its own forward and backward): the schedule option is stage 2's")
	case opts.Offloads():
		return nil, fmt.Errorf("zero: a schedule with offload: the host steps the slices after backward, in its own order; use stage 2 on the device for a schedule, or offload without one")
	case assigns(opts.Schedule) != nil:
		return nil, fmt.Errorf("zero: schedule %v assigns owners, but under stage 2 every rank steps its slice of every bucket: assign is stage 1's (hookWithZeroSchedule)", opts.Schedule)
	}
	if opts.LimitAllGathers == 0 {
		opts.LimitAllGathers = 2
	}
	if opts.LimitAllGathers < 0 {
		return nil, fmt.Errorf("zero: limitAllGathers must be 1 or more, got %d", opts.LimitAllGathers)
	}
	if opts.ShardsParameters() && len(opts.Units) == 0 {
		return nil, fmt.Errorf("zero: stage 3 shards the parameters of units: call zero.fullyShard on each block of the model and then on the model itself before making the optimizer")
	}
	switch opts.Partition {
	case "":
		opts.Partition = "greedy"
		if opts.ShardsGradients() {
			opts.Partition = "flat"
		}
	case "greedy", "flat":
	default:
		return nil, fmt.Errorf("zero: unknown partition %q (greedy or flat)", opts.Partition)
	}
	if opts.ShardsGradients() && opts.Partition != "flat" {
		return nil, fmt.Errorf("zero: stage %d reduce-scatters gradients into equal slices and needs partition \"flat\", not %q", opts.Stage, opts.Partition)
	}
	if opts.OverlapWithDDP && (opts.Partition != "greedy" || opts.ShardsGradients()) {
		return nil, fmt.Errorf("zero: overlapWithDDP works with stage 1 and the greedy partition (stage 2 overlaps its reduce-scatters with backward by itself)")
	}
	if opts.BucketCapMB == 0 {
		opts.BucketCapMB = 25
	}
	if opts.BucketCapMB < 0 {
		return nil, fmt.Errorf("zero: bucketCapMB must be positive, got %v", opts.BucketCapMB)
	}
	if len(params) == 0 {
		return nil, fmt.Errorf("zero: ZeroRedundancyOptimizer expects at least one parameter")
	}
	defaults.Params = nil
	if err := defaults.Validate(kind); err != nil {
		return nil, err
	}
	z := &Optimizer{pg: pg, rt: params[0].Runtime(), kind: kind, defaults: defaults, opts: opts,
		state: map[*tensor.Tensor]*optim.State{}, owner: map[*tensor.Tensor]int{},
		groupOf: map[*tensor.Tensor]int{}, index: map[*tensor.Tensor]int{}}
	if opts.Partition == "flat" {
		z.flat = &flatLayout{z: z, sync: true}
		if opts.Schedule != nil {
			z.flat.sched = newFlatSchedule(z.flat, opts.Schedule, opts.StrictSchedule)
		}
		if opts.ShardsParameters() {
			if err := z.flat.assignUnits(opts.Units, params); err != nil {
				return nil, err
			}
			if err := z.flat.checkUnitsAgree(); err != nil {
				return nil, err
			}
		}
	}
	g := defaults.Hyper()
	g.Params = params
	if err := z.AddParamGroup(g); err != nil {
		return nil, err
	}
	if opts.Plan != nil {
		opts.Plan.z = z
	}
	return z, nil
}

// Kind is the wrapped optimizer's algorithm.
func (z *Optimizer) Kind() optim.Kind { return z.kind }

// ProcessGroup is the group the state is sharded over.
func (z *Optimizer) ProcessGroup() dist.ProcessGroup { return z.pg }

// Options returns the options in effect (defaults filled in).
func (z *Optimizer) Options() Options { return z.opts }

// Defaults returns a copy of the defaults, to start a new group from.
func (z *Optimizer) Defaults() optim.ParamGroup { return z.defaults.Hyper() }

// ParamGroups implements optim.LRGroups: schedulers change the global
// groups' learning rates, which the next Step uses.
func (z *Optimizer) ParamGroups() []*optim.ParamGroup { return z.Groups }

// Params lists every parameter in group order (global indices).
func (z *Optimizer) Params() []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, g := range z.Groups {
		out = append(out, g.Params...)
	}
	return out
}

// AddParamGroup adds a group and partitions again (add_param_group):
// the greedy partition reassigns every parameter (state already built
// stays with its parameters when this rank still owns them); the flat
// partition adds buckets for the new group and leaves the others alone.
func (z *Optimizer) AddParamGroup(g optim.ParamGroup) error {
	if z.ov != nil {
		return fmt.Errorf("zero: addParamGroup after the overlap hook was made; add the groups first")
	}
	if err := z.settle(); err != nil {
		return err
	}
	if f := z.flat; f != nil && f.sched != nil && f.active {
		return fmt.Errorf("zero: addParamGroup between a backward pass and its step, with a schedule: add the group after step()")
	}
	// The plain optimizer checks the group (non-empty, floating-point
	// leaves, no parameter twice); ZeRO keeps the same rules.
	check, err := optim.New(z.kind, nil, z.defaults)
	if err != nil {
		return err
	}
	for _, og := range z.Groups {
		if err := check.AddParamGroup(*og); err != nil {
			return err
		}
	}
	if err := check.AddParamGroup(g); err != nil {
		return fmt.Errorf("zero: %w", err)
	}
	dt := g.Params[0].DType()
	if len(z.Groups) > 0 {
		dt = z.Groups[0].Params[0].DType()
	}
	for _, p := range g.Params {
		if p.DType() != dt {
			return fmt.Errorf("zero: ZeroRedundancyOptimizer expects parameters of one dtype (%v); %s is %v", dt, paramLabel(p, -1), p.DType())
		}
		if !p.IsContiguous() {
			return fmt.Errorf("zero: %s is not contiguous", paramLabel(p, -1))
		}
	}
	ng := g
	ng.Params = slices.Clone(g.Params)
	z.Groups = append(z.Groups, &ng)
	gi := len(z.Groups) - 1
	for _, p := range ng.Params {
		z.groupOf[p] = gi
		z.index[p] = len(z.index)
	}
	switch {
	case z.flat != nil:
		if z.opts.ShardsGradients() {
			// Without DDP, nobody else makes the replicas start equal.
			if err := z.broadcastFrom0(ng.Params); err != nil {
				return err
			}
		}
		return z.flat.addGroup(gi)
	case z.opts.OverlapWithDDP:
		return nil // the overlap hook assigns the buckets' parameters
	default:
		z.partition()
		return z.viewRankBuffers()
	}
}

// partition assigns every parameter to a rank, PyTorch's way: one running
// size per rank across all groups; within a group the parameters, largest
// first (a stable sort), each go to the rank with the smallest total, ties
// to the lowest rank. Parameters are never split.
func (z *Optimizer) partition() {
	clear(z.owner)
	load := make([]int, z.pg.Size())
	for _, g := range z.Groups {
		z.assignLargestFirst(g.Params, load)
	}
	z.dropForeignState()
}

// assignLargestFirst gives params, largest first (a stable sort), each to
// the rank with the smallest load, ties to the lowest rank, and adds
// their sizes to load.
func (z *Optimizer) assignLargestFirst(params []*tensor.Tensor, load []int) {
	sizes := make([]int, len(params))
	for i, p := range params {
		sizes[i] = p.Numel()
	}
	for i, r := range AssignLargestFirst(sizes, load) {
		z.owner[params[i]] = r
	}
}

// AssignLargestFirst is PyTorch's greedy partition of one parameter
// group: it returns the owner rank of each of the parameters of the given
// sizes, taking them largest first (a stable sort) and giving each to the
// rank with the smallest load (ties to the lowest rank), whose load it
// then increases. load has one running total per rank and carries over
// from group to group.
func AssignLargestFirst(sizes []int, load []int) []int {
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sizes[b], sizes[a]) })
	owner := make([]int, len(sizes))
	for _, i := range order {
		r := 0
		for k := 1; k < len(load); k++ {
			if load[k] < load[r] {
				r = k
			}
		}
		owner[i] = r
		load[r] += sizes[i]
	}
	return owner
}

// dropForeignState frees the state of parameters this rank no longer owns.
func (z *Optimizer) dropForeignState() {
	for p, s := range z.state {
		if z.owner[p] != z.pg.Rank() {
			s.Release()
			delete(z.state, p)
		}
	}
}

// viewRankBuffers makes, with ParametersAsBucketView and the greedy
// partition, each rank's parameters views of one flat buffer per rank, in
// group order, so that one broadcast per rank sends a whole shard.
func (z *Optimizer) viewRankBuffers() error {
	if !z.opts.ParametersAsBucketView {
		return nil
	}
	sc := z.rt.OpenScope() // the views below
	defer sc.Close()
	shards := z.Shards()
	bufs := make([]*tensor.Tensor, len(shards))
	for r, shard := range shards {
		n := 0
		for _, p := range shard {
			n += p.Numel()
		}
		if n == 0 {
			continue
		}
		buf := z.rt.Empty(shard[0].DType(), n).Persist()
		off := 0
		for _, p := range shard {
			view := buf.Narrow(0, off, p.Numel())
			err := view.View(p.Shape()...).CopyFrom(p)
			if err == nil {
				err = p.SetData(view)
			}
			view.Release()
			if err != nil {
				buf.Release()
				return fmt.Errorf("zero: parameters as bucket view: %w", err)
			}
			off += p.Numel()
		}
		bufs[r] = buf
	}
	for _, b := range z.rankBufs {
		b.Release() // the parameters that viewed it hold new storage now
	}
	z.rankBufs = bufs
	return nil
}

// Owner is the rank that updates p under the greedy partition (-1 under
// the flat one, where every rank updates a slice of it, or before the
// overlap hook assigned it).
func (z *Optimizer) Owner(p *tensor.Tensor) int {
	if r, ok := z.owner[p]; ok {
		return r
	}
	return -1
}

// Shards lists each rank's parameters, in group order (greedy partition;
// under the flat partition a parameter is listed for every rank holding
// a slice of it).
func (z *Optimizer) Shards() [][]*tensor.Tensor {
	out := make([][]*tensor.Tensor, z.pg.Size())
	if z.flat != nil {
		for r := range out {
			for _, b := range z.flat.buckets {
				for _, pc := range b.piecesOf(r) {
					if !slices.Contains(out[r], pc.param) {
						out[r] = append(out[r], pc.param)
					}
				}
			}
		}
		return out
	}
	for _, g := range z.Groups {
		for _, p := range g.Params {
			if r, ok := z.owner[p]; ok {
				out[r] = append(out[r], p)
			}
		}
	}
	return out
}

// ShardSizes is the number of elements each rank updates: the sizes of
// its whole parameters (greedy), or of its slices (flat, padding
// included, so every rank's is the same). The balance of a partition.
func (z *Optimizer) ShardSizes() []int {
	out := make([]int, z.pg.Size())
	if z.flat != nil {
		for _, b := range z.flat.buckets {
			for r := range out {
				out[r] += b.slice
			}
		}
		return out
	}
	for p, r := range z.owner {
		out[r] += p.Numel()
	}
	return out
}

// Step updates this rank's shard, then the updated parameters reach every
// rank. With the greedy partition each owned parameter with a gradient is
// updated and every parameter broadcast from its owner; with the flat one
// see flatLayout.step. With OverlapWithDDP the step already ran in the
// DDP hook during backward: Step waits until it and its broadcasts are
// done (and is also what the next forward needs). With a stage-2
// Schedule likewise: Step waits for the all-gathers the schedule
// launched and returns the iteration's first error.
func (z *Optimizer) Step() error {
	switch {
	case z.opts.OverlapWithDDP:
		if z.ov == nil {
			return ErrNoOverlapHook
		}
		return z.ov.finish()
	case z.flat != nil:
		return z.flat.step()
	}
	me := z.pg.Rank()
	for gi, g := range z.Groups {
		var params []*tensor.Tensor
		for _, p := range g.Params {
			if z.owner[p] == me {
				params = append(params, p)
			}
		}
		if err := z.update(gi, params, func(p *tensor.Tensor) *tensor.Tensor { return p.Grad() }); err != nil {
			return err
		}
	}
	return z.syncParameters()
}

// update runs the local optimizer of group gi over params (owned by this
// rank), each with the gradient grad returns (nil: skipped, as PyTorch
// skips parameters without .grad).
func (z *Optimizer) update(gi int, params []*tensor.Tensor, grad func(*tensor.Tensor) *tensor.Tensor) error {
	if len(params) == 0 {
		return nil
	}
	grads := make([]*tensor.Tensor, len(params))
	states := make([]*optim.State, len(params))
	for i, p := range params {
		grads[i] = grad(p)
		states[i] = z.state[p]
	}
	if err := optim.Update(z.kind, z.Groups[gi], params, grads, states); err != nil {
		return fmt.Errorf("zero: %w", err)
	}
	for i, p := range params {
		if states[i] != nil {
			z.state[p] = states[i]
		}
	}
	return nil
}

// syncParameters broadcasts every parameter from its owner: one broadcast
// per parameter, or one per rank when the parameters view per-rank
// buffers.
func (z *Optimizer) syncParameters() error {
	var works []*dist.Work
	if z.rankBufs != nil {
		for r, b := range z.rankBufs {
			if b != nil {
				works = append(works, z.pg.Broadcast(b, r))
			}
		}
	} else {
		for _, g := range z.Groups {
			for _, p := range g.Params {
				works = append(works, z.pg.Broadcast(p, z.owner[p]))
			}
		}
	}
	return waitAll(works, "sending updated parameters")
}

// broadcastFrom0 makes every rank's params rank 0's. A parameter built
// lazily (zero.init) has no values to send: its random initialisations
// take rank 0's generator states instead, which makes the same values
// without making them whole (the other steps, constant fills and copies,
// are each rank's own: the same script makes them the same).
func (z *Optimizer) broadcastFrom0(params []*tensor.Tensor) error {
	var works []*dist.Work
	var lazy []*tensor.Tensor
	for _, p := range params {
		if p.IsLazy() {
			lazy = append(lazy, p)
			continue
		}
		works = append(works, z.pg.Broadcast(p, 0))
	}
	if err := waitAll(works, "broadcasting the parameters from rank 0"); err != nil || len(lazy) == 0 {
		return err
	}
	var draws [][][]byte
	for _, p := range lazy {
		draws = append(draws, p.LazyDraws())
	}
	payload, err := json.Marshal(draws)
	if err != nil {
		return err
	}
	if payload, err = z.pg.BroadcastObject(payload, 0); err != nil {
		return fmt.Errorf("zero: sending rank 0's initialisation of the lazily built parameters: %w", err)
	}
	if err := json.Unmarshal(payload, &draws); err != nil || len(draws) != len(lazy) {
		return fmt.Errorf("zero: rank 0 built %d parameters lazily (zero.init) and rank %d %d: every rank must build the same model", len(draws), z.pg.Rank(), len(lazy))
	}
	for i, p := range lazy {
		if err := p.SetLazyDraws(draws[i]); err != nil {
			return fmt.Errorf("zero: %s differs from rank 0's: %w", paramLabel(p, z.index[p]), err)
		}
	}
	return nil
}

func waitAll(works []*dist.Work, what string) error {
	var first error
	for _, w := range works {
		if err := w.Wait(); err != nil && first == nil {
			first = fmt.Errorf("zero: %s: %w", what, err)
		}
	}
	return first
}

// ZeroGrad clears the gradients of every parameter: to nil when
// setToNone, else zeroed in place.
func (z *Optimizer) ZeroGrad(setToNone bool) error {
	for _, p := range z.Params() {
		if err := nn.ZeroGradOf(p, setToNone); err != nil {
			return err
		}
	}
	return nil
}

// State returns p's optimizer state on this rank under the greedy
// partition (nil when another rank owns p, or before its first update).
func (z *Optimizer) State(p *tensor.Tensor) *optim.State {
	z.waitHost()
	return z.state[p]
}

// Memory is what one rank holds, in bytes.
type Memory struct {
	Parameters int64 `json:"parameters"`
	Gradients  int64 `json:"gradients"`
	State      int64 `json:"optimizerState"`
	// OwnedParameters are the bytes of the parameters this rank updates.
	OwnedParameters int64 `json:"ownedParameters"`
	// HostState is what offload keeps on the host instead of State: the
	// optimizer state and the float32 master copy of the rank's slices.
	HostState int64 `json:"hostState"`
}

// Total is the sum of parameters, gradients and optimizer state.
func (m Memory) Total() int64 { return m.Parameters + m.Gradients + m.State }

// Memory reports this rank's bytes of parameters, gradients and
// optimizer state. Under stage 2 the gradients are the rank's slices (the
// full gradients exist only between backward producing them and their
// reduce-scatter); under stage 3 the parameters too (Parameters counts
// this rank's slices and the units gathered at the moment).
func (z *Optimizer) Memory() Memory {
	var m Memory
	me := z.pg.Rank()
	for _, p := range z.Params() {
		b := int64(p.Numel() * p.DType().Size())
		if !p.MemoryFreed() {
			m.Parameters += b // stage 3: only the parameters gathered now
		}
		if gr := p.GradNoSync(); gr != nil {
			m.Gradients += int64(gr.Numel() * gr.DType().Size())
		}
		if r, ok := z.owner[p]; ok && r == me {
			m.OwnedParameters += b
		}
	}
	for _, s := range z.state {
		m.State += s.Bytes()
	}
	if z.flat != nil {
		z.flat.memory(&m)
	}
	return m
}

// paramLabel names parameter p (global index i, or -1) in messages.
func paramLabel(p *tensor.Tensor, i int) string {
	switch {
	case p.Name() != "":
		return fmt.Sprintf("parameter %q", p.Name())
	case i >= 0:
		return fmt.Sprintf("parameter %d", i)
	}
	return fmt.Sprintf("a parameter of shape %v", p.Shape())
}
