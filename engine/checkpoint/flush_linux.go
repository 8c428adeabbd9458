package checkpoint

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing [off, off+n) of f to
// disk now, without waiting (sync_file_range with SYNC_FILE_RANGE_WRITE),
// so that the final fsync of a large file finds most of it written and the
// writer is not throttled for gigabytes of dirty pages at once.
func startWriteback(f *os.File, off, n int64) {
	unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
