package script

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestRandomArgumentsNeverInternal calls the shape- and geometry-driven
// operations — convolutions, poolings, views, indexing, sorting, losses,
// norms, attention, products, reductions, creation, and modules built
// with random sizes — with random arguments, most of them legal and some
// not (zero, negative, huge and out-of-range sizes, dimensions and
// indices), forward and backward. Each call either works or fails with an
// error that names the problem: never a Go panic caught as an "internal
// error", never a backward that fails after its forward accepted the
// arguments, never a hang. It found a convolution whose kernel is wider
// than a 1-wide row and its padding panicking in backward, the backward of
// an embedding of width 0 and of a linear layer of 0 input features
// failing, and scatter_add reading its source past its end.
func TestRandomArgumentsNeverInternal(t *testing.T) {
	r, err := New(Options{Stdout: io.Discard, Stderr: io.Discard, AutoRelease: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.RunString("setup.js", `const { tensor, nn } = require("zeroeng"); const F = nn.functional;
globalThis.tensor = tensor; globalThis.nn = nn; globalThis.F = F;
// run calls fn and returns "" or the error's message.
globalThis.run = fn => { try { fn(); return ""; } catch (e) { return String(e && e.message || e); } };`); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	// small is mostly a legal size or index, sometimes 0, negative or huge.
	small := func(lo, hi int) int {
		switch rng.IntN(20) {
		case 0:
			return 0
		case 1:
			return -1 - rng.IntN(3)
		case 2:
			return 1000
		}
		return lo + rng.IntN(hi-lo+1)
	}
	// ext is an extent of a tensor: small's, a huge one capped at hi.
	ext := func(hi int) int { return min(small(1, hi), hi) }
	// size is a legal extent: the operands' sizes stay small, so that a
	// huge padding or dilation is the only large thing in a call.
	size := func(hi int) int { return 1 + rng.IntN(hi) }
	shape := func(dims, hi int) string {
		s := make([]string, dims)
		for i := range s {
			s[i] = fmt.Sprint(min(max(1, small(1, hi)), hi)) // no huge tensors: their work is legal, and slow
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	pair := func(lo, hi int) string {
		if rng.IntN(2) == 0 {
			return fmt.Sprint(small(lo, hi))
		}
		return fmt.Sprintf("[%d, %d]", small(lo, hi), small(lo, hi))
	}
	// capped is pair without the huge value: a convolution with a huge
	// padding or a huge kernel is legal, and its work is huge.
	capped := func(lo, hi int) string {
		if rng.IntN(2) == 0 {
			return fmt.Sprint(min(small(lo, hi), hi))
		}
		return fmt.Sprintf("[%d, %d]", min(small(lo, hi), hi), min(small(lo, hi), hi))
	}
	ops := []func() string{
		func() string {
			c := size(5)
			return fmt.Sprintf(`const x = tensor.randn([%d, %d, %d, %d]).requiresGrad_(true); const w = tensor.randn([%d, %d, %d, %d]).requiresGrad_(true);
F.conv2d(x, w, null, { stride: %s, padding: %s, dilation: %s }).sum().backward();`,
				size(2), c, size(9), size(9), size(3), c, ext(5), ext(5),
				pair(1, 3), capped(0, 3), capped(1, 2))
		},
		func() string {
			c := size(5)
			return fmt.Sprintf(`const x = tensor.randn([%d, %d, %d]).requiresGrad_(true); const w = tensor.randn([%d, %d, %d]).requiresGrad_(true);
F.conv1d(x, w, null, { stride: %d, padding: %d, dilation: %d }).sum().backward();`,
				size(2), c, size(12), size(3), c, ext(5), small(1, 3), min(small(0, 3), 3), min(small(1, 2), 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true);
F.maxPool2d(x, %s, { stride: %s, padding: %s, dilation: %s, ceilMode: %v }).sum().backward();`,
				shape(4, 9), pair(1, 4), pair(1, 3), pair(0, 2), pair(1, 2), rng.IntN(2) == 0)
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true);
F.avgPool2d(x, %s, { stride: %s, padding: %s, ceilMode: %v, countIncludePad: %v }).sum().backward();`,
				shape(4, 9), pair(1, 4), pair(1, 3), pair(0, 2), rng.IntN(2) == 0, rng.IntN(2) == 0)
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); F.adaptiveAvgPool2d(x, %s).sum().backward();`, shape(4, 9), capped(1, 10)) // an output of 1000×1000 is legal, and slow
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.narrow(%d, %d, %d).sum().backward();`, shape(3, 6), small(0, 2), small(0, 5), small(0, 5))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.select(%d, %d).sum().backward();`, shape(3, 6), small(0, 2), small(0, 5))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.split(%d, %d).forEach(p => p.sum().backward({ retainGraph: true }));`, shape(3, 6), small(1, 4), small(0, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.chunk(%d, %d)[0].sum().backward();`, shape(3, 6), small(1, 4), small(0, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.flip([%d, %d]).mul(2).sum().backward();`, shape(3, 5), small(0, 2), small(0, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.repeat(%d, %d, %d).sum().backward();`, shape(2, 4), ext(3), ext(3), ext(3))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.permute(%d, %d, %d).reshape(%d, -1).sum().backward();`, shape(3, 5), small(0, 2), small(0, 2), small(0, 2), small(1, 6))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.transpose(%d, %d).contiguous().view(%d, %d).sum().backward();`, shape(3, 4), small(0, 2), small(0, 2), small(1, 8), small(-1, 8))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.unsqueeze(%d).expand(%d, -1, -1, -1).sum().backward();`, shape(3, 4), small(0, 3), small(1, 3))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.topk(%d, %d).values.sum().backward();`, shape(2, 6), small(1, 6), small(0, 1))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.sort(%d).values.mul(2).sum().backward(); x.argsort(%d, true);`, shape(3, 5), small(0, 2), small(0, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.cumsum(%d).sum().backward(); x.cumprod(%d);`, shape(3, 5), small(0, 2), small(0, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); const i = tensor.randint(%d, %d, %s);
x.gather(%d, i).sum().backward();`, shape(2, 5), small(-2, 0), small(1, 6), shape(2, 5), small(0, 1))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); const i = tensor.randint(%d, %d, [%d]);
x.indexSelect(%d, i).sum().backward();`, shape(2, 5), small(-2, 0), small(1, 6), small(1, 6), small(0, 1))
		},
		func() string {
			return fmt.Sprintf(`const w = tensor.randn([%d, %d]).requiresGrad_(true); const i = tensor.randint(%d, %d, %s);
F.embedding(i, w).sum().backward();`, ext(8), ext(4), small(-2, 0), small(1, 10), shape(2, 4))
		},
		func() string {
			return fmt.Sprintf(`const i = tensor.randint(0, %d, %s); F.oneHot(i, %d).sum();`, small(1, 6), shape(2, 4), small(-1, 6))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.repeatInterleave(%d, %d).sum().backward();`, shape(2, 4), small(1, 3), small(0, 1))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn([%d, %d]).requiresGrad_(true); const y = tensor.randint(%d, %d, [%d]);
F.crossEntropy(x, y, { reduction: %q }).sum().backward();`, ext(5), ext(6), small(-2, 0), small(1, 7), ext(5), []string{"mean", "sum", "none"}[rng.IntN(3)])
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn([%d, %d, %d]).requiresGrad_(true); const y = tensor.randint(%d, %d, [%d, %d]);
F.crossEntropy(x, y).backward();`, ext(3), ext(5), ext(4), small(-2, 0), small(1, 6), ext(3), ext(4))
		},
		func() string {
			d := small(1, 6)
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); const w = tensor.randn([%d]).requiresGrad_(true);
F.layerNorm(x, [%d], w, w).sum().backward(); F.rmsNorm(x, [%d], w).sum().backward();`, shape(3, 6), d, small(1, 6), small(1, 6))
		},
		func() string {
			c := small(1, 5)
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); const m = tensor.zeros([%d]), v = tensor.ones([%d]);
F.batchNorm(x, m, v, { training: true }).sum().backward();`, shape(4, 5), c, c)
		},
		func() string {
			return fmt.Sprintf(`const q = tensor.randn(%s).requiresGrad_(true), k = tensor.randn(%s).requiresGrad_(true), v = tensor.randn(%s).requiresGrad_(true);
F.scaledDotProductAttention(q, k, v, { isCausal: %v }).sum().backward();`, shape(4, 5), shape(4, 5), shape(4, 5), rng.IntN(2) == 0)
		},
		func() string {
			return fmt.Sprintf(`const a = tensor.randn(%s).requiresGrad_(true), b = tensor.randn(%s).requiresGrad_(true); a.matmul(b).sum().backward();`, shape(1+rng.IntN(3), 5), shape(1+rng.IntN(3), 5))
		},
		func() string {
			return fmt.Sprintf(`const a = tensor.randn(%s).requiresGrad_(true), b = tensor.randn(%s).requiresGrad_(true);
tensor.cat([a, b], %d).sum().backward(); tensor.stack([a, b], %d).sum().backward();`, shape(2, 4), shape(2, 4), small(0, 1), small(0, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); const m = tensor.randn(%s).gt(0);
x.maskedFill(m, 0).sum().backward(); tensor.where(m, x, x.mul(2)).sum().backward();`, shape(2, 4), shape(2, 4))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true);
x.softmax(%d).sum().backward(); x.logSoftmax(%d).sum().backward(); x.amax(%d).sum().backward();`, shape(3, 4), small(-1, 2), small(-1, 2), small(0, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true);
x.var(%d).sum().backward(); x.std(%d).sum().backward(); x.norm(2, %d).sum().backward(); x.prod(%d).sum().backward();`, shape(3, 4), small(0, 2), small(0, 2), small(0, 2), small(0, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.squeeze(%d).flatten(%d, %d).sum().backward();`, shape(3, 3), small(0, 2), small(0, 2), small(-1, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); x.unbind(%d)[0].sum().backward(); x.argmax(%d); x.max(%d).values.sum();`, shape(3, 3), small(0, 2), small(0, 2), small(0, 2))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); const i = tensor.randint(%d, %d, %s);
tensor.zeros(%s).scatterAdd(%d, i, x).sum().backward();`, shape(2, 4), small(-2, 0), small(1, 5), shape(2, 4), shape(2, 5), small(0, 1))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true); F.dropout2d(x, { p: %g, training: true }).sum().backward(); F.dropout(x, { p: %g }).sum().backward();`,
				shape(4, 4), float64(small(0, 10))/10, float64(small(0, 10))/10)
		},
		// Modules made with random sizes, then run.
		func() string {
			in, out := ext(6), ext(6)
			return fmt.Sprintf(`const m = nn.Linear(%d, %d, %v); m.forward(tensor.randn([%d, %d])).sum().backward();`, in, out, rng.IntN(2) == 0, ext(4), ext(6))
		},
		func() string {
			return fmt.Sprintf(`const m = nn.Conv2d(%d, %d, %s, { stride: %s, padding: %s, groups: %d });
m.forward(tensor.randn([%d, %d, %d, %d])).sum().backward();`, ext(4), ext(4), capped(1, 3), pair(1, 2), capped(0, 2), ext(2), size(2), ext(4), size(8), size(8))
		},
		func() string {
			return fmt.Sprintf(`const m = nn.Embedding(%d, %d, { paddingIdx: %d }); m.forward(tensor.randint(0, %d, [%d])).sum().backward();`, ext(6), ext(4), small(-3, 5), size(6), ext(5))
		},
		func() string {
			return fmt.Sprintf(`const m = nn.LayerNorm(%s); m.forward(tensor.randn(%s)).sum().backward();`, shape(1+rng.IntN(2), 4), shape(3, 4))
		},
		func() string {
			c := ext(4)
			return fmt.Sprintf(`const m = nn.BatchNorm2d(%d); m.forward(tensor.randn([%d, %d, %d, %d])).sum().backward(); m.eval(); m.forward(tensor.randn([1, %d, 2, 2]));`, c, size(3), ext(4), size(4), size(4), ext(4))
		},
		func() string {
			return fmt.Sprintf(`const m = nn.MaxPool2d(%s, { stride: %s, padding: %s }); m.forward(tensor.randn(%s));
const a = nn.AvgPool2d(%s, { stride: %s }); a.forward(tensor.randn(%s));`, capped(1, 3), pair(1, 3), capped(0, 2), shape(4, 6), capped(1, 3), pair(1, 3), shape(3, 6))
		},
		// Creation, reductions over lists of dimensions, dtypes.
		func() string {
			return fmt.Sprintf(`tensor.arange(%d, %d, %d); tensor.linspace(%d, %d, %d); tensor.eye(%d, %d); tensor.full(%s, %d).to(%q);`,
				small(-3, 3), small(-3, 9), small(-2, 3), small(-3, 3), small(-3, 3), ext(5), ext(5), ext(5), shape(2, 4), small(-2, 2),
				[]string{"float32", "float64", "bfloat16", "float16", "int64", "int32", "uint8", "bool"}[rng.IntN(8)])
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true);
x.sum([%d, %d], true).backward(); x.mean({ dim: [%d], keepdim: %v }).sum().backward();`, shape(3, 4), small(-3, 2), small(-3, 2), small(-3, 2), rng.IntN(2) == 0)
		},
		func() string {
			return fmt.Sprintf(`const a = tensor.randn(%s).requiresGrad_(true), b = tensor.randn(%s);
a.mm(b).sum().backward(); tensor.bmm(tensor.randn(%s), tensor.randn(%s));`, shape(2, 4), shape(2, 4), shape(3, 3), shape(3, 3))
		},
		func() string {
			return fmt.Sprintf(`const x = tensor.randn(%s).requiresGrad_(true);
x.clamp(%d, %d).pow(%d).sum().backward(); x.abs().pow(%g).sum().backward(); x.norm(%d).backward();`, shape(2, 4), small(-2, 2), small(-2, 2), small(-2, 3), float64(small(-4, 4))/2, small(-1, 3))
		},
	}
	tries := 3000
	if testing.Short() {
		tries = 600
	}
	failed := 0
	for i := range tries {
		src := ops[rng.IntN(len(ops))]()
		stop := time.AfterFunc(10*time.Second, func() { r.Interrupt("a call ran past 10 s") })
		v, err := r.RunString(fmt.Sprintf("random%d.js", i), "run(() => { "+src+" })")
		stop.Stop()
		if err != nil {
			t.Fatalf("%s\n%v", src, err)
		}
		msg := v.String()
		if msg != "" {
			failed++
		}
		// "backward of X" is an error raised inside a backward function:
		// the forward accepted the arguments, so the engine is at fault.
		if strings.Contains(msg, "internal") || strings.Contains(msg, "goroutine") || strings.Contains(msg, "runtime error") || strings.Contains(msg, "backward of") {
			t.Errorf("%s\nfailed with %s", src, msg)
		}
	}
	// Both sides are exercised: most calls legal, a good share refused.
	if failed < tries/10 || failed > tries*9/10 {
		t.Errorf("%d of %d calls failed: the arguments are not mixed as meant", failed, tries)
	}
	t.Logf("%d of %d calls refused their arguments", failed, tries)
}
