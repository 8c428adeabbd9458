package checkpoint

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/zeroeng/zeroeng/engine/checkpoint/shard"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeFile creates path (inside the save's temporary folder), lets fill
// write it through a buffer, and syncs it; it returns the file's size and
// CRC-32C for the manifest.
func writeFile(path string, fill func(io.Writer) error) (FileInfo, error) {
	info := FileInfo{Name: filepath.Base(path)}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return info, fmt.Errorf("checkpoint: %w", err)
	}
	sum := &blockSum{}
	counter := &countingWriter{w: io.MultiWriter(f, sum), f: f}
	bw := bufio.NewWriterSize(counter, 1<<20)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return info, fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	info.Bytes, info.CRC32C = counter.n, sum.total
	info.BlockBytes, info.BlockCRC32C = BlockBytes, sum.blocks()
	return info, nil
}

// BlockBytes is the size of the blocks whose CRC-32C the manifest holds
// for each file (FileInfo.BlockCRC32C): a reshard reads parts of other
// ranks' files and checks only the blocks it touches, at most two blocks
// more than it needs per part.
const BlockBytes = 64 << 10

// blockSum computes a file's CRC-32C and its blocks' as it is written.
type blockSum struct {
	total uint32
	cur   uint32 // the current block's
	n     int64  // bytes in the current block
	sums  []byte
}

func (b *blockSum) Write(p []byte) (int, error) {
	b.total = crc32.Update(b.total, castagnoli, p)
	n := len(p)
	for len(p) > 0 {
		k := int(min(int64(len(p)), BlockBytes-b.n))
		b.cur = crc32.Update(b.cur, castagnoli, p[:k])
		b.n += int64(k)
		p = p[k:]
		if b.n == BlockBytes {
			b.sums = binary.LittleEndian.AppendUint32(b.sums, b.cur)
			b.cur, b.n = 0, 0
		}
	}
	return n, nil
}

// blocks returns the blocks' CRCs, the last partial block's included.
func (b *blockSum) blocks() []byte {
	out := b.sums
	if b.n > 0 {
		out = binary.LittleEndian.AppendUint32(out, b.cur)
	}
	return out
}

// countingWriter counts what goes to the file and starts its writeback
// every writebackChunk bytes.
type countingWriter struct {
	w       io.Writer
	f       *os.File
	n       int64
	flushed int64
}

const writebackChunk = 64 << 20

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.n-c.flushed >= writebackChunk {
		startWriteback(c.f, c.flushed, c.n-c.flushed)
		c.flushed = c.n
	}
	return n, err
}

// reader opens the files of one checkpoint for checked reads of their
// parts (rangeFile), each once. Nothing reads a whole file into memory: a
// load reads each tensor straight into the memory that keeps it.
type reader struct {
	dir    string
	m      *Manifest
	mu     sync.Mutex
	ranges map[string]*rangeFile // the files open
}

func newReader(dir string, m *Manifest) *reader {
	return &reader{dir: dir, m: m, ranges: map[string]*rangeFile{}}
}

// open opens a file for checked reads of its parts (once).
func (r *reader) open(name string) (*rangeFile, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.ranges[name]; f != nil {
		return f, nil
	}
	f, err := openRange(r.dir, r.m, name)
	if err != nil {
		return nil, err
	}
	r.ranges[name] = f
	return f, nil
}

// close closes the files open for reads of parts.
func (r *reader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.ranges {
		f.Close()
	}
	r.ranges = map[string]*rangeFile{}
}

// optimizerMeta is the "zeroeng.optimizer" metadata of an optimizer file:
// the hyper-parameters in PyTorch's state-dict layout, and for each chunk
// where its elements start in its flattened parameter, its step and its
// state's 0-d entries beside the step ("scalars": NAdam's mu_product,
// which the step count alone does not give once β₁ or momentum_decay
// changed during the run). The chunk's entries are the tensors named
// state.<index>.<entry> (exp_avg, ...). Files written before chunks had
// "scalars" load as before: NAdam recomputes mu_product from the step.
type optimizerMeta struct {
	Kind        string           `json:"kind"`
	ParamGroups []map[string]any `json:"param_groups"`
	Chunks      []chunkMeta      `json:"chunks"`
}

type chunkMeta struct {
	Index   int                `json:"index"`
	At      int                `json:"at"`
	Step    int64              `json:"step"`
	Scalars map[string]float64 `json:"scalars,omitempty"`
}

const optimizerMetaKey = "zeroeng.optimizer"

// optimizerChunks is what a rank saves of opt: its kind, its
// hyper-parameters (PyTorch's param_groups) and its chunks (all of a plain
// optimizer's state, one chunk per parameter), with its parameters.
func optimizerChunks(opt any) (meta optimizerMeta, chunks []shard.Chunk, params []*tensor.Tensor, err error) {
	var kind optim.Kind
	var groups []*optim.ParamGroup
	switch o := opt.(type) {
	case *optim.Optimizer:
		kind, groups, params = o.Kind(), o.Groups, o.Params()
		for id, p := range params {
			s := o.State(p)
			if s == nil {
				continue
			}
			c := shard.Chunk{Index: id, Step: s.Step, Scalars: maps.Clone(s.Scalars), N: params[id].Numel()}
			for _, e := range s.Tensors() {
				b, err := tensor.SharedBytes(e.Tensor)
				if err != nil {
					return meta, nil, nil, fmt.Errorf("state %q of parameter %d: %w", e.Name, id, err)
				}
				c.Names = append(c.Names, e.Name)
				c.Data = append(c.Data, b)
			}
			chunks = append(chunks, c)
		}
	case ShardedOptimizer:
		kind, groups, params = o.Kind(), o.ParamGroups(), o.Params()
		if chunks, err = o.LocalChunks(); err != nil {
			return meta, nil, nil, err
		}
	default:
		return meta, nil, nil, fmt.Errorf("%T cannot be saved", opt)
	}
	meta.Kind = kind.String()
	meta.ParamGroups = optim.MakeStateDict(kind, groups, func(*tensor.Tensor) *optim.State { return nil }).ParamGroups
	for _, c := range chunks {
		meta.Chunks = append(meta.Chunks, chunkMeta{Index: c.Index, At: c.At, Step: c.Step, Scalars: c.Scalars})
	}
	return meta, chunks, params, nil
}

// writeOptimizer writes a rank's optimizer chunks.
func writeOptimizer(path string, opt any) (FileInfo, error) {
	meta, chunks, params, err := optimizerChunks(opt)
	if err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	var raw []safetensors.Tensor
	for _, c := range chunks {
		p := params[c.Index]
		dt := optim.StateDType(p)
		for i, name := range c.Names {
			shape := []int{len(c.Data[i]) / dt.Size()}
			if c.At == 0 && shape[0] == p.Numel() {
				shape = p.Shape()
			}
			raw = append(raw, safetensors.Tensor{Name: fmt.Sprintf("state.%d.%s", c.Index, name), DType: dt, Shape: shape, Data: c.Data[i]})
		}
	}
	mb, err := json.Marshal(meta)
	if err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return writeFile(path, func(w io.Writer) error {
		return safetensors.Write(w, raw, map[string]string{optimizerMetaKey: string(mb)})
	})
}
