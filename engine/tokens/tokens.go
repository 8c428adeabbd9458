// Package tokens owns the token data language models train on: llm.c's
// token shards, .npy token arrays and byte-level text, opened as one stream
// of tokens (Dataset) whose windows are read from the files when they are
// needed, and the distributed loader that cuts the stream into batches of
// (input, target) windows, each rank its own slice of a per-epoch shuffle
// (Loader).
//
// Opening reads each file's header only (a .npy array of ids wider than a
// byte is scanned once more for its largest id), so a dataset of hundreds
// of gigabytes opens in the time of its file count, and what a process
// holds is its loaders' batches: the tokens come from the files by
// positioned reads, through the page cache.
package tokens

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/zeroeng/zeroeng/internal/fileio"
)

// Dataset is a stream of token ids: the concatenation of segments, each a
// run of tokens stored in a file (from the byte offset of its first token,
// 1, 2, 4 or 8 bytes a token) or in memory. Tokens are read when asked for
// (At, a Loader's batches), and every token read is checked against Vocab.
type Dataset struct {
	segs []segment
	n    int
	// Vocab bounds the token ids: every id is below it. For llm.c shards,
	// text and .npy byte arrays it is the format's vocabulary (50257 for
	// GPT-2 shards, 128256 for Llama 3 shards, 256 for bytes); for wider
	// .npy arrays and in-memory ids it is one more than the largest id.
	Vocab int
	// Source names where the tokens came from, for messages.
	Source string
}

// segment is a run of n tokens of a dataset, from its token start on.
type segment struct {
	start int    // the index in the dataset of the segment's first token
	n     int    // tokens
	name  string // the file's path, or the in-memory data's name, for messages
	src   *source
	off   int64 // byte offset of the first token in src
	codec
}

// add appends a run of n tokens to d; an empty one is left out.
func (d *Dataset) add(s segment) {
	if s.n == 0 {
		return
	}
	s.start = d.n
	d.segs = append(d.segs, s)
	d.n += s.n
}

// Len is the number of tokens.
func (d *Dataset) Len() int { return d.n }

// At reads token i. It is for small uses and tests: a Loader reads whole
// windows at a time.
func (d *Dataset) At(i int) (int64, error) {
	if i < 0 || i >= d.n {
		return 0, fmt.Errorf("tokens: token %d of %s, which holds %d tokens", i, d.Source, d.n)
	}
	var v [1]int64
	if err := d.read(v[:], i, d.Vocab, make([]byte, headCheck), nil); err != nil {
		return 0, err
	}
	return v[0], nil
}

// Slice is tokens [lo, hi) as a dataset reading the same files or memory
// (a train and a validation split of one file).
func (d *Dataset) Slice(lo, hi int) (*Dataset, error) {
	if lo < 0 || hi > d.n || lo > hi {
		return nil, fmt.Errorf("tokens: slice [%d, %d) of %s, which holds %d tokens", lo, hi, d.Source, d.n)
	}
	out := &Dataset{Vocab: d.Vocab, Source: fmt.Sprintf("%s[%d:%d]", d.Source, lo, hi)}
	for _, s := range d.segs {
		a, b := max(lo, s.start), min(hi, s.start+s.n)
		if a >= b {
			continue
		}
		s.off += int64(a-s.start) * int64(s.width)
		s.n = b - a
		out.add(s)
	}
	return out, nil
}

// ReadError is a failure to read a dataset's tokens: the file (or the
// in-memory data's name), the byte offset of the read or of the bad token
// in it, and what went wrong.
type ReadError struct {
	File   string
	Offset int64
	Err    error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("tokens: %s: byte offset %d: %v", e.File, e.Offset, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// read decodes tokens [lo, lo+len(dst)) into dst, checking every one
// against bound (ids must lie in [0, bound)). scratch holds the bytes of a
// read and must have room for len(dst) tokens of 8 bytes and for a file's
// header (headCheck bytes). A file is checked against what its open found
// (size, header) before it is read: once per batch when checked is given
// (the files checked so far in the batch), at every read otherwise.
func (d *Dataset) read(dst []int64, lo, bound int, scratch []byte, checked *[]*source) error {
	i := sort.Search(len(d.segs), func(i int) bool { return d.segs[i].start+d.segs[i].n > lo })
	for len(dst) > 0 {
		if i == len(d.segs) {
			return fmt.Errorf("tokens: tokens [%d, %d) of %s, which holds %d tokens", lo, lo+len(dst), d.Source, d.n)
		}
		s := &d.segs[i]
		k := lo - s.start
		m := min(len(dst), s.n-k)
		off := s.off + int64(k)*int64(s.width)
		if checked == nil || !slices.Contains(*checked, s.src) {
			if err := s.src.check(scratch); err != nil {
				return &ReadError{File: s.name, Offset: off, Err: err}
			}
			if checked != nil {
				*checked = append(*checked, s.src)
			}
		}
		b := scratch[:m*s.width]
		if n, err := s.src.r.ReadAt(b, off); n < len(b) {
			return &ReadError{File: s.name, Offset: off + int64(n), Err: s.src.shortRead(err)}
		}
		if j := s.decode(dst[:m], b, bound); j >= 0 {
			return &ReadError{File: s.name, Offset: off + int64(j)*int64(s.width),
				Err: fmt.Errorf("token id %d is outside the vocabulary [0, %d)", dst[j], bound)}
		}
		dst, lo, i = dst[m:], lo+m, i+1
	}
	return nil
}

// FromBytes is byte-level tokenization: every byte of text is a token, the
// vocabulary is the 256 byte values. The dataset reads text itself, which
// must not change afterwards.
func FromBytes(text []byte, source string) *Dataset {
	d := &Dataset{Vocab: 256, Source: source}
	d.add(segment{n: len(text), name: source, src: memory(text), codec: codec{width: 1}})
	return d
}

// FromInt64s is a dataset of the given token ids (a tensor's, made by a
// script), which must lie in [0, 2³¹). They are kept in 16 bits each when
// they fit, in 32 otherwise.
func FromInt64s(ids []int64, source string) (*Dataset, error) {
	d := &Dataset{Source: source}
	for i, v := range ids {
		if v < 0 || v > maxID {
			return nil, fmt.Errorf("tokens: %s: element %d is %d, not a token id (0 to 2³¹-1)", source, i, v)
		}
		d.Vocab = max(d.Vocab, int(v)+1)
	}
	c := codec{width: 2}
	if d.Vocab > 1<<16 {
		c.width = 4
	}
	buf := make([]byte, len(ids)*c.width)
	for i, v := range ids {
		if c.width == 2 {
			binary.LittleEndian.PutUint16(buf[2*i:], uint16(v))
		} else {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(v))
		}
	}
	d.add(segment{n: len(ids), name: source, src: memory(buf), codec: c})
	return d, nil
}

// Load opens the files that patterns name (paths or filepath.Glob
// patterns; the files of a pattern in lexical order, as llm.c's shards are
// numbered) as one stream of their tokens. Each file is read by its
// content: an llm.c shard by its magic number, a .npy file by its magic
// string (a 1-d integer array of token ids), anything else as text, byte
// by byte. Load reads the headers and checks each against the file's size;
// the tokens are read when a loader needs them, except that a .npy array
// wider than a byte is scanned once for its largest id (see Dataset.Vocab).
// Every dataset of the process that names a file shares one open file.
func Load(patterns ...string) (*Dataset, error) { return LoadUntil(nil, patterns...) }

// LoadUntil is Load, asking stop (when not nil) before each file and every
// few megabytes of a .npy array's scan whether to go on: its error, when
// it returns one, ends the load (a signal, another rank's failure), so
// that no amount of data keeps a process from stopping.
func LoadUntil(stop func() error, patterns ...string) (*Dataset, error) {
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
	names := make([]string, len(patterns))
	for i, p := range patterns {
		names[i] = filepath.Clean(p)
	}
	d := &Dataset{Source: strings.Join(names, " ")}
	for _, f := range files {
		if stop != nil {
			if err := stop(); err != nil {
				return nil, err
			}
		}
		src, err := openShared(f, stop)
		if err != nil {
			return nil, err
		}
		d.add(segment{n: src.lay.n, name: f, src: src, off: src.lay.off, codec: src.lay.codec})
		d.Vocab = max(d.Vocab, src.lay.vocab)
	}
	return d, nil
}

// Parse reads one file's bytes (named name in messages) by content, as
// Load does, with the same checks; the dataset reads data, which must not
// change afterwards.
func Parse(data []byte, name string) (*Dataset, error) {
	src := memory(data)
	lay, _, err := probe(src.r, src.size, name, nil)
	if err != nil {
		return nil, err
	}
	d := &Dataset{Vocab: lay.vocab, Source: name}
	d.add(segment{n: lay.n, name: name, src: src, off: lay.off, codec: lay.codec})
	return d, nil
}

// WriteShard writes tokens as an llm.c GPT-2 shard (uint16 tokens), the
// format of llm.c's data scripts.
func WriteShard(path string, tokens []uint16) error {
	buf := append(shardHeader(magicGPT2, versionGPT2, len(tokens)), make([]byte, 2*len(tokens))...)
	for i, t := range tokens {
		binary.LittleEndian.PutUint16(buf[headerBytes+2*i:], t)
	}
	return fileio.WriteAtomic("tokens", path, func(f *os.File) error {
		_, err := f.Write(buf)
		return err
	})
}

// shardHeader is an llm.c shard header declaring n tokens.
func shardHeader(magic, version int32, n int) []byte {
	h := make([]byte, headerBytes)
	binary.LittleEndian.PutUint32(h[0:], uint32(magic))
	binary.LittleEndian.PutUint32(h[4:], uint32(version))
	binary.LittleEndian.PutUint32(h[8:], uint32(n))
	return h
}
