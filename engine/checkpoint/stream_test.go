package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// allocated returns the bytes the Go heap handed out while fn ran (every
// allocation, whether freed since or not).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// sparseCheckpoint writes by hand a checkpoint whose model.safetensors
// holds one float32 tensor of size bytes of zeros, as a sparse file (the
// disk holds only its header), with its manifest; blockBytes is the size
// of the blocks whose CRCs the manifest records.
func sparseCheckpoint(t *testing.T, size, blockBytes int64) (dir, file string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), StepName(1))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	header := fmt.Appendf(nil, `{"w":{"dtype":"F32","shape":[%d],"data_offsets":[0,%d]}}`, size/4, size)
	for len(header)%8 != 0 {
		header = append(header, ' ')
	}
	head := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	head = append(head, header...)
	file = filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(file, head, 0o644); err != nil {
		t.Fatal(err)
	}
	total := int64(len(head)) + size
	if err := os.Truncate(file, total); err != nil {
		t.Fatal(err)
	}
	// The CRCs of the header and the zeros that follow it.
	info := FileInfo{Name: "model.safetensors", Bytes: total, BlockBytes: blockBytes}
	zeros := make([]byte, 1<<20)
	var cur uint32
	var inBlock int64
	add := func(b []byte) {
		info.CRC32C = crc32.Update(info.CRC32C, castagnoli, b)
		for len(b) > 0 {
			n := min(int64(len(b)), blockBytes-inBlock)
			cur = crc32.Update(cur, castagnoli, b[:n])
			inBlock += n
			b = b[n:]
			if inBlock == blockBytes {
				info.BlockCRC32C = binary.LittleEndian.AppendUint32(info.BlockCRC32C, cur)
				cur, inBlock = 0, 0
			}
		}
	}
	add(head)
	for left := size; left > 0; left -= int64(len(zeros)) {
		add(zeros[:min(left, int64(len(zeros)))])
	}
	if inBlock > 0 {
		info.BlockCRC32C = binary.LittleEndian.AppendUint32(info.BlockCRC32C, cur)
	}
	writeManifest(t, dir, info)
	return dir, file
}

func writeManifest(t *testing.T, dir string, info FileInfo) {
	t.Helper()
	m := Manifest{Format: Format, Version: 1, Step: 1, WorldSize: 1, Files: []FileInfo{info}, Modules: []string{"model"}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyStreams: verify checks a 512 MiB checkpoint (a sparse file
// of zeros, which a checkpoint larger than memory would be but for its
// size) with a few megabytes of heap, no more than it takes for one of
// 64 MiB; it finds one changed byte naming the file and the block, and a
// manifest whose block CRCs are wrong.
func TestVerifyStreams(t *testing.T) {
	const bound = 32 << 20
	var allocs []uint64
	var dir, file string
	for _, size := range []int64{512 << 20, 64 << 20} {
		dir, file = sparseCheckpoint(t, size, BlockBytes)
		var err error
		n := allocated(func() { _, err = Verify(dir) })
		if err != nil || n > bound {
			t.Fatalf("verifying %d bytes: %v, %d bytes allocated (bound %d)", size, err, n, bound)
		}
		t.Logf("verifying %d bytes allocated %d bytes", size, n)
		allocs = append(allocs, n)
	}
	// What grows with the file is the manifest's list of block CRCs (4
	// bytes per 64 KiB, as JSON). The 4 MiB read buffer comes from a
	// sync.Pool, which one verify may find filled and the other empty
	// (a collection empties it): it is allowed for too.
	if allocs[0] > allocs[1]+(1<<20)+(4<<20) {
		t.Errorf("verifying 512 MiB allocated %d bytes, 64 MiB %d", allocs[0], allocs[1])
	}

	// One byte changed in block 900.
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := int64(900*BlockBytes + 77)
	if _, err := f.WriteAt([]byte{1}, at); err != nil {
		t.Fatal(err)
	}
	_, err = Verify(dir)
	want := fmt.Sprintf("%s is corrupted: CRC-32C", file)
	block := fmt.Sprintf("the first damaged block is bytes [%d, %d)", 900*BlockBytes, 901*BlockBytes)
	if err == nil || !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), block) {
		t.Errorf("a changed byte: %v, want %q and %q", err, want, block)
	}
	f.WriteAt([]byte{0}, at)
	f.Close()

	// The file intact, one of the manifest's block CRCs wrong.
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	info := m.Files[0]
	info.BlockCRC32C[4*3] ^= 1
	writeManifest(t, dir, info)
	_, err = Verify(dir)
	if err == nil || !strings.Contains(err.Error(), "the manifest's block CRCs do not match the file") || !strings.Contains(err.Error(), fmt.Sprintf("block [%d, %d) differs first", 3*BlockBytes, 4*BlockBytes)) {
		t.Errorf("a wrong block CRC: %v", err)
	}
}

// TestVerifyOtherBlocks: blocks of another size than BlockBytes (a
// manifest zeroeng did not write) are checked too, and a file without
// block CRCs by its CRC alone.
func TestVerifyOtherBlocks(t *testing.T) {
	dir, _ := sparseCheckpoint(t, 8<<20+4*1000, 1<<20)
	if _, err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	m, _ := ReadManifest(dir)
	info := m.Files[0]
	bad := info
	bad.BlockCRC32C = append([]byte(nil), info.BlockCRC32C...)
	bad.BlockCRC32C[len(bad.BlockCRC32C)-1] ^= 1 // the last, short block
	writeManifest(t, dir, bad)
	if _, err := Verify(dir); err == nil || !strings.Contains(err.Error(), "the manifest is corrupted") {
		t.Errorf("a wrong CRC of the last block of 1 MiB blocks: %v", err)
	}
	none := info
	none.BlockBytes, none.BlockCRC32C = 0, nil
	writeManifest(t, dir, none)
	if _, err := Verify(dir); err != nil {
		t.Errorf("a manifest without block CRCs: %v", err)
	}
	none.CRC32C ^= 1
	writeManifest(t, dir, none)
	if _, err := Verify(dir); err == nil || !strings.Contains(err.Error(), "is corrupted: CRC-32C") {
		t.Errorf("a wrong CRC without block CRCs: %v", err)
	}
}

// bigState is a model of n float32 tensors of numel values each (made by
// init: randn, or zeros), with AdamW after one step when withOpt.
func bigState(t *testing.T, rt *tensor.Runtime, n, numel int, random, withOpt bool) (*State, []*tensor.Tensor) {
	t.Helper()
	var params []*tensor.Tensor
	var named []nn.NamedTensor
	for i := range n {
		var p *tensor.Tensor
		if random {
			p = rt.Randn(dtype.Float32, numel/64, 64).Persist()
		} else {
			p = rt.Zeros(dtype.Float32, numel/64, 64).Persist()
		}
		p.SetRequiresGrad(true)
		params = append(params, p)
		named = append(named, nn.NamedTensor{Name: fmt.Sprintf("layers.%d.weight", i), Tensor: p})
	}
	st := &State{Modules: []Module{{Key: "model", Tensors: named}}}
	if withOpt {
		opt, err := optim.NewAdamW(params, optim.DefaultAdamW())
		if err != nil {
			t.Fatal(err)
		}
		if random {
			for _, p := range params {
				p.SetGrad(rt.Randn(dtype.Float32, p.Shape()...).Persist())
			}
			if err := opt.Step(); err != nil {
				t.Fatal(err)
			}
		}
		st.Optimizers = []Optimizer{{Key: "optimizer", Opt: opt}}
	}
	return st, params
}

func sameBytes(t *testing.T, got, want []*tensor.Tensor, what string) {
	t.Helper()
	for i := range want {
		a, err := got[i].Bytes()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := want[i].Bytes()
		if string(a) != string(b) {
			t.Fatalf("%s %d differs after the load", what, i)
		}
	}
}

// TestLoadIntoModel: a 64 MB model is read from its checkpoint straight
// into the parameters, with a few megabytes of Go heap (reading the file
// whole and copying it in took 64 MB and more).
func TestLoadIntoModel(t *testing.T) {
	const n, numel = 16, 1 << 20 // 16 × 4 MiB
	const bound = 12 << 20
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	saved, want := bigState(t, rt, n, numel, true, false)
	dir := t.TempDir()
	if _, err := Save(w.Group(0), dir, 1, saved, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	st, got := bigState(t, rt, n, numel, false, false)
	var err error
	if b := allocated(func() { _, _, err = Restore(w.Group(0), rt, dir, st) }); err != nil || b > bound {
		t.Fatalf("loading %d bytes: %v, %d bytes allocated (bound %d)", n*numel*4, err, b, bound)
	} else {
		t.Logf("loading %d bytes allocated %d bytes", n*numel*4, b)
	}
	sameBytes(t, got, want, "parameter")
}

// TestLoadIntoOptimizer: AdamW's state is read straight into the tensors
// the optimizer makes for it: the load allocates the state the optimizer
// keeps and a few megabytes, where a state dict of the file's bytes
// would be a second copy of the state.
func TestLoadIntoOptimizer(t *testing.T) {
	const n, numel = 4, 1 << 20
	stateBytes := uint64(2 * n * numel * 4)
	const margin = 12 << 20
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	saved, wantParams := bigState(t, rt, n, numel, true, true)
	dir := t.TempDir()
	if _, err := Save(w.Group(0), dir, 1, saved, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	st, gotParams := bigState(t, rt, n, numel, false, true)
	live := rt.Stats().LiveBytes
	rt.ResetPeakMemStats()
	var err error
	b := allocated(func() { _, _, err = Restore(w.Group(0), rt, dir, st) })
	if err != nil {
		t.Fatal(err)
	}
	if b > stateBytes+margin {
		t.Errorf("loading %d bytes of state allocated %d bytes, over the state and %d", stateBytes, b, margin)
	}
	grown := rt.Stats().LiveBytes - live
	if peak := rt.Stats().PeakBytes - live; peak > grown+(1<<20) {
		t.Errorf("the tensors' memory peaked at %d bytes above the %d before the load, %d after it", peak, live, grown)
	}
	t.Logf("loading %d bytes of state allocated %d bytes", stateBytes, b)
	sameBytes(t, gotParams, wantParams, "parameter")
	src, dst := saved.Optimizers[0].Opt.(*optim.Optimizer), st.Optimizers[0].Opt.(*optim.Optimizer)
	for i, p := range wantParams {
		a, b := src.State(p), dst.State(gotParams[i])
		if b == nil || a.Step != b.Step {
			t.Fatalf("parameter %d: state %+v after the load, %+v saved", i, b, a)
		}
		sameBytes(t, []*tensor.Tensor{b.ExpAvg, b.ExpAvgSq}, []*tensor.Tensor{a.ExpAvg, a.ExpAvgSq}, fmt.Sprintf("state of parameter %d", i))
	}
}

// TestLoadStaged: tensors that cannot be read into straight load through
// the staging buffer, a few megabytes at a time (a tensor larger than the
// buffer included): float64 parameters from a checkpoint of float32 ones
// (converted), and parameters that have no memory yet (lazy, as a model
// built with zero.init until first used).
func TestLoadStaged(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	saved, want := bigState(t, rt, 2, 5<<18, true, false) // 5 MiB each
	dir := t.TempDir()
	if _, err := Save(w.Group(0), dir, 1, saved, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		make func(shape []int) *tensor.Tensor
	}{
		{"float64", func(shape []int) *tensor.Tensor { return rt.Zeros(dtype.Float64, shape...) }},
		{"lazy", func(shape []int) *tensor.Tensor { return rt.Lazy(dtype.Float32, shape...) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var named []nn.NamedTensor
			var got []*tensor.Tensor
			for _, n := range saved.Modules[0].Tensors {
				p := c.make(n.Tensor.Shape()).Persist()
				got = append(got, p)
				named = append(named, nn.NamedTensor{Name: n.Name, Tensor: p})
			}
			if _, _, err := Restore(w.Group(0), rt, dir, &State{Modules: []Module{{Key: "model", Tensors: named}}}); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				a, _ := got[i].Float64s()
				b, _ := want[i].Float64s()
				for k := range b {
					if a[k] != b[k] {
						t.Fatalf("tensor %d, element %d: %v loaded, %v saved", i, k, a[k], b[k])
					}
				}
			}
		})
	}
}

// TestFileChangedDuringLoad: a file that changes between the checks and
// the reads into the tensors fails the load naming the file (each block
// is checked again as it lands).
func TestFileChangedDuringLoad(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	saved, _ := bigState(t, rt, 2, 1<<16, true, true)
	dir := t.TempDir()
	path, err := Save(w.Group(0), dir, 1, saved, SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := bigState(t, rt, 2, 1<<16, false, true)
	m, err := ReadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := read(w.Group(0), rt, path, m, st)
	if err != nil {
		t.Fatal(err)
	}
	defer p.release()
	file := filepath.Join(path, "optimizer.safetensors")
	flip(t, file)
	if err := p.apply(st); err == nil || !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), file+" is corrupted") {
		t.Errorf("a file changed after the checks: %v", err)
	}
}

// TestLoadWithoutBlockCRCs: a checkpoint whose manifest has no block CRCs
// (written before them) loads, each file checked whole first, and a
// damaged one changes nothing.
func TestLoadWithoutBlockCRCs(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	saved, want := bigState(t, rt, 3, 1<<16, true, true)
	dir := t.TempDir()
	path, err := Save(w.Group(0), dir, 1, saved, SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	editManifest(t, path, func(m *Manifest) {
		for i := range m.Files {
			m.Files[i].BlockBytes, m.Files[i].BlockCRC32C = 0, nil
		}
	})
	st, got := bigState(t, rt, 3, 1<<16, false, true)
	if _, _, err := Restore(w.Group(0), rt, dir, st); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, got, want, "parameter")

	flip(t, filepath.Join(path, "model.safetensors"))
	st, got = bigState(t, rt, 3, 1<<16, false, true)
	if _, _, err := Restore(w.Group(0), rt, dir, st); err == nil || !strings.Contains(err.Error(), "model.safetensors is corrupted: CRC-32C") {
		t.Fatalf("a damaged file without block CRCs: %v", err)
	}
	for i, p := range got {
		if v, _ := p.Float64s(); v[0] != 0 || v[len(v)-1] != 0 {
			t.Fatalf("a failed load changed parameter %d", i)
		}
	}
}

// TestDamagedOptimizerChangesNothing: a damaged block of a plain
// optimizer's file fails the load naming the file and the bytes, before
// the model or the optimizer changes (the checks come before the reads
// into them).
func TestDamagedOptimizerChangesNothing(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	saved, _ := bigState(t, rt, 3, 1<<16, true, true)
	dir := t.TempDir()
	path, err := Save(w.Group(0), dir, 1, saved, SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(path, "optimizer.safetensors")
	flip(t, file)
	st, got := bigState(t, rt, 3, 1<<16, false, true)
	_, _, err = Restore(w.Group(0), rt, dir, st)
	if err == nil || !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), file+" is corrupted: CRC-32C") || !strings.Contains(err.Error(), "of bytes [") {
		t.Fatalf("a damaged optimizer file: %v", err)
	}
	opt := st.Optimizers[0].Opt.(*optim.Optimizer)
	for i, p := range got {
		if v, _ := p.Float64s(); v[0] != 0 || v[len(v)-1] != 0 {
			t.Errorf("a failed load changed parameter %d", i)
		}
		if s := opt.State(p); s != nil {
			t.Errorf("a failed load gave parameter %d state %+v", i, s)
		}
	}
}

// TestLoadIntoShard: each rank of a ZeRO optimizer reads its own shard
// from the files straight into the state tensors the optimizer will keep:
// the load allocates the state and a few megabytes, where reading the
// shard's bytes and then making the tensors from them allocated the state
// twice; under another partition (the flat one's other buckets) too.
func TestLoadIntoShard(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops the buffers a load reuses: allocation counts mean nothing")
	}
	// The state (67 MB) outweighs what a load may hold besides it: up to
	// 4 streams of 4 MiB buffers per rank, made again whenever a garbage
	// collection has emptied their pool (32 MiB on 2 ranks), and a little
	// more; a second copy of the state would be 67 MB more.
	const n, numel = 4, 1 << 21
	stateBytes := uint64(2 * n * numel * 4) // exp_avg and exp_avg_sq, all ranks together
	const margin = 40 << 20
	for _, c := range []struct {
		name         string
		save, resume zero.Options
	}{
		{"own shard", zero.Options{Partition: "flat"}, zero.Options{Partition: "flat"}},
		{"other buckets", zero.Options{Partition: "flat"}, zero.Options{Partition: "flat", BucketCapMB: 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			newRank := func(pg dist.ProcessGroup, opts zero.Options, random bool) (*State, []*tensor.Tensor, *zero.Optimizer) {
				rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
				st, params := bigState(t, rt, n, numel, random, false)
				z, err := zero.New(pg, optim.AdamW, params, optim.DefaultAdamW().Group(), opts)
				if err != nil {
					t.Fatal(err)
				}
				st.Optimizers = []Optimizer{{Key: "optimizer", Opt: z}}
				return st, params, z
			}
			err := onRanks(2, func(rank int, pg dist.ProcessGroup) error {
				st, params, z := newRank(pg, c.save, true)
				for _, p := range params {
					p.SetGrad(p.Runtime().Randn(dtype.Float32, p.Shape()...).Persist())
				}
				if err := z.Step(); err != nil {
					return err
				}
				_, err := Save(pg, dir, 1, st, SaveOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			states := make([]*State, 2)
			w, _ := dist.NewWorld(2, dist.Options{})
			defer w.Close()
			for r := range 2 {
				states[r], _, _ = newRank(w.Group(r), c.resume, false)
			}
			b := allocated(func() {
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for r := range 2 {
					wg.Go(func() {
						_, _, errs[r] = Restore(w.Group(r), states[r].Modules[0].Tensors[0].Tensor.Runtime(), dir, states[r])
					})
				}
				wg.Wait()
				err = errors.Join(errs...)
			})
			if err != nil {
				t.Fatal(err)
			}
			if b > stateBytes+margin {
				t.Errorf("loading %d bytes of state on 2 ranks allocated %d bytes, over the state and %d", stateBytes, b, margin)
			}
			t.Logf("loading %d bytes of state on 2 ranks allocated %d bytes", stateBytes, b)
		})
	}
}
