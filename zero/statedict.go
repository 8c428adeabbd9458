package zero

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"maps"
	"slices"

	"github.com/zeroeng/zeroeng/engine/checkpoint/shard"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Chunk is what one rank holds of one parameter's optimizer state
// (shard.Chunk, where engine/checkpoint sees it too).
type Chunk = shard.Chunk

// ConsolidateStateDict gathers every rank's optimizer state on rank to
// (consolidate_state_dict). It is collective: every rank calls it. Each
// rank sends its shard to the target only (PyTorch broadcasts every shard
// to every rank); the target then serves StateDict.
func (z *Optimizer) ConsolidateStateDict(to int) error {
	if to < 0 || to >= z.pg.Size() {
		return fmt.Errorf("zero: consolidateStateDict: rank %d is not in the group of %d", to, z.pg.Size())
	}
	chunks, err := z.LocalChunks()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(chunks); err != nil {
		return fmt.Errorf("zero: consolidateStateDict: %w", err)
	}
	payloads, err := z.pg.GatherObject(buf.Bytes(), to)
	if err != nil {
		return fmt.Errorf("zero: consolidateStateDict: %w", err)
	}
	z.releaseConsolidated()
	if z.pg.Rank() != to {
		return nil
	}
	asm := NewAssembly(z.rt, z.Params())
	for r, payload := range payloads {
		var got []Chunk
		if err := gob.NewDecoder(bytes.NewReader(payload)).Decode(&got); err != nil {
			asm.Release()
			return fmt.Errorf("zero: consolidateStateDict: rank %d's shard: %w", r, err)
		}
		if err := asm.Add(fmt.Sprintf("rank %d", r), got); err != nil {
			asm.Release()
			return fmt.Errorf("zero: consolidateStateDict: %w", err)
		}
	}
	z.consolidated = asm.States()
	return nil
}

// Assembly puts chunks from any number of ranks back together into the
// whole-parameter states of a consolidated state dict. An entry that one
// chunk holds whole shares the chunk's bytes on host devices.
type Assembly struct {
	rt      *tensor.Runtime
	params  []*tensor.Tensor
	full    map[int]*optim.State
	covered map[int]map[string]int // elements written per state entry
}

// NewAssembly starts an assembly of the states of params (in global
// index order) on rt.
func NewAssembly(rt *tensor.Runtime, params []*tensor.Tensor) *Assembly {
	return &Assembly{rt: rt, params: params, full: map[int]*optim.State{}, covered: map[int]map[string]int{}}
}

// Add copies chunks into place; from names their source in errors ("rank
// 2", a file).
func (a *Assembly) Add(from string, chunks []Chunk) error {
	for _, c := range chunks {
		if c.Index < 0 || c.Index >= len(a.params) || len(c.Names) != len(c.Data) {
			return fmt.Errorf("%s holds state for parameter %d of %d", from, c.Index, len(a.params))
		}
		p := a.params[c.Index]
		s := a.full[c.Index]
		if s == nil {
			s = &optim.State{}
			a.full[c.Index] = s
			a.covered[c.Index] = map[string]int{}
		}
		if s.Scalars == nil || c.Step > s.Step {
			// The scalars (mu_product) of the chunk with the latest
			// step; every chunk of a parameter holds the same.
			s.Scalars = maps.Clone(c.Scalars)
		}
		s.Step = max(s.Step, c.Step)
		dt := optim.StateDType(p)
		for i, name := range c.Names {
			field, ok := optim.StateField(s, name)
			if !ok {
				return fmt.Errorf("%s holds an unknown entry %q for %s", from, name, paramLabel(p, c.Index))
			}
			n := len(c.Data[i]) / dt.Size()
			if c.At < 0 || c.At+n > p.Numel() || n*dt.Size() != len(c.Data[i]) {
				return fmt.Errorf("%s holds %d bytes of %q at element %d of %s (%d %v elements)", from, len(c.Data[i]), name, c.At, paramLabel(p, c.Index), p.Numel(), dt)
			}
			if *field == nil && c.At == 0 && n == p.Numel() {
				// The whole entry in one chunk: a tensor over its bytes
				// where the device's memory is host memory, not a copy.
				*field = a.rt.FromHostMemory(dt, c.Data[i], p.Shape()...).Persist()
				if err := (*field).Err(); err != nil {
					return err
				}
				a.covered[c.Index][name] += n
				continue
			}
			if *field == nil {
				*field = a.rt.Zeros(dt, p.Shape()...).Persist()
			}
			src := a.rt.FromBytes(dt, c.Data[i], n)
			dst := (*field).View(-1).Narrow(0, c.At, n)
			err := dst.CopyFrom(src)
			src.Release()
			dst.Release()
			if err != nil {
				return err
			}
			a.covered[c.Index][name] += n
		}
	}
	return nil
}

// Complete checks that every state entry begun was covered whole, by
// chunks that do not overlap.
func (a *Assembly) Complete() error {
	for i, s := range a.full {
		for _, e := range s.Tensors() {
			if got, want := a.covered[i][e.Name], a.params[i].Numel(); got != want {
				return fmt.Errorf("the chunks of %q of %s cover %d of its %d elements", e.Name, paramLabel(a.params[i], i), got, want)
			}
		}
	}
	return nil
}

// States hands the assembled states over to the caller, by global index.
func (a *Assembly) States() map[int]*optim.State {
	full := a.full
	a.full = nil
	return full
}

// Release frees what was assembled, when it is not handed over.
func (a *Assembly) Release() {
	for _, s := range a.full {
		s.Release()
	}
	a.full = nil
}

// LocalChunks lists this rank's state, one chunk per parameter or piece
// that has state, in bucket (flat) or index order (greedy), each with the
// step and the 0-d entries (Scalars: NAdam's mu_product) of its piece's
// state. The data shares the state's memory where that is host memory: it
// is valid until the optimizer steps or loads again.
func (z *Optimizer) LocalChunks() ([]Chunk, error) {
	if err := z.settle(); err != nil {
		return nil, err
	}
	var out []Chunk
	add := func(p *tensor.Tensor, at, n int, s *optim.State) error {
		c := Chunk{Index: z.index[p], At: at, Step: s.Step, Scalars: maps.Clone(s.Scalars), N: n}
		for _, e := range s.Tensors() {
			b, err := tensor.SharedBytes(e.Tensor)
			if err != nil {
				return fmt.Errorf("zero: state %q of %s: %w", e.Name, paramLabel(p, z.index[p]), err)
			}
			c.Names = append(c.Names, e.Name)
			c.Data = append(c.Data, b)
		}
		out = append(out, c)
		return nil
	}
	if z.flat != nil {
		for _, b := range z.flat.buckets {
			for _, pc := range b.pieces {
				if pc.state != nil {
					if err := add(pc.param, pc.at, pc.n, pc.state); err != nil {
						return nil, err
					}
				}
			}
		}
		return out, nil
	}
	for _, p := range z.Params() {
		if s := z.state[p]; s != nil {
			if err := add(p, 0, p.Numel(), s); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func (z *Optimizer) releaseConsolidated() {
	for _, s := range z.consolidated {
		s.Release()
	}
	z.consolidated = nil
}

// StateDict returns the optimizer's whole state in the plain optimizer's
// layout (global parameter indices, PyTorch's keys), on the rank that was
// the target of the last ConsolidateStateDict. The tensors are the
// consolidated copies, valid until the next consolidation.
func (z *Optimizer) StateDict() (*optim.StateDict, error) {
	if z.consolidated == nil {
		return nil, fmt.Errorf("zero: stateDict on rank %d: call consolidateStateDict(to) on every rank first, and stateDict on rank to", z.pg.Rank())
	}
	return optim.MakeStateDict(z.kind, z.Groups, func(p *tensor.Tensor) *optim.State { return z.consolidated[z.index[p]] }), nil
}

// LoadStateDict restores hyper-parameters and state from a consolidated
// dict (or a plain optimizer's), made under any world size and partition:
// each rank keeps the state of what it owns (whole parameters, or the
// slices of them under the flat partition). Nothing changes unless the
// whole dict is valid.
func (z *Optimizer) LoadStateDict(sd *optim.StateDict) error {
	if sd == nil {
		return fmt.Errorf("zero: loadStateDict: no state dict")
	}
	if err := z.settle(); err != nil {
		return err
	}
	hyper, states, err := optim.ReadStateDict(z.kind, z.Groups, sd)
	if err != nil {
		return fmt.Errorf("zero: loadStateDict: %w", err)
	}
	for i, g := range z.Groups {
		ps := g.Params
		*g = hyper[i]
		g.Params = ps
	}
	params := z.Params()
	if z.flat != nil {
		sc := z.rt.OpenScope()
		defer sc.Close()
		for _, b := range z.flat.buckets {
			for _, pc := range b.pieces {
				if pc.state != nil {
					pc.state.Release()
					pc.state = nil
				}
				s := states[z.index[pc.param]]
				if s == nil {
					continue
				}
				pc.state = &optim.State{Step: s.Step, Scalars: maps.Clone(s.Scalars)}
				for _, e := range s.Tensors() {
					field, _ := optim.StateField(pc.state, e.Name)
					*field = e.Tensor.View(-1).Narrow(0, pc.at, pc.n).Clone().Persist()
				}
			}
		}
		for _, s := range states {
			s.Release()
		}
		return nil
	}
	me := z.pg.Rank()
	keys := make([]int, 0, len(states))
	for k := range states {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p, s := params[k], states[k]
		if r, assigned := z.owner[p]; assigned && r != me {
			s.Release()
			continue
		}
		if old := z.state[p]; old != nil {
			old.Release()
		}
		z.state[p] = s
	}
	return nil
}

// ErrOtherLayout is LoadShard's answer to chunks saved under another
// world size or partition; the consolidated state dict serves those.
var ErrOtherLayout = shard.ErrOtherLayout

// ownPiece is one parameter, or piece of one, whose state this rank keeps:
// where its state lives and the shape it has there.
type ownPiece struct {
	param *tensor.Tensor
	at, n int
	shape []int
	state **optim.State // the flat partition's; the greedy one keeps z.state
}

func (z *Optimizer) ownPieces() []ownPiece {
	var out []ownPiece
	if z.flat != nil {
		for _, b := range z.flat.buckets {
			for _, pc := range b.pieces {
				out = append(out, ownPiece{pc.param, pc.at, pc.n, []int{pc.n}, &pc.state})
			}
		}
		return out
	}
	for _, p := range z.Params() {
		if z.owner[p] == z.pg.Rank() {
			out = append(out, ownPiece{p, 0, p.Numel(), p.Shape(), nil})
		}
	}
	return out
}

// MatchesShard reports whether chunks are exactly this rank's pieces, as
// LocalChunks gives them under this world size and partition (pieces
// without state may be missing): what LoadShard accepts. A chunk without
// Data is described by N.
func (z *Optimizer) MatchesShard(chunks []Chunk) bool {
	z.waitHost()
	_, ok := z.matchChunks(z.ownPieces(), chunks)
	return ok
}

// matchChunks finds each chunk's piece.
func (z *Optimizer) matchChunks(pieces []ownPiece, chunks []Chunk) ([]int, bool) {
	byIndex := map[int]int{}
	for i, pc := range pieces {
		byIndex[z.index[pc.param]] = i
	}
	at := make([]int, len(chunks))
	used := make([]bool, len(pieces))
	for ci, c := range chunks {
		i, ok := byIndex[c.Index]
		if !ok || used[i] || pieces[i].at != c.At || (len(c.Names) > 0 && c.N != pieces[i].n) || (c.Data != nil && len(c.Names) != len(c.Data)) {
			return nil, false
		}
		size := optim.StateDType(pieces[i].param).Size()
		for _, d := range c.Data {
			if len(d) != pieces[i].n*size {
				return nil, false
			}
		}
		used[i], at[ci] = true, i
	}
	return at, true
}

// LoadShard restores the hyper-parameters from paramGroups (a state dict's
// param_groups) and this rank's state from the chunks LocalChunks gave
// under the same world size and partition, without any communication.
// Chunks that are not exactly this rank's pieces give ErrOtherLayout;
// nothing changes unless everything is valid.
func (z *Optimizer) LoadShard(paramGroups []map[string]any, chunks []Chunk) error {
	l, err := z.beginLoadShard(paramGroups, chunks)
	if err != nil {
		return err
	}
	for ci, c := range chunks {
		for k, name := range c.Names {
			if c.Data == nil {
				l.Abort()
				return fmt.Errorf("zero: loadShard: %s %q: no data", paramLabel(l.pieces[l.at[ci]].param, c.Index), name)
			}
			t := l.Entry(ci, k)
			if err := optim.CheckStateValues(name, t.DType(), c.Data[k], c.At); err != nil {
				l.Abort()
				return fmt.Errorf("zero: loadShard: %s: %w", paramLabel(l.pieces[l.at[ci]].param, c.Index), err)
			}
			if err := t.SetBytes(c.Data[k]); err != nil {
				l.Abort()
				return fmt.Errorf("zero: loadShard: %s %q: %w", paramLabel(l.pieces[l.at[ci]].param, c.Index), name, err)
			}
		}
	}
	return l.Commit()
}

// ShardLoad is LoadShard in two steps (a shard.Load), for a reader that
// fills the state tensors itself (a checkpoint, read from its files
// straight into them): BeginLoadShard checks the chunks' layout and
// entries and makes the tensors, the reader fills each Entry, then Commit
// installs them or Abort frees them. The optimizer changes only at Commit.
type ShardLoad struct {
	z      *Optimizer
	hyper  []optim.ParamGroup
	pieces []ownPiece
	at     []int              // each chunk's piece
	states []*optim.State     // by piece
	tensor [][]*tensor.Tensor // by chunk, then entry
}

// BeginLoadShard starts a LoadShard of chunks that describe their entries
// (Index, At, Step, Scalars, Names, N) and may hold no Data: it checks the
// hyper-parameters, that the chunks are this rank's pieces (else
// ErrOtherLayout), that each holds exactly the entries its parameter's
// state keeps under them (optim.CheckStateNames) and scalars it keeps
// with values a run can have (optim.CheckStateScalars; a chunk without
// them, from an older checkpoint, leaves NAdam to recompute mu_product
// from the step), and makes the state tensors for the reader to fill.
// The load is a *ShardLoad.
func (z *Optimizer) BeginLoadShard(paramGroups []map[string]any, chunks []Chunk) (shard.Load, error) {
	l, err := z.beginLoadShard(paramGroups, chunks)
	if err != nil {
		return nil, err // not a nil *ShardLoad in the interface
	}
	return l, nil
}

// ShardLayout is the partition and stage the state is cut under, as a
// checkpoint's manifest records them.
func (z *Optimizer) ShardLayout() shard.Layout {
	return shard.Layout{Partition: z.opts.Partition, Stage: z.opts.Stage}
}

func (z *Optimizer) beginLoadShard(paramGroups []map[string]any, chunks []Chunk) (*ShardLoad, error) {
	if err := z.settle(); err != nil {
		return nil, err
	}
	hyper, _, err := optim.ReadStateDict(z.kind, z.Groups, &optim.StateDict{ParamGroups: paramGroups})
	if err != nil {
		return nil, fmt.Errorf("zero: loadShard: %w", err)
	}
	pieces := z.ownPieces()
	at, ok := z.matchChunks(pieces, chunks)
	if !ok {
		return nil, ErrOtherLayout
	}
	groupOf := map[*tensor.Tensor]int{}
	for i, g := range z.Groups {
		for _, p := range g.Params {
			groupOf[p] = i
		}
	}
	l := &ShardLoad{z: z, hyper: hyper, pieces: pieces, at: at, states: make([]*optim.State, len(pieces)), tensor: make([][]*tensor.Tensor, len(chunks))}
	for ci, c := range chunks {
		pc := pieces[at[ci]]
		dt := optim.StateDType(pc.param)
		half := dt != pc.param.DType()
		if err := optim.CheckStateNames(z.kind, &hyper[groupOf[pc.param]], half, c.Step, c.Names); err != nil {
			l.Abort()
			return nil, fmt.Errorf("zero: loadShard: %s: %w", paramLabel(pc.param, c.Index), err)
		}
		if err := optim.CheckStateScalars(z.kind, c.Scalars); err != nil {
			l.Abort()
			return nil, fmt.Errorf("zero: loadShard: %s: %w", paramLabel(pc.param, c.Index), err)
		}
		s := &optim.State{Step: c.Step, Scalars: maps.Clone(c.Scalars)}
		l.states[at[ci]] = s
		for _, name := range c.Names {
			field, _ := optim.StateField(s, name)
			t := z.stateRuntime().Empty(dt, pc.shape...)
			if err := t.Err(); err != nil {
				l.Abort()
				return nil, fmt.Errorf("zero: loadShard: %s %q: %w", paramLabel(pc.param, c.Index), name, err)
			}
			*field = t.Persist()
			l.tensor[ci] = append(l.tensor[ci], *field)
		}
	}
	return l, nil
}

// Entry is the tensor that entry k of chunk ci is to be read into: of the
// state's dtype, the piece's shape (the parameter's under the greedy
// partition, flat under the flat one), contiguous.
func (l *ShardLoad) Entry(ci, k int) *tensor.Tensor { return l.tensor[ci][k] }

// Commit gives the optimizer the loaded hyper-parameters and state.
func (l *ShardLoad) Commit() error {
	z := l.z
	for i, g := range z.Groups {
		ps := g.Params
		*g = l.hyper[i]
		g.Params = ps
	}
	for i, pc := range l.pieces {
		if z.flat == nil {
			if old := z.state[pc.param]; old != nil {
				old.Release()
			}
			delete(z.state, pc.param)
			if l.states[i] != nil {
				z.state[pc.param] = l.states[i]
			}
			continue
		}
		if *pc.state != nil {
			(*pc.state).Release()
		}
		*pc.state = l.states[i]
	}
	l.states = nil
	return nil
}

// Abort frees what BeginLoadShard made; the optimizer is as it was.
func (l *ShardLoad) Abort() {
	for _, s := range l.states {
		if s != nil {
			s.Release()
		}
	}
	l.states = nil
}
