package device

import (
	"fmt"

	"github.com/zeroeng/zeroeng/internal/hostmem"
)

// OutOfMemoryError is an allocation refused because it would take a
// device's live memory over the limit set for it (a rank's --max-memory,
// torch.cuda.set_per_process_memory_fraction's counterpart): the memory a
// model needs on one rank is then told apart from what the machine has,
// and a job can be sized for a smaller device than the one it runs on.
type OutOfMemoryError struct {
	Device  string // "cpu:1"
	Request int64  // bytes asked for
	Live    int64  // bytes live before the request
	Peak    int64  // high-water mark of live bytes so far
	Limit   int64
}

func (e *OutOfMemoryError) Error() string {
	return fmt.Sprintf("%s: out of memory: %s more would make %s live, over the device's limit of %s (--max-memory, ZEROENG_MAX_MEMORY); %s live now, peak %s",
		e.Device, hostmem.Size(e.Request), hostmem.Size(e.Live+e.Request), hostmem.Size(e.Limit), hostmem.Size(e.Live), hostmem.Size(e.Peak))
}

// CheckLimit returns an *OutOfMemoryError when size more bytes would take
// stats' live bytes over limit (no limit when limit <= 0).
func CheckLimit(dev fmt.Stringer, limit int64, stats MemStats, size int) error {
	if limit <= 0 || stats.LiveBytes+int64(size) <= limit {
		return nil
	}
	return &OutOfMemoryError{Device: dev.String(), Request: int64(size), Live: stats.LiveBytes, Peak: stats.PeakBytes, Limit: limit}
}
