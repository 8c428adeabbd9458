package tensor

import (
	"fmt"
)

// Memory that comes and goes under tensors that stay: ZeRO stage 3 keeps
// each unit's parameters as views of one flat buffer and gives that
// buffer's memory back between the unit's uses (after its forward, after
// its backward), gathering the shards into fresh memory just before the
// next use — PyTorch FSDP's storage.resize_(0). The parameters, their
// views and the references autograd saved for backward keep pointing at
// the same storage; only its memory is absent meanwhile, and an op that
// reads it then fails with the reason given, instead of reading garbage.

// FreeMemory gives t's memory back to the device while t, its views and
// autograd's references to it live on. t must cover its whole buffer
// (Empty, Zeros, ...). why says in errors what holds the memory back
// ("the parameters of zero unit 2 are sharded").
func (t *Tensor) FreeMemory(why string) error {
	if err := t.usable("FreeMemory"); err != nil {
		return err
	}
	s := t.st
	if s.buf == nil {
		return nil // freed already
	}
	if !t.coversStorage() {
		return fmt.Errorf("tensor: FreeMemory of a view: free the tensor that holds the whole buffer")
	}
	if err := s.settle(); err != nil {
		return err
	}
	s.rt.dev.Free(s.buf)
	s.buf, s.freed, s.freedVersion = nil, why, s.version.Load()
	s.zeroPending = false
	return nil
}

// RestoreMemory gives memory back to a tensor whose memory was freed, with
// undefined contents (the caller fills it). It returns seal, which the
// caller calls once it has written back the very values the memory held
// when it was freed: seal resets the storage's version, so that autograd
// accepts the references it saved before the memory was freed (writes
// would otherwise make backward refuse them).
func (t *Tensor) RestoreMemory() (seal func(), err error) {
	if err := t.usable("RestoreMemory"); err != nil {
		return nil, err
	}
	s := t.st
	if s.buf != nil {
		return func() {}, nil
	}
	n := t.Numel()
	buf, err := s.rt.dev.Alloc(t.dt, n)
	if err != nil {
		return nil, fmt.Errorf("tensor: restoring the memory of %s: %w", t.label(), err)
	}
	s.buf, s.freed = buf, ""
	v := s.freedVersion
	return func() { s.version.Store(v) }, nil
}

// MemoryFreed reports whether t's memory is given back (FreeMemory).
func (t *Tensor) MemoryFreed() bool { return t.st != nil && t.st.buf == nil && t.st.freed != "" }

func (t *Tensor) usable(op string) error {
	switch {
	case t == nil:
		return errNil
	case t.err != nil:
		return t.err
	case t.released.Load():
		return fmt.Errorf("tensor: %s of a released %s", op, t.label())
	case t.st == nil:
		return fmt.Errorf("tensor: %s of a tensor without memory", op)
	}
	return nil
}

// OnBackward registers fn to run during a backward pass just before the
// gradient flows into the op that made t, that is before any op that led
// to t runs its backward: ZeRO stage 3 gathers a unit's parameters there.
// An error from fn ends the backward pass with it (the ops below would
// find their saved tensors missing). t must have been made by an op that
// autograd recorded. It returns a function that removes the hook; the
// hook lasts as long as the graph.
func (t *Tensor) OnBackward(fn func() error) (remove func(), err error) {
	if err := t.usable("OnBackward"); err != nil {
		return nil, err
	}
	n := t.fn
	if n == nil {
		return nil, fmt.Errorf("tensor: OnBackward of a tensor that no recorded op made (a leaf, or made under NoGrad)")
	}
	id := hookIDs.Add(1)
	n.pre = append(n.pre, preHook{id, fn})
	return func() {
		for i, h := range n.pre {
			if h.id == id {
				n.pre = append(n.pre[:i], n.pre[i+1:]...)
				return
			}
		}
	}, nil
}

type preHook struct {
	id int64
	fn func() error
}
