package checkpoint

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/zeroeng/zeroeng/internal/safefile"
)

// rangeFile reads parts of one file of a checkpoint with positioned reads,
// checking every block it reads against the manifest's CRC-32C of that
// block: a load reads each tensor straight into the memory that keeps it,
// a rank that reshards reads only the parts of other ranks' files that it
// needs, and neither ever uses a byte the manifest does not vouch for. A
// file whose manifest entry has no block CRCs (an older checkpoint) is
// checked whole once, streamed, before the first read. Its errors are the
// checkpoint's damage (ErrDamaged).
type rangeFile struct {
	path string
	info FileInfo
	f    *os.File

	mu       sync.Mutex // guards the fields below
	verified bool       // the whole file was checked (no block CRCs)
	block    int64      // the block in buf, -1 for none
	buf      []byte     // its bytes, checked
}

// openRange opens file name of the checkpoint at dir for checked reads:
// a regular file of the size the manifest says.
func openRange(dir string, m *Manifest, name string) (*rangeFile, error) {
	path := filepath.Join(dir, name)
	want, ok := m.file(name)
	if !ok {
		return nil, damaged(fmt.Errorf("checkpoint: %s: the manifest lists no file %s", dir, name))
	}
	f, st, err := safefile.Open(path)
	if err != nil {
		return nil, damaged(fmt.Errorf("checkpoint: %w", err))
	}
	if st.Size() != want.Bytes {
		f.Close()
		return nil, damaged(fmt.Errorf("checkpoint: %s has %d bytes, the manifest says %d: the file is truncated or was replaced", path, st.Size(), want.Bytes))
	}
	return &rangeFile{path: path, info: want, f: f, block: -1}, nil
}

// Size is the file's size.
func (r *rangeFile) Size() int64 { return r.info.Bytes }

// ReadAt reads len(p) bytes at off, checked. Whole blocks are read
// straight into p and checked there; the blocks at either end, which p
// holds only part of, through a buffer of one block. Several reads of the
// same file may run at once.
func (r *rangeFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > r.info.Bytes {
		return 0, damaged(fmt.Errorf("checkpoint: %s: bytes [%d, %d) are outside its %d bytes", r.path, off, off+int64(len(p)), r.info.Bytes))
	}
	if r.info.BlockBytes == 0 {
		r.mu.Lock()
		var err error
		if !r.verified {
			buf := getChunk()
			err = r.verifyWhole(*buf)
			putChunk(buf)
		}
		r.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if _, err := r.f.ReadAt(p, off); err != nil {
			return 0, damaged(fmt.Errorf("checkpoint: reading %s: %w", r.path, err))
		}
		return len(p), nil
	}
	bs := r.info.BlockBytes
	n := 0
	for n < len(p) {
		at := off + int64(n)
		k := at / bs
		if whole := int64(len(p)-n) / bs; at == k*bs && whole > 0 {
			// Whole blocks: straight into p, each checked there.
			if err := r.readBlocks(p[n:int64(n)+whole*bs], k); err != nil {
				return n, err
			}
			n += int(whole * bs)
			continue
		}
		r.mu.Lock()
		err := r.load(k)
		if err == nil {
			n += copy(p[n:], r.buf[at-r.block*bs:])
		}
		r.mu.Unlock()
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// readBlocks reads whole blocks from block k on into p and checks them,
// a few at a time, so that each is checked while the processor's cache
// still holds it.
func (r *rangeFile) readBlocks(p []byte, k int64) error {
	bs := r.info.BlockBytes
	step := max(bs, readPiece/bs*bs)
	for at := int64(0); at < int64(len(p)); at += step {
		piece := p[at:min(at+step, int64(len(p)))]
		if _, err := r.f.ReadAt(piece, k*bs+at); err != nil {
			return damaged(fmt.Errorf("checkpoint: reading %s: %w", r.path, err))
		}
		for i := int64(0); i*bs < int64(len(piece)); i++ {
			if err := r.check(piece[i*bs:(i+1)*bs], k+at/bs+i); err != nil {
				return err
			}
		}
	}
	return nil
}

// readPiece is the size of the reads that fill a tensor: small enough
// that its blocks are still in the cache when their CRCs are checked.
const readPiece = 1 << 20

// check checks block k's bytes b.
func (r *rangeFile) check(b []byte, k int64) error {
	return r.blockError(k, crc32.Checksum(b, castagnoli))
}

// blockError is the error of block k whose bytes' CRC-32C is got: nil
// when it is the manifest's.
func (r *rangeFile) blockError(k int64, got uint32) error {
	if want := binary.LittleEndian.Uint32(r.info.BlockCRC32C[4*k:]); got != want {
		start, end := r.blockBounds(k)
		return damaged(fmt.Errorf("checkpoint: %s is corrupted: CRC-32C %08x of bytes [%d, %d), the manifest says %08x", r.path, got, start, end, want))
	}
	return nil
}

// blockBounds are the bytes of block k.
func (r *rangeFile) blockBounds(k int64) (from, to int64) {
	from = k * r.info.BlockBytes
	return from, min(from+r.info.BlockBytes, r.info.Bytes)
}

// load reads block k into buf and checks it; r.mu is held.
func (r *rangeFile) load(k int64) error {
	if r.block == k {
		return nil
	}
	bs := r.info.BlockBytes
	start := k * bs
	size := min(bs, r.info.Bytes-start)
	if cap(r.buf) < int(size) {
		r.buf = make([]byte, bs)
	}
	r.buf = r.buf[:size]
	r.block = -1
	if _, err := r.f.ReadAt(r.buf, start); err != nil {
		return damaged(fmt.Errorf("checkpoint: reading %s: %w", r.path, err))
	}
	if err := r.check(r.buf, k); err != nil {
		return err
	}
	r.block = k
	return nil
}

// verifyWhole checks the whole file's CRC-32C, streaming it through buf.
func (r *rangeFile) verifyWhole(buf []byte) error {
	var sum uint32
	if err := r.stream(0, r.info.Bytes, buf, func(b []byte) bool {
		sum = crc32.Update(sum, castagnoli, b)
		return true
	}); err != nil {
		return err
	}
	if sum != r.info.CRC32C {
		return damaged(fmt.Errorf("checkpoint: %s is corrupted: CRC-32C %08x, the manifest says %08x", r.path, sum, r.info.CRC32C))
	}
	r.verified = true
	return nil
}

// chunkBytes is the size of the reads that stream a file (verify, and
// the checks before a load): large enough for a disk's bandwidth, and a
// few megabytes whatever the size of the file.
const chunkBytes = 4 << 20

// chunks keeps the buffers of streamed reads for the next file.
var chunks = sync.Pool{New: func() any {
	b := make([]byte, chunkBytes)
	return &b
}}

func getChunk() *[]byte  { return chunks.Get().(*[]byte) }
func putChunk(b *[]byte) { chunks.Put(b) }

// stream reads bytes [from, to) of the file in order, through buf, and
// hands each piece to fn until it returns false. A file that ends early
// (truncated while it is read) is an error.
func (r *rangeFile) stream(from, to int64, buf []byte, fn func([]byte) bool) error {
	for at := from; at < to; {
		n := min(int64(len(buf)), to-at)
		if _, err := r.f.ReadAt(buf[:n], at); err != nil {
			return damaged(fmt.Errorf("checkpoint: reading %s: %w", r.path, err))
		}
		at += n
		if !fn(buf[:n]) {
			return nil
		}
	}
	return nil
}

// fileSum folds bytes of a file, given in order from the start of block
// first, into each block's CRC-32C (compared with the manifest's as soon
// as the block ends) and, when it sums the whole file, into the file's:
// any amount of a file is checked in one pass, holding nothing but the
// caller's buffer. Blocks may be of any size the manifest declares.
type fileSum struct {
	r       *rangeFile
	whole   bool   // summing the whole file: total is wanted
	total   uint32 // the whole file's CRC-32C
	k       int64  // the current block
	cur     uint32 // its CRC-32C so far
	inBlock int64  // its bytes so far
	bad     error  // the first block that differs from the manifest's
	badK    int64  // its index
}

func newFileSum(r *rangeFile, first int64, whole bool) *fileSum {
	return &fileSum{r: r, whole: whole, k: first, badK: -1}
}

// add folds in the next bytes; it returns false once a block differs.
func (s *fileSum) add(b []byte) bool {
	if s.whole {
		s.total = crc32.Update(s.total, castagnoli, b)
	}
	bs := s.r.info.BlockBytes
	if bs == 0 {
		return true
	}
	for len(b) > 0 {
		n := min(int64(len(b)), bs-s.inBlock)
		s.cur = crc32.Update(s.cur, castagnoli, b[:n])
		s.inBlock += n
		b = b[n:]
		if s.inBlock == bs || s.k*bs+s.inBlock == s.r.info.Bytes { // the last block may be short
			s.endBlock()
		}
	}
	return s.bad == nil
}

// endBlock compares the block just summed with the manifest's.
func (s *fileSum) endBlock() {
	if s.bad == nil {
		if s.bad = s.r.blockError(s.k, s.cur); s.bad != nil {
			s.badK = s.k
		}
	}
	s.k, s.cur, s.inBlock = s.k+1, 0, 0
}

// span is bytes [from, to) of a file.
type span struct{ from, to int64 }

// valueSpan is bytes [from, to) of a file whose values check examines as
// a check streams them by (an optimizer's state: finite, second moments
// not negative), piece by piece in file order, with each piece's offset
// from from. The values are checked in the same pass as the CRCs: a
// checkpoint's state is read once before anything changes.
type valueSpan struct {
	from, to int64
	check    func(b []byte, off int64) error
}

// valueSweep hands the bytes a check streams, in file order, to the value
// spans they fall in; the first failure is kept.
type valueSweep struct {
	spans []valueSpan // sorted by from
	next  int         // spans before it have ended
	err   error
}

func newValueSweep(spans []valueSpan) *valueSweep {
	if len(spans) == 0 {
		return nil
	}
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b valueSpan) int { return cmp.Compare(a.from, b.from) })
	return &valueSweep{spans: spans}
}

// feed checks b, the bytes of the file from at on.
func (v *valueSweep) feed(at int64, b []byte) {
	if v == nil || v.err != nil {
		return
	}
	end := at + int64(len(b))
	for v.next < len(v.spans) && v.spans[v.next].to <= at {
		v.next++
	}
	for i := v.next; i < len(v.spans) && v.spans[i].from < end; i++ {
		s := v.spans[i]
		if lo, hi := max(at, s.from), min(end, s.to); lo < hi {
			if v.err = s.check(b[lo-at:hi-at], lo-s.from); v.err != nil {
				return
			}
		}
	}
}

// result is the first value that failed its check.
func (v *valueSweep) result() error {
	if v == nil {
		return nil
	}
	return v.err
}

// checkSpans checks every block of the file that spans touch, reading
// each once, in file order, through buf: what a load reads it checks
// first, so that a damaged checkpoint is found before anything changes.
// A file without block CRCs is checked whole. The values of the value
// spans (which lie inside spans) are checked in the same pass; a damaged
// block is the error before a value.
func (r *rangeFile) checkSpans(spans []span, values []valueSpan, buf []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	sweep := newValueSweep(values)
	bs := r.info.BlockBytes
	if bs == 0 {
		if !r.verified {
			if err := r.verifyWhole(buf); err != nil {
				return err
			}
		}
		// An old checkpoint without block CRCs: its values, read again.
		for _, s := range sweep.spansOrNone() {
			at := s.from
			if err := r.stream(s.from, s.to, buf, func(b []byte) bool {
				sweep.feed(at, b)
				at += int64(len(b))
				return sweep.err == nil
			}); err != nil {
				return err
			}
		}
		return sweep.result()
	}
	// Whole blocks, merged.
	var blocks []span
	for _, s := range spans {
		if s.from >= s.to {
			continue
		}
		blocks = append(blocks, span{s.from / bs * bs, min((s.to+bs-1)/bs*bs, r.info.Bytes)})
	}
	slices.SortFunc(blocks, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	for i := 0; i < len(blocks); {
		s := blocks[i]
		for i++; i < len(blocks) && blocks[i].from <= s.to; i++ {
			s.to = max(s.to, blocks[i].to)
		}
		sum := newFileSum(r, s.from/bs, false)
		at := s.from
		if err := r.stream(s.from, s.to, buf, func(b []byte) bool {
			ok := sum.add(b)
			sweep.feed(at, b)
			at += int64(len(b))
			return ok
		}); err != nil {
			return err
		}
		if sum.bad != nil {
			return sum.bad
		}
	}
	return sweep.result()
}

func (v *valueSweep) spansOrNone() []valueSpan {
	if v == nil {
		return nil
	}
	return v.spans
}

// checkWhole checks the whole file, streamed through buf once: its
// CRC-32C and each of its blocks' (what verify does). A file that fails
// its CRC is corrupted; one whose CRC matches while a block's does not
// has a corrupted manifest.
func (r *rangeFile) checkWhole(buf []byte, values []valueSpan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	sum := newFileSum(r, 0, true)
	sweep := newValueSweep(values)
	at := int64(0)
	if err := r.stream(0, r.info.Bytes, buf, func(b []byte) bool {
		sum.add(b)
		sweep.feed(at, b)
		at += int64(len(b))
		return true
	}); err != nil {
		return err
	}
	if sum.total != r.info.CRC32C {
		msg := fmt.Sprintf("checkpoint: %s is corrupted: CRC-32C %08x, the manifest says %08x", r.path, sum.total, r.info.CRC32C)
		if sum.badK >= 0 {
			from, to := r.blockBounds(sum.badK)
			msg += fmt.Sprintf(" (the first damaged block is bytes [%d, %d))", from, to)
		}
		return damaged(errors.New(msg))
	}
	if sum.badK >= 0 {
		from, to := r.blockBounds(sum.badK)
		return damaged(fmt.Errorf("checkpoint: %s: the manifest's block CRCs do not match the file (whose CRC-32C does; block [%d, %d) differs first): the manifest is corrupted", r.path, from, to))
	}
	r.verified = true
	return sweep.result()
}

func (r *rangeFile) Close() { r.f.Close() }
