package optim

import (
	"encoding/binary"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

func TestCheckStateNames(t *testing.T) {
	adam := Defaults(Adam)
	ams := adam
	ams.AMSGrad = true
	sgd := Defaults(SGD)
	sgdm := sgd
	sgdm.Momentum = 0.9
	rms := Defaults(RMSprop)
	rmsAll := rms
	rmsAll.Momentum, rmsAll.Centered = 0.5, true
	cases := []struct {
		name  string
		kind  Kind
		h     ParamGroup
		half  bool
		step  int64
		names []string
		want  string // "" when accepted
	}{
		{"adam complete", Adam, adam, false, 3, []string{"exp_avg_sq", "exp_avg"}, ""},
		{"adam never stepped", AdamW, adam, false, 0, nil, ""},
		{"adam step without state", Adam, adam, false, 3, nil, `no "exp_avg" or "exp_avg_sq": Adam (amsgrad=false) keeps it from the first step (step 3)`},
		{"adam without exp_avg_sq", Adam, adam, false, 1, []string{"exp_avg"}, `no "exp_avg_sq"`},
		{"amsgrad without its max", Adam, ams, false, 1, []string{"exp_avg", "exp_avg_sq"}, `no "max_exp_avg_sq": Adam (amsgrad=true)`},
		{"max without amsgrad", Adam, adam, false, 1, []string{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, `entry "max_exp_avg_sq", which Adam (amsgrad=false) does not keep`},
		{"half without master", AdamW, adam, true, 1, []string{"exp_avg", "exp_avg_sq"}, `no "master_param": AdamW (amsgrad=false, half-precision parameter)`},
		{"half with master", AdamW, adam, true, 1, []string{"exp_avg", "exp_avg_sq", "master_param"}, ""},
		{"master for float32", AdamW, adam, false, 1, []string{"exp_avg", "exp_avg_sq", "master_param"}, `entry "master_param"`},
		{"twice", Adam, adam, false, 1, []string{"exp_avg", "exp_avg_sq", "exp_avg"}, `entry "exp_avg" twice`},
		{"unknown", Adam, adam, false, 1, []string{"exp_avg", "exp_avg_sq", "velocity"}, `unknown entry "velocity" for Adam`},
		{"sgd without momentum", SGD, sgd, false, 0, nil, ""},
		{"sgd momentum buffer optional", SGD, sgdm, false, 0, nil, ""},
		{"sgd momentum buffer", SGD, sgdm, false, 0, []string{"momentum_buffer"}, ""},
		{"sgd buffer without momentum", SGD, sgd, false, 0, []string{"momentum_buffer"}, `which SGD (momentum=0) does not keep`},
		{"rmsprop all", RMSprop, rmsAll, false, 2, []string{"square_avg", "momentum_buffer", "grad_avg"}, ""},
		{"rmsprop centered without grad_avg", RMSprop, rmsAll, false, 2, []string{"square_avg", "momentum_buffer"}, `no "grad_avg"`},
		{"adagrad", Adagrad, Defaults(Adagrad), false, 2, []string{"sum"}, ""},
		{"adamax without exp_inf", Adamax, Defaults(Adamax), false, 2, []string{"exp_avg"}, `no "exp_inf"`},
		{"nadam without exp_avg_sq", NAdam, Defaults(NAdam), false, 2, []string{"exp_avg"}, `no "exp_avg_sq": NAdam keeps it`},
		{"nadam complete", NAdam, Defaults(NAdam), false, 2, []string{"exp_avg", "exp_avg_sq"}, ""},
		{"radam with exp_inf", RAdam, Defaults(RAdam), false, 2, []string{"exp_avg", "exp_avg_sq", "exp_inf"}, `entry "exp_inf", which RAdam does not keep`},
		{"negative step", Adam, adam, false, -1, nil, "step is -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckStateNames(c.kind, &c.h, c.half, c.step, c.names)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

func f32bytes(vs ...float32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func TestCheckStateValues(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	cases := []struct {
		name  string
		entry string
		b     []byte
		want  string
	}{
		{"fine", "exp_avg_sq", f32bytes(0, 1, 2, 3, 1e30, 5), ""},
		{"odd count", "exp_avg_sq", f32bytes(1, 2, 3), ""},
		{"-0 is 0", "exp_avg_sq", f32bytes(1, negZero, 2), ""},
		{"negative first moment", "exp_avg", f32bytes(-1, -2, -3), ""},
		{"negative second moment", "exp_avg_sq", f32bytes(1, 2, -3), `"exp_avg_sq" holds -3 at element 12: it is a running sum`},
		{"NaN", "exp_avg", f32bytes(1, nan), `"exp_avg" holds NaN at element 11`},
		{"-Inf last, odd", "momentum_buffer", f32bytes(1, 2, float32(math.Inf(-1))), `holds -Inf at element 12`},
		{"Inf", "sum", f32bytes(inf), `holds +Inf at element 10`},
		{"torn", "exp_avg", []byte{1, 2, 3}, "not a whole number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckStateValues(c.entry, dtype.Float32, c.b, 10)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	// The fast pass agrees with a value-by-value one on random bit patterns.
	r := rand.New(rand.NewSource(1))
	for range 2000 {
		n := 1 + r.Intn(9)
		vs := make([]float32, n)
		for i := range vs {
			vs[i] = math.Float32frombits(r.Uint32())
			if r.Intn(3) > 0 {
				vs[i] = float32(math.Abs(float64(r.NormFloat64())))
			}
		}
		for _, entry := range []string{"exp_avg", "exp_avg_sq"} {
			want := true
			for _, v := range vs {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || (NonNegativeState(entry) && v < 0) {
					want = false
				}
			}
			if got := CheckStateValues(entry, dtype.Float32, f32bytes(vs...), 0) == nil; got != want {
				t.Fatalf("%q %v: accepted %v, want %v", entry, vs, got, want)
			}
		}
	}
}

// BenchmarkCheckStateValues: the pass a load makes over every byte of an
// optimizer's state.
func BenchmarkCheckStateValues(b *testing.B) {
	data := f32bytes(make([]float32, 1<<22)...)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := CheckStateValues("exp_avg_sq", dtype.Float32, data, 0); err != nil {
			b.Fatal(err)
		}
	}
}
