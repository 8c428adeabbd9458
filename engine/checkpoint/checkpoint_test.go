package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// layout is how a run's optimizer is made: plain AdamW (replicated on
// every rank) or ZeRO with options.
type layout struct {
	ranks int
	zero  bool
	opts  zero.Options
}

func (l layout) String() string {
	if !l.zero {
		return fmt.Sprintf("plain×%d", l.ranks)
	}
	p := l.opts.Partition
	if p == "" {
		p = "greedy"
	}
	return fmt.Sprintf("zero-%s-s%d×%d", p, max(1, l.opts.Stage), l.ranks)
}

// job is a toy training run: five parameters in two groups, AdamW, and
// gradients that every rank computes alike (as if DDP had averaged them),
// with noise drawn from the rank's generator when noise is set, so that a
// resume that does not restore the generators diverges. With nadam the
// optimizer is NAdam and β₁ changes before every step (as OneCycleLR's
// cycle_momentum changes it), so that its state's mu_product is no
// function of the step count: a resume must restore it.
type job struct {
	dt    dtype.DType
	noise bool
	nadam bool
}

// nadamBeta1 is β₁ at step s of a nadam job.
func nadamBeta1(s int) float64 { return 0.95 - 0.05*float64(s%4) }

var shapes = [][]int{{9}, {7}, {5}, {3}, {4, 6}}

// rankState is one rank's model and optimizer.
type rankState struct {
	rt     *tensor.Runtime
	params []*tensor.Tensor
	opt    any
	step   func() error
	groups func() []*optim.ParamGroup
}

func (j job) newRank(t testing.TB, l layout, pg dist.ProcessGroup, init float64) *rankState {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 7)
	dt := j.dt
	if !dt.Valid() {
		dt = dtype.Float32
	}
	var params []*tensor.Tensor
	for i, sh := range shapes {
		n := 1
		for _, d := range sh {
			n *= d
		}
		v := make([]float64, n)
		for k := range v {
			v[k] = math.Cos(init + float64(i*10+k))
		}
		p := rt.FromValues(dt, v, sh...).Persist()
		p.SetName(fmt.Sprintf("layers.%d.weight", i))
		if err := p.SetRequiresGrad(true); err != nil {
			t.Fatal(err)
		}
		params = append(params, p)
	}
	kind, hyper := optim.AdamW, optim.DefaultAdamW().Group()
	if j.nadam {
		kind, hyper = optim.NAdam, optim.Defaults(optim.NAdam)
		hyper.Beta1 = 0.5 // the checkpoint's β₁ replaces it
	}
	hyper.LR = 0.05 + init // the hyper-parameters come from the checkpoint on resume
	g2 := hyper.Hyper()
	g2.LR /= 10
	g2.Params = params[3:]
	var opt interface {
		Step() error
		AddParamGroup(optim.ParamGroup) error
	}
	var groups func() []*optim.ParamGroup
	var err error
	if l.zero {
		var z *zero.Optimizer
		z, err = zero.New(pg, kind, params[:3], hyper, l.opts)
		opt, groups = z, func() []*optim.ParamGroup { return z.Groups }
	} else {
		var o *optim.Optimizer
		o, err = optim.New(kind, params[:3], hyper)
		opt, groups = o, func() []*optim.ParamGroup { return o.Groups }
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := opt.AddParamGroup(g2); err != nil {
		t.Fatal(err)
	}
	return &rankState{rt: rt, params: params, opt: opt, step: opt.Step, groups: groups}
}

// train runs steps [from, to) on one rank.
func (j job) train(rs *rankState, from, to int) error {
	for step := from; step < to; step++ {
		for i, p := range rs.params {
			v := make([]float64, p.Numel())
			for k := range v {
				v[k] = math.Sin(float64(step*7 + i*3 + k))
			}
			g := rs.rt.FromValues(p.DType(), v, p.Shape()...)
			if j.noise {
				g = g.Add(rs.rt.Randn(p.DType(), p.Shape()...).Mul(rs.rt.Scalar(p.DType(), 0.1)))
			}
			if err := p.SetGrad(g.Persist()); err != nil {
				return err
			}
		}
		if j.nadam {
			for _, g := range rs.groups() {
				g.Beta1 = nadamBeta1(step)
			}
		}
		if err := rs.step(); err != nil {
			return err
		}
	}
	return nil
}

func (rs *rankState) state(testing.TB) *State {
	st := &State{
		Modules:    []Module{{Key: "model", Tensors: named(rs.params)}},
		Optimizers: []Optimizer{{Key: "optimizer", Opt: rs.opt}},
		JSON:       map[string]json.RawMessage{"note": json.RawMessage(`{"epoch":2}`)},
		RNG:        rs.rt.Generator().State(),
		SetRNG:     rs.rt.Generator().SetState,
	}
	return st
}

func named(ps []*tensor.Tensor) []nn.NamedTensor {
	out := make([]nn.NamedTensor, len(ps))
	for i, p := range ps {
		out[i] = nn.NamedTensor{Name: p.Name(), Tensor: p}
	}
	return out
}

func values(ps []*tensor.Tensor) [][]float64 {
	var out [][]float64
	for _, p := range ps {
		v, _ := p.Float64s()
		out = append(out, v)
	}
	return out
}

// onRanks runs fn on every rank of a new world of n.
func onRanks(n int, fn func(rank int, pg dist.ProcessGroup) error) error {
	w, err := dist.NewWorld(n, dist.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = fn(r, w.Group(r)) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// TestResume checks that training resumed from a checkpoint taken at step
// 3 ends, after step 6, with exactly the parameters of the uninterrupted
// run: under the same world size and layout (each rank reading its own
// shard, generators restored), and resharded onto other world sizes and
// layouts.
func TestResume(t *testing.T) {
	plain := func(n int) layout { return layout{ranks: n} }
	greedy := func(n int) layout { return layout{ranks: n, zero: true} }
	flat := func(n int) layout { return layout{ranks: n, zero: true, opts: zero.Options{Partition: "flat"}} }
	small := func(n int) layout {
		return layout{ranks: n, zero: true, opts: zero.Options{Partition: "flat", BucketCapMB: 0.0001}}
	}
	nadam := job{nadam: true}
	cases := []struct {
		job          job
		save, resume layout
	}{
		{job{noise: true}, plain(1), plain(1)},
		{job{noise: true}, plain(2), plain(2)},
		{job{noise: true}, greedy(2), greedy(2)},
		{job{noise: true}, flat(3), flat(3)},
		{job{noise: true}, small(2), small(2)},
		{job{noise: true, dt: dtype.BFloat16}, flat(2), flat(2)},
		{job{}, flat(2), flat(3)},
		{job{}, greedy(3), flat(2)},
		{job{}, small(2), flat(2)},
		{job{}, flat(2), plain(1)},
		{job{}, plain(1), greedy(2)},
		{job{dt: dtype.BFloat16}, flat(3), plain(2)},
		// NAdam with β₁ changing every step: mu_product (a number in each
		// parameter's state, per piece under the flat partition) comes
		// back from the checkpoint; recomputed from the step it differs.
		// Stages 2 and 3, which need a backward pass: TestShardedResume.
		{nadam, plain(1), plain(1)},
		{nadam, greedy(2), greedy(2)},
		{nadam, flat(2), flat(2)},
		{nadam, small(2), small(2)},
		{job{nadam: true, dt: dtype.BFloat16}, flat(2), flat(2)},
		{nadam, flat(2), flat(3)},
		{nadam, small(2), flat(1)},
		{nadam, greedy(2), greedy(3)},
		{nadam, greedy(2), flat(1)},
		{nadam, flat(2), plain(1)},
		{nadam, plain(1), small(2)},
	}
	for _, c := range cases {
		dtName := "float32"
		if c.job.dt.Valid() {
			dtName = c.job.dt.String()
		}
		if c.job.nadam {
			dtName += "/nadam"
		}
		t.Run(fmt.Sprintf("%s→%s/%s", c.save, c.resume, dtName), func(t *testing.T) {
			dir := t.TempDir()
			var want [][]float64
			err := onRanks(c.save.ranks, func(rank int, pg dist.ProcessGroup) error {
				rs := c.job.newRank(t, c.save, pg, 0)
				if err := c.job.train(rs, 0, 3); err != nil {
					return err
				}
				if _, err := Save(pg, dir, 3, rs.state(t), SaveOptions{}); err != nil {
					return err
				}
				if err := c.job.train(rs, 3, 6); err != nil {
					return err
				}
				if rank == 0 {
					want = values(rs.params)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			err = onRanks(c.resume.ranks, func(rank int, pg dist.ProcessGroup) error {
				rs := c.job.newRank(t, c.resume, pg, 0.5) // other weights and lr: all must come from the checkpoint
				m, path, err := Restore(pg, rs.rt, dir, rs.state(t))
				if err != nil {
					return err
				}
				var note bytes.Buffer
				if m != nil {
					json.Compact(&note, m.State["note"])
				}
				if m == nil || m.Step != 3 || filepath.Base(path) != "step-00000003" || note.String() != `{"epoch":2}` {
					return fmt.Errorf("restored step %d from %s with note %s", m.Step, path, note.String())
				}
				if err := c.job.train(rs, 3, 6); err != nil {
					return err
				}
				for i, v := range values(rs.params) {
					if !slices.Equal(v, want[i]) {
						return fmt.Errorf("parameter %d after resuming: %v, the uninterrupted run has %v", i, v[:3], want[i][:3])
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestResumeWithoutGeneratorsDiverges shows that the generator states
// matter to TestResume: without them the noisy run differs.
func TestResumeWithoutGeneratorsDiverges(t *testing.T) {
	j := job{noise: true}
	l := layout{ranks: 1}
	dir := t.TempDir()
	var want [][]float64
	err := onRanks(1, func(rank int, pg dist.ProcessGroup) error {
		rs := j.newRank(t, l, pg, 0)
		if err := j.train(rs, 0, 3); err != nil {
			return err
		}
		if _, err := Save(pg, dir, 3, rs.state(t), SaveOptions{}); err != nil {
			return err
		}
		err := j.train(rs, 3, 6)
		want = values(rs.params)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = onRanks(1, func(rank int, pg dist.ProcessGroup) error {
		rs := j.newRank(t, l, pg, 0)
		st := rs.state(t)
		st.SetRNG = nil
		if _, _, err := Restore(pg, rs.rt, dir, st); err != nil {
			return err
		}
		if err := j.train(rs, 3, 6); err != nil {
			return err
		}
		if slices.Equal(values(rs.params)[0], want[0]) {
			return fmt.Errorf("the run without its generator state matched the uninterrupted one")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// saveSteps saves steps of a one-rank plain run into dir.
func saveSteps(t *testing.T, dir string, keep int, steps ...int64) {
	t.Helper()
	err := onRanks(1, func(rank int, pg dist.ProcessGroup) error {
		rs := job{}.newRank(t, layout{ranks: 1}, pg, 0)
		for _, s := range steps {
			if err := (job{}).train(rs, int(s), int(s)+1); err != nil {
				return err
			}
			if _, err := Save(pg, dir, s, rs.state(t), SaveOptions{Keep: keep}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestKeepAndLatest(t *testing.T) {
	dir := t.TempDir()
	saveSteps(t, dir, 2, 1, 2, 3, 4, 5)
	removing.Wait() // the retired checkpoints are deleted in the background
	if got, want := listDir(t, dir), []string{LockName, "latest", "step-00000004", "step-00000005"}; !slices.Equal(got, want) {
		t.Fatalf("after five saves keeping 2: %v, want %v", got, want)
	}
	if p, err := Latest(dir); err != nil || filepath.Base(p) != "step-00000005" {
		t.Fatalf("Latest = %q, %v", p, err)
	}
	// A crash between the folder's rename and latest's update: latest
	// still names the older one, which is complete.
	if err := os.WriteFile(filepath.Join(dir, LatestName), []byte("step-00000004\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, _ := Latest(dir); filepath.Base(p) != "step-00000004" {
		t.Fatalf("Latest = %q, want the step latest names", p)
	}
	// Without latest, the newest folder with a manifest.
	os.Remove(filepath.Join(dir, LatestName))
	os.Remove(filepath.Join(dir, "step-00000005", ManifestName))
	if p, _ := Latest(dir); filepath.Base(p) != "step-00000004" {
		t.Fatalf("Latest = %q, want the newest complete step", p)
	}
	// Saving the same step again replaces it.
	saveSteps(t, dir, 0, 4)
	if p, _ := Latest(dir); filepath.Base(p) != "step-00000004" {
		t.Fatalf("Latest = %q after saving step 4 again", p)
	}
	// An empty or missing directory holds no checkpoint.
	if p, err := Latest(filepath.Join(dir, "none")); p != "" || err != nil {
		t.Fatalf("Latest of a missing directory = %q, %v", p, err)
	}
}

// TestFailedSaveChangesNothing makes one rank fail while writing: every
// rank gets the error, and the directory keeps its previous checkpoint,
// pointed to by latest, and no temporary folder.
func TestFailedSaveChangesNothing(t *testing.T) {
	dir := t.TempDir()
	saveSteps(t, dir, 0, 1)
	before := listDir(t, dir)
	err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
		rs := job{}.newRank(t, layout{ranks: 2, zero: true}, pg, 0)
		if err := (job{}).train(rs, 0, 1); err != nil {
			return err
		}
		st := rs.state(t)
		if rank == 1 {
			st.Optimizers[0].Opt = "not an optimizer"
		}
		_, err := Save(pg, dir, 2, st, SaveOptions{})
		if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "cannot be saved") {
			return fmt.Errorf("Save returned %v, want rank 1's error", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, dir); !slices.Equal(got, before) {
		t.Fatalf("a failed save left %v, before it %v", got, before)
	}
	if p, _ := Latest(dir); filepath.Base(p) != "step-00000001" {
		t.Fatalf("latest = %q after a failed save", p)
	}
}

// TestBadCheckpoints restores damaged or mismatched checkpoints: each
// gives a clear error on every rank and leaves the model as it was.
func TestBadCheckpoints(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, ckpt string)
		mutate func(st *State)
		want   string
	}{
		{"truncated model", func(t *testing.T, ckpt string) { truncate(t, filepath.Join(ckpt, "model.safetensors")) }, nil, "truncated"},
		{"flipped byte", func(t *testing.T, ckpt string) { flip(t, filepath.Join(ckpt, "model.safetensors")) }, nil, "corrupted: CRC-32C"},
		{"missing shard", func(t *testing.T, ckpt string) {
			os.Remove(filepath.Join(ckpt, "optimizer.rank-00001-of-00002.safetensors"))
		}, nil, "no such file"},
		{"truncated shard", func(t *testing.T, ckpt string) {
			truncate(t, filepath.Join(ckpt, "optimizer.rank-00000-of-00002.safetensors"))
		}, nil, "optimizer.rank-00000-of-00002.safetensors has"},
		{"bad manifest", func(t *testing.T, ckpt string) {
			os.WriteFile(filepath.Join(ckpt, ManifestName), []byte(`{"format": "zeroeng-checkpoint", "version": 1, `), 0o644)
		}, nil, "manifest.json: unexpected end of JSON input"},
		{"newer version", func(t *testing.T, ckpt string) { editManifest(t, ckpt, func(m *Manifest) { m.Version = 9 }) }, nil, "version 9"},
		{"manifest lists no files", func(t *testing.T, ckpt string) {
			flip(t, filepath.Join(ckpt, "model.safetensors"))
			editManifest(t, ckpt, func(m *Manifest) { m.Files = nil })
		}, nil, `lists no file model.safetensors, which module "model" needs`},
		{"one shard of a sharded optimizer", func(t *testing.T, ckpt string) {
			editManifest(t, ckpt, func(m *Manifest) { m.Optimizers[0].Shards = 1 })
		}, nil, `optimizer "optimizer" has 1 shards for 2 ranks`},
		{"a file no part uses", func(t *testing.T, ckpt string) {
			editManifest(t, ckpt, func(m *Manifest) { m.Files = append(m.Files, FileInfo{Name: "extra.safetensors"}) })
		}, nil, "lists extra.safetensors, which no module or optimizer of the checkpoint uses"},
		{"a module key that leaves the folder", func(t *testing.T, ckpt string) {
			editManifest(t, ckpt, func(m *Manifest) { m.Modules[0] = "../model" })
		}, nil, `bad module key "../model"`},
		{"latest names garbage", func(t *testing.T, ckpt string) {
			os.WriteFile(filepath.Join(filepath.Dir(ckpt), LatestName), []byte("../../etc\n"), 0o644)
		}, nil, "does not name a step folder"},
		{"latest links to a secret", func(t *testing.T, ckpt string) {
			secret := filepath.Join(t.TempDir(), "secret")
			os.WriteFile(secret, []byte("root:x:0:0\n"), 0o600)
			latest := filepath.Join(filepath.Dir(ckpt), LatestName)
			os.Remove(latest)
			os.Symlink(secret, latest)
		}, nil, "latest is a symbolic link"},
		{"latest is a FIFO", func(t *testing.T, ckpt string) {
			latest := filepath.Join(filepath.Dir(ckpt), LatestName)
			os.Remove(latest)
			syscall.Mkfifo(latest, 0o644)
		}, nil, "not a regular file (a FIFO)"},
		{"manifest is a FIFO", func(t *testing.T, ckpt string) {
			os.Remove(filepath.Join(ckpt, ManifestName))
			syscall.Mkfifo(filepath.Join(ckpt, ManifestName), 0o644)
		}, nil, "not a regular file (a FIFO)"},
		{"model is a FIFO", func(t *testing.T, ckpt string) {
			os.Remove(filepath.Join(ckpt, "model.safetensors"))
			syscall.Mkfifo(filepath.Join(ckpt, "model.safetensors"), 0o644)
		}, nil, "not a regular file (a FIFO)"},
		{"step folder links out", func(t *testing.T, ckpt string) {
			elsewhere := filepath.Join(t.TempDir(), "elsewhere")
			os.Rename(ckpt, elsewhere)
			os.Symlink(elsewhere, ckpt)
		}, nil, "which is not a folder in"},
		{"other model", nil, func(st *State) {
			st.Modules[0].Tensors[4].Name = "head.weight"
		}, `Missing key(s) in state_dict: "head.weight"`},
		{"other shapes", nil, func(st *State) {
			st.Modules[0].Tensors[1].Tensor = st.Modules[0].Tensors[0].Tensor
		}, "size mismatch for layers.1.weight: copying a param with shape [7] from checkpoint, the shape in current model is [9]"},
		{"no such part", nil, func(st *State) { st.Optimizers[0].Key = "adam" }, `has no optimizer "adam" (it has "optimizer")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := layout{ranks: 2, zero: true, opts: zero.Options{Partition: "flat"}}
			var ckpt string
			err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
				rs := job{}.newRank(t, l, pg, 0)
				if err := (job{}).train(rs, 0, 2); err != nil {
					return err
				}
				p, err := Save(pg, dir, 2, rs.state(t), SaveOptions{})
				if rank == 0 {
					ckpt = p
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if c.damage != nil {
				c.damage(t, ckpt)
			}
			err = onRanks(2, func(rank int, pg dist.ProcessGroup) error {
				rs := job{}.newRank(t, l, pg, 0.5)
				before := values(rs.params)
				st := rs.state(t)
				if c.mutate != nil {
					c.mutate(st)
				}
				_, _, err := Restore(pg, rs.rt, dir, st)
				if err == nil || !strings.Contains(err.Error(), c.want) {
					return fmt.Errorf("Restore returned %v, want an error containing %q", err, c.want)
				}
				if strings.Contains(err.Error(), "root:x") {
					return fmt.Errorf("the error shows the contents of a file it was pointed at: %v", err)
				}
				if got := values(rs.params); !slices.EqualFunc(got, before, slices.Equal) {
					return fmt.Errorf("a failed restore changed the parameters")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func truncate(t *testing.T, path string) {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, st.Size()/2); err != nil {
		t.Fatal(err)
	}
}

func flip(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func editManifest(t *testing.T, ckpt string, edit func(*Manifest)) {
	path := filepath.Join(ckpt, ManifestName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	b, _ = json.Marshal(m)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBadKeys(t *testing.T) {
	for _, key := range []string{"", "../x", ".hidden", "manifest", "latest", "a/b"} {
		st := &State{Modules: []Module{{Key: key}}}
		if err := st.checkKeys(); err == nil {
			t.Errorf("key %q was accepted", key)
		}
	}
	st := &State{Modules: []Module{{Key: "model"}}, Optimizers: []Optimizer{{Key: "model"}}}
	if err := st.checkKeys(); err == nil || !strings.Contains(err.Error(), "two parts") {
		t.Errorf("a repeated key: %v", err)
	}
}

// TestPyTorchLoadsTheModel reads a checkpoint's model.safetensors with
// PyTorch (testdata/read_with_torch.py, Debian's python3-torch) into a
// module with the same names: float32 and bfloat16 tensors, the same
// shapes and values.
func TestPyTorchLoadsTheModel(t *testing.T) {
	// No probe beforehand: importing torch takes seconds, so the reader's
	// own run says whether PyTorch is there.
	python := "/usr/bin/python3"
	if _, err := exec.LookPath(python); err != nil {
		t.Skipf("needs %s with PyTorch (Debian's python3-torch): %v", python, err)
	}
	dir := t.TempDir()
	var want map[string][]any
	err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
		rs := job{dt: dtype.BFloat16}.newRank(t, layout{ranks: 2, zero: true, opts: zero.Options{Partition: "flat"}}, pg, 0)
		if err := (job{}).train(rs, 0, 2); err != nil {
			return err
		}
		st := rs.state(t)
		extra := rs.rt.FromValues(dtype.Float32, []float64{1.5, -2, 3.25}, 3).Persist()
		st.Modules[0].Tensors = append(st.Modules[0].Tensors, nn.NamedTensor{Name: "head.bias", Tensor: extra})
		if rank == 0 {
			want = map[string][]any{}
			for _, n := range st.Modules[0].Tensors {
				v, _ := n.Tensor.Float64s()
				sum := 0.0
				for _, x := range v {
					sum += x
				}
				shape := []any{}
				for _, d := range n.Tensor.Shape() {
					shape = append(shape, float64(d))
				}
				want[n.Name] = []any{n.Tensor.DType().String(), shape, sum}
			}
		}
		_, err := Save(pg, dir, 2, st, SaveOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, "testdata/read_with_torch.py", filepath.Join(dir, "step-00000002", "model.safetensors")).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No module named 'torch'") {
			t.Skipf("needs %s with PyTorch (Debian's python3-torch): %v", python, err)
		}
		t.Fatalf("PyTorch could not read the model: %v\n%s", err, out)
	}
	var got map[string][]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got) != len(want) {
		t.Fatalf("PyTorch read %d tensors, want %d: %s", len(got), len(want), out)
	}
	for name, w := range want {
		g := got[name]
		if g == nil || g[0] != w[0] || fmt.Sprint(g[1]) != fmt.Sprint(w[1]) || math.Abs(g[2].(float64)-w[2].(float64)) > 1e-9*math.Max(1, math.Abs(w[2].(float64))) {
			t.Errorf("%s: PyTorch read %v, zeroeng saved %v", name, g, w)
		}
	}
}

// TestRestoreNewestIntact: a resume goes on from the newest intact
// checkpoint when the newer ones (or latest) are damaged, saying which it
// skipped; it never skips one that is intact but unfit for the state, and
// fails when nothing intact is left.
func TestRestoreNewestIntact(t *testing.T) {
	for _, c := range []struct {
		name     string
		damage   func(t *testing.T, dir string)
		mutate   func(st *State)
		wantStep int64  // 0: an error
		want     string // in the error, or in a skipped one's
		skipped  int
	}{
		{"intact", func(*testing.T, string) {}, nil, 3, "", 0},
		{"newest corrupted", func(t *testing.T, dir string) { flip(t, filepath.Join(dir, StepName(3), "model.safetensors")) }, nil, 2, "corrupted: CRC-32C", 1},
		{"two newest damaged", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, StepName(3), ManifestName))
			truncate(t, filepath.Join(dir, StepName(2), "optimizer.rank-00001-of-00002.safetensors"))
		}, nil, 1, "truncated", 2},
		{"latest a FIFO", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, LatestName))
			syscall.Mkfifo(filepath.Join(dir, LatestName), 0o644)
		}, nil, 3, "not a regular file", 1},
		{"intact but another model", func(*testing.T, string) {}, func(st *State) { st.Modules[0].Tensors[4].Name = "head.weight" }, 0, `Missing key(s) in state_dict: "head.weight"`, 0},
		{"all damaged", func(t *testing.T, dir string) {
			for s := int64(1); s <= 3; s++ {
				flip(t, filepath.Join(dir, StepName(s), "model.safetensors"))
			}
		}, nil, 0, "no intact checkpoint", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := layout{ranks: 2, zero: true, opts: zero.Options{Partition: "flat"}}
			err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
				rs := job{}.newRank(t, l, pg, 0)
				for step := int64(1); step <= 3; step++ {
					if err := (job{}).train(rs, int(step)-1, int(step)); err != nil {
						return err
					}
					if _, err := Save(pg, dir, step, rs.state(t), SaveOptions{}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			c.damage(t, dir)
			err = onRanks(2, func(rank int, pg dist.ProcessGroup) error {
				rs := job{}.newRank(t, l, pg, 0)
				st := rs.state(t)
				if c.mutate != nil {
					c.mutate(st)
				}
				m, _, skipped, err := RestoreNewestIntact(pg, rs.rt, dir, st)
				if len(skipped) != c.skipped {
					return fmt.Errorf("skipped %v, want %d", skipped, c.skipped)
				}
				for _, s := range skipped {
					if !errors.Is(s.Err, ErrDamaged) {
						return fmt.Errorf("skipped %s for %v, which is not damage", s.Path, s.Err)
					}
				}
				if c.wantStep == 0 {
					if err == nil || !strings.Contains(err.Error(), c.want) {
						return fmt.Errorf("err = %v, want %q", err, c.want)
					}
					return nil
				}
				if err != nil {
					return err
				}
				if m.Step != c.wantStep {
					return fmt.Errorf("restored step %d, want %d", m.Step, c.wantStep)
				}
				if c.want != "" && !strings.Contains(skipped[len(skipped)-1].Err.Error(), c.want) {
					return fmt.Errorf("skipped for %v, want %q", skipped[len(skipped)-1].Err, c.want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
