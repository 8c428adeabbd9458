package checkpoint

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestAllFinite checks the scan against math.IsNaN and math.IsInf: every
// float16 and bfloat16 value, float32 and float64 edge values and random
// bits, each at the start, the end of a 64-byte block and in the tail of
// a buffer; integers are always finite.
func TestAllFinite(t *testing.T) {
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	r := rand.New(rand.NewPCG(1, 2))
	check := func(dt dtype.DType, bits uint64, want bool) {
		t.Helper()
		size := dt.Size()
		n := 64/size + 5 // a block and a tail
		for _, at := range []int{0, 64/size - 1, n - 1} {
			b := make([]byte, n*size)
			for i := range n {
				// Finite neighbours, of either sign.
				putBits(b[i*size:], size, one(dt)|uint64(i%2)<<(8*size-1))
			}
			putBits(b[at*size:], size, bits)
			if got := allFinite(dt, b); got != want {
				t.Fatalf("%v: %#x at element %d of %d: allFinite = %v, want %v", dt, bits, at, n, got, want)
			}
		}
	}
	for u := range 1 << 16 {
		check(dtype.Float16, uint64(u), finite(float64(dtype.F16(u).Float32())))
		check(dtype.BFloat16, uint64(u), finite(float64(dtype.BF16(u).Float32())))
	}
	f32 := []uint32{0, 1 << 31, 1, 0x007fffff, 0x00800000, 0x3f800000, 0x7f000000, 0x7f7fffff, 0xff7fffff,
		0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff}
	for range 10000 {
		f32 = append(f32, r.Uint32())
	}
	for _, u := range f32 {
		check(dtype.Float32, uint64(u), finite(float64(math.Float32frombits(u))))
	}
	f64 := []uint64{0, 1 << 63, 1, math.Float64bits(math.MaxFloat64), math.Float64bits(-math.MaxFloat64),
		math.Float64bits(math.Inf(1)), math.Float64bits(math.Inf(-1)), math.Float64bits(math.NaN()), 0x7ff0000000000001}
	for range 10000 {
		f64 = append(f64, r.Uint64())
	}
	for _, u := range f64 {
		check(dtype.Float64, u, finite(math.Float64frombits(u)))
	}
	for _, dt := range []dtype.DType{dtype.Int64, dtype.Int32, dtype.Uint8, dtype.Bool} {
		if !allFinite(dt, slices.Repeat([]byte{0xff}, 100)) {
			t.Errorf("%v: all ones is not finite", dt)
		}
	}
}

func putBits(b []byte, size int, v uint64) {
	switch size {
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b, v)
	}
}

// one is 1.0 in dt's bits.
func one(dt dtype.DType) uint64 {
	switch dt {
	case dtype.Float16:
		return 0x3c00
	case dtype.BFloat16:
		return 0x3f80
	case dtype.Float32:
		return 0x3f800000
	}
	return math.Float64bits(1)
}

// poison makes one value of t, a tensor in host memory, NaN.
func poison(t *testing.T, p *tensor.Tensor) {
	t.Helper()
	b, ok := tensor.HostBytes(p)
	if !ok {
		t.Fatal("the tensor is not in host memory")
	}
	size := p.DType().Size()
	putBits(b[len(b)-size:], size, math.MaxUint64) // all ones: a NaN in every format
}

// TestNonFiniteKeepsGoodCheckpoint: a run that goes on saving NaN
// parameters with Keep 2 never loses its last finite checkpoint: it stays
// beyond Keep while the ones kept are all NaN, the warning names it and
// says how to resume from it, latest names the newest save, and once a
// finite checkpoint is saved again it goes as Keep says.
func TestNonFiniteKeepsGoodCheckpoint(t *testing.T) {
	dir := t.TempDir()
	var warnings []string
	opts := SaveOptions{Keep: 2, Warn: func(msg string) { warnings = append(warnings, msg) }}
	err := onRanks(1, func(rank int, pg dist.ProcessGroup) error {
		rs := job{}.newRank(t, layout{ranks: 1}, pg, 0)
		save := func(step int64, want ...string) {
			t.Helper()
			warnings = nil
			if _, err := Save(pg, dir, step, rs.state(t), opts); err != nil {
				t.Fatal(err)
			}
			removing.Wait()
			if got := listDir(t, dir); !slices.Equal(got, append([]string{LockName, LatestName}, want...)) {
				t.Fatalf("after saving step %d: %v, want %v", step, got, want)
			}
			if p, err := Latest(dir); err != nil || filepath.Base(p) != StepName(step) {
				t.Fatalf("after saving step %d, latest is %q (%v)", step, p, err)
			}
		}
		if err := (job{}).train(rs, 1, 3); err != nil {
			return err
		}
		save(1, StepName(1))
		save(2, StepName(1), StepName(2))
		if len(warnings) != 0 {
			t.Fatalf("finite saves warned %q", warnings)
		}
		good := filepath.Join(dir, StepName(2))

		poison(t, rs.params[4])
		// Step 2 is still within Keep.
		save(3, StepName(2), StepName(3))
		if len(warnings) != 1 || !strings.Contains(warnings[0], StepName(3)+" holds NaN or infinite parameters (in model.safetensors)") ||
			!strings.Contains(warnings[0], StepName(2)+" is the newest checkpoint with finite ones") {
			t.Fatalf("saving NaN parameters warned %q", warnings)
		}
		// Then it stays beyond Keep, as long as NaN checkpoints come.
		for step := int64(4); step <= 5; step++ {
			save(step, StepName(2), StepName(step-1), StepName(step))
			want := "kept " + StepName(2) + ", the newest checkpoint with finite ones, beyond keep 2. " +
				filepath.Join(dir, LatestName) + " names " + StepName(step) + ": to resume from " + StepName(2) +
				" instead, run: echo " + StepName(2) + " > " + shellQuote(filepath.Join(dir, LatestName))
			if len(warnings) != 1 || !strings.Contains(warnings[0], want) {
				t.Fatalf("step %d warned\n%q\nwant it to contain\n%q", step, warnings, want)
			}
		}
		if finite, known, err := ParamsFinite(good); !finite || !known || err != nil {
			t.Errorf("ParamsFinite(%s) = %v, %v, %v; want finite, known", good, finite, known, err)
		}
		bad := filepath.Join(dir, StepName(5))
		if finite, known, err := ParamsFinite(bad); finite || !known || err != nil {
			t.Errorf("ParamsFinite(%s) = %v, %v, %v; want non-finite, known", bad, finite, known, err)
		}
		// Both are checkpoints that load, the NaN one included.
		for _, path := range []string{bad, good} {
			rs3 := job{}.newRank(t, layout{ranks: 1}, pg, 1)
			if _, _, err := Restore(pg, rs3.rt, path, rs3.state(t)); err != nil {
				t.Fatal(err)
			}
			nan := slices.ContainsFunc(values(rs3.params), func(v []float64) bool { return slices.ContainsFunc(v, math.IsNaN) })
			if nan != (path == bad) {
				t.Errorf("restored from %s: NaN parameters %v", path, nan)
			}
		}
		// Finite again: the spared checkpoint goes with the rest.
		rs2 := job{}.newRank(t, layout{ranks: 1}, pg, 0)
		rs.params, rs.opt = rs2.params, rs2.opt
		save(6, StepName(5), StepName(6))
		if len(warnings) != 0 {
			t.Fatalf("a finite save warned %q", warnings)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNonFiniteSlice: under ZeRO stage 3 each rank writes its own slices,
// and one NaN in one rank's slice makes the whole checkpoint non-finite:
// the manifest names that rank's file, and the finite checkpoint before
// it stays beyond Keep 1.
func TestNonFiniteSlice(t *testing.T) {
	for _, consolidated := range []bool{false, true} {
		dir := t.TempDir()
		var warnings []string
		opts := SaveOptions{Keep: 1, Consolidated: consolidated, Warn: func(msg string) { warnings = append(warnings, msg) }}
		err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
			rs, err := newS3(t, s3{2, 3, 0, false}, pg, 0, s3Width, 3, 0)
			if err != nil {
				return err
			}
			if err := rs.train(0, 2); err != nil {
				return err
			}
			// A buffer's infinities are its own business (an attention
			// mask): the parameters are what is checked.
			b, _ := tensor.HostBytes(rs.buf)
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(math.Inf(-1))))
			if _, err := Save(pg, dir, 1, rs.state(), opts); err != nil {
				return err
			}
			if rank == 1 {
				s, err := rs.z.ParamSlice(0)
				if err != nil {
					return err
				}
				poison(t, s)
			}
			_, err = Save(pg, dir, 2, rs.state(), opts)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		removing.Wait()
		if got, want := listDir(t, dir), []string{LockName, LatestName, StepName(1), StepName(2)}; !slices.Equal(got, want) {
			t.Fatalf("consolidated=%v: %v, want %v", consolidated, got, want)
		}
		slice := sliceName("model", 1, 2)
		if len(warnings) != 1 || !strings.Contains(warnings[0], "parameters (in "+slice+"); kept "+StepName(1)) {
			t.Fatalf("consolidated=%v: warned %q", consolidated, warnings)
		}
		if finite, known, err := ParamsFinite(filepath.Join(dir, StepName(2))); finite || !known || err != nil {
			t.Errorf("consolidated=%v: ParamsFinite = %v, %v, %v; want non-finite, known", consolidated, finite, known, err)
		}
	}
}

// TestNonFiniteOldManifest: a checkpoint saved before manifests recorded
// finiteness counts as finite: it is the one kept beyond Keep.
func TestNonFiniteOldManifest(t *testing.T) {
	dir := t.TempDir()
	var warnings []string
	opts := SaveOptions{Keep: 1, Warn: func(msg string) { warnings = append(warnings, msg) }}
	err := onRanks(1, func(rank int, pg dist.ProcessGroup) error {
		rs := job{}.newRank(t, layout{ranks: 1}, pg, 0)
		if _, err := Save(pg, dir, 1, rs.state(t), opts); err != nil {
			return err
		}
		old := filepath.Join(dir, StepName(1))
		editManifest(t, old, func(m *Manifest) { m.Finite, m.NonFinite = nil, nil }) // as written before them
		if finite, known, err := ParamsFinite(old); !finite || known || err != nil {
			t.Errorf("ParamsFinite of an old manifest = %v, %v, %v; want finite, unknown", finite, known, err)
		}
		poison(t, rs.params[0])
		for step := int64(2); step <= 3; step++ {
			if _, err := Save(pg, dir, step, rs.state(t), opts); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	removing.Wait()
	if got, want := listDir(t, dir), []string{LockName, LatestName, StepName(1), StepName(3)}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[1], "kept "+StepName(1)) {
		t.Fatalf("warned %q", warnings)
	}
}

// BenchmarkAllFinite scans GPT-2 124M's parameters (float32, 498 MB) for
// NaN and infinities, as a save does beside writing them; SetBytes makes
// the result a speed.
func BenchmarkAllFinite(b *testing.B) {
	var bufs [][]byte
	var total int64
	for _, sh := range gpt2Shapes() {
		n := 4
		for _, d := range sh {
			n *= d
		}
		buf := make([]byte, n)
		for i := 0; i < n; i += 4 {
			binary.LittleEndian.PutUint32(buf[i:], math.Float32bits(float32(i%1000)/1000-0.5))
		}
		bufs = append(bufs, buf)
		total += int64(n)
	}
	b.SetBytes(total)
	b.ResetTimer()
	for range b.N {
		for _, buf := range bufs {
			if !allFinite(dtype.Float32, buf) {
				b.Fatal("not finite")
			}
		}
	}
}
