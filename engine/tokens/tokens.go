// Package tokens owns the token data language models train on: llm.c's
// token shards, .npy token arrays and byte-level text, read into memory as
// one stream (Dataset), and the distributed loader that cuts the stream into
// batches of (input, target) windows, each rank its own slice of a
// per-epoch shuffle (Loader).
package tokens

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/npy"
	"github.com/zeroeng/zeroeng/internal/fileio"
	"github.com/zeroeng/zeroeng/internal/safefile"
)

// llm.c's shard header: 256 little-endian int32, of which the first three
// are the magic number, the version and the number of tokens. GPT-2 shards
// (magic 20240520, version 1) hold uint16 tokens; llm.c's Llama 3 shards
// (magic 20240801, version 7) hold uint32 tokens.
const (
	headerInts    = 256
	headerBytes   = headerInts * 4
	magicGPT2     = 20240520
	magicLlama3   = 20240801
	versionGPT2   = 1
	versionLlama3 = 7
)

// maxFileBytes bounds one token file read into memory: far above any
// shard (llm.c writes 100M tokens, 200 MB, per shard), it keeps an
// endless or absurd file from growing the process without limit.
const maxFileBytes = 64 << 30

// Dataset is a stream of token ids held in memory. Tokens that fit in 16
// bits are kept in 16 bits (llm.c's GPT-2 shards, bytes).
type Dataset struct {
	u16 []uint16
	i32 []int32
	// Vocab is one more than the largest token id (256 for text read as
	// bytes, whatever its content).
	Vocab int
	// Source names where the tokens came from, for messages.
	Source string
}

// Len is the number of tokens.
func (d *Dataset) Len() int {
	if d.i32 != nil {
		return len(d.i32)
	}
	return len(d.u16)
}

// At is token i.
func (d *Dataset) At(i int) int64 {
	if d.i32 != nil {
		return int64(d.i32[i])
	}
	return int64(d.u16[i])
}

// Slice is tokens [lo, hi) as a dataset sharing d's memory (a train and a
// validation split of one file).
func (d *Dataset) Slice(lo, hi int) (*Dataset, error) {
	if lo < 0 || hi > d.Len() || lo > hi {
		return nil, fmt.Errorf("tokens: slice [%d, %d) of %s, which holds %d tokens", lo, hi, d.Source, d.Len())
	}
	out := &Dataset{Vocab: d.Vocab, Source: fmt.Sprintf("%s[%d:%d]", d.Source, lo, hi)}
	if d.i32 != nil {
		out.i32 = d.i32[lo:hi]
	} else {
		out.u16 = d.u16[lo:hi]
	}
	return out, nil
}

// FromBytes is byte-level tokenization: every byte of text is a token, the
// vocabulary is the 256 byte values.
func FromBytes(text []byte, source string) *Dataset {
	u := make([]uint16, len(text))
	for i, b := range text {
		u[i] = uint16(b)
	}
	return &Dataset{u16: u, Vocab: 256, Source: source}
}

// FromInt64s is a dataset of the given token ids (a tensor's, made by a
// script), which must lie in [0, 2³¹).
func FromInt64s(ids []int64, source string) (*Dataset, error) {
	d := &Dataset{i32: make([]int32, len(ids)), Source: source}
	for i, v := range ids {
		if v < 0 || v > 1<<31-1 {
			return nil, fmt.Errorf("tokens: %s: element %d is %d, not a token id (0 to 2³¹-1)", source, i, v)
		}
		d.i32[i] = int32(v)
		d.Vocab = max(d.Vocab, int(v)+1)
	}
	return d.narrow(), nil
}

// narrow keeps the tokens in 16 bits when they fit.
func (d *Dataset) narrow() *Dataset {
	if d.i32 == nil || d.Vocab > 1<<16 {
		return d
	}
	d.u16 = make([]uint16, len(d.i32))
	for i, v := range d.i32 {
		d.u16[i] = uint16(v)
	}
	d.i32 = nil
	return d
}

// Load reads the files that patterns name (paths or filepath.Glob patterns;
// the files of a pattern in lexical order, as llm.c's shards are numbered)
// and concatenates their tokens. Each file is read by its content: an
// llm.c shard by its magic number, a .npy file by its magic string (a 1-d
// integer array of token ids), anything else as text, byte by byte.
func Load(patterns ...string) (*Dataset, error) {
	var files []string
	for _, p := range patterns {
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("tokens: pattern %q: %w", p, err)
		}
		if len(matches) == 0 {
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("tokens: no file matches %q", p)
			}
			matches = []string{p}
		}
		slices.Sort(matches)
		files = append(files, matches...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("tokens: no files given")
	}
	var parts []*Dataset
	for _, f := range files {
		data, err := safefile.ReadFile(f, maxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("tokens: %w", err)
		}
		d, err := Parse(data, f)
		if err != nil {
			return nil, err
		}
		parts = append(parts, d)
	}
	names := make([]string, len(patterns))
	for i, p := range patterns {
		names[i] = filepath.Clean(p)
	}
	return concat(parts, strings.Join(names, " ")), nil
}

// Parse reads one file's bytes (named name in messages) by content, as
// Load does.
func Parse(data []byte, name string) (*Dataset, error) {
	switch {
	case len(data) >= 8 && (binary.LittleEndian.Uint32(data) == magicGPT2 || binary.LittleEndian.Uint32(data) == magicLlama3):
		return parseShard(data, name)
	case bytes.HasPrefix(data, []byte("\x93NUMPY")):
		return parseNpy(data, name)
	}
	return FromBytes(data, name), nil
}

func parseShard(data []byte, name string) (*Dataset, error) {
	if len(data) < headerBytes {
		return nil, fmt.Errorf("tokens: %s: an llm.c shard needs a %d-byte header, the file has %d bytes", name, headerBytes, len(data))
	}
	word := func(i int) int64 { return int64(int32(binary.LittleEndian.Uint32(data[4*i:]))) }
	magic, version, n := word(0), word(1), word(2)
	size := int64(2)
	switch {
	case magic == magicGPT2 && version == versionGPT2:
	case magic == magicLlama3 && version == versionLlama3:
		size = 4
	default:
		return nil, fmt.Errorf("tokens: %s: llm.c shard magic %d with version %d; known are %d version %d (uint16 tokens) and %d version %d (uint32 tokens)",
			name, magic, version, magicGPT2, versionGPT2, magicLlama3, versionLlama3)
	}
	body := int64(len(data) - headerBytes)
	if n < 0 || n*size != body {
		return nil, fmt.Errorf("tokens: %s: the header declares %d tokens (%d bytes) but %d bytes follow it: truncated or not an llm.c shard",
			name, n, n*size, body)
	}
	toks := data[headerBytes:]
	d := &Dataset{Source: name}
	if size == 2 {
		d.u16 = make([]uint16, n)
		for i := range d.u16 {
			d.u16[i] = binary.LittleEndian.Uint16(toks[2*i:])
			d.Vocab = max(d.Vocab, int(d.u16[i])+1)
		}
		return d, nil
	}
	d.i32 = make([]int32, n)
	for i := range d.i32 {
		v := binary.LittleEndian.Uint32(toks[4*i:])
		if v > 1<<31-1 {
			return nil, fmt.Errorf("tokens: %s: token %d is %d, beyond the int32 token ids the engine takes", name, i, v)
		}
		d.i32[i] = int32(v)
		d.Vocab = max(d.Vocab, int(v)+1)
	}
	return d, nil
}

func parseNpy(data []byte, name string) (*Dataset, error) {
	a, err := npy.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokens: %s: %w", name, err)
	}
	if len(a.Shape) != 1 {
		return nil, fmt.Errorf("tokens: %s: token ids must be a 1-d array, the file holds shape %v", name, a.Shape)
	}
	n := a.Shape[0]
	at := func(i int) int64 { return 0 }
	switch a.DType {
	case dtype.Uint8:
		at = func(i int) int64 { return int64(a.Data[i]) }
	case dtype.Int32:
		at = func(i int) int64 { return int64(int32(binary.LittleEndian.Uint32(a.Data[4*i:]))) }
	case dtype.Int64:
		at = func(i int) int64 { return int64(binary.LittleEndian.Uint64(a.Data[8*i:])) }
	default:
		return nil, fmt.Errorf("tokens: %s: token ids must be integers, the array is %v", name, a.DType)
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = at(i)
	}
	return FromInt64s(ids, name)
}

func concat(parts []*Dataset, source string) *Dataset {
	if len(parts) == 1 {
		parts[0].Source = source
		return parts[0]
	}
	out := &Dataset{Source: source}
	wide := false
	for _, p := range parts {
		out.Vocab = max(out.Vocab, p.Vocab)
		wide = wide || p.i32 != nil
	}
	for _, p := range parts {
		if !wide {
			out.u16 = append(out.u16, p.u16...)
			continue
		}
		for i := range p.Len() {
			out.i32 = append(out.i32, int32(p.At(i)))
		}
	}
	return out
}

// WriteShard writes tokens as an llm.c GPT-2 shard (uint16 tokens), the
// format of llm.c's data scripts.
func WriteShard(path string, tokens []uint16) error {
	buf := make([]byte, headerBytes+2*len(tokens))
	binary.LittleEndian.PutUint32(buf[0:], magicGPT2)
	binary.LittleEndian.PutUint32(buf[4:], versionGPT2)
	binary.LittleEndian.PutUint32(buf[8:], uint32(len(tokens)))
	for i, t := range tokens {
		binary.LittleEndian.PutUint16(buf[headerBytes+2*i:], t)
	}
	return fileio.WriteAtomic("tokens", path, func(f *os.File) error {
		_, err := f.Write(buf)
		return err
	})
}
