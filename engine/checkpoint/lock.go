package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// LockName is the file whose lock marks a checkpoint folder as in use.
const LockName = ".lock"

// ErrInUse matches the error of Lock for a folder that another job holds.
var ErrInUse = errors.New("checkpoint: the folder is in use by another job")

// holder is what the lock file says about the job that holds it.
type holder struct {
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Since string `json:"since"`
}

var (
	locksMu sync.Mutex
	locks   = map[string]*os.File{} // folders this process holds, by absolute path
)

// Lock makes dir this process's checkpoint folder until it exits: two jobs
// saving into one folder would overwrite each other's checkpoints and
// latest, and remove each other's saves in progress as leftovers. It
// creates dir if needed. A folder another process holds is an error
// naming that process (ErrInUse); locking a folder twice is a no-op. The
// lock is the kernel's (flock), so a job that dies releases it.
func Lock(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	locksMu.Lock()
	defer locksMu.Unlock()
	if _, ok := locks[abs]; ok {
		return nil
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	path := filepath.Join(abs, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := tryLock(f); err != nil {
		defer f.Close()
		if !errors.Is(err, errLocked) {
			return fmt.Errorf("checkpoint: locking %s: %w", path, err)
		}
		var h holder
		b := make([]byte, 512)
		n, _ := f.ReadAt(b, 0)
		who := "another process"
		if json.Unmarshal(b[:n], &h) == nil && h.PID > 0 {
			who = fmt.Sprintf("pid %d on %s, since %s", h.PID, h.Host, h.Since)
		}
		return fmt.Errorf("%w: %s is being written by %s; two jobs in one checkpoint folder would overwrite each other's checkpoints: give this job another folder, or stop the other", ErrInUse, dir, who)
	}
	host, _ := os.Hostname()
	b, _ := json.Marshal(holder{Host: host, PID: os.Getpid(), Since: time.Now().Format(time.DateTime)})
	if err := f.Truncate(0); err == nil {
		f.WriteAt(append(b, '\n'), 0)
	}
	locks[abs] = f // kept open, and so locked, until the process exits
	return nil
}
