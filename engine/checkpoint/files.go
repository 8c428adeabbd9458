package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
	"github.com/zeroeng/zeroeng/internal/hostmem"
	"github.com/zeroeng/zeroeng/internal/safefile"
	"github.com/zeroeng/zeroeng/zero"
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

// readFile reads one file of the checkpoint at dir and checks it against
// the manifest: present, the same size, the same CRC-32C. Its errors are
// the checkpoint's damage (ErrDamaged).
func readFile(dir string, m *Manifest, name string) ([]byte, error) {
	b, err := readFileChecked(dir, m, name)
	return b, damaged(err)
}

func readFileChecked(dir string, m *Manifest, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	want, ok := m.file(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint: %s: the manifest lists no file %s", dir, name)
	}
	f, st, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	if st.Size() != want.Bytes {
		return nil, fmt.Errorf("checkpoint: %s has %d bytes, the manifest says %d: the file is truncated or was replaced", path, st.Size(), want.Bytes)
	}
	if err := hostmem.Check(want.Bytes); err != nil {
		return nil, fmt.Errorf("checkpoint: reading %s: %w", path, err)
	}
	b := make([]byte, want.Bytes)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("checkpoint: reading %s: %w", path, err)
	}
	if err := checkSums(path, want, b); err != nil {
		return nil, err
	}
	return b, nil
}

// checkSums checks a whole file's bytes against the manifest's CRC-32C,
// and its blocks' when the manifest has them.
func checkSums(path string, want FileInfo, b []byte) error {
	var got blockSum
	if want.BlockBytes == 0 || want.BlockBytes == BlockBytes {
		got.Write(b) // both at once
	} else {
		got.total = crc32.Checksum(b, castagnoli)
	}
	if got.total != want.CRC32C {
		return fmt.Errorf("checkpoint: %s is corrupted: CRC-32C %08x, the manifest says %08x", path, got.total, want.CRC32C)
	}
	if want.BlockBytes == 0 {
		return nil
	}
	sums := got.blocks()
	if want.BlockBytes != BlockBytes {
		sums = nil
		for at := int64(0); at < int64(len(b)); at += want.BlockBytes {
			sums = binary.LittleEndian.AppendUint32(sums, crc32.Checksum(b[at:min(at+want.BlockBytes, int64(len(b)))], castagnoli))
		}
	}
	if !bytes.Equal(sums, want.BlockCRC32C) {
		return fmt.Errorf("checkpoint: %s: the manifest's block CRCs do not match the file (whose CRC-32C does): the manifest is corrupted", path)
	}
	return nil
}

// reader reads the files of one checkpoint, several at once: read
// starts reading (and checking) files in the background, get waits for
// one, starting it if need be.
type reader struct {
	dir    string
	m      *Manifest
	mu     sync.Mutex
	reads  map[string]*fileRead
	ranges map[string]*rangeFile // files read in parts (open)
}

type fileRead struct {
	done chan struct{}
	data []byte
	err  error
}

func newReader(dir string, m *Manifest) *reader {
	return &reader{dir: dir, m: m, reads: map[string]*fileRead{}}
}

func (r *reader) read(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range names {
		if r.reads[name] != nil {
			continue
		}
		fr := &fileRead{done: make(chan struct{})}
		r.reads[name] = fr
		go func() {
			fr.data, fr.err = readFile(r.dir, r.m, name)
			close(fr.done)
		}()
	}
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
	if r.ranges == nil {
		r.ranges = map[string]*rangeFile{}
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
	r.ranges = nil
}

func (r *reader) get(name string) ([]byte, error) {
	r.read(name)
	r.mu.Lock()
	fr := r.reads[name]
	r.mu.Unlock()
	<-fr.done
	return fr.data, fr.err
}

// writeModule writes a state dict as safetensors, as PyTorch's
// safetensors.torch.save_file does ({"format": "pt"}).
func writeModule(path string, tensors []nn.NamedTensor) (FileInfo, error) {
	named := make([]tensorio.Named, len(tensors))
	for i, n := range tensors {
		named[i] = tensorio.Named{Name: n.Name, Tensor: n.Tensor}
	}
	raw, err := tensorio.Raw(path, named)
	if err != nil {
		return FileInfo{}, err
	}
	return writeFile(path, func(w io.Writer) error {
		return safetensors.Write(w, raw, map[string]string{"format": "pt"})
	})
}

// readModule parses a module file into tensors on rt, which the caller
// releases.
func readModule(rt *tensor.Runtime, rd *reader, key string) (map[string]*tensor.Tensor, error) {
	name := key + ".safetensors"
	b, err := rd.get(name)
	if err != nil {
		return nil, err
	}
	f, err := safetensors.Parse(b)
	if err != nil {
		return nil, damaged(fmt.Errorf("checkpoint: %s: %w", filepath.Join(rd.dir, name), err))
	}
	out := map[string]*tensor.Tensor{}
	for _, st := range f.Tensors {
		// Over the file's bytes where the device's memory is host memory:
		// the one copy is into the parameter.
		t := rt.FromHostMemory(st.DType, st.Data, st.Shape...)
		if err := t.Err(); err != nil {
			releaseAll(out)
			return nil, fmt.Errorf("checkpoint: %s: tensor %q: %w", filepath.Join(rd.dir, name), st.Name, err)
		}
		out[st.Name] = t.Persist()
	}
	return out, nil
}

func releaseAll(ts map[string]*tensor.Tensor) {
	for _, t := range ts {
		t.Release()
	}
}

// optimizerMeta is the "zeroeng.optimizer" metadata of an optimizer file:
// the hyper-parameters in PyTorch's state-dict layout, and where each
// chunk's elements start in its flattened parameter. The chunk's entries
// are the tensors named state.<index>.<entry> (exp_avg, ...).
type optimizerMeta struct {
	Kind        string           `json:"kind"`
	ParamGroups []map[string]any `json:"param_groups"`
	Chunks      []chunkMeta      `json:"chunks"`
}

type chunkMeta struct {
	Index int   `json:"index"`
	At    int   `json:"at"`
	Step  int64 `json:"step"`
}

const optimizerMetaKey = "zeroeng.optimizer"

// optimizerChunks is what a rank saves of opt: its kind, its
// hyper-parameters (PyTorch's param_groups) and its chunks (all of a plain
// optimizer's state, one chunk per parameter), with its parameters.
func optimizerChunks(opt any) (meta optimizerMeta, chunks []zero.Chunk, params []*tensor.Tensor, err error) {
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
			c := zero.Chunk{Index: id, Step: s.Step}
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
	case *zero.Optimizer:
		kind, groups, params = o.Kind(), o.Groups, o.Params()
		if chunks, err = o.LocalChunks(); err != nil {
			return meta, nil, nil, err
		}
	default:
		return meta, nil, nil, fmt.Errorf("%T cannot be saved", opt)
	}
	meta.Kind = kind.String()
	meta.ParamGroups = optim.MakeStateDict(kind, groups, func(*tensor.Tensor) *optim.State { return nil }).ParamGroups
	for _, c := range chunks {
		meta.Chunks = append(meta.Chunks, chunkMeta{Index: c.Index, At: c.At, Step: c.Step})
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

// readOptimizer parses one optimizer file into its hyper-parameters and
// chunks; params are the optimizer's, to check each chunk's type.
func readOptimizer(rd *reader, name string, params []*tensor.Tensor) (*optimizerMeta, []zero.Chunk, error) {
	b, err := rd.get(name)
	if err != nil {
		return nil, nil, err
	}
	return parseOptimizer(b, filepath.Join(rd.dir, name), params)
}

// parseOptimizer parses the content of an optimizer file at path.
func parseOptimizer(b []byte, path string, params []*tensor.Tensor) (*optimizerMeta, []zero.Chunk, error) {
	f, err := safetensors.Parse(b)
	if err != nil {
		return nil, nil, damaged(fmt.Errorf("checkpoint: %s: %w", path, err))
	}
	var meta optimizerMeta
	text, ok := f.Metadata[optimizerMetaKey]
	if !ok {
		return nil, nil, fmt.Errorf("checkpoint: %s is not an optimizer file (no %q metadata)", path, optimizerMetaKey)
	}
	if err := json.Unmarshal([]byte(text), &meta); err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %s: metadata %q: %v", path, optimizerMetaKey, err)
	}
	chunks := make([]zero.Chunk, len(meta.Chunks))
	byIndex := map[int]int{}
	for i, c := range meta.Chunks {
		if c.Index < 0 || c.Index >= len(params) {
			return nil, nil, fmt.Errorf("checkpoint: %s: state for parameter %d, but the optimizer has %d parameters", path, c.Index, len(params))
		}
		if _, dup := byIndex[c.Index]; dup {
			return nil, nil, fmt.Errorf("checkpoint: %s: two chunks of parameter %d", path, c.Index)
		}
		byIndex[c.Index] = i
		chunks[i] = zero.Chunk{Index: c.Index, At: c.At, Step: c.Step}
	}
	for _, st := range f.Tensors {
		rest, ok := strings.CutPrefix(st.Name, "state.")
		idxText, entry, ok2 := strings.Cut(rest, ".")
		idx, err := strconv.Atoi(idxText)
		i, known := byIndex[idx]
		if !ok || !ok2 || err != nil || !known {
			return nil, nil, fmt.Errorf("checkpoint: %s: tensor %q belongs to no chunk of the metadata", path, st.Name)
		}
		if want := optim.StateDType(params[idx]); st.DType != want {
			return nil, nil, fmt.Errorf("checkpoint: %s: tensor %q is %v; the parameter's state is %v", path, st.Name, st.DType, want)
		}
		chunks[i].Names = append(chunks[i].Names, entry)
		chunks[i].Data = append(chunks[i].Data, st.Data)
	}
	return &meta, chunks, nil
}
