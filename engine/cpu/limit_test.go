package cpu

import (
	"errors"
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// TestMaxMemory: allocations past Options.MaxMemory fail with a
// *device.OutOfMemoryError that gives the numbers; freed memory (pooled
// or not) no longer counts.
func TestMaxMemory(t *testing.T) {
	d := New(Options{Index: 3, MaxMemory: 1000})
	a, err := d.Alloc(dtype.Float32, 200) // 800 bytes
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Alloc(dtype.Float32, 51) // 204 more: 1004
	var oom *device.OutOfMemoryError
	if !errors.As(err, &oom) || oom.Device != "cpu:3" || oom.Request != 204 || oom.Live != 800 || oom.Limit != 1000 {
		t.Fatalf("past the limit: %v (%+v)", err, oom)
	}
	if b, err := d.Alloc(dtype.Float32, 50); err != nil { // exactly 1000
		t.Fatalf("up to the limit: %v", err)
	} else {
		d.Free(b)
	}
	d.Free(a)
	if _, err := d.Alloc(dtype.Float32, 250); err != nil {
		t.Fatalf("after a free: %v", err)
	}
	if _, err := New(Options{}).Alloc(dtype.Float32, 1<<20); err != nil {
		t.Fatalf("no limit: %v", err)
	}
}
