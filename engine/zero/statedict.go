package zero

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"slices"

	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// stateChunk is the state of one parameter, or of a piece of it under the
// flat partition, as a rank sends it to the consolidation target.
type stateChunk struct {
	Index int // the parameter's global index
	At    int // first element, in the flattened parameter
	Step  int64
	Names []string // "exp_avg", ...
	Data  [][]byte // each entry's elements in optim.StateDType, little-endian
}

// ConsolidateStateDict gathers every rank's optimizer state on rank to
// (consolidate_state_dict). It is collective: every rank calls it. Each
// rank sends its shard to the target only (PyTorch broadcasts every shard
// to every rank); the target then serves StateDict.
func (z *Optimizer) ConsolidateStateDict(to int) error {
	if to < 0 || to >= z.pg.Size() {
		return fmt.Errorf("zero: consolidateStateDict: rank %d is not in the group of %d", to, z.pg.Size())
	}
	chunks, err := z.localChunks()
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
	params := z.Params()
	full := map[int]*optim.State{}
	for r, payload := range payloads {
		var got []stateChunk
		if err := gob.NewDecoder(bytes.NewReader(payload)).Decode(&got); err != nil {
			return fmt.Errorf("zero: consolidateStateDict: rank %d's shard: %w", r, err)
		}
		for _, c := range got {
			if c.Index < 0 || c.Index >= len(params) || len(c.Names) != len(c.Data) {
				return fmt.Errorf("zero: consolidateStateDict: rank %d sent state for parameter %d of %d", r, c.Index, len(params))
			}
			p := params[c.Index]
			s := full[c.Index]
			if s == nil {
				s = &optim.State{}
				full[c.Index] = s
			}
			s.Step = max(s.Step, c.Step)
			for i, name := range c.Names {
				field, ok := optim.StateField(s, name)
				if !ok {
					return fmt.Errorf("zero: consolidateStateDict: rank %d sent an unknown entry %q", r, name)
				}
				dt := optim.StateDType(p)
				if *field == nil {
					*field = z.rt.Zeros(dt, p.Shape()...).Persist()
				}
				n := len(c.Data[i]) / dt.Size()
				if c.At+n > p.Numel() {
					return fmt.Errorf("zero: consolidateStateDict: rank %d sent %d elements at %d of %s", r, n, c.At, paramLabel(p, c.Index))
				}
				src := z.rt.FromBytes(dt, c.Data[i], n)
				dst := (*field).View(-1).Narrow(0, c.At, n)
				err := dst.CopyFrom(src)
				src.Release()
				dst.Release()
				if err != nil {
					return err
				}
			}
		}
	}
	z.consolidated = full
	return nil
}

// localChunks lists this rank's state.
func (z *Optimizer) localChunks() ([]stateChunk, error) {
	var out []stateChunk
	add := func(p *tensor.Tensor, at int, s *optim.State) error {
		c := stateChunk{Index: z.index[p], At: at, Step: s.Step}
		for _, e := range s.Tensors() {
			b, err := e.Tensor.Bytes()
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
					if err := add(pc.param, pc.at, pc.state); err != nil {
						return nil, err
					}
				}
			}
		}
		return out, nil
	}
	for _, p := range z.Params() {
		if s := z.state[p]; s != nil {
			if err := add(p, 0, s); err != nil {
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
				pc.state = &optim.State{Step: s.Step}
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
