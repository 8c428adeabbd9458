package checkpoint

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/zeroeng/zeroeng/engine/checkpoint/shard"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Resharding a sharded optimizer's state: each rank works out which parts
// of which parameters it keeps state for under its own partition, and
// reads only the parts of the saved chunks that overlap them, from every
// rank's file, with positioned reads. No rank holds more than its own
// state, whatever the world sizes and partitions.

// flatBuckets and paramOwner are what a sharded optimizer tells of its
// partition (ZeRO's does): the flat partition's buckets and this rank's
// slice of each, or the greedy partition's owner of each parameter (-1
// when not decided yet).
type flatBuckets interface {
	NumFlatBuckets() int
	FlatBucket(i int) (params []*tensor.Tensor, offsets []int, numel, lo, hi int)
}

type paramOwner interface{ Owner(*tensor.Tensor) int }

// statePiece is elements [at, at+n) of parameter index.
type statePiece struct{ index, at, n int }

// ownPieces lists the parts of params (in index order) whose state opt
// keeps on rank, or false when opt does not say.
func ownPieces(opt any, params []*tensor.Tensor, rank int) ([]statePiece, bool) {
	index := make(map[*tensor.Tensor]int, len(params))
	for i, p := range params {
		index[p] = i
	}
	var out []statePiece
	if fb, ok := opt.(flatBuckets); ok && fb.NumFlatBuckets() > 0 {
		for i := range fb.NumFlatBuckets() {
			ps, offs, _, lo, hi := fb.FlatBucket(i)
			for j, p := range ps {
				k, known := index[p]
				if !known {
					return nil, false
				}
				if s, e := max(offs[j], lo), min(offs[j]+p.Numel(), hi); s < e {
					out = append(out, statePiece{k, s - offs[j], e - s})
				}
			}
		}
		return out, true
	}
	po, ok := opt.(paramOwner)
	if !ok {
		return nil, false
	}
	for i, p := range params {
		switch po.Owner(p) {
		case rank:
			out = append(out, statePiece{i, 0, p.Numel()})
		case -1:
			return nil, false
		}
	}
	return out, true
}

// savedChunk is one chunk of a saved optimizer file: where each of its
// entries' elements lie in the file.
type savedChunk struct {
	at, n   int
	step    int64
	scalars map[string]float64 // the state's 0-d entries (nil in older files)
	names   []string
	file    *rangeFile
	offsets []int64 // of element at, per name
}

// optimizerLayout reads what an optimizer file's header says of its
// chunks, with parseOptimizer's checks and the sizes' too.
func optimizerLayout(h *safetensors.Header, f *rangeFile, params []*tensor.Tensor) (*optimizerMeta, []*savedChunk, map[int]*savedChunk, error) {
	path := f.path
	var meta optimizerMeta
	text, ok := h.Metadata[optimizerMetaKey]
	if !ok {
		return nil, nil, nil, fmt.Errorf("checkpoint: %s is not an optimizer file (no %q metadata)", path, optimizerMetaKey)
	}
	if err := json.Unmarshal([]byte(text), &meta); err != nil {
		return nil, nil, nil, fmt.Errorf("checkpoint: %s: metadata %q: %v", path, optimizerMetaKey, err)
	}
	var chunks []*savedChunk
	byIndex := map[int]*savedChunk{}
	for _, c := range meta.Chunks {
		if c.Index < 0 || c.Index >= len(params) {
			return nil, nil, nil, fmt.Errorf("checkpoint: %s: state for parameter %d, but the optimizer has %d parameters", path, c.Index, len(params))
		}
		if byIndex[c.Index] != nil {
			return nil, nil, nil, fmt.Errorf("checkpoint: %s: two chunks of parameter %d", path, c.Index)
		}
		sc := &savedChunk{at: c.At, n: -1, step: c.Step, scalars: c.Scalars, file: f}
		byIndex[c.Index] = sc
		chunks = append(chunks, sc)
	}
	for _, t := range h.Tensors {
		rest, ok := strings.CutPrefix(t.Name, "state.")
		idxText, entry, ok2 := strings.Cut(rest, ".")
		idx, err := strconv.Atoi(idxText)
		sc := byIndex[idx]
		if !ok || !ok2 || err != nil || sc == nil || slices.Contains(sc.names, entry) {
			return nil, nil, nil, fmt.Errorf("checkpoint: %s: tensor %q belongs to no chunk of the metadata", path, t.Name)
		}
		p := params[idx]
		if want := optim.StateDType(p); t.DType != want {
			return nil, nil, nil, fmt.Errorf("checkpoint: %s: tensor %q is %v; the parameter's state is %v", path, t.Name, t.DType, want)
		}
		n, _ := elems(t.Shape)
		if (sc.n >= 0 && n != sc.n) || sc.at < 0 || sc.at > p.Numel() || n > p.Numel()-sc.at {
			return nil, nil, nil, fmt.Errorf("checkpoint: %s: tensor %q holds %d elements at %d of parameter %d (%d elements)", path, t.Name, n, sc.at, idx, p.Numel())
		}
		sc.n = n
		sc.names = append(sc.names, entry)
		sc.offsets = append(sc.offsets, t.Begin)
	}
	return &meta, chunks, byIndex, nil
}

// savedChunks reads the headers of every file of the optimizer's: the
// parameter groups (the first file's), each parameter's saved chunks
// from every file, and how to name the files in errors.
func savedChunks(rd *reader, info *OptimizerInfo, params []*tensor.Tensor) (groups []map[string]any, saved map[int][]*savedChunk, where string, err error) {
	saved = map[int][]*savedChunk{} // by parameter index
	for s := 0; s < info.Shards; s++ {
		f, err := rd.open(shardName(info.Key, s, info.Shards))
		if err != nil {
			return nil, nil, "", err
		}
		h, err := safetensors.ReadHeader(f, f.Size(), f.path)
		if err != nil {
			return nil, nil, "", damaged(fmt.Errorf("checkpoint: %w", err))
		}
		meta, _, byIndex, err := optimizerLayout(h, f, params)
		if err != nil {
			return nil, nil, "", err
		}
		if s == 0 {
			groups = meta.ParamGroups
		}
		for idx, c := range byIndex {
			saved[idx] = append(saved[idx], c)
		}
	}
	where = filepath.Join(rd.dir, shardName(info.Key, 0, info.Shards))
	if info.Shards > 1 {
		where += " and the other shards"
	}
	return groups, saved, where, nil
}

// readOverlap plans the load of this rank's state, pieces exactly, from
// the parts of every saved file's chunks that overlap them.
func readOverlap(rd *reader, info *OptimizerInfo, params []*tensor.Tensor, pieces []statePiece) ([]map[string]any, *shardLoad, error) {
	groups, saved, where, err := savedChunks(rd, info, params)
	if err != nil {
		return nil, nil, err
	}
	sh := &shardLoad{file: shardName(info.Key, 0, info.Shards)}
	for _, pc := range pieces {
		dt := optim.StateDType(params[pc.index])
		c := shard.Chunk{Index: pc.index, At: pc.at, N: pc.n}
		var entries [][]statePart
		covered := map[string]int{}
		found := false
		for _, sc := range saved[pc.index] {
			s, e := max(pc.at, sc.at), min(pc.at+pc.n, sc.at+sc.n)
			if s >= e {
				continue
			}
			if !found || sc.step > c.Step {
				// The scalars (mu_product) of the latest step's chunk;
				// every chunk of a parameter holds the same.
				c.Scalars = maps.Clone(sc.scalars)
			}
			if !found {
				found = true
				c.Names = slices.Clone(sc.names)
				entries = make([][]statePart, len(c.Names))
			}
			c.Step = max(c.Step, sc.step)
			if len(sc.names) != len(c.Names) {
				return nil, nil, fmt.Errorf("checkpoint: %s: parameter %d has state %q in one chunk and %q in another", where, pc.index, c.Names, sc.names)
			}
			for k, name := range sc.names {
				i := slices.Index(c.Names, name)
				if i < 0 {
					return nil, nil, fmt.Errorf("checkpoint: %s: parameter %d has state %q in one chunk and not in another", where, pc.index, name)
				}
				es := int64(dt.Size())
				src := &srcTensor{dt: dt, shape: []int{e - s}, numel: e - s, file: sc.file, at: sc.offsets[k] + int64(s-sc.at)*es}
				entries[i] = append(entries[i], statePart{at: s - pc.at, src: src, key: stateKey(pc.index, name), first: s - sc.at})
				covered[name] += e - s
			}
		}
		if !found {
			continue // no state saved for it (never stepped)
		}
		for _, name := range c.Names {
			if covered[name] != pc.n {
				return nil, nil, fmt.Errorf("checkpoint: %s: the chunks of %q of parameter %d cover %d of the %d elements at %d that this rank keeps", where, name, pc.index, covered[name], pc.n, pc.at)
			}
		}
		sh.chunks = append(sh.chunks, c)
		sh.parts = append(sh.parts, entries)
	}
	return groups, sh, nil
}
