package device

// Clamper is implemented by devices with a one-pass kernel for
// torch.clamp with two number bounds (optional, as the window kernels
// are): dst = min(max(src, lo), hi) element by element, the bits Maximum
// and then Minimum with those numbers give (NaN elements stay NaN; the
// bounds are not NaN). It reports an error for the layouts and dtypes it
// does not take, and the tensor layer then runs those two ops, as it does
// on devices without it.
type Clamper interface {
	Clamp(dst, src View, lo, hi float64) error
}
