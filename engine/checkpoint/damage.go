package checkpoint

import "errors"

// ErrDamaged matches (errors.Is) the error of a load that found the
// checkpoint itself damaged — its manifest or a file missing, truncated,
// failing its CRC-32C or unreadable — rather than unfit for the state
// being restored (another model, another optimizer). RestoreNewestIntact
// skips such checkpoints; it never skips an unfit one.
var ErrDamaged = errors.New("checkpoint: damaged")

type damageError struct{ err error }

func (e *damageError) Error() string        { return e.err.Error() }
func (e *damageError) Unwrap() error        { return e.err }
func (e *damageError) Is(target error) bool { return target == ErrDamaged }

// damaged marks err (nil stays nil) as a damaged checkpoint's.
func damaged(err error) error {
	if err == nil || errors.Is(err, ErrDamaged) {
		return err
	}
	return &damageError{err}
}
