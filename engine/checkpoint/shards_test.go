package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// *zero.Optimizer is what holds a stage-3 model's slices.
var (
	_ ShardedParams    = (*zero.Optimizer)(nil)
	_ ShardedOptimizer = (*zero.Optimizer)(nil)
)

// s3 is how a run of the sharded-model tests is made: ZeRO stage 3 over
// units (one per layer), ZeRO stage 2 over a whole model, or plain AdamW
// (stage 0, one rank). With nadam the optimizer is NAdam, its β₁ changed
// before every step (nadamBeta1).
type s3 struct {
	ranks, stage int
	dt           dtype.DType
	nadam        bool
}

func (l s3) String() string {
	s := fmt.Sprintf("stage%d×%d", l.stage, l.ranks)
	if l.dt == dtype.BFloat16 {
		s += "/bf16"
	}
	if l.nadam {
		s += "/nadam"
	}
	return s
}

// s3Rank is one rank of such a run: a stack of Linear layers and Tanh,
// and a buffer saved whole.
type s3Rank struct {
	l     s3
	rt    *tensor.Runtime
	pg    dist.ProcessGroup
	model *nn.Sequential
	buf   *tensor.Tensor
	opt   interface{ Step() error }
	z     *zero.Optimizer
	owner []int // layer → unit
}

const s3Width = 8

func newS3(t testing.TB, l s3, pg dist.ProcessGroup, init float64, width, layers int, maxMemory int64) (*s3Rank, error) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{Index: pg.Rank(), MaxMemory: maxMemory}), 7)
	dt := l.dt
	if !dt.Valid() {
		dt = dtype.Float32
	}
	var ls []nn.Layer
	for range layers {
		lin, err := nn.NewLinear(rt, width, width, true)
		if err != nil {
			return nil, err
		}
		ls = append(ls, lin, nn.Tanh())
	}
	m, err := nn.NewSequential(ls...)
	if err != nil {
		return nil, err
	}
	for i, p := range m.Parameters() {
		v := make([]float64, p.Numel())
		for k := range v {
			v[k] = 0.3 * math.Cos(init+float64(i*10+k))
		}
		src := rt.FromValues(p.DType(), v, p.Shape()...)
		rt.NoGrad(func() { err = p.CopyFrom(src) })
		src.Release()
		if err != nil {
			return nil, err
		}
	}
	if dt != dtype.Float32 {
		if err := m.To(dt); err != nil {
			return nil, err
		}
	}
	rs := &s3Rank{l: l, rt: rt, pg: pg, model: m, buf: rt.FromValues(dtype.Float32, []float64{init, 1, 2, 3, float64(pg.Rank())}, 5).Persist()}
	kind, hyper := optim.AdamW, optim.DefaultAdamW().Group()
	if l.nadam {
		kind, hyper = optim.NAdam, optim.Defaults(optim.NAdam)
		hyper.Beta1 = 0.5 // the checkpoint's β₁ replaces it
	}
	hyper.LR = 0.01 + init
	switch l.stage {
	case 3:
		var units []zero.UnitSpec
		for _, layer := range m.Layers {
			rs.owner = append(rs.owner, -1)
			if ps := layer.(interface{ Parameters() []*tensor.Tensor }).Parameters(); len(ps) > 0 {
				rs.owner[len(rs.owner)-1] = len(units)
				units = append(units, zero.UnitSpec{Params: ps, ReshardAfterForward: true})
			}
		}
		rs.z, err = zero.New(pg, kind, m.Parameters(), hyper, zero.Options{Stage: 3, Units: units})
		rs.opt = rs.z
	case 2:
		rs.z, err = zero.New(pg, kind, m.Parameters(), hyper, zero.Options{Stage: 2, BucketCapMB: 0.001})
		rs.opt = rs.z
	default:
		if l.ranks != 1 {
			t.Fatalf("plain AdamW on one rank only")
		}
		rs.opt, err = optim.New(kind, m.Parameters(), hyper)
	}
	return rs, err
}

// train runs steps [from, to): each rank's own batch, the stage-3 units
// gathered around their layers.
func (rs *s3Rank) train(from, to int) error {
	for step := from; step < to; step++ {
		if err := rs.trainStep(step); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
	}
	return nil
}

func (rs *s3Rank) trainStep(step int) error {
	sc := rs.rt.OpenScope()
	defer sc.Close()
	width := rs.model.Parameters()[0].Shape()[1]
	v := make([]float64, 2*width)
	for k := range v {
		v[k] = math.Sin(float64(step*13 + rs.pg.Rank()*7 + k))
	}
	x := rs.rt.FromValues(rs.model.Parameters()[0].DType(), v, 2, width)
	for i, layer := range rs.model.Layers {
		var u *zero.Unit
		if rs.l.stage == 3 && rs.owner[i] >= 0 {
			u = rs.z.Unit(rs.owner[i])
			if err := u.BeforeForward(); err != nil {
				return err
			}
		}
		x = layer.Forward(x)
		if u != nil {
			if err := u.AfterForward([]*tensor.Tensor{x}); err != nil {
				return err
			}
		}
	}
	if err := x.Mul(x).SumAll().Backward(); err != nil {
		return err
	}
	if rs.l.nadam {
		var groups []*optim.ParamGroup
		if o, ok := rs.opt.(*optim.Optimizer); ok {
			groups = o.Groups
		} else {
			groups = rs.z.ParamGroups()
		}
		for _, g := range groups {
			g.Beta1 = nadamBeta1(step)
		}
	}
	if err := rs.opt.Step(); err != nil {
		return err
	}
	if o, ok := rs.opt.(*optim.Optimizer); ok {
		return o.ZeroGrad(true)
	}
	return nil
}

func (rs *s3Rank) state() *State {
	tensors := append(rs.model.NamedParameters(), nn.NamedTensor{Name: "scale", Tensor: rs.buf})
	mod := Module{Key: "model", Tensors: tensors}
	if rs.l.stage == 3 {
		mod.Sharded = rs.z
	}
	return &State{Modules: []Module{mod}, Optimizers: []Optimizer{{Key: "optimizer", Opt: rs.opt}},
		RNG: rs.rt.Generator().State(), SetRNG: rs.rt.Generator().SetState}
}

// snapshot is a run's whole state, on rank 0: every parameter's bytes and
// the optimizer's state in the plain layout. Collective.
type snapshot struct {
	params [][]byte
	state  map[int]map[string][]byte
}

func (rs *s3Rank) snapshot() (*snapshot, error) {
	s := &snapshot{state: map[int]map[string][]byte{}}
	for _, p := range rs.model.Parameters() {
		var b []byte
		var err error
		if rs.l.stage == 3 {
			b, err = rs.z.GatherParam(p, 0, p.Numel(), 0)
		} else {
			b, err = p.Bytes()
		}
		if err != nil {
			return nil, err
		}
		s.params = append(s.params, b)
	}
	var sd *optim.StateDict
	var err error
	switch o := rs.opt.(type) {
	case *zero.Optimizer:
		if err := o.ConsolidateStateDict(0); err != nil {
			return nil, err
		}
		if rs.pg.Rank() != 0 {
			return nil, nil
		}
		sd, err = o.StateDict()
	case *optim.Optimizer:
		sd, err = o.StateDict()
	}
	if err != nil {
		return nil, err
	}
	for idx, entries := range sd.State {
		s.state[idx] = map[string][]byte{}
		for name, t := range entries {
			if s.state[idx][name], err = t.Bytes(); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

func (s *snapshot) diff(o *snapshot) error {
	for i := range s.params {
		if !bytes.Equal(s.params[i], o.params[i]) {
			return fmt.Errorf("parameter %d differs", i)
		}
	}
	if len(s.state) != len(o.state) {
		return fmt.Errorf("state for %d parameters, want %d", len(o.state), len(s.state))
	}
	for idx, entries := range s.state {
		for name, b := range entries {
			if !bytes.Equal(o.state[idx][name], b) {
				return fmt.Errorf("state %q of parameter %d differs", name, idx)
			}
		}
	}
	return nil
}

// TestShardedResume: a stage-3 model saved on 2 and 3 ranks writes each
// rank's slices (no model.safetensors unless asked), resumes bit for bit
// on the same ranks (each rank reading its own files only), and reshards
// onto another world size, ZeRO stage 2 and plain AdamW with every
// parameter and every optimizer state exactly the saved ones.
func TestShardedResume(t *testing.T) {
	bf16 := func(l s3) s3 { l.dt = dtype.BFloat16; return l }
	nadam := func(l s3) s3 { l.nadam = true; return l }
	for _, c := range []struct {
		save, resume s3
		consolidated bool
	}{
		{s3{2, 3, 0, false}, s3{2, 3, 0, false}, false},
		{s3{3, 3, 0, false}, s3{3, 3, 0, false}, true},
		{bf16(s3{2, 3, 0, false}), bf16(s3{2, 3, 0, false}), false},
		{s3{3, 3, 0, false}, s3{2, 3, 0, false}, false},
		{s3{2, 3, 0, false}, s3{3, 3, 0, false}, false},
		{s3{2, 3, 0, false}, s3{1, 3, 0, false}, false},
		{s3{2, 3, 0, false}, s3{3, 3, 0, false}, true}, // from the consolidated file
		{s3{3, 3, 0, false}, s3{2, 2, 0, false}, false},
		{s3{2, 3, 0, false}, s3{1, 0, 0, false}, false},
		{s3{1, 0, 0, false}, s3{2, 3, 0, false}, false},
		{s3{2, 2, 0, false}, s3{3, 3, 0, false}, false},
		// NAdam, β₁ changing every step: each parameter's mu_product
		// (per piece of it) comes back with its state.
		{nadam(s3{2, 3, 0, false}), nadam(s3{2, 3, 0, false}), false},
		{nadam(s3{2, 2, 0, false}), nadam(s3{2, 2, 0, false}), false},
		{nadam(bf16(s3{2, 2, 0, false})), nadam(bf16(s3{2, 2, 0, false})), false},
		{nadam(s3{1, 0, 0, false}), nadam(s3{1, 0, 0, false}), false},
		{nadam(s3{2, 3, 0, false}), nadam(s3{3, 3, 0, false}), false},
		{nadam(s3{2, 3, 0, false}), nadam(s3{1, 3, 0, false}), true},
		{nadam(s3{2, 2, 0, false}), nadam(s3{3, 2, 0, false}), false},
		{nadam(s3{2, 2, 0, false}), nadam(s3{1, 0, 0, false}), false},
		{nadam(s3{1, 0, 0, false}), nadam(s3{2, 2, 0, false}), false},
	} {
		t.Run(fmt.Sprintf("%s→%s/consolidated=%v", c.save, c.resume, c.consolidated), func(t *testing.T) {
			dir := t.TempDir()
			var saved, want *snapshot
			err := onRanks(c.save.ranks, func(rank int, pg dist.ProcessGroup) error {
				rs, err := newS3(t, c.save, pg, 0, s3Width, 3, 0)
				if err != nil {
					return err
				}
				if err := rs.train(0, 3); err != nil {
					return err
				}
				if _, err := Save(pg, dir, 3, rs.state(), SaveOptions{Consolidated: c.consolidated}); err != nil {
					return err
				}
				s, err := rs.snapshot()
				if rank == 0 {
					saved = s
				}
				if err != nil {
					return err
				}
				if err := rs.train(3, 5); err != nil {
					return err
				}
				s, err = rs.snapshot()
				if rank == 0 {
					want = s
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			names := listDir(t, filepath.Join(dir, StepName(3)))
			if c.save.stage == 3 && slices.Contains(names, "model.safetensors") != c.consolidated {
				t.Fatalf("files %v: model.safetensors written: %v, asked: %v", names, !c.consolidated, c.consolidated)
			}
			err = onRanks(c.resume.ranks, func(rank int, pg dist.ProcessGroup) error {
				rs, err := newS3(t, c.resume, pg, 0.5, s3Width, 3, 0)
				if err != nil {
					return err
				}
				if _, _, err := Restore(pg, rs.rt, dir, rs.state()); err != nil {
					return err
				}
				got, err := rs.snapshot()
				if err != nil {
					return err
				}
				// Rank 0's verdict on every rank: a rank that returned
				// alone would leave the others waiting in the next step.
				var verdict []byte
				if rank == 0 {
					if err := saved.diff(got); err != nil {
						verdict = []byte(err.Error())
					}
					for idx, entries := range got.state {
						if _, ok := entries["mu_product"]; c.resume.nadam && !ok {
							verdict = fmt.Appendf(nil, "parameter %d's NAdam state has no mu_product", idx)
						}
					}
				}
				if verdict, err = pg.BroadcastObject(verdict, 0); err != nil {
					return err
				}
				if len(verdict) > 0 {
					return fmt.Errorf("after the resume: %s", verdict)
				}
				// Each rank's buffer comes back from its own file under stage
				// 3 on the same ranks; from rank 0's model file otherwise.
				own := c.resume.ranks == c.save.ranks && c.save.stage == 3 && c.resume.stage == 3
				if v, _ := rs.buf.Float64s(); v[0] != 0 || (own && v[4] != float64(rank)) {
					return fmt.Errorf("the buffer is %v after the resume", v)
				}
				if err := rs.train(3, 5); err != nil {
					return err
				}
				if c.resume != c.save {
					return nil // other batches: another run from here
				}
				got, err = rs.snapshot()
				if err == nil && rank == 0 {
					err = want.diff(got)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestShardedSaveMemory: saving and loading a stage-3 model keeps each
// rank's device memory at its slices and state plus at most one tensor
// (PeakBytes), where gathering the model for them (what checkpoints did)
// takes the whole model; under a memory cap that the gathering exceeds,
// saves (with the consolidated file too) and loads succeed.
func TestShardedSaveMemory(t *testing.T) {
	const width, layers = 64, 8
	oneTensor := int64(width * width * 4)
	whole := int64(layers * (width*width + width) * 4)
	const margin = 4 << 10
	for _, consolidated := range []bool{false, true} {
		t.Run(fmt.Sprintf("consolidated=%v", consolidated), func(t *testing.T) {
			dir := t.TempDir()
			// The cap: what training needs, plus a tensor; well short of
			// the whole model on top.
			capped := int64(0)
			err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
				rs, err := newS3(t, s3{2, 3, 0, false}, pg, 0, width, layers, 0)
				if err != nil {
					return err
				}
				if err := rs.train(0, 2); err != nil {
					return err
				}
				live := rs.rt.Stats().LiveBytes
				if rank == 0 {
					capped = max(rs.rt.Stats().PeakBytes, live+oneTensor+margin)
				}
				rs.rt.ResetPeakMemStats()
				if _, err := Save(pg, dir, 2, rs.state(), SaveOptions{Consolidated: consolidated}); err != nil {
					return err
				}
				if peak := rs.rt.Stats().PeakBytes - live; peak > oneTensor+margin {
					return fmt.Errorf("rank %d: saving took %d bytes more than the %d live, over one tensor (%d) and a margin", rank, peak, live, oneTensor)
				}
				// What a save gathering the model takes: the bound means
				// something.
				rs.rt.ResetPeakMemStats()
				if err := rs.z.WithFullParams(false, func() error { return nil }); err != nil {
					return err
				}
				if peak := rs.rt.Stats().PeakBytes - live; peak < whole/2 {
					return fmt.Errorf("rank %d: gathering the whole model took only %d bytes", rank, peak)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			capped += margin
			for _, ranks := range []int{2, 3} {
				again := t.TempDir()
				err = onRanks(ranks, func(rank int, pg dist.ProcessGroup) error {
					rs, err := newS3(t, s3{ranks, 3, 0, false}, pg, 0.5, width, layers, capped)
					if err != nil {
						return err
					}
					// A resume: the optimizer's state comes with the
					// load; nothing more than a tensor beyond it.
					rs.rt.ResetPeakMemStats()
					if _, _, err := Restore(pg, rs.rt, dir, rs.state()); err != nil {
						return err
					}
					live := rs.rt.Stats().LiveBytes
					if peak := rs.rt.Stats().PeakBytes - live; peak > oneTensor+margin {
						return fmt.Errorf("rank %d of %d: loading peaked %d bytes above the %d live after it", rank, ranks, peak, live)
					}
					if err := rs.train(2, 3); err != nil {
						return fmt.Errorf("training under a cap of %d bytes: %w", capped, err)
					}
					if _, err := Save(pg, again, 3, rs.state(), SaveOptions{Consolidated: consolidated}); err != nil {
						return fmt.Errorf("saving under a cap of %d bytes: %w", capped, err)
					}
					// The cap bites: on the ranks it was made for,
					// gathering the model does not fit.
					if ranks != 2 {
						return nil
					}
					if err := rs.z.WithFullParams(false, func() error { return nil }); err == nil || !strings.Contains(err.Error(), "out of memory") {
						return fmt.Errorf("rank %d: gathering the whole model under the cap: %v", rank, err)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestDamagedSliceFile: a damaged slice file is an error on every rank
// that names the file, whether each rank reads its own file or parts of
// every file (a reshard), and the model is left as it was.
func TestDamagedSliceFile(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, path string)
		ranks  int
		want   string
	}{
		{"flipped byte, same ranks", flip, 2, "is corrupted: CRC-32C"},
		{"flipped byte, resharded", flip, 3, "is corrupted: CRC-32C"},
		{"truncated, same ranks", truncate, 2, "the file is truncated or was replaced"},
		{"truncated, resharded", truncate, 1, "the file is truncated or was replaced"},
		{"missing, resharded", func(t *testing.T, path string) { os.Remove(path) }, 3, "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var ckpt string
			err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
				rs, err := newS3(t, s3{2, 3, 0, false}, pg, 0, s3Width, 2, 0)
				if err != nil {
					return err
				}
				if err := rs.train(0, 1); err != nil {
					return err
				}
				p, err := Save(pg, dir, 1, rs.state(), SaveOptions{})
				if rank == 0 {
					ckpt = p
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(ckpt, "model.rank-00001-of-00002.safetensors")
			c.damage(t, file)
			err = onRanks(c.ranks, func(rank int, pg dist.ProcessGroup) error {
				rs, err := newS3(t, s3{c.ranks, 3, 0, false}, pg, 0.5, s3Width, 2, 0)
				if err != nil {
					return err
				}
				before, _ := rs.snapshot()
				_, _, err = Restore(pg, rs.rt, dir, rs.state())
				if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrDamaged) {
					return fmt.Errorf("rank %d: Restore returned %v, want an error naming %s (%q)", rank, err, file, c.want)
				}
				after, _ := rs.snapshot()
				if rank == 0 {
					if err := before.diff(after); err != nil {
						return fmt.Errorf("a failed restore changed the model: %v", err)
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

// TestExportModule: ExportModule puts a stage-3 checkpoint's model
// together from the slice files into the very bytes a stage-0 save of the
// same model writes (and SaveOptions.Consolidated writes); PyTorch loads
// it with the saved values.
func TestExportModule(t *testing.T) {
	dir := t.TempDir()
	var ckpt string
	err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
		rs, err := newS3(t, s3{2, 3, 0, false}, pg, 0, s3Width, 3, 0)
		if err != nil {
			return err
		}
		p, err := Save(pg, dir, 0, rs.state(), SaveOptions{})
		if rank == 0 {
			ckpt = p
		}
		if err == nil {
			_, err = Save(pg, dir, 1, rs.state(), SaveOptions{Consolidated: true})
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	plain := t.TempDir()
	err = onRanks(1, func(rank int, pg dist.ProcessGroup) error {
		rs, err := newS3(t, s3{1, 0, 0, false}, pg, 0, s3Width, 3, 0)
		if err != nil {
			return err
		}
		_, err = Save(pg, plain, 0, rs.state(), SaveOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(plain, StepName(0), "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "model.safetensors")
	if key, err := ExportModule(ckpt, "", out); err != nil || key != "model" {
		t.Fatalf("ExportModule: %q, %v", key, err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, want) {
		t.Fatalf("the exported file (%d bytes) differs from a stage-0 save's (%d bytes)", len(got), len(want))
	}
	cons, _ := os.ReadFile(filepath.Join(dir, StepName(1), "model.safetensors"))
	if !bytes.Equal(cons, want) {
		t.Fatalf("the consolidated file (%d bytes) differs from a stage-0 save's (%d bytes)", len(cons), len(want))
	}
	// From a checkpoint with the consolidated file: a checked copy.
	if _, err := ExportModule(filepath.Join(dir, StepName(1)), "model", out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Fatal("the export of a consolidated file differs from it")
	}
	if _, err := ExportModule(ckpt, "ema", out); err == nil || !strings.Contains(err.Error(), `has no module "ema" (it has "model")`) {
		t.Errorf("an unknown module: %v", err)
	}
	flip(t, filepath.Join(ckpt, "model.rank-00000-of-00002.safetensors"))
	if _, err := ExportModule(ckpt, "", out); err == nil || !strings.Contains(err.Error(), "model.rank-00000-of-00002.safetensors is corrupted") {
		t.Errorf("a damaged slice file: %v", err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Error("a failed export replaced the file")
	}
	// A stage-0 save's file is what PyTorch loads (TestPyTorchLoadsTheModel;
	// cmd/zeroeng's TestCheckpointExport loads an exported one).
}

// TestSliceFilesAreSafetensors: a slice file is plain safetensors, its
// metadata parsed back by parseSlices; a tampered one is refused.
func TestSliceFilesAreSafetensors(t *testing.T) {
	path := savedSlices(t)
	b, err := os.ReadFile(filepath.Join(path, "model.rank-00001-of-00002.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)), "f")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := parseSlices(h, "f")
	if err != nil {
		t.Fatal(err)
	}
	if meta.Rank != 1 || meta.WorldSize != 2 || len(meta.Buckets) != 2 || !slices.Equal(meta.Whole, []string{"scale"}) || meta.Buckets[0].Params[0].Names[0] != "0.bias" {
		t.Fatalf("metadata %+v", meta)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"rank":1`, `"rank":2`, "rank 2 of 2"},
		{`"whole":["scale"]`, `"whole":[]`, `tensor "scale" is no part of the metadata`},
		{`"offset":0`, `"offset":-1`, "elements of shape"},
		{`"names":["0.bias"]`, `"names":["0.weight"]`, `the name "0.weight" is empty or given twice`},
	} {
		h.Metadata[sliceMetaKey] = strings.Replace(meta2json(t, meta), c.from, c.to, 1)
		if _, err := parseSlices(h, "f"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s → %s: %v, want %q", c.from, c.to, err, c.want)
		}
	}
}

func meta2json(t *testing.T, m *sliceMeta) string {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// savedSlices saves a small stage-3 checkpoint on 2 ranks.
func savedSlices(t testing.TB) string {
	dir := t.TempDir()
	var path string
	err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
		rs, err := newS3(t, s3{2, 3, 0, false}, pg, 0, 4, 2, 0)
		if err != nil {
			return err
		}
		p, err := Save(pg, dir, 1, rs.state(), SaveOptions{})
		if rank == 0 {
			path = p
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRangeFile: parts of a file read through rangeFile are its bytes,
// whole blocks or not; a damaged block fails the reads that touch it only,
// naming the file; a file whose manifest entry has no block CRCs (an older
// checkpoint) is checked whole before the first read.
func TestRangeFile(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 4*BlockBytes+1234)
	for i := range data {
		data[i] = byte(i*7 + i/BlockBytes)
	}
	info, err := writeFile(filepath.Join(dir, "f"), func(w io.Writer) error { _, err := w.Write(data); return err })
	if err != nil {
		t.Fatal(err)
	}
	if len(info.BlockCRC32C) != 4*5 {
		t.Fatalf("%d bytes of block CRCs for 5 blocks", len(info.BlockCRC32C))
	}
	m := &Manifest{Files: []FileInfo{info}}
	f, err := openRange(dir, m, "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range [][2]int{{0, 10}, {BlockBytes - 3, BlockBytes + 3}, {BlockBytes, 3 * BlockBytes}, {5, 4*BlockBytes + 1234}, {4 * BlockBytes, 4*BlockBytes + 1234}} {
		got := make([]byte, r[1]-r[0])
		if _, err := f.ReadAt(got, int64(r[0])); err != nil || !bytes.Equal(got, data[r[0]:r[1]]) {
			t.Errorf("bytes %v: %v", r, err)
		}
	}
	if _, err := f.ReadAt(make([]byte, 2), int64(len(data)-1)); err == nil {
		t.Error("a read past the end succeeded")
	}
	b := slices.Clone(data)
	b[2*BlockBytes+5] ^= 1
	os.WriteFile(filepath.Join(dir, "f"), b, 0o644)
	g, _ := openRange(dir, m, "f")
	defer g.Close()
	if _, err := g.ReadAt(make([]byte, 100), 0); err != nil {
		t.Errorf("a read of an intact block: %v", err)
	}
	for _, r := range [][2]int{{2*BlockBytes + 1, 2*BlockBytes + 9}, {BlockBytes, 3 * BlockBytes}} {
		_, err := g.ReadAt(make([]byte, r[1]-r[0]), int64(r[0]))
		if err == nil || !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), filepath.Join(dir, "f")+" is corrupted") {
			t.Errorf("bytes %v of a damaged block: %v", r, err)
		}
	}
	old := info
	old.BlockBytes, old.BlockCRC32C = 0, nil
	h, _ := openRange(dir, &Manifest{Files: []FileInfo{old}}, "f")
	defer h.Close()
	if _, err := h.ReadAt(make([]byte, 10), 0); err == nil || !strings.Contains(err.Error(), "is corrupted: CRC-32C") {
		t.Errorf("a damaged file without block CRCs: %v", err)
	}
}
