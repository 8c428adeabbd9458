package checkpoint

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
)

// A run whose loss has gone NaN goes on saving checkpoints of NaN
// parameters, and with SaveOptions.Keep those would retire the last good
// ones. So a save checks, as it writes the model's tensors, that every
// floating-point value of its parameters is finite, records the answer in
// the manifest, and
// the pruning never retires the newest checkpoint with finite parameters
// while every checkpoint kept would have non-finite ones.

// floatBits describes where a floating-point format keeps its exponent,
// eight bytes (whole elements) at a time: a value is NaN or infinite
// exactly when its exponent bits are all set, and then adding one unit of
// the exponent's lowest bit to them carries into the element's sign bit.
// Elements cannot carry into each other: the exponent bits of an element
// plus that unit fit in the element.
type floatBits struct {
	exp, unit, sign uint64
}

var floatFormats = map[dtype.DType]floatBits{
	dtype.Float32:  {0x7f800000_7f800000, 0x00800000_00800000, 0x80000000_80000000},
	dtype.Float64:  {0x7ff00000_00000000, 0x00100000_00000000, 0x80000000_00000000},
	dtype.BFloat16: {0x7f807f80_7f807f80, 0x00800080_00800080, 0x80008000_80008000},
	dtype.Float16:  {0x7c007c00_7c007c00, 0x04000400_04000400, 0x80008000_80008000},
}

// allFinite reports whether every value in b, little-endian elements of
// dt, is finite; values of other dtypes (integers, booleans) always are.
// It reads eight bytes at a time and tests once per 64 bytes, so that it
// runs at the speed memory is read.
func allFinite(dt dtype.DType, b []byte) bool {
	f, ok := floatFormats[dt]
	if !ok {
		return true
	}
	for len(b) >= 64 {
		// The elements' exponents plus a unit: the sign bit is set in
		// any that was all ones.
		acc := (binary.LittleEndian.Uint64(b[0:]) & f.exp) + f.unit
		acc |= (binary.LittleEndian.Uint64(b[8:]) & f.exp) + f.unit
		acc |= (binary.LittleEndian.Uint64(b[16:]) & f.exp) + f.unit
		acc |= (binary.LittleEndian.Uint64(b[24:]) & f.exp) + f.unit
		acc |= (binary.LittleEndian.Uint64(b[32:]) & f.exp) + f.unit
		acc |= (binary.LittleEndian.Uint64(b[40:]) & f.exp) + f.unit
		acc |= (binary.LittleEndian.Uint64(b[48:]) & f.exp) + f.unit
		acc |= (binary.LittleEndian.Uint64(b[56:]) & f.exp) + f.unit
		if acc&f.sign != 0 {
			return false
		}
		b = b[64:]
	}
	for len(b) > 0 {
		// The last elements, padded with zeros, which are finite.
		var word [8]byte
		n := copy(word[:], b)
		if (binary.LittleEndian.Uint64(word[:])&f.exp+f.unit)&f.sign != 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// scanPiece is how much of a tensor is checked at a time before it is
// written: small enough to stay in the cache, so that the write and its
// CRC read it from there rather than from memory once more.
const scanPiece = 256 << 10

// writeTensors writes raw as safetensors with metadata, as
// safetensors.Write does, byte for byte, and reports whether every
// floating-point value of the tensors marked in check is finite. Each
// piece of a tensor's data is checked just before it is written
// (safetensors.StreamWriter takes the data in pieces), so that the check
// costs little more than the one read of memory the write makes anyway.
// (Writing GPT-2 124M's model file to tmpfs here took 0.65 s so, against
// 0.86 s for the whole tensors written unchecked, best of 6 runs each.)
func writeTensors(path string, raw []safetensors.Tensor, check []bool, metadata map[string]string) (FileInfo, bool, error) {
	specs := make([]safetensors.Spec, len(raw))
	for i, t := range raw {
		specs[i] = safetensors.Spec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	finite := true
	fi, err := writeFile(path, func(w io.Writer) error {
		sw, err := safetensors.NewStreamWriter(w, specs, metadata)
		if err != nil {
			return err
		}
		for _, i := range safetensors.DataOrder(specs) {
			t := raw[i]
			for b := t.Data; len(b) > 0; {
				// Whole elements per piece, so that each is checked whole.
				n := min(len(b), scanPiece-scanPiece%t.DType.Size())
				if finite && check[i] && !allFinite(t.DType, b[:n]) {
					finite = false
				}
				if _, err := sw.Write(b[:n]); err != nil {
					return fmt.Errorf("tensor %q: %w", t.Name, err)
				}
				b = b[n:]
			}
		}
		return sw.Close()
	})
	return fi, finite, err
}

// isParam tells the tensors whose values are checked: the parameters.
// Buffers may hold infinities on purpose (an attention mask of -Inf), and
// a diverged run's parameters are NaN anyway.
func isParam(t *tensor.Tensor) bool { return t.RequiresGrad() }

// writeModule writes a state dict as safetensors, as PyTorch's
// safetensors.torch.save_file does ({"format": "pt"}), and reports whether every
// floating-point value of the module's parameters is finite.
func writeModule(path string, tensors []nn.NamedTensor) (FileInfo, bool, error) {
	named := make([]tensorio.Named, len(tensors))
	check := make([]bool, len(tensors))
	for i, n := range tensors {
		named[i] = tensorio.Named{Name: n.Name, Tensor: n.Tensor}
		check[i] = isParam(n.Tensor)
	}
	raw, err := tensorio.Raw(path, named)
	if err != nil {
		return FileInfo{}, false, err
	}
	return writeTensors(path, raw, check, map[string]string{"format": "pt"})
}

// typedBytes is a tensor's memory and its dtype, for allFinite.
type typedBytes struct {
	dt   dtype.DType
	data []byte
}

// sliceData returns the memory of the parameters that this rank's slice
// file of a module saved in slices (ZeRO stage 3) holds: its slices of the
// flat buckets, and its parameters held whole. It is the memory sliceWriter
// writes from (ParamSlice, SharedBytes: no copy on the host), taken on the
// rank's goroutine as sliceWriter takes it.
func sliceData(mod Module, lay *moduleLayout) ([]typedBytes, error) {
	var out []typedBytes
	for _, b := range lay.buckets {
		s, err := mod.Sharded.ParamSlice(b.index)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: module %q: %w", mod.Key, err)
		}
		data, err := tensor.SharedBytes(s)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: module %q, bucket %d: %w", mod.Key, b.index, err)
		}
		out = append(out, typedBytes{s.DType(), data})
	}
	for _, n := range lay.whole {
		if !isParam(n.Tensor) {
			continue
		}
		data, err := tensor.SharedBytes(n.Tensor)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: module %q, tensor %q: %w", mod.Key, n.Name, err)
		}
		out = append(out, typedBytes{n.Tensor.DType(), data})
	}
	return out, nil
}

// rawFinite reports whether every floating-point value of data is finite.
func rawFinite(data []typedBytes) bool {
	for _, d := range data {
		if !allFinite(d.dt, d.data) {
			return false
		}
	}
	return true
}

// ParamsFinite reports whether the checkpoint at path (a step's folder)
// was saved with every floating-point value of its modules' parameters
// finite (Manifest.Finite); known is false for checkpoints saved before
// zeroeng recorded it, which count as finite.
func ParamsFinite(path string) (finite, known bool, err error) {
	m, err := ReadManifest(path)
	if err != nil {
		return false, false, err
	}
	if m.Finite == nil {
		return true, false, nil
	}
	return *m.Finite, true, nil
}
