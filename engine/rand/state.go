package rand

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// State format, version 1 (all integers little-endian):
//
//	off  size  field
//	  0     4  magic "ZRNG"
//	  4     4  version (1)
//	  8     8  initial seed
//	 16     4  left: draws until the next twist, 1..624
//	 20     4  next: index of the next state word, 0..624
//	 24     4  flags: 1 seeded, 2 cached double normal valid, 4 cached float normal valid
//	 28     4  cached float normal sample (IEEE 754 bits)
//	 32     8  cached double normal sample (IEEE 754 bits)
//	 40  2496  the 624 mt19937 state words
//
// It holds everything that determines future draws, so SetState(State())
// continues the exact sequence.
const (
	stateMagic   = "ZRNG"
	stateVersion = 1
	stateSize    = 40 + 4*mtN

	flagSeeded      = 1
	flagNormalValid = 2
	flagFloatValid  = 4
)

// State returns the generator state in the package's versioned binary format,
// for checkpoints.
func (g *Generator) State() []byte {
	b := make([]byte, stateSize)
	copy(b, stateMagic)
	le := binary.LittleEndian
	le.PutUint32(b[4:], stateVersion)
	le.PutUint64(b[8:], g.seed)
	le.PutUint32(b[16:], uint32(g.left))
	le.PutUint32(b[20:], g.next)
	var flags uint32
	if g.seeded {
		flags |= flagSeeded
	}
	if g.normalValid {
		flags |= flagNormalValid
	}
	if g.floatValid {
		flags |= flagFloatValid
	}
	le.PutUint32(b[24:], flags)
	le.PutUint32(b[28:], math.Float32bits(g.floatNext))
	le.PutUint64(b[32:], math.Float64bits(g.normalNext))
	for i, w := range g.mt {
		le.PutUint32(b[40+4*i:], w)
	}
	return b
}

// SetState restores a state returned by State. A malformed state returns an
// error and leaves g unchanged.
func (g *Generator) SetState(b []byte) error {
	if len(b) < 8 || string(b[:4]) != stateMagic {
		return errors.New("rand: not a generator state (bad magic)")
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[4:]); v != stateVersion {
		return fmt.Errorf("rand: unsupported generator state version %d", v)
	}
	if len(b) != stateSize {
		return fmt.Errorf("rand: generator state has %d bytes, want %d", len(b), stateSize)
	}
	flags := le.Uint32(b[24:])
	if flags&^(flagSeeded|flagNormalValid|flagFloatValid) != 0 {
		return fmt.Errorf("rand: generator state has unknown flags %#x", flags)
	}
	var n Generator
	n.seed = le.Uint64(b[8:])
	left, next := le.Uint32(b[16:]), le.Uint32(b[20:])
	if err := checkEngine(flags&flagSeeded != 0, uint64(left), uint64(next)); err != nil {
		return err
	}
	n.left, n.next, n.seeded = int32(left), next, true
	n.normalValid = flags&flagNormalValid != 0
	n.floatValid = flags&flagFloatValid != 0
	n.floatNext = math.Float32frombits(le.Uint32(b[28:]))
	n.normalNext = math.Float64frombits(le.Uint64(b[32:]))
	for i := range n.mt {
		n.mt[i] = le.Uint32(b[40+4*i:])
	}
	*g = n
	return nil
}

// checkEngine accepts the engine bookkeeping at::mt19937::is_valid accepts,
// and additionally requires left+next <= 625 so that the draws before the next
// twist stay inside the state array (every state a generator can reach
// satisfies it).
func checkEngine(seeded bool, left, next uint64) error {
	if !seeded {
		return errors.New("rand: invalid generator state: not seeded")
	}
	if left < 1 || left > mtN || next > mtN || left+next > mtN+1 {
		return fmt.Errorf("rand: invalid generator state: left=%d next=%d", left, next)
	}
	return nil
}

// Layout of torch.get_rng_state() for the CPU generator: the bytes of
// at::detail::CPUGeneratorImplState (ATen/CPUGeneratorImpl.cpp) on x86-64.
//
//	off  size  field
//	  0     8  the_initial_seed (uint64)
//	  8     4  left (int)
//	 12     4  seeded (int)
//	 16     8  next (uint64)
//	 24  4992  state[624] (uint64 each, holding the 32-bit words)
//	5016    8  normal_x (double, always 0)
//	5024    8  normal_y (double: the cached double normal sample)
//	5032    8  normal_rho (double, always 0)
//	5040    4  normal_is_valid (int), then 4 bytes of padding
//	5048    4  next_float_normal_sample (float)
//	5052    1  is_next_float_normal_sample_valid (bool), then 3 bytes of padding
const torchStateSize = 5056

// TorchState returns the state in the layout of torch.get_rng_state() (a
// 5056-byte uint8 tensor), so that torch.set_rng_state(torch.tensor(list(b),
// dtype=torch.uint8)) continues this generator's sequence in PyTorch.
func (g *Generator) TorchState() []byte {
	b := make([]byte, torchStateSize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], g.seed)
	le.PutUint32(b[8:], uint32(g.left))
	if g.seeded {
		le.PutUint32(b[12:], 1)
	}
	le.PutUint64(b[16:], uint64(g.next))
	for i, w := range g.mt {
		le.PutUint64(b[24+8*i:], uint64(w))
	}
	if g.normalValid {
		le.PutUint64(b[5024:], math.Float64bits(g.normalNext))
		le.PutUint32(b[5040:], 1)
	}
	if g.floatValid {
		le.PutUint32(b[5048:], math.Float32bits(g.floatNext))
		b[5052] = 1
	}
	return b
}

// SetTorchState restores a state in the layout of torch.get_rng_state(), as
// torch.set_rng_state does. Only the current 5056-byte layout is accepted (not
// the pre-1.5 legacy one). A malformed state returns an error and leaves g
// unchanged.
func (g *Generator) SetTorchState(b []byte) error {
	if len(b) != torchStateSize {
		return fmt.Errorf("rand: torch CPU generator state has %d bytes, want %d", len(b), torchStateSize)
	}
	le := binary.LittleEndian
	var n Generator
	n.seed = le.Uint64(b[0:])
	left := int32(le.Uint32(b[8:]))
	seeded := le.Uint32(b[12:]) != 0
	next := le.Uint64(b[16:])
	if left < 1 {
		return fmt.Errorf("rand: invalid torch generator state: left=%d", left)
	}
	if err := checkEngine(seeded, uint64(left), next); err != nil {
		return err
	}
	n.left, n.next, n.seeded = left, uint32(next), true
	for i := range n.mt {
		n.mt[i] = uint32(le.Uint64(b[24+8*i:])) // PyTorch copies into uint32 words too
	}
	if le.Uint32(b[5040:]) != 0 {
		n.normalValid = true
		n.normalNext = math.Float64frombits(le.Uint64(b[5024:]))
	}
	if b[5052] != 0 {
		n.floatValid = true
		n.floatNext = math.Float32frombits(le.Uint32(b[5048:]))
	}
	*g = n
	return nil
}
