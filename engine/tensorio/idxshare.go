package tensorio

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/zeroeng/zeroeng/engine/idx"
)

// The ranks of an in-process job each load the same dataset; decompressing
// Fashion-MNIST's 60,000 images takes seconds, so a process decodes each
// idx file once and every rank copies its tensor from the shared, read-only
// decoded array. Concurrent loads of one file wait for the first; the
// decoded array is held weakly, so it is freed once every rank has made its
// tensor (a later load decodes again). A file changed on disk (another
// size or modification time) is decoded anew.

type idxKey struct {
	path  string // absolute
	size  int64
	mtime time.Time
}

type idxEntry struct {
	ready chan struct{} // closed when the decode has finished
	arr   weak.Pointer[idx.Array]
	err   error
}

var (
	idxMu      sync.Mutex
	idxEntries = map[idxKey]*idxEntry{}
	idxDecodes atomic.Int64 // decodes so far, for the tests
)

// readIdxShared returns path's decoded array, decoding it only when no
// other rank of this process holds it.
func readIdxShared(path string) (*idx.Array, error) {
	abs, err := filepath.Abs(path)
	fi, serr := os.Stat(path)
	if err != nil || serr != nil || !fi.Mode().IsRegular() {
		return decodeIdx(path) // its error names the problem
	}
	key := idxKey{abs, fi.Size(), fi.ModTime()}
	idxMu.Lock()
	if e, ok := idxEntries[key]; ok {
		idxMu.Unlock()
		<-e.ready
		if e.err != nil {
			return nil, e.err
		}
		if a := e.arr.Value(); a != nil {
			return a, nil
		}
		idxMu.Lock() // collected since: decode again below
	}
	e := &idxEntry{ready: make(chan struct{})}
	idxEntries[key] = e
	idxMu.Unlock()
	a, err := decodeIdx(path)
	e.arr, e.err = weak.Make(a), err
	close(e.ready)
	if err != nil {
		idxMu.Lock()
		if idxEntries[key] == e {
			delete(idxEntries, key) // the next load tries again
		}
		idxMu.Unlock()
	}
	return a, err
}

func decodeIdx(path string) (*idx.Array, error) {
	idxDecodes.Add(1)
	return idx.ReadFile(path)
}
