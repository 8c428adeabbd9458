// Package dtype owns the element types of zeroeng tensors: their names (PyTorch,
// safetensors and NumPy spellings), their sizes, and the bit-exact conversions
// between float32 and the 16-bit floating-point formats.
//
// It has no dependencies so that every other package (kernels, file formats,
// the tensor layer) can share one definition.
package dtype

import "fmt"

// DType is the element type of a tensor.
type DType uint8

// The element types. Float32, Float64, BFloat16 and Float16 are floating
// point and can take part in autograd; the integer and boolean types hold
// indices, labels, masks and raw file data.
const (
	Invalid DType = iota
	Float32
	Float64
	BFloat16
	Float16
	Int64
	Int32
	Uint8
	Bool
)

var info = [...]struct {
	size        int
	name        string // PyTorch name without the "torch." prefix
	safetensors string // dtype string of the safetensors header
	float       bool
}{
	Invalid:  {0, "invalid", "", false},
	Float32:  {4, "float32", "F32", true},
	Float64:  {8, "float64", "F64", true},
	BFloat16: {2, "bfloat16", "BF16", true},
	Float16:  {2, "float16", "F16", true},
	Int64:    {8, "int64", "I64", false},
	Int32:    {4, "int32", "I32", false},
	Uint8:    {1, "uint8", "U8", false},
	Bool:     {1, "bool", "BOOL", false},
}

// All lists every valid DType, for table-driven code and tests.
var All = []DType{Float32, Float64, BFloat16, Float16, Int64, Int32, Uint8, Bool}

// Valid reports whether d is one of the defined element types.
func (d DType) Valid() bool { return d > Invalid && int(d) < len(info) }

// Size is the number of bytes of one element.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return info[d].size
}

// String is the PyTorch name of the type ("float32", "bfloat16", "int64").
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return info[d].name
}

// IsFloat reports whether d is a floating-point type (and so can require
// gradients).
func (d DType) IsFloat() bool { return d.Valid() && info[d].float }

// Safetensors is the dtype string used in safetensors headers ("F32", "BF16").
func (d DType) Safetensors() string {
	if !d.Valid() {
		return ""
	}
	return info[d].safetensors
}

// FromSafetensors parses a safetensors dtype string.
func FromSafetensors(s string) (DType, bool) {
	for _, d := range All {
		if info[d].safetensors == s {
			return d, true
		}
	}
	return Invalid, false
}

// Parse accepts a PyTorch name with or without the "torch." prefix, and the
// common aliases "float", "double", "half", "long", "int".
func Parse(s string) (DType, bool) {
	if len(s) > 6 && s[:6] == "torch." {
		s = s[6:]
	}
	switch s {
	case "float":
		return Float32, true
	case "double":
		return Float64, true
	case "half":
		return Float16, true
	case "long":
		return Int64, true
	case "int":
		return Int32, true
	}
	for _, d := range All {
		if info[d].name == s {
			return d, true
		}
	}
	return Invalid, false
}
