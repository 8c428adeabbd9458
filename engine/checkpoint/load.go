package checkpoint

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/zeroeng/zeroeng/engine/checkpoint/shard"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Restore loads the newest checkpoint under dir (or dir itself, when it is
// a checkpoint) into st on every rank of pg, and returns its manifest and
// folder; nil and "" when dir holds no checkpoint yet. It is collective:
// rank 0 chooses the checkpoint, everything a rank reads is checked (the
// files' sizes, the CRC-32C of every block it uses, names, shapes) before
// anything changes, and every rank returns the same error when any rank
// fails. Tensors are read from the files straight into the parameters and
// the optimizer state (restoreFrom).
//
// Under the world size and layout it was saved with, each rank reads only
// its own ZeRO shard and its own slices of a sharded module; under
// another, each rank reads the parts of the files that overlap what it
// keeps (a plain optimizer or module, which keeps everything, reads
// everything). The generator states are restored only under the same
// world size.
func Restore(pg dist.ProcessGroup, rt *tensor.Runtime, dir string, st *State) (*Manifest, string, error) {
	var path string
	var err error
	if pg.Rank() == 0 {
		path, err = Latest(dir)
	}
	if err := agree(pg, err); err != nil {
		return nil, "", err
	}
	b, err := pg.BroadcastObject([]byte(path), 0)
	if err != nil {
		return nil, "", err
	}
	path = string(b)
	if path == "" {
		return nil, "", nil
	}
	m, err := restoreFrom(pg, rt, path, st)
	if err != nil {
		return nil, "", err
	}
	return m, path, nil
}

// Skipped is a damaged checkpoint RestoreNewestIntact passed over.
type Skipped struct {
	Path string
	Err  error // why (it matches ErrDamaged)
}

// RestoreNewestIntact is Restore from the newest checkpoint under dir that
// is intact: when the one latest names (or latest itself) is damaged —
// a file missing, truncated, failing its CRC (ErrDamaged) — it goes on
// with the next older complete checkpoint, and says which it skipped and
// why. A checkpoint that is intact but does not fit st (another model) is
// an error, as with Restore: an older one would not fit either, and
// falling back past it would hide the mistake.
func RestoreNewestIntact(pg dist.ProcessGroup, rt *tensor.Runtime, dir string, st *State) (*Manifest, string, []Skipped, error) {
	// Rank 0 lists the candidates, newest first: latest's, then the
	// complete step folders.
	var candidates []string
	var latestErr error
	if pg.Rank() == 0 {
		latest, err := Latest(dir)
		switch {
		case err != nil:
			latestErr = damaged(err)
		case latest != "":
			candidates = append(candidates, latest)
		}
		steps, err := listSteps(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) && latestErr == nil {
			latestErr = err
		}
		for i := len(steps) - 1; i >= 0; i-- {
			if p := filepath.Join(dir, StepName(steps[i])); !slices.Contains(candidates, p) {
				candidates = append(candidates, p)
			}
		}
	}
	b, err := json.Marshal(candidates)
	if err != nil {
		return nil, "", nil, err
	}
	if b, err = pg.BroadcastObject(b, 0); err != nil {
		return nil, "", nil, err
	}
	if err := json.Unmarshal(b, &candidates); err != nil {
		return nil, "", nil, err
	}
	var skipped []Skipped
	if err := agree(pg, latestErr); err != nil {
		if !errors.Is(err, ErrDamaged) || len(candidates) == 0 {
			return nil, "", nil, err
		}
		skipped = append(skipped, Skipped{Path: filepath.Join(dir, LatestName), Err: err})
	}
	for _, path := range candidates {
		m, err := restoreFrom(pg, rt, path, st)
		if err == nil {
			return m, path, skipped, nil
		}
		if !errors.Is(err, ErrDamaged) {
			return nil, "", skipped, err
		}
		skipped = append(skipped, Skipped{Path: path, Err: err})
	}
	if len(skipped) > 0 {
		return nil, "", skipped, fmt.Errorf("checkpoint: no intact checkpoint under %s; the newest was damaged: %w", dir, skipped[0].Err)
	}
	return nil, "", nil, nil
}

// restoreFrom restores st from the checkpoint at path, on every rank or
// on none. It reads each file twice, never holding it in memory: read
// plans the load and checks every byte it will use against the manifest,
// streamed, so that a damaged or unfit checkpoint fails on every rank
// before anything changes; apply then reads each tensor straight into the
// memory that keeps it (a parameter, an optimizer's state), checking each
// block again as it lands.
func restoreFrom(pg dist.ProcessGroup, rt *tensor.Runtime, path string, st *State) (*Manifest, error) {
	m, err := ReadManifest(path)
	var loaded *pending
	if err == nil {
		loaded, err = read(pg, rt, path, m, st)
	}
	if err := agree(pg, err); err != nil {
		loaded.release()
		return nil, err
	}
	err = loaded.apply(st)
	loaded.release()
	if err == nil && st.SetRNG != nil && len(m.RNG) == pg.Size() && m.WorldSize == pg.Size() {
		err = st.SetRNG(m.RNG[pg.Rank()])
	}
	if err := agree(pg, err); err != nil {
		return nil, err
	}
	return m, nil
}

// pending is what read planned and checked, ready to apply.
type pending struct {
	path    string
	rt      *tensor.Runtime
	rd      *reader
	modules []*moduleLoad // by st.Modules index
	shards  []*shardLoad  // by st.Optimizers index
	full    []*stateLoad  // by st.Optimizers index, when not shards
}

// shardLoad is a rank's own part of a ZeRO optimizer's state, loaded
// without communication: the optimizer's new state tensors (made and
// checked by the optimizer's BeginLoadShard when read plans the load) and where
// each chunk's entries lie in the files, read straight into them by
// apply.
type shardLoad struct {
	file   string // for messages
	load   shard.Load
	chunks []shard.Chunk
	parts  [][][]statePart // by chunk, then entry
}

func (p *pending) release() {
	if p == nil {
		return
	}
	if p.rd != nil {
		p.rd.close()
	}
	for _, sh := range p.shards {
		if sh != nil && sh.load != nil {
			sh.load.Abort()
		}
	}
	p.modules, p.shards, p.full = nil, nil, nil
}

// begin starts z's load of sh's chunks under groups (the saved
// hyper-parameters); false when they are not this rank's pieces.
func (sh *shardLoad) begin(z ShardedOptimizer, groups []map[string]any, where string) (bool, error) {
	ld, err := z.BeginLoadShard(groups, sh.chunks)
	if errors.Is(err, shard.ErrOtherLayout) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checkpoint: %s: %w", where, err)
	}
	sh.load = ld
	return true, nil
}

// read plans the load of this rank's part of the checkpoint at path:
// every file's header, names, shapes and types are checked against st,
// and every byte that apply will read against the manifest's block CRCs.
// It keeps nothing of the files but a ZeRO shard's chunks.
func read(pg dist.ProcessGroup, rt *tensor.Runtime, path string, m *Manifest, st *State) (p *pending, err error) {
	p = &pending{path: path, rt: rt, shards: make([]*shardLoad, len(st.Optimizers)), full: make([]*stateLoad, len(st.Optimizers))}
	defer func() {
		if err != nil {
			p.release()
			p = nil
		}
	}()
	rd := newReader(path, m)
	p.rd = rd
	for _, mod := range st.Modules {
		var ml *moduleLoad
		var err error
		info, sliced := m.sharded(mod.Key)
		switch {
		case mod.Sharded != nil:
			ml, err = readIntoSlices(rd, pg, m, mod)
		case slices.Contains(m.Modules, mod.Key):
			ml, err = readFromFull(rd, mod)
		case sliced:
			ml, err = readFromSlices(rd, pg, m, mod, info)
		default:
			err = fmt.Errorf("checkpoint: %s has no module %q (it has %s)", path, mod.Key, keyList(m.moduleKeys()))
		}
		if err != nil {
			return nil, err
		}
		p.modules = append(p.modules, ml)
	}
	for i, o := range st.Optimizers {
		var info *OptimizerInfo
		var have []string
		for j := range m.Optimizers {
			have = append(have, m.Optimizers[j].Key)
			if m.Optimizers[j].Key == o.Key {
				info = &m.Optimizers[j]
			}
		}
		if info == nil {
			return nil, fmt.Errorf("checkpoint: %s has no optimizer %q (it has %s)", path, o.Key, keyList(have))
		}
		params, err := optimizerParams(o)
		if err != nil {
			return nil, err
		}
		if ownShard(o, info, pg) {
			file := shardName(o.Key, pg.Rank(), info.Shards)
			groups, sh, err := readShard(rd, file, params)
			if err != nil {
				return nil, err
			}
			ok, err := sh.begin(o.Opt.(ShardedOptimizer), groups, filepath.Join(path, file))
			if err != nil {
				return nil, err
			}
			if ok {
				p.shards[i] = sh
				continue
			}
			// Other buckets (another bucketCapMB): the parts below.
		}
		if pieces, ok := ownPieces(o.Opt, params, pg.Rank()); ok {
			// A sharded optimizer under another layout: the parts of the
			// saved chunks that overlap this rank's own.
			groups, sh, err := readOverlap(rd, info, params, pieces)
			if err != nil {
				return nil, err
			}
			if ok, err := sh.begin(o.Opt.(ShardedOptimizer), groups, filepath.Join(path, sh.file)); err != nil || !ok {
				// The pieces are the optimizer's own: another layout
				// here is this package's mistake.
				return nil, cmp.Or(err, fmt.Errorf("checkpoint: %s: optimizer %q: the state read does not fit the optimizer's partition", path, o.Key))
			}
			p.shards[i] = sh
			continue
		}
		// A plain optimizer, which keeps the whole state.
		if p.full[i], err = readState(rd, info, o, params); err != nil {
			return nil, err
		}
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return p, nil
}

// ownShard tells whether o, a sharded optimizer, was saved under this
// world size and partition, so that each rank can read its own shard only.
func ownShard(o Optimizer, info *OptimizerInfo, pg dist.ProcessGroup) bool {
	z, ok := o.Opt.(ShardedOptimizer)
	return ok && info.Shards > 1 && info.Shards == pg.Size() && info.Partition == z.ShardLayout().Partition
}

func optimizerParams(o Optimizer) ([]*tensor.Tensor, error) {
	switch opt := o.Opt.(type) {
	case *optim.Optimizer:
		return opt.Params(), nil
	case ShardedOptimizer:
		return opt.Params(), nil
	}
	return nil, fmt.Errorf("checkpoint: optimizer %q: %T cannot be restored", o.Key, o.Opt)
}

// apply reads what read planned into the rank's model and optimizers.
func (p *pending) apply(st *State) error {
	for i, mod := range st.Modules {
		if err := p.modules[i].apply(mod); err != nil {
			return fmt.Errorf("checkpoint: %s: module %q: %w", p.path, mod.Key, err)
		}
	}
	for i, o := range st.Optimizers {
		if sh := p.shards[i]; sh != nil {
			if err := sh.apply(); err != nil {
				return fmt.Errorf("checkpoint: %s: %w", filepath.Join(p.path, sh.file), err)
			}
			continue
		}
		if err := p.full[i].apply(p.rt, o.Opt); err != nil {
			return fmt.Errorf("checkpoint: %s: optimizer %q: %w", p.path, o.Key, err)
		}
	}
	return nil
}

func keyList(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, ", ")
}

// Verify checks the checkpoint at path without loading it into anything:
// its manifest, and every file the manifest lists (size, CRC-32C of the
// file and of its blocks, safetensors structure, the slice metadata of a
// stage-3 model's files). Each file is streamed once in chunks of a few
// megabytes, a few files at a time, so that a checkpoint of any size, one
// larger than the host's memory too, is verified in a few megabytes.
func Verify(path string) (*Manifest, error) {
	m, err := ReadManifest(path)
	if err != nil {
		return nil, err
	}
	sliceFiles := map[string]bool{}
	for _, sm := range m.Sharded {
		for r := range sm.Shards {
			sliceFiles[sliceName(sm.Key, r, sm.Shards)] = true
		}
	}
	errs := make([]error, len(m.Files))
	sem := make(chan struct{}, streams)
	var wg sync.WaitGroup
	for i, f := range m.Files {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = verifyFile(path, m, f.Name, sliceFiles[f.Name])
		})
	}
	wg.Wait()
	for _, err := range errs { // the first file's, in the manifest's order
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// streams is how many files verify and the checks before a load stream
// at once: enough to keep a fast disk and the CRC busy.
const streams = 4

// verifyFile checks one file of the checkpoint at dir, streamed.
func verifyFile(dir string, m *Manifest, name string, sliced bool) error {
	f, err := openRange(dir, m, name)
	if err != nil {
		return err
	}
	defer f.Close()
	// The header first, unchecked, for an optimizer file's values, which
	// the pass that checks the CRCs checks too; a damaged file is the
	// error before anything its header says.
	h, herr := safetensors.ReadHeader(f, f.Size(), f.path)
	var values []valueSpan
	var lerr error
	if herr == nil {
		values, lerr = stateValueSpans(h, f) // none unless the layout is right
	}
	buf := getChunk()
	err = f.checkWhole(*buf, values)
	putChunk(buf)
	if err != nil {
		return err
	}
	if herr != nil {
		return damaged(fmt.Errorf("checkpoint: %w", herr))
	}
	if lerr != nil {
		return lerr
	}
	if sliced {
		if _, err := parseSlices(h, f.path); err != nil {
			return damaged(err)
		}
	}
	return nil
}
