package checkpoint

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zeroeng/zeroeng/engine/checkpoint/shard"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// A load reads each file twice and never holds one in memory. read plans
// it (headers, names, shapes, types) and streams every byte the plan uses
// through a buffer of a few megabytes, checking each block against the
// manifest (check); only when every rank has found its part intact does
// apply read each tensor's bytes from the file straight into the tensor
// that keeps them, checking each block again as it lands (readInto). The
// second read usually comes from the page cache; it is what keeps a
// damaged checkpoint from changing anything without a second copy of the
// model and optimizer state in memory (RATIONALE.md, "Checkpoints load
// straight into the model").

// check streams every byte that apply will read and checks it against
// the manifest, a few files at a time; the first damaged file in path
// order is the error.
func (p *pending) check() error {
	spans := map[*rangeFile][]span{}
	values := map[*rangeFile][]valueSpan{}
	add := func(f *rangeFile, s span) {
		if s.from < s.to {
			spans[f] = append(spans[f], s)
		}
	}
	addState := func(part statePart) {
		part.src.spans(0, part.src.numel, add)
		values[part.src.file] = append(values[part.src.file], part.values())
	}
	for _, ml := range p.modules {
		for _, s := range ml.segs {
			s.src.spans(s.from, s.from+s.n, add)
		}
	}
	for _, sl := range p.full {
		if sl == nil {
			continue
		}
		for _, ps := range sl.states {
			for _, parts := range ps.parts {
				for _, part := range parts {
					addState(part)
				}
			}
		}
	}
	for _, sh := range p.shards {
		if sh == nil {
			continue
		}
		for _, entries := range sh.parts {
			for _, parts := range entries {
				for _, part := range parts {
					addState(part)
				}
			}
		}
	}
	files := make([]*rangeFile, 0, len(spans))
	for f := range spans {
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b *rangeFile) int { return cmp.Compare(a.path, b.path) })
	errs := make([]error, len(files))
	sem := make(chan struct{}, streams)
	var wg sync.WaitGroup
	for i, f := range files {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			buf := getChunk()
			errs[i] = f.checkSpans(spans[f], values[f], *buf)
			putChunk(buf)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// fills reads planned parts of the files straight into host memory,
// several at a time: apply finds each part's memory on the rank's
// goroutine (tensors are not safe for concurrent use), then only file
// reads run concurrently, each into its own bytes.
type fills struct{ jobs []fillJob }

// fillJob is elements [a, b) of src, read into dst.
type fillJob struct {
	src  *srcTensor
	a, b int
	dst  []byte
}

// where is the file and offset j reads from; a part of several files
// (a bucket's slices) sorts first, "".
func (j fillJob) where() (string, int64) {
	if j.src.bucket != nil {
		return "", 0
	}
	return j.src.file.path, j.src.at + int64(j.a)*int64(j.src.dt.Size())
}

// fillPiece is the size of the parts that run concurrently: a tensor of
// hundreds of megabytes is read by several readers.
const fillPiece = 8 << 20

// add plans the read of elements [a, b) of src into dst, in pieces that
// end at the file's block boundaries (no block is read twice).
func (f *fills) add(src *srcTensor, a, b int, dst []byte) {
	es := src.dt.Size()
	if src.bucket != nil {
		f.jobs = append(f.jobs, fillJob{src, a, b, dst})
		return
	}
	bs := max(src.file.info.BlockBytes, 1)
	for lo := a; lo < b; {
		hi := min(b, lo+max(1, fillPiece/es))
		if end := src.at + int64(hi)*int64(es); hi < b && end%bs != 0 {
			if aligned := end / bs * bs; aligned > src.at+int64(lo)*int64(es) && (aligned-src.at)%int64(es) == 0 {
				hi = int((aligned - src.at) / int64(es))
			}
		}
		f.jobs = append(f.jobs, fillJob{src, lo, hi, dst[(lo-a)*es : (hi-a)*es]})
		lo = hi
	}
}

// run reads every planned part, streams at a time, in the files' order
// (a disk's best when the page cache does not hold them), and stops at
// the first error.
func (f *fills) run() error {
	slices.SortStableFunc(f.jobs, func(x, y fillJob) int {
		xf, xo := x.where()
		yf, yo := y.where()
		return cmp.Or(cmp.Compare(xf, yf), cmp.Compare(xo, yo))
	})
	errs := make([]error, len(f.jobs))
	next := make(chan int)
	var failed atomic.Bool // the rest is not read
	var wg sync.WaitGroup
	for range min(streams, len(f.jobs)) {
		wg.Go(func() {
			for i := range next {
				if failed.Load() {
					continue
				}
				j := f.jobs[i]
				if errs[i] = j.src.read(j.a, j.b, j.dst); errs[i] != nil {
					failed.Store(true)
				}
			}
		})
	}
	for i := range f.jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	f.jobs = nil
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// readInto reads elements [a, b) of src into dst's elements from at on,
// in dst's row-major order. A contiguous host tensor of src's type (a CPU
// parameter, an optimizer's state) is read into straight from the file,
// by f.run; any other (a device's tensor, another type, which needs a
// conversion) now, through *stage, a buffer of a few megabytes made on
// first use, a piece at a time.
func readInto(f *fills, dst *tensor.Tensor, at int, src *srcTensor, a, b int, stage *[]byte) error {
	n := b - a
	if at < 0 || n < 0 || at > dst.Numel()-n {
		// read planned the sizes; a mismatch is this package's mistake.
		return fmt.Errorf("elements [%d, %d) of a %v tensor of shape %v", at, at+n, dst.DType(), dst.Shape())
	}
	if n == 0 {
		return nil
	}
	es := src.dt.Size()
	if dst.DType() == src.dt && dst.IsContiguous() {
		if hb, ok := tensor.HostBytes(dst); ok {
			tensor.WritableView(dst) // a write, for autograd's version checks
			f.add(src, a, b, hb[at*es:(at+n)*es])
			return nil
		}
	}
	rt := dst.Runtime()
	if !dst.IsContiguous() {
		// A strided tensor, written whole (a module's tensor; never
		// more than one tensor's bytes).
		if at != 0 || n != dst.Numel() {
			return fmt.Errorf("elements [%d, %d) of a strided tensor of shape %v", at, at+n, dst.Shape())
		}
		buf, err := alloc(n * es)
		if err != nil {
			return err
		}
		if err := src.read(a, b, buf); err != nil {
			return err
		}
		t := rt.FromHostMemory(src.dt, buf, dst.Shape()...)
		defer t.Release()
		return dst.CopyFrom(t)
	}
	if *stage == nil {
		*stage = make([]byte, chunkBytes)
	}
	flat := dst.View(-1)
	defer flat.Release()
	step := max(1, chunkBytes/es)
	for lo := a; lo < b; lo += step {
		hi := min(lo+step, b)
		buf := (*stage)[:(hi-lo)*es]
		if err := src.read(lo, hi, buf); err != nil {
			return err
		}
		part := flat.Narrow(0, at+lo-a, hi-lo)
		var err error
		if dst.DType() == src.dt {
			err = part.SetBytes(buf)
		} else {
			t := rt.FromHostMemory(src.dt, buf, hi-lo)
			err = part.CopyFrom(t)
			t.Release()
		}
		part.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// readShard plans the load of a ZeRO shard saved under this rank's
// layout: the saved hyper-parameters, its chunks (their entries, no data)
// and where each entry's elements lie in the file.
func readShard(rd *reader, name string, params []*tensor.Tensor) ([]map[string]any, *shardLoad, error) {
	f, err := rd.open(name)
	if err != nil {
		return nil, nil, err
	}
	h, err := safetensors.ReadHeader(f, f.Size(), f.path)
	if err != nil {
		return nil, nil, damaged(fmt.Errorf("checkpoint: %w", err))
	}
	meta, saved, _, err := optimizerLayout(h, f, params)
	if err != nil {
		return nil, nil, err
	}
	sh := &shardLoad{file: name}
	for i, sc := range saved {
		idx := meta.Chunks[i].Index
		dt := optim.StateDType(params[idx])
		sh.chunks = append(sh.chunks, shard.Chunk{Index: idx, At: sc.at, Step: sc.step, Scalars: maps.Clone(sc.scalars), N: max(sc.n, 0), Names: sc.names})
		entries := make([][]statePart, len(sc.names))
		for k, entry := range sc.names {
			src := &srcTensor{dt: dt, shape: []int{sc.n}, numel: sc.n, file: f, at: sc.offsets[k]}
			entries[k] = []statePart{{src: src, key: stateKey(idx, entry)}}
		}
		sh.parts = append(sh.parts, entries)
	}
	return meta.ParamGroups, sh, nil
}

// apply reads the planned parts into the optimizer's new state tensors
// and gives them to it.
func (sh *shardLoad) apply() error {
	var f fills
	var stage []byte
	for ci, c := range sh.chunks {
		for k, name := range c.Names {
			dst := sh.load.Entry(ci, k)
			for _, part := range sh.parts[ci][k] {
				if err := readInto(&f, dst, part.at, part.src, 0, part.src.numel, &stage); err != nil {
					sh.load.Abort()
					return fmt.Errorf("parameter %d, %q: %w", c.Index, name, err)
				}
			}
		}
	}
	if err := f.run(); err != nil {
		sh.load.Abort()
		return err
	}
	err := sh.load.Commit()
	sh.load = nil
	return err
}

// stateKey is the name of a saved state entry's tensor.
func stateKey(index int, entry string) string { return fmt.Sprintf("state.%d.%s", index, entry) }

// stateValueSpans checks what can be checked of an optimizer file (one
// with the "zeroeng.optimizer" metadata) without its optimizer: its kind
// and hyper-parameters, that each chunk holds the entries the kind keeps
// under its group's (master weights allowed either way: the parameters'
// dtypes are not in the file), and that its scalars are ones the kind
// keeps, with values a run can have (optim.CheckStateScalars). It lists
// every entry's bytes with the check of their values. Any other file has
// none.
func stateValueSpans(h *safetensors.Header, f *rangeFile) ([]valueSpan, error) {
	path := f.path
	text, ok := h.Metadata[optimizerMetaKey]
	if !ok {
		return nil, nil
	}
	var meta optimizerMeta
	if err := json.Unmarshal([]byte(text), &meta); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: metadata %q: %v", path, optimizerMetaKey, err)
	}
	kind, err := optim.ParseKind(meta.Kind)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	groups, ids, err := optim.ReadParamGroups(kind, meta.ParamGroups)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	groupOf := map[int]int{}
	for g, list := range ids {
		for _, id := range list {
			groupOf[id] = g
		}
	}
	entries := map[int][]string{}
	var values []valueSpan
	for _, t := range h.Tensors {
		rest, _ := strings.CutPrefix(t.Name, "state.")
		idxText, entry, _ := strings.Cut(rest, ".")
		idx, err := strconv.Atoi(idxText)
		if err != nil || !strings.HasPrefix(t.Name, "state.") {
			return nil, fmt.Errorf("checkpoint: %s: tensor %q is not an optimizer's state entry", path, t.Name)
		}
		entries[idx] = append(entries[idx], entry)
		part := statePart{src: &srcTensor{dt: t.DType, file: f, at: t.Begin, numel: int((t.End - t.Begin) / int64(max(t.DType.Size(), 1)))}, key: t.Name}
		values = append(values, part.values())
	}
	for idx := range entries {
		if !slices.ContainsFunc(meta.Chunks, func(c chunkMeta) bool { return c.Index == idx }) {
			return nil, fmt.Errorf("checkpoint: %s: it holds state for parameter %d, which none of its chunks is", path, idx)
		}
	}
	for _, c := range meta.Chunks {
		g, ok := groupOf[c.Index]
		if !ok {
			return nil, fmt.Errorf("checkpoint: %s: state for parameter %d, which no parameter group holds", path, c.Index)
		}
		names := entries[c.Index]
		half := slices.Contains(names, "master_param")
		if err := optim.CheckStateNames(kind, &groups[g], half, c.Step, names); err != nil {
			return nil, fmt.Errorf("checkpoint: %s: parameter %d's state: %w", path, c.Index, err)
		}
		if err := optim.CheckStateScalars(kind, c.Scalars); err != nil {
			return nil, fmt.Errorf("checkpoint: %s: parameter %d's state: %w", path, c.Index, err)
		}
	}
	return values, nil
}

// stateLoad is what read planned for a plain optimizer, which keeps every
// parameter's whole state: its hyper-parameters, and for each parameter
// with state its step and where each entry's elements lie in the files
// (in one chunk, or in one per rank of a ZeRO save).
type stateLoad struct {
	groups []map[string]any
	params []*tensor.Tensor
	states map[int]*savedState // by parameter index
}

type savedState struct {
	step    int64
	scalars map[string]float64 // the 0-d entries (nil in older files)
	names   []string           // the entries, as the first chunk lists them
	parts   map[string][]statePart
}

// statePart is the elements [at, at+src.numel) of an entry: the saved
// tensor key's, from its element first on.
type statePart struct {
	at    int
	src   *srcTensor
	key   string // "state.3.exp_avg"
	first int
}

// values is the check of the part's values (optim.CheckStateValues),
// whose failure names the file, the tensor and the element.
func (part statePart) values() valueSpan {
	src := part.src
	es := int64(src.dt.Size())
	_, entry, _ := strings.Cut(strings.TrimPrefix(part.key, "state."), ".")
	from := src.at
	return valueSpan{from: from, to: from + int64(src.numel)*es, check: func(b []byte, off int64) error {
		if err := optim.CheckStateValues(entry, src.dt, b, part.first+int(off/es)); err != nil {
			return fmt.Errorf("checkpoint: %s: tensor %q: %w", src.file.path, part.key, err)
		}
		return nil
	}}
}

// readState plans the load of a plain optimizer's whole state from every
// file of the optimizer's, and checks that its hyper-parameters fit.
func readState(rd *reader, info *OptimizerInfo, o Optimizer, params []*tensor.Tensor) (*stateLoad, error) {
	groups, saved, where, err := savedChunks(rd, info, params)
	if err != nil {
		return nil, err
	}
	states, err := stateParts(where, saved, params)
	if err != nil {
		return nil, err
	}
	// The hyper-parameters, now: another optimizer's checkpoint fails
	// before anything changes.
	var kind optim.Kind
	var own []*optim.ParamGroup
	switch opt := o.Opt.(type) {
	case *optim.Optimizer:
		kind, own = opt.Kind(), opt.Groups
	case ShardedOptimizer:
		kind, own = opt.Kind(), opt.ParamGroups()
	}
	hyper, _, err := optim.ReadStateDict(kind, own, &optim.StateDict{ParamGroups: groups})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: optimizer %q: %w", rd.dir, info.Key, err)
	}
	// Each state's entries, now too: one missing would fail the first
	// step after the model had changed.
	var groupOf []int
	for g, og := range own {
		for range og.Params {
			groupOf = append(groupOf, g)
		}
	}
	for idx, s := range states {
		p := params[idx]
		if err := optim.CheckStateNames(kind, &hyper[groupOf[idx]], optim.StateDType(p) != p.DType(), s.step, s.names); err != nil {
			return nil, fmt.Errorf("checkpoint: %s: optimizer %q: parameter %d's state: %w", where, info.Key, idx, err)
		}
		if err := optim.CheckStateScalars(kind, s.scalars); err != nil {
			return nil, fmt.Errorf("checkpoint: %s: optimizer %q: parameter %d's state: %w", where, info.Key, idx, err)
		}
	}
	return &stateLoad{groups: groups, params: params, states: states}, nil
}

// stateParts puts the saved chunks of each parameter's state together:
// every entry must be one the optimizers know, and its chunks must tile
// the parameter's elements exactly.
func stateParts(where string, saved map[int][]*savedChunk, params []*tensor.Tensor) (map[int]*savedState, error) {
	states := map[int]*savedState{}
	for _, idx := range slices.Sorted(maps.Keys(saved)) {
		chunks, p := saved[idx], params[idx]
		dt := optim.StateDType(p)
		s := &savedState{parts: map[string][]statePart{}}
		for i, c := range chunks {
			if i == 0 || c.step > s.step {
				s.scalars = maps.Clone(c.scalars) // the latest step's
			}
			s.step = max(s.step, c.step)
			for k, name := range c.names {
				if _, ok := optim.StateField(&optim.State{}, name); !ok {
					return nil, fmt.Errorf("checkpoint: %s: parameter %d has an unknown state entry %q", where, idx, name)
				}
				if name == "master_param" && dt == p.DType() {
					return nil, fmt.Errorf("checkpoint: %s: parameter %d has master_param, but it is %v (master weights are kept for bfloat16 and float16 parameters)", where, idx, p.DType())
				}
				if s.parts[name] == nil {
					s.names = append(s.names, name)
				}
				src := &srcTensor{dt: dt, shape: []int{c.n}, numel: c.n, file: c.file, at: c.offsets[k]}
				s.parts[name] = append(s.parts[name], statePart{at: c.at, src: src, key: stateKey(idx, name)})
			}
		}
		for _, name := range s.names {
			parts := s.parts[name]
			slices.SortFunc(parts, func(a, b statePart) int { return cmp.Compare(a.at, b.at) })
			end, covered := 0, 0
			for _, part := range parts {
				if part.at == end {
					end += part.src.numel
				}
				covered += part.src.numel
			}
			if end != p.Numel() || covered != end {
				return nil, fmt.Errorf("checkpoint: %s: the chunks of %q of parameter %d cover %d of its %d elements (or overlap)", where, name, idx, covered, p.Numel())
			}
		}
		states[idx] = s
	}
	return states, nil
}

// apply gives opt the planned state: LoadStateDict makes the optimizer's
// own state tensors, from placeholders that hold no memory (one zero
// broadcast to the parameter's shape; the optimizers copy what they
// load), and each entry is then read from the files straight into them.
// A state dict of the file's bytes would be a second copy of the whole
// state.
func (sl *stateLoad) apply(rt *tensor.Runtime, opt any) error {
	sc := rt.OpenScope()
	defer sc.Close()
	sd := &optim.StateDict{State: map[int]map[string]*tensor.Tensor{}, ParamGroups: sl.groups}
	zeros := map[dtype.DType]*tensor.Tensor{}
	for idx, s := range sl.states {
		p := sl.params[idx]
		dt := optim.StateDType(p)
		entry := map[string]*tensor.Tensor{"step": rt.Scalar(tensor.Float64, float64(s.step))}
		for name, v := range s.scalars {
			entry[name] = rt.Scalar(tensor.Float64, v) // exact: a float64 0-d tensor
		}
		for _, name := range s.names {
			if zeros[dt] == nil {
				zeros[dt] = rt.Zeros(dt)
			}
			entry[name] = zeros[dt].Expand(p.Shape()...)
		}
		sd.State[idx] = entry
	}
	var stateOf func(*tensor.Tensor) *optim.State
	switch o := opt.(type) {
	case *optim.Optimizer:
		if err := o.LoadStateDict(sd); err != nil {
			return err
		}
		stateOf = o.State
	case ShardedOptimizer:
		// Under the greedy partition before its owners are assigned:
		// every rank keeps the whole state (State has it). The flat
		// partition's pieces load as shards (ownPieces).
		if fb, ok := o.(flatBuckets); ok && fb.NumFlatBuckets() > 0 {
			return fmt.Errorf("the flat partition's state loads in pieces, not whole")
		}
		if err := o.LoadStateDict(sd); err != nil {
			return err
		}
		stateOf = o.State
	default:
		return fmt.Errorf("%T cannot be restored", opt)
	}
	var f fills
	var stage []byte
	for _, idx := range slices.Sorted(maps.Keys(sl.states)) {
		s := sl.states[idx]
		st := stateOf(sl.params[idx])
		if st == nil {
			continue // another rank's
		}
		for _, name := range s.names {
			field, _ := optim.StateField(st, name)
			if *field == nil {
				return fmt.Errorf("parameter %d: the optimizer made no %q to load into", idx, name)
			}
			for _, part := range s.parts[name] {
				if err := readInto(&f, *field, part.at, part.src, 0, part.src.numel, &stage); err != nil {
					return fmt.Errorf("parameter %d, %q: %w", idx, name, err)
				}
			}
		}
	}
	return f.run()
}
