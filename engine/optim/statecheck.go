package optim

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Checks of loaded state. An update reads every entry its algorithm keeps
// as soon as one exists (Adam's exp_avg_sq beside exp_avg), so a state
// with an entry missing is refused when it is loaded, naming the entry,
// instead of failing inside the first step after it; and an entry whose
// values no run can produce (a negative second moment, NaN) is refused
// too, since the next step would turn the parameters into NaN.

// RequiredState lists the entries a parameter's state must hold under
// kind and the group's hyper-parameters h, once it holds any (half: the
// parameter is bfloat16 or float16 and has a float32 master copy): the
// algorithm's Keeps. SGD's momentum_buffer is not among them: PyTorch
// starts it from the gradient when a state lacks it, and so does this
// package.
func RequiredState(kind Kind, h *ParamGroup, half bool) []string {
	var names []string
	if a := kind.Algorithm(); a != nil {
		names, _ = a.keeps(h)
	}
	if half {
		names = append(names, "master_param")
	}
	return names
}

// CheckStateNames checks that names, the entries of one parameter's
// loaded state after step steps, are what kind keeps under h: none
// (a parameter never stepped) or every one RequiredState lists, and
// nothing else but the optional ones.
func CheckStateNames(kind Kind, h *ParamGroup, half bool, step int64, names []string) error {
	if step < 0 {
		return fmt.Errorf("step is %d", step)
	}
	a := kind.Algorithm()
	if a == nil {
		return fmt.Errorf("unknown optimizer kind %v", kind)
	}
	_, optional := a.keeps(h)
	allowed := append(RequiredState(kind, h, half), optional...)
	for i, name := range names {
		if !slices.Contains(allowed, name) {
			if !knownEntry(name) {
				return fmt.Errorf("unknown entry %q for %v", name, kind)
			}
			return fmt.Errorf("entry %q, which %v%s does not keep", name, kind, settings(a, h, half))
		}
		if slices.Contains(names[:i], name) {
			return fmt.Errorf("entry %q twice", name)
		}
	}
	if len(names) == 0 && (step == 0 || a.NoStep) {
		return nil
	}
	var missing []string
	for _, name := range RequiredState(kind, h, half) {
		if !slices.Contains(names, name) {
			missing = append(missing, fmt.Sprintf("%q", name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no %s: %v%s keeps it from the first step (step %d)", strings.Join(missing, " or "), kind, settings(a, h, half), step)
	}
	return nil
}

// settings names the hyper-parameters and the precision that decide
// which entries a keeps.
func settings(a *Algorithm, h *ParamGroup, half bool) string {
	var s []string
	for _, name := range a.Deciding {
		s = append(s, fmt.Sprintf("%s=%v", name, h.Get(name)))
	}
	if half {
		s = append(s, "half-precision parameter")
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, ", ") + ")"
}

// CheckStateScalars checks the 0-d entries beside step of one
// parameter's loaded state (State.Scalars: NAdam's mu_product), wherever
// they come from (a checkpoint's chunk, a ZeRO shard): each is one that
// kind keeps (Algorithm.Scalars), finite, and inside the range any run
// keeps it in (scalarRanges). A state may lack them: a checkpoint written
// before they were saved holds none, and the step then recomputes them
// from the step count (nadam.go).
func CheckStateScalars(kind Kind, scalars map[string]float64) error {
	a := kind.Algorithm()
	if a == nil {
		return fmt.Errorf("unknown optimizer kind %v", kind)
	}
	for _, name := range slices.Sorted(maps.Keys(scalars)) {
		v := scalars[name]
		if !slices.Contains(a.Scalars, name) {
			if knownScalar(name) {
				return fmt.Errorf("scalar %q, which %v does not keep", name, kind)
			}
			return fmt.Errorf("unknown scalar %q for %v", name, kind)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%q is %v: optimizer state is finite in any run that can go on", name, v)
		}
		if r, ok := scalarRanges[name]; ok && !(v >= r.lo && v <= r.hi) {
			return fmt.Errorf("%q is %v: it is %s, in [%v, %v] in any run", name, v, r.what, r.lo, r.hi)
		}
	}
	return nil
}

// scalarRange is the range a 0-d state entry stays in in any run, which
// loads check; each algorithm's file declares its scalars' (nadam.go).
type scalarRange struct {
	lo, hi float64
	what   string // what the value is, for the message
}

var scalarRanges = map[string]scalarRange{}

// NonNegativeState tells whether every value of the entry name is ≥ 0 in
// any run: the second moments and accumulators (Algorithm.NonNegative).
func NonNegativeState(name string) bool {
	for _, a := range registry {
		if a != nil && slices.Contains(a.NonNegative, name) {
			return true
		}
	}
	return false
}

// CheckStateValues checks the little-endian values b of the state entry
// name, in dtype dt (a state's: float32 or float64): every one finite,
// and ≥ 0 where NonNegativeState says so (−0 counts as 0). first is the
// element number of b[0] in the entry, for the message. It runs at memory
// speed, as loads call it on every byte of an optimizer's state: the
// common case, every value good, is a pass of bit operations over eight
// bytes at a time, and only a failure looks for the element to name.
func CheckStateValues(name string, dt dtype.DType, b []byte, first int) error {
	nonNeg := NonNegativeState(name)
	switch dt {
	case dtype.Float32:
		if len(b)%4 != 0 {
			return fmt.Errorf("%q: %d bytes is not a whole number of float32 values", name, len(b))
		}
		if fastFloat32OK(b, nonNeg) {
			return nil
		}
		for i := 0; i < len(b); i += 4 {
			v := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
			if err := badValue(name, v, nonNeg, first+i/4); err != nil {
				return err
			}
		}
	case dtype.Float64:
		if len(b)%8 != 0 {
			return fmt.Errorf("%q: %d bytes is not a whole number of float64 values", name, len(b))
		}
		for i := 0; i < len(b); i += 8 {
			v := math.Float64frombits(binary.LittleEndian.Uint64(b[i:]))
			if err := badValue(name, v, nonNeg, first+i/8); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%q is %v; optimizer state is float32 or float64", name, dt)
	}
	return nil
}

func badValue(name string, v float64, nonNeg bool, at int) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%q holds %v at element %d: optimizer state is finite in any run that can go on (did the run diverge before this was saved?)", name, v, at)
	case nonNeg && v < 0:
		return fmt.Errorf("%q holds %v at element %d: it is a running sum of squares or magnitudes, never negative", name, v, at)
	}
	return nil
}

// fastFloat32OK tells whether every float32 of b is finite (and not
// negative, with nonNeg), two values per 64-bit word: a value is not
// finite when its exponent bits are all ones, which adding 1 to the
// exponent carries into the sign bit's place; negative when its sign
// bit is set and it is not −0. false means some value may be bad.
func fastFloat32OK(b []byte, nonNeg bool) bool {
	const (
		exp   = 0x7f800000_7f800000
		one   = 0x00800000_00800000
		signs = 0x80000000_80000000
	)
	var inf, neg uint64
	i := 0
	for ; i+32 <= len(b); i += 32 {
		w := b[i : i+32 : i+32] // one bounds check for four words
		w0 := binary.LittleEndian.Uint64(w[0:])
		w1 := binary.LittleEndian.Uint64(w[8:])
		w2 := binary.LittleEndian.Uint64(w[16:])
		w3 := binary.LittleEndian.Uint64(w[24:])
		inf |= (w0&exp + one) | (w1&exp + one) | (w2&exp + one) | (w3&exp + one)
		neg |= w0 | w1 | w2 | w3
	}
	inf &= signs
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		inf |= (w&exp + one) & signs
		neg |= w
	}
	if i < len(b) {
		w := uint64(binary.LittleEndian.Uint32(b[i:]))
		inf |= (w&exp + one) & signs
		neg |= w
	}
	if inf != 0 {
		return false
	}
	// A sign bit seen: −0 is fine, so look closer (rare: a state that
	// holds −0, or a bad one).
	return !nonNeg || neg&signs == 0
}

// ReadParamGroups reads a state dict's param_groups without an optimizer
// (a checkpoint checked on its own): each group's hyper-parameters over
// kind's defaults, validated, and its parameters' indices.
func ReadParamGroups(kind Kind, maps []map[string]any) ([]ParamGroup, [][]int, error) {
	groups := make([]ParamGroup, len(maps))
	ids := make([][]int, len(maps))
	for i, m := range maps {
		var ok bool
		if ids[i], ok = toInts(m["params"]); !ok {
			return nil, nil, fmt.Errorf("optim: param group %d: \"params\" is not a list of indices", i)
		}
		g := Defaults(kind)
		if err := applyMap(&g, m); err != nil {
			return nil, nil, fmt.Errorf("%w (group %d)", err, i)
		}
		if err := g.Validate(kind); err != nil {
			return nil, nil, fmt.Errorf("%w (group %d)", err, i)
		}
		groups[i] = g
	}
	return groups, ids, nil
}
