package zero

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// run describes one training run of the MLP on n in-process ranks: DDP
// (unless stage 2, which reduces gradients itself) with ZeRO or with the
// plain optimizer, two parameter groups (the last layer at a tenth of the
// learning rate, added after construction), a StepLR scheduler and a
// global batch of 24 split across the ranks.
type run struct {
	n     int
	kind  optim.Kind
	hyper optim.ParamGroup
	steps int

	zero     bool
	opts     Options
	overlap  string // "", "A" (HookWithZeroStep) or "B" (interleaved)
	shard    bool
	ddpOpts  ddp.Options
	seedRank bool // initialise each rank's model differently
	// dt, when valid, is the model's dtype (bfloat16: mixed precision
	// with float32 master weights); the inputs are converted to it.
	dt dtype.DType
	// clip, when positive, clips the gradients' 2-norm before each step.
	clip float64
	// keepGathered: stage 3's units keep their parameters from forward to
	// backward (reshardAfterForward false).
	keepGathered bool
	// offload: the optimizer's half runs on a second CPU device, the host
	// (Options.Offload).
	offload bool

	// uneven: rank r stops after steps-r iterations, under Join.
	uneven bool
	// noStep leaves out opt.Step() (PyTorch's overlap tests: the hook
	// steps), so that the parameters are read right after the last
	// backward pass.
	noStep bool
	// net slows every collective down to that link (dist.NetModel).
	net dist.NetModel

	// between is called on every rank after the given step (0-based) with
	// the rank's optimizer; it may consolidate or load state.
	between func(step, rank int, opt any) error
}

type optimizer interface {
	Step() error
	ZeroGrad(bool) error
	ParamGroups() []*optim.ParamGroup
}

type result struct {
	params [][]float64 // rank 0's, every rank's being equal
	mems   []Memory
	moved  []OffloadBytes
	opts   []any
}

func (c run) train(t *testing.T) result {
	t.Helper()
	if c.steps == 0 {
		c.steps = 6
	}
	w, err := dist.NewWorld(c.n, dist.Options{Net: c.net})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	vals := make([][][]float64, c.n)
	res := result{mems: make([]Memory, c.n), moved: make([]OffloadBytes, c.n), opts: make([]any, c.n)}
	errs := make([]error, c.n)
	var wg sync.WaitGroup
	for rank := range c.n {
		wg.Go(func() { errs[rank] = c.rank(t, w, rank, &vals[rank], &res) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := 1; r < c.n; r++ {
		for i := range vals[0] {
			if !slices.Equal(vals[r][i], vals[0][i]) {
				t.Fatalf("rank %d's parameter %d differs from rank 0's", r, i)
			}
		}
	}
	res.params = vals[0]
	return res
}

func (c run) rank(t *testing.T, w *dist.World, rank int, vals *[][]float64, res *result) error {
	seed := uint64(0)
	if c.seedRank {
		seed = uint64(rank)
	}
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), seed)
	m := mlp(t, rt)
	if c.dt.Valid() {
		if err := m.To(c.dt); err != nil {
			return err
		}
	}
	pg := w.Group(rank)
	params := m.Parameters()
	var d *ddp.DDP
	if !c.zero || c.opts.Stage < 2 {
		var named []ddp.Param
		for _, p := range m.NamedParameters() {
			named = append(named, ddp.Param{Name: p.Name, Tensor: p.Tensor})
		}
		var err error
		if d, err = ddp.New(pg, named, c.ddpOpts); err != nil {
			return err
		}
		defer d.Close()
	}
	first, last := params[:4], params[4:]
	var opt optimizer
	var z *Optimizer
	var err error
	forward := m.Forward
	if c.zero && c.opts.Stage == 3 {
		// One unit per Linear, gathered and resharded around its
		// forward as zero.fullyShard does.
		var units []UnitSpec
		var owner []int
		for _, l := range m.Layers {
			if ps := l.(interface{ Parameters() []*tensor.Tensor }).Parameters(); len(ps) > 0 {
				owner = append(owner, len(units))
				units = append(units, UnitSpec{Params: ps, ReshardAfterForward: !c.keepGathered})
			} else {
				owner = append(owner, -1)
			}
		}
		c.opts.Units = units
		forward = func(x *tensor.Tensor) *tensor.Tensor {
			for i, l := range m.Layers {
				u := z.Unit(owner[i])
				if u != nil {
					if err := u.BeforeForward(); err != nil {
						return rt.Failed(err)
					}
				}
				x = l.Forward(x)
				if u != nil {
					if err := u.AfterForward([]*tensor.Tensor{x}); err != nil {
						return rt.Failed(err)
					}
				}
			}
			return x
		}
	}
	if c.offload {
		c.opts.Offload = tensor.NewRuntime(cpu.New(cpu.Options{Index: 100 + rank}), 0)
	}
	if c.zero {
		z, err = New(pg, c.kind, first, c.hyper, c.opts)
		opt = z
	} else {
		var o *optim.Optimizer
		o, err = optim.New(c.kind, first, c.hyper)
		opt = o
	}
	if err != nil {
		return err
	}
	if z != nil {
		defer z.Close()
	}
	g := c.hyper.Hyper()
	g.LR /= 10
	g.Params = last
	switch o := opt.(type) {
	case *Optimizer:
		err = o.AddParamGroup(g)
	case *optim.Optimizer:
		err = o.AddParamGroup(g)
	}
	if err != nil {
		return err
	}
	res.opts[rank] = opt
	if c.overlap != "" {
		wrap := HookWithZeroStep
		if c.overlap == "B" {
			wrap = HookWithZeroStepInterleaved
		}
		hook, err := wrap(ddp.AllReduceHook(pg), d, z, OverlapOptions{ShardBuckets: c.shard})
		if err != nil {
			return err
		}
		if err := d.RegisterCommHook(hook); err != nil {
			return err
		}
	}
	sched, err := optim.NewStepLR(opt, 2, 0.5)
	if err != nil {
		return err
	}
	per := 24 / c.n
	steps := c.steps
	if c.uneven {
		steps -= rank
	}
	loop := func() error {
		for step := range steps {
			sc := rt.OpenScope()
			xs := make([]float64, 24*16)
			ys := make([]int64, 24)
			for i := range xs {
				xs[i] = math.Sin(float64(i*3 + step))
			}
			for i := range ys {
				ys[i] = int64((i + step) % 4)
			}
			x, y := rt.FromValues(dtype.Float32, xs, 24, 16), rt.FromInt64s(ys, 24)
			if c.dt.Valid() {
				x = x.To(c.dt)
			}
			if err := opt.ZeroGrad(false); err != nil {
				return err
			}
			loss := tensor.CrossEntropy(forward(x.Narrow(0, rank*per, per)), y.Narrow(0, rank*per, per), tensor.DefaultCrossEntropy)
			if err := loss.Backward(); err != nil {
				return err
			}
			if c.clip > 0 {
				var err error
				if z != nil {
					_, err = z.ClipGradNorm(c.clip, 2)
				} else {
					_, err = optim.ClipGradNorm(params, c.clip, 2)
				}
				if err != nil {
					return err
				}
			}
			if c.noStep {
				// Nothing between backward and the next use of the
				// parameters: the next forward, or the read below.
			} else if err := opt.Step(); err != nil {
				return err
			}
			if !c.uneven {
				// A joined rank no longer steps its scheduler; the
				// uneven runs keep one learning rate.
				sched.Step()
			}
			sc.Close()
			if c.between != nil {
				if err := c.between(step, rank, opt); err != nil {
					return err
				}
			}
		}
		return nil
	}
	switch {
	case c.uneven && z != nil:
		err = z.Join(d, loop)
	case c.uneven:
		err = d.Join(loop)
	default:
		err = loop()
	}
	if err != nil {
		return err
	}
	read := func() error {
		for _, p := range params {
			v, err := p.Float64s()
			if err != nil {
				return err
			}
			*vals = append(*vals, v)
		}
		return nil
	}
	if z != nil {
		err = z.WithFullParams(false, read)
	} else {
		err = read()
	}
	if err != nil {
		return err
	}
	if z != nil {
		res.mems[rank] = z.Memory()
		res.moved[rank] = z.Offloaded()
	}
	return nil
}

// closeNorm holds the relative L2 distance between got and want, over all
// parameters, to tol.
func closeNorm(t *testing.T, got, want [][]float64, tol float64, what string) {
	t.Helper()
	var diff, ref float64
	for i := range want {
		for j := range want[i] {
			d := got[i][j] - want[i][j]
			diff += d * d
			ref += want[i][j] * want[i][j]
		}
	}
	if r := math.Sqrt(diff / ref); r > tol {
		t.Fatalf("%s: relative distance %.4g from the plain run, more than %g", what, r, tol)
	}
}

func closeTo(t *testing.T, got, want [][]float64, what string) {
	t.Helper()
	for i := range want {
		for j := range want[i] {
			if a, b := got[i][j], want[i][j]; math.Abs(a-b) > 1e-6*math.Max(1, math.Abs(b)) {
				t.Fatalf("%s: parameter %d, element %d: ZeRO %v, plain %v", what, i, j, a, b)
			}
		}
	}
}

// kindCase is an optimizer ZeRO's tests run: its algorithm and settings.
type kindCase struct {
	name  string
	kind  optim.Kind
	hyper optim.ParamGroup
}

// kinds are the algorithms of engine/optim's registry: those below with
// settings of their own, every other one (NAdam, RAdam, ...) with
// PyTorch's defaults.
var kinds = func() []kindCase {
	sgd := optim.SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3}.Group()
	sgdMax := sgd.Hyper()
	sgdMax.Maximize = true
	adam := optim.DefaultAdam().Group()
	adam.LR = 1e-2
	adamW := optim.DefaultAdamW().Group()
	adamW.LR = 1e-2
	rms := optim.RMSpropConfig{LR: 1e-3, Alpha: 0.9, Eps: 1e-8, Momentum: 0.5, Centered: true}.Group()
	adagrad := optim.AdagradConfig{LR: 1e-2, LRDecay: 0.01, InitialAccumulatorValue: 0.1, Eps: 1e-10}.Group()
	adamax := optim.DefaultAdamax().Group()
	out := []kindCase{{"SGD", optim.SGD, sgd}, {"SGD maximize", optim.SGD, sgdMax}, {"Adam", optim.Adam, adam}, {"AdamW", optim.AdamW, adamW},
		{"RMSprop", optim.RMSprop, rms}, {"Adagrad", optim.Adagrad, adagrad}, {"Adamax", optim.Adamax, adamax}}
	for _, a := range optim.Algorithms() {
		if !slices.ContainsFunc(out, func(k kindCase) bool { return k.kind == a.Kind }) {
			out = append(out, kindCase{a.Name, a.Kind, optim.Defaults(a.Kind)})
		}
	}
	return out
}()

// small DDP buckets, so that the MLP spans three of them.
var smallBuckets = ddp.Options{FirstBucketCapMB: 0.0005, BucketCapMB: 0.001}

func TestParityWithDDPAndThePlainOptimizer(t *testing.T) {
	layouts := []struct {
		name    string
		opts    Options
		offload bool
	}{
		{"greedy", Options{}, false},
		{"greedy bucket view", Options{ParametersAsBucketView: true}, false},
		{"flat", Options{Partition: "flat"}, false},
		{"flat bucket view", Options{Partition: "flat", ParametersAsBucketView: true, BucketCapMB: 0.002}, false},
		{"stage 2", Options{Stage: 2, BucketCapMB: 0.002}, false},
		{"stage 3", Options{Stage: 3}, false},
		{"stage 2 offloaded", Options{Stage: 2, BucketCapMB: 0.002}, true},
		{"stage 3 offloaded", Options{Stage: 3}, true},
	}
	for _, k := range kinds {
		for _, l := range layouts {
			for n := 1; n <= 4; n++ {
				t.Run(fmt.Sprintf("%s/%s/n=%d", k.name, l.name, n), func(t *testing.T) {
					plain := run{n: n, kind: k.kind, hyper: k.hyper}
					want := plain.train(t)
					z := plain
					z.zero, z.opts, z.offload = true, l.opts, l.offload
					z.seedRank = l.opts.Stage >= 2 // stages 2 and 3 make the replicas equal themselves
					got := z.train(t)
					closeTo(t, got.params, want.params, l.name)
					checkMemory(t, got.mems, l.opts.Stage)
					if l.offload {
						checkOffload(t, got, z.steps)
					}
					if l.opts.Stage == 3 {
						z.keepGathered = true
						closeTo(t, z.train(t).params, want.params, "stage 3, kept until backward")
					}
				})
			}
		}
	}
}

// checkMemory asserts the bounds of the issue: optimizer state per rank at
// most total/N plus the largest parameter's state (2.weight, 32×32, two
// float32 tensors at most); under stage 2, gradient bytes per rank about
// total/N.
func checkMemory(t *testing.T, mems []Memory, stage int) {
	t.Helper()
	n := int64(len(mems))
	var total int64
	for _, m := range mems {
		total += m.State
	}
	largest := int64(32 * 32 * 4 * 2)
	for r, m := range mems {
		if m.State > total/n+largest {
			t.Errorf("rank %d holds %d bytes of optimizer state; total %d over %d ranks", r, m.State, total, n)
		}
		if stage == 2 {
			full := m.Parameters // as many gradient bytes as parameter bytes, unsharded
			if m.Gradients > full/n+int64(4*n*2) {
				t.Errorf("rank %d holds %d bytes of gradients under stage 2; the full gradients are %d bytes over %d ranks", r, m.Gradients, full, n)
			}
		}
	}
}

// checkOffload: the state is on the host, and each step moved this rank's
// gradient slices down and its parameter slices up, plus the master copy's
// first fetch (the parameters' parts of the slices: a bucket's padding,
// when it falls in this rank's slice, goes down with the gradients but
// not up without stage 3's whole-slice shards).
func checkOffload(t *testing.T, got result, steps int) {
	t.Helper()
	if steps == 0 {
		steps = 6
	}
	for r, m := range got.mems {
		if m.State != 0 || m.HostState == 0 {
			t.Errorf("rank %d: state %d bytes on the device, %d on the host", r, m.State, m.HostState)
		}
		slice := m.OwnedParameters
		mv := got.moved[r]
		if mv.ToDevice%int64(steps) != 0 || mv.ToDevice > int64(steps)*slice || mv.ToDevice < int64(steps)*(slice-64) ||
			mv.ToHost < int64(steps)*slice || mv.ToHost > int64(steps+1)*slice {
			t.Errorf("rank %d: moved %+v in %d steps of a %d-byte slice", r, mv, steps, slice)
		}
	}
}
