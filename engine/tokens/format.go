package tokens

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/zeroeng/zeroeng/engine/npy"
)

// llm.c's shard header: 256 little-endian int32, of which the first three
// are the magic number, the version and the number of tokens. GPT-2 shards
// (magic 20240520, version 1) hold uint16 tokens; llm.c's Llama 3 shards
// (magic 20240801, version 7) hold uint32 tokens. The count is an int32,
// so a shard holds at most 2³¹-1 tokens.
const (
	headerInts    = 256
	headerBytes   = headerInts * 4
	magicGPT2     = 20240520
	magicLlama3   = 20240801
	versionGPT2   = 1
	versionLlama3 = 7
)

// The vocabularies of the formats whose ids are not scanned: llm.c's
// GPT-2 shards hold ids of GPT-2's tokenizer (50257), its Llama 3 shards
// ids of Llama 3's (128256), and text and .npy byte arrays bytes.
const (
	vocabGPT2   = 50257
	vocabLlama3 = 128256
	vocabBytes  = 256
)

// maxID is the largest token id the engine takes: ids are int32 on the
// way to an embedding.
const maxID = 1<<31 - 1

// headCheck is how much of a file's start, its header, is kept at open
// and compared with the file at every check: an llm.c header whole, the
// start of a .npy header (which holds the array's type and shape).
const headCheck = headerBytes

// npyMagic starts a .npy file.
const npyMagic = "\x93NUMPY"

// codec is how a segment stores its tokens: width bytes each (1, 2, 4 or
// 8), unsigned or signed (two's complement), little- or big-endian (.npy
// arrays may be either).
type codec struct {
	width  int
	signed bool
	big    bool
}

// decode converts the len(dst) tokens stored in b to dst and returns the
// index of the first one outside [0, bound), or -1 when all lie in it.
func (c codec) decode(dst []int64, b []byte, bound int) int {
	var ord binary.ByteOrder = binary.LittleEndian
	if c.big {
		ord = binary.BigEndian
	}
	switch {
	case c.width == 2 && !c.signed && !c.big: // llm.c's GPT-2 shards
		for i := range dst {
			dst[i] = int64(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case c.width == 4 && !c.signed && !c.big: // llm.c's Llama 3 shards
		for i := range dst {
			dst[i] = int64(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case c.width == 1 && c.signed:
		for i := range dst {
			dst[i] = int64(int8(b[i]))
		}
	case c.width == 1: // text
		for i := range dst {
			dst[i] = int64(b[i])
		}
	case c.width == 2 && c.signed:
		for i := range dst {
			dst[i] = int64(int16(ord.Uint16(b[2*i:])))
		}
	case c.width == 2:
		for i := range dst {
			dst[i] = int64(ord.Uint16(b[2*i:]))
		}
	case c.width == 4 && c.signed:
		for i := range dst {
			dst[i] = int64(int32(ord.Uint32(b[4*i:])))
		}
	case c.width == 4:
		for i := range dst {
			dst[i] = int64(ord.Uint32(b[4*i:]))
		}
	default: // int64
		for i := range dst {
			dst[i] = int64(ord.Uint64(b[8*i:]))
		}
	}
	for i, v := range dst {
		if uint64(v) >= uint64(bound) { // a negative id too
			return i
		}
	}
	return -1
}

// layout is what a file's header says: how its tokens are stored, the
// byte offset of the first, how many there are, and their vocabulary.
type layout struct {
	codec
	off   int64
	n     int
	vocab int
}

// probe reads the header of r, a file or data of size bytes named name in
// messages, and returns its layout and its head: the bytes of its header
// kept for checks (at most headCheck; none for text). Only a .npy array of
// ids wider than a byte is read further, once, for its largest id.
func probe(r io.ReaderAt, size int64, name string, stop func() error) (layout, []byte, error) {
	b := make([]byte, min(size, headerBytes))
	if err := readFull(r, b, 0); err != nil {
		return layout{}, nil, fmt.Errorf("tokens: %s: reading its first %d bytes: %w", name, len(b), err)
	}
	var lay layout
	var err error
	switch {
	case len(b) >= 8 && (binary.LittleEndian.Uint32(b) == magicGPT2 || binary.LittleEndian.Uint32(b) == magicLlama3):
		lay, err = probeShard(b, size, name)
	case bytes.HasPrefix(b, []byte(npyMagic)):
		lay, err = probeNpy(r, size, name, stop)
	default:
		lay = layout{codec: codec{width: 1}, n: int(size), vocab: vocabBytes}
	}
	if err != nil {
		return layout{}, nil, err
	}
	return lay, b[:min(int64(len(b)), lay.off)], nil
}

// readFull reads len(b) bytes at off, calling a short read what it is.
func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// probeShard checks an llm.c shard header (b holds the file's first bytes)
// against the file's size.
func probeShard(b []byte, size int64, name string) (layout, error) {
	if size < headerBytes {
		return layout{}, fmt.Errorf("tokens: %s: an llm.c shard needs a %d-byte header, the file has %d bytes", name, headerBytes, size)
	}
	word := func(i int) int64 { return int64(int32(binary.LittleEndian.Uint32(b[4*i:]))) }
	magic, version, n := word(0), word(1), word(2)
	lay := layout{codec: codec{width: 2}, off: headerBytes, vocab: vocabGPT2}
	switch {
	case magic == magicGPT2 && version == versionGPT2:
	case magic == magicLlama3 && version == versionLlama3:
		lay.width, lay.vocab = 4, vocabLlama3
	default:
		return layout{}, fmt.Errorf("tokens: %s: llm.c shard magic %d with version %d; known are %d version %d (uint16 tokens) and %d version %d (uint32 tokens)",
			name, magic, version, magicGPT2, versionGPT2, magicLlama3, versionLlama3)
	}
	body := size - headerBytes
	if n < 0 || n*int64(lay.width) != body {
		return layout{}, fmt.Errorf("tokens: %s: the header declares %d tokens (%d bytes) but %d bytes follow it: truncated or not an llm.c shard",
			name, n, n*int64(lay.width), body)
	}
	lay.n = int(n)
	return lay, nil
}

// probeNpy checks a .npy file's preamble and header against its size; the
// array must be 1-d, of integers. Its vocabulary is 256 for bytes and one
// more than the largest id otherwise, found by reading the ids once.
func probeNpy(r io.ReaderAt, size int64, name string, stop func() error) (layout, error) {
	h, err := npy.ReadHeader(r, size, "")
	if err != nil {
		return layout{}, fmt.Errorf("tokens: %s: %w", name, err)
	}
	c, err := npyCodec(h.Descr)
	if err != nil {
		return layout{}, fmt.Errorf("tokens: %s: %w", name, err)
	}
	if len(h.Shape) != 1 {
		return layout{}, fmt.Errorf("tokens: %s: token ids must be a 1-d array, the file holds shape %v", name, h.Shape)
	}
	lay := layout{codec: c, off: h.DataOffset, n: h.Shape[0], vocab: vocabBytes}
	if c.width > 1 || c.signed {
		if lay.vocab, err = scanIDs(r, lay, name, stop); err != nil {
			return layout{}, err
		}
	}
	return lay, nil
}

// scanIDs reads the ids of a .npy array once, a piece at a time, and
// returns one more than the largest: an array of ids holds no vocabulary.
// An id that is negative or beyond int32 is an error naming its element.
// stop, when not nil, is asked before every piece whether to go on.
func scanIDs(r io.ReaderAt, lay layout, name string, stop func() error) (int, error) {
	const piece = 1 << 16 // ids per read
	buf := make([]byte, min(lay.n, piece)*lay.width)
	ids := make([]int64, min(lay.n, piece))
	vocab := 0
	for i := 0; i < lay.n; i += piece {
		if stop != nil {
			if err := stop(); err != nil {
				return 0, err
			}
		}
		m := min(piece, lay.n-i)
		b := buf[:m*lay.width]
		off := lay.off + int64(i)*int64(lay.width)
		if err := readFull(r, b, off); err != nil {
			return 0, &ReadError{File: name, Offset: off, Err: err}
		}
		if j := lay.decode(ids[:m], b, maxID+1); j >= 0 {
			return 0, fmt.Errorf("tokens: %s: element %d is %d, not a token id (0 to 2³¹-1)", name, i+j, ids[j])
		}
		for _, v := range ids[:m] {
			vocab = max(vocab, int(v)+1)
		}
	}
	return vocab, nil
}

// npyCodec is how a .npy array of the type descr stores token ids: an
// integer type engine/npy reads (i1, i2, i4, i8, u1, u2, u4), either byte
// order.
func npyCodec(descr string) (codec, error) {
	unsupported := func(why string) (codec, error) {
		return codec{}, fmt.Errorf("npy: unsupported descr '%s': %s", descr, why)
	}
	if len(descr) != 3 || descr[2] < '1' || descr[2] > '8' {
		return unsupported("not a type string such as '<i4'")
	}
	order, kind, size := descr[0], descr[1], int(descr[2]-'0')
	c := codec{width: size, signed: kind == 'i', big: order == '>'}
	switch {
	case kind == 'f' && (size == 2 || size == 4 || size == 8):
		return codec{}, fmt.Errorf("token ids must be integers, the array is float%d", 8*size)
	case kind == 'b' && size == 1:
		return codec{}, errors.New("token ids must be integers, the array is bool")
	case kind == 'u' && size == 8:
		return unsupported("uint64 does not fit in int64; convert it in NumPy")
	case kind == 'i' && (size == 1 || size == 2 || size == 4 || size == 8):
	case kind == 'u' && (size == 1 || size == 2 || size == 4):
	default:
		return unsupported("token ids are integers: i1, i2, i4, i8, u1, u2 or u4")
	}
	switch {
	case order == '<' || order == '>':
	case order == '|' && size == 1:
	case order == '=':
		return unsupported("native byte order '=' is ambiguous in a file")
	default:
		return unsupported(fmt.Sprintf("byte order %q", order))
	}
	return c, nil
}
