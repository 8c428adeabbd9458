package dtype

import (
	"encoding/binary"
	"math"
	"os"
	"testing"
)

func TestNames(t *testing.T) {
	tests := []struct {
		d           DType
		size        int
		name, st    string
		isFloat     bool
		parseAlias  string
		parsedAlias DType
	}{
		{Float32, 4, "float32", "F32", true, "torch.float", Float32},
		{Float64, 8, "float64", "F64", true, "double", Float64},
		{BFloat16, 2, "bfloat16", "BF16", true, "torch.bfloat16", BFloat16},
		{Float16, 2, "float16", "F16", true, "half", Float16},
		{Int64, 8, "int64", "I64", false, "long", Int64},
		{Int32, 4, "int32", "I32", false, "int", Int32},
		{Uint8, 1, "uint8", "U8", false, "uint8", Uint8},
		{Bool, 1, "bool", "BOOL", false, "bool", Bool},
	}
	for _, tt := range tests {
		if tt.d.Size() != tt.size || tt.d.String() != tt.name || tt.d.Safetensors() != tt.st || tt.d.IsFloat() != tt.isFloat {
			t.Errorf("%v: got size %d name %q st %q float %v", tt.d, tt.d.Size(), tt.d.String(), tt.d.Safetensors(), tt.d.IsFloat())
		}
		if d, ok := FromSafetensors(tt.st); !ok || d != tt.d {
			t.Errorf("FromSafetensors(%q) = %v, %v", tt.st, d, ok)
		}
		if d, ok := Parse(tt.parseAlias); !ok || d != tt.parsedAlias {
			t.Errorf("Parse(%q) = %v, %v", tt.parseAlias, d, ok)
		}
	}
	if Invalid.Valid() || DType(200).Valid() || DType(200).Size() != 0 {
		t.Error("invalid dtypes must not be valid")
	}
	if _, ok := Parse("complex64"); ok {
		t.Error("Parse accepted an unknown type")
	}
}

// TestHalfMatchesTorch checks the float32 -> float16/bfloat16 roundings bit for
// bit against NumPy and PyTorch (testdata/gen_half_table.py).
func TestHalfMatchesTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/half_table.bin")
	if err != nil {
		t.Fatal(err)
	}
	n := int(binary.LittleEndian.Uint32(raw))
	f := raw[4 : 4+4*n]
	h := raw[4+4*n : 4+6*n]
	b := raw[4+6*n : 4+8*n]
	for i := 0; i < n; i++ {
		x := math.Float32frombits(binary.LittleEndian.Uint32(f[4*i:]))
		wantH := F16(binary.LittleEndian.Uint16(h[2*i:]))
		wantB := BF16(binary.LittleEndian.Uint16(b[2*i:]))
		if got := F16FromFloat32(x); got != wantH {
			t.Errorf("F16FromFloat32(%g) = %#04x, numpy %#04x", x, uint16(got), uint16(wantH))
		}
		if got := BF16FromFloat32(x); got != wantB {
			t.Errorf("BF16FromFloat32(%g) = %#04x, torch %#04x", x, uint16(got), uint16(wantB))
		}
	}
}

// TestHalfRoundTrip widens every 16-bit pattern and narrows it back.
func TestHalfRoundTrip(t *testing.T) {
	for u := 0; u < 1<<16; u++ {
		h := F16(u)
		f := h.Float32()
		if f != f {
			if g := F16FromFloat32(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Errorf("NaN %#04x came back as %#04x", u, uint16(g))
			}
			continue
		}
		if g := F16FromFloat32(f); g != h {
			t.Errorf("F16 %#04x -> %g -> %#04x", u, f, uint16(g))
		}
		b := BF16(u)
		if fb := b.Float32(); fb == fb && BF16FromFloat32(fb) != b {
			t.Errorf("BF16 %#04x does not round trip", u)
		}
	}
}
