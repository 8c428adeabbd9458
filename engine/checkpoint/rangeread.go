package checkpoint

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/zeroeng/zeroeng/internal/safefile"
)

// rangeFile reads parts of one file of a checkpoint with positioned reads,
// checking every block it reads against the manifest's CRC-32C of that
// block: a rank that reshards reads only the parts of other ranks' files
// that it needs, and still never uses a byte the manifest does not vouch
// for. A file whose manifest entry has no block CRCs (an older checkpoint)
// is checked whole once, streamed, before the first read. Its errors are
// the checkpoint's damage (ErrDamaged).
type rangeFile struct {
	path string
	info FileInfo
	f    *os.File

	mu       sync.Mutex
	verified bool   // the whole file was checked (no block CRCs)
	block    int64  // the block in buf, -1 for none
	buf      []byte // its bytes, checked
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

// ReadAt reads len(p) bytes at off, checked.
func (r *rangeFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > r.info.Bytes {
		return 0, damaged(fmt.Errorf("checkpoint: %s: bytes [%d, %d) are outside its %d bytes", r.path, off, off+int64(len(p)), r.info.Bytes))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info.BlockBytes == 0 {
		if !r.verified {
			if err := r.verifyWhole(); err != nil {
				return 0, err
			}
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
		if err := r.load(k); err != nil {
			return n, err
		}
		n += copy(p[n:], r.buf[at-r.block*bs:])
	}
	return n, nil
}

// readBlocks reads whole blocks from block k on into p and checks them.
func (r *rangeFile) readBlocks(p []byte, k int64) error {
	bs := r.info.BlockBytes
	if _, err := r.f.ReadAt(p, k*bs); err != nil {
		return damaged(fmt.Errorf("checkpoint: reading %s: %w", r.path, err))
	}
	for i := int64(0); i*bs < int64(len(p)); i++ {
		if err := r.check(p[i*bs:(i+1)*bs], k+i); err != nil {
			return err
		}
	}
	return nil
}

// check checks block k's bytes b.
func (r *rangeFile) check(b []byte, k int64) error {
	got := crc32.Checksum(b, castagnoli)
	if want := binary.LittleEndian.Uint32(r.info.BlockCRC32C[4*k:]); got != want {
		start := k * r.info.BlockBytes
		return damaged(fmt.Errorf("checkpoint: %s is corrupted: CRC-32C %08x of bytes [%d, %d), the manifest says %08x", r.path, got, start, start+int64(len(b)), want))
	}
	return nil
}

// load reads block k into buf and checks it.
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

// verifyWhole checks the whole file's CRC-32C, streaming it.
func (r *rangeFile) verifyWhole() error {
	sum := crc32.New(castagnoli)
	if _, err := io.Copy(sum, io.NewSectionReader(r.f, 0, r.info.Bytes)); err != nil {
		return damaged(fmt.Errorf("checkpoint: reading %s: %w", r.path, err))
	}
	if got := sum.Sum32(); got != r.info.CRC32C {
		return damaged(fmt.Errorf("checkpoint: %s is corrupted: CRC-32C %08x, the manifest says %08x", r.path, got, r.info.CRC32C))
	}
	r.verified = true
	return nil
}

func (r *rangeFile) Close() { r.f.Close() }
