package devicetest_test

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/device/devicetest"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// TestCPUConformsToItself runs the whole suite with two independent CPU
// devices: it must pass, and it exercises every case of the harness.
func TestCPUConformsToItself(t *testing.T) {
	devicetest.Conformance(t, cpu.New(cpu.Options{}), cpu.New(cpu.Options{Index: 1}))
}

// TestCaseNames checks that case names are unique and usable with -run.
func TestCaseNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range devicetest.Cases() {
		if seen[c.Name] {
			t.Errorf("duplicate case %q", c.Name)
		}
		seen[c.Name] = true
		if strings.ContainsAny(c.Name, " \t\n()[]*+?^$|\\") || strings.Contains(c.Name, "//") || strings.HasSuffix(c.Name, "/") {
			t.Errorf("case name %q has characters that go test -run would misread", c.Name)
		}
	}
	if len(seen) < 1000 {
		t.Errorf("only %d cases", len(seen))
	}
}

// broken is a CPU device with one deliberate bug.
type broken struct {
	*cpu.Device
	bug string
}

// Unary skips the last element of every row (a kernel that drops its tail),
// and with the "leak" bug allocates scratch it never frees.
func (b *broken) Unary(op device.UnaryOp, dst, src device.View, s float64) error {
	switch b.bug {
	case "unary-skips-last":
		if n := len(dst.Shape); n > 0 && dst.Numel() > 1 {
			dst.Shape = slices.Clone(dst.Shape)
			src.Shape = slices.Clone(src.Shape)
			dst.Shape[n-1]--
			src.Shape[n-1]--
		}
	case "leak":
		if _, err := b.Device.Alloc(dtype.Float32, 16); err != nil {
			return err
		}
	}
	return b.Device.Unary(op, dst, src, s)
}

// Reduce leaves out the last element of the first reduced axis.
func (b *broken) Reduce(op device.ReduceOp, dst, src device.View) error {
	if b.bug == "reduce-off-by-one" {
		for i := range src.Shape {
			if dst.Shape[i] == 1 && src.Shape[i] > 1 {
				src.Shape = slices.Clone(src.Shape)
				src.Shape[i]--
				break
			}
		}
	}
	return b.Device.Reduce(op, dst, src)
}

// Gemm reads square operands with the wrong transposition.
func (b *broken) Gemm(dst, a, bb device.GemmOperand, batch, m, n, k int, alpha, beta float64) error {
	if b.bug == "gemm-swaps-transposes" {
		if m == k {
			a.Trans = !a.Trans
		}
		if k == n {
			bb.Trans = !bb.Trans
		}
	}
	return b.Device.Gemm(dst, a, bb, batch, m, n, k, alpha, beta)
}

// Copy rounds float32 to bfloat16 by truncation instead of to nearest even.
func (b *broken) Copy(dst, src device.View) error {
	if b.bug != "copy-bf16-truncates" || dst.DType != dtype.BFloat16 || src.DType != dtype.Float32 {
		return b.Device.Copy(dst, src)
	}
	n := src.Numel()
	raw := make([]byte, 4*n)
	if err := b.Device.Download(raw, src); err != nil {
		return err
	}
	out := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(out[2*i:], uint16(binary.LittleEndian.Uint32(raw[4*i:])>>16))
	}
	tmp, err := b.Device.Alloc(dtype.BFloat16, n)
	if err != nil {
		return err
	}
	defer b.Device.Free(tmp)
	tv := device.View{Buf: tmp, DType: dtype.BFloat16, Shape: src.Shape, Strides: device.ContiguousStrides(src.Shape)}
	if err := b.Device.Upload(tv, out); err != nil {
		return err
	}
	return b.Device.Copy(dst, tv)
}

// Fill writes the whole span of a strided view, gaps included.
func (b *broken) Fill(dst device.View, x float64) error {
	if b.bug == "fill-writes-gaps" && !dst.Contiguous() && dst.Numel() > 0 {
		span := 1
		for i, s := range dst.Shape {
			span += (s - 1) * dst.Strides[i]
		}
		dst = device.View{Buf: dst.Buf, DType: dst.DType, Offset: dst.Offset, Shape: []int{span}, Strides: []int{1}}
	}
	return b.Device.Fill(dst, x)
}

// Binary clobbers its first input.
func (b *broken) Binary(op device.BinaryOp, dst, a, bb device.View) error {
	if err := b.Device.Binary(op, dst, a, bb); err != nil || b.bug != "binary-writes-input" || a.Buf == dst.Buf {
		return err
	}
	return b.Device.Fill(a, 0)
}

// CrossEntropy and its backward do not ignore anything.
func (b *broken) CrossEntropy(loss, logits, target device.View, opt device.CrossEntropyOptions) (int, error) {
	if b.bug == "ce-ignores-ignore-index" {
		opt.IgnoreIndex = -12345
	}
	return b.Device.CrossEntropy(loss, logits, target, opt)
}

func (b *broken) CrossEntropyBackward(dlogits, dloss, logits, target device.View, opt device.CrossEntropyOptions) error {
	if b.bug == "ce-ignores-ignore-index" {
		opt.IgnoreIndex = -12345
	}
	return b.Device.CrossEntropyBackward(dlogits, dloss, logits, target, opt)
}

// Softmax writes NaN into its first element.
func (b *broken) Softmax(dst, src device.View, log bool) error {
	if err := b.Device.Softmax(dst, src, log); err != nil || b.bug != "softmax-writes-nan" || dst.Numel() == 0 {
		return err
	}
	return b.Device.Fill(device.View{Buf: dst.Buf, DType: dst.DType, Offset: dst.Offset, Shape: []int{}, Strides: []int{}}, math.NaN())
}

// ScatterAdd swallows its index errors.
func (b *broken) ScatterAdd(dst, src, index device.View, axis int) error {
	err := b.Device.ScatterAdd(dst, src, index, axis)
	if b.bug == "scatter-add-no-bounds-check" {
		return nil
	}
	return err
}

// Download ignores the offset of strided views.
func (b *broken) Download(dst []byte, src device.View) error {
	if b.bug == "download-ignores-offset" && !src.Contiguous() {
		src.Offset = 0
	}
	return b.Device.Download(dst, src)
}

// LayerNormBackward never writes dw.
func (b *broken) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w device.View) error {
	if b.bug == "layer-norm-skips-dw" {
		dw = device.View{}
	}
	return b.Device.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w)
}

// AdamStep ignores AMSGrad.
func (b *broken) AdamStep(p, g, m, v, vmax device.View, h device.AdamHyper) error {
	if b.bug == "adam-ignores-amsgrad" && h.AMSGrad {
		h.AMSGrad, vmax = false, device.View{}
	}
	return b.Device.AdamStep(p, g, m, v, vmax, h)
}

// Sort orders equal values by descending position, the freedom of an
// unstable sort, which the contract does not leave: it sorts src reversed
// along the axis (a negative stride) and maps the positions back.
func (b *broken) Sort(values, indices, src device.View, axis int, descending bool) error {
	if b.bug != "sort-ties-reversed" || src.Numel() == 0 {
		return b.Device.Sort(values, indices, src, axis, descending)
	}
	n := src.Shape[axis]
	src.Strides = slices.Clone(src.Strides)
	src.Offset += (n - 1) * src.Strides[axis]
	src.Strides[axis] = -src.Strides[axis]
	if err := b.Device.Sort(values, indices, src, axis, descending); err != nil {
		return err
	}
	return b.Device.Unary(device.RSubScalar, indices, indices, float64(n-1))
}

// Scan leaves the last element of every row unwritten.
func (b *broken) Scan(op device.ScanOp, dst, src device.View, axis int, reverse bool) error {
	if b.bug == "scan-skips-last" && dst.Numel() > 0 && dst.Shape[axis] > 1 {
		dst.Shape, src.Shape = slices.Clone(dst.Shape), slices.Clone(src.Shape)
		dst.Shape[axis]--
		src.Shape[axis]--
	}
	return b.Device.Scan(op, dst, src, axis, reverse)
}

// TestHarnessCatchesBugs checks that the suite reports each deliberate bug
// in the cases of the op that has it.
func TestHarnessCatchesBugs(t *testing.T) {
	for _, tc := range []struct {
		bug      string
		prefixes []string // the cases to run
		want     string   // a substring of some failure message
	}{
		{"unary-skips-last", []string{"Unary/"}, "NaN"},
		{"leak", []string{"Unary/exp/"}, "live buffers"},
		{"reduce-off-by-one", []string{"Reduce/"}, "elements differ"},
		{"gemm-swaps-transposes", []string{"Gemm/"}, "elements differ"},
		{"copy-bf16-truncates", []string{"Copy/f32->bf16/"}, "allowed: exact"},
		{"fill-writes-gaps", []string{"Fill/"}, "outside every view"},
		{"binary-writes-input", []string{"Binary/add/"}, "modified input"},
		{"ce-ignores-ignore-index", []string{"CrossEntropy"}, "counted"},
		{"softmax-writes-nan", []string{"Softmax/"}, "NaN"},
		{"scatter-add-no-bounds-check", []string{"ScatterAdd/", "IndexError/ScatterAdd/"}, "no error"},
		{"download-ignores-offset", []string{"Memory/download/"}, "Download of view"},
		{"layer-norm-skips-dw", []string{"LayerNormBackward/"}, "dw"},
		{"adam-ignores-amsgrad", []string{"AdamStep/"}, "vmax"},
		{"sort-ties-reversed", []string{"Sort/"}, "indices"},
		{"scan-skips-last", []string{"Scan/"}, "never written"},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			opts := devicetest.Options{Short: true, Filter: func(name string) bool {
				for _, p := range tc.prefixes {
					if strings.HasPrefix(name, p) {
						return true
					}
				}
				return false
			}}
			ref := cpu.New(cpu.Options{})
			if fs := devicetest.Check(ref, cpu.New(cpu.Options{}), opts); len(fs) != 0 {
				t.Fatalf("the healthy device fails %d cases, the first: %v", len(fs), fs[0])
			}
			fs := devicetest.Check(ref, &broken{Device: cpu.New(cpu.Options{}), bug: tc.bug}, opts)
			if len(fs) == 0 {
				t.Fatalf("no failure reported")
			}
			found := false
			for _, f := range fs {
				found = found || strings.Contains(f.Msg, tc.want)
				if !opts.Filter(f.Case) {
					t.Errorf("failure in unselected case %s", f.Case)
				}
				if !strings.Contains(f.Msg, "seed ") {
					t.Errorf("failure without the seed: %v", f)
				}
			}
			if !found {
				t.Errorf("no failure message mentions %q; the first: %v", tc.want, fs[0])
			}
			t.Logf("%d failures; the first:\n%v", len(fs), fs[0])
		})
	}
}

func TestSeed(t *testing.T) {
	t.Setenv(devicetest.SeedEnv, "")
	if got := devicetest.Seed(devicetest.Options{}); got != devicetest.DefaultSeed {
		t.Errorf("default seed %d, want %d", got, devicetest.DefaultSeed)
	}
	if got := devicetest.Seed(devicetest.Options{Seed: 7}); got != 7 {
		t.Errorf("Options.Seed 7 gave %d", got)
	}
	t.Setenv(devicetest.SeedEnv, "0x2a")
	if got := devicetest.Seed(devicetest.Options{Seed: 7}); got != 42 {
		t.Errorf("%s=0x2a gave %d", devicetest.SeedEnv, got)
	}
	// Another seed gives other inputs, which a healthy device passes too.
	opts := devicetest.Options{Short: true, Filter: func(n string) bool { return strings.HasPrefix(n, "Gemm/f32/nt") }}
	if fs := devicetest.Check(cpu.New(cpu.Options{}), cpu.New(cpu.Options{}), opts); len(fs) != 0 {
		t.Errorf("seed 42: %v", fs[0])
	}
}
