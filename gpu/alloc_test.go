package gpu

import (
	"errors"
	"testing"

	"github.com/zeroeng/zeroeng/gpu/cuda"
)

// fakeMemory hands out addresses from a counter and can run out.
type fakeMemory struct {
	next      cuda.DevicePtr
	live      map[cuda.DevicePtr]int
	capacity  int
	allocs    int
	frees     int
	liveBytes int
}

func newFakeMemory(capacity int) *fakeMemory {
	return &fakeMemory{next: 1 << 20, live: map[cuda.DevicePtr]int{}, capacity: capacity}
}

func (m *fakeMemory) alloc(n int) (cuda.DevicePtr, error) {
	if m.liveBytes+n > m.capacity {
		return 0, &cuda.Error{Call: "cuMemAlloc_v2", Code: cuda.ErrorOutOfMemory}
	}
	p := m.next
	m.next += cuda.DevicePtr(n)
	m.live[p] = n
	m.liveBytes += n
	m.allocs++
	return p, nil
}

func (m *fakeMemory) free(p cuda.DevicePtr) error {
	n, ok := m.live[p]
	if !ok {
		return errors.New("double free")
	}
	delete(m.live, p)
	m.liveBytes -= n
	m.frees++
	return nil
}

func TestRoundSize(t *testing.T) {
	for _, c := range []struct{ in, want int }{
		{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {1<<20 - 1, 1 << 20},
		{1 << 20, 2 << 20}, {2<<20 + 1, 4 << 20}, {100 << 20, 100 << 20},
	} {
		if got := roundSize(c.in); got != c.want {
			t.Errorf("roundSize(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestAllocatorReusesFreedBlocks(t *testing.T) {
	mem := newFakeMemory(1 << 30)
	a := newAllocator(mem, 1<<40)
	// Two "steps" that allocate the same sizes: the second is served from
	// the cache.
	sizes := []int{100, 4000, 3 << 20, 100}
	for step := 0; step < 2; step++ {
		var bs []*block
		for _, n := range sizes {
			b, err := a.get(n)
			if err != nil {
				t.Fatal(err)
			}
			bs = append(bs, b)
		}
		for i, b := range bs {
			if err := a.put(b, sizes[i], nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := a.memStats()
	if mem.allocs != 4 || st.Allocs != 4 || st.Reuses != 4 {
		t.Errorf("driver allocs %d, stats %+v: want 4 allocations and 4 reuses", mem.allocs, st)
	}
	if st.LiveBuffers != 0 || st.LiveBytes != 0 {
		t.Errorf("live after freeing everything: %+v", st)
	}
	if want := int64(512 + 4096 + 4<<20 + 512); st.PooledBytes != want {
		t.Errorf("pooled %d, want %d", st.PooledBytes, want)
	}
	if st.PeakBytes != 100+4000+3<<20+100 {
		t.Errorf("peak %d counts requested bytes, want %d", st.PeakBytes, 100+4000+3<<20+100)
	}
}

func TestAllocatorReleasesCacheOnOutOfMemory(t *testing.T) {
	mem := newFakeMemory(8 << 20)
	a := newAllocator(mem, 1<<40)
	b, err := a.get(6 << 20)
	if err != nil {
		t.Fatal(err)
	}
	a.put(b, 6<<20, nil) // cached: the driver still counts it
	// 4 MiB does not fit beside the cached 6 MiB: the cache is released
	// and the allocation retried.
	b2, err := a.get(4 << 20)
	if err != nil {
		t.Fatalf("allocation after releasing the cache: %v", err)
	}
	if mem.frees != 1 || a.memStats().PooledBytes != 0 {
		t.Errorf("frees %d, pooled %d: the cache was not released", mem.frees, a.memStats().PooledBytes)
	}
	// Really out of memory: the error says so and what is live.
	_, err = a.get(6 << 20)
	var ce *cuda.Error
	if !errors.As(err, &ce) || ce.Code != cuda.ErrorOutOfMemory {
		t.Fatalf("got %v, want a CUDA out-of-memory error", err)
	}
	a.put(b2, 4<<20, nil)
}

func TestAllocatorWaitsForOtherStream(t *testing.T) {
	mem := newFakeMemory(1 << 30)
	a := newAllocator(mem, 1<<40)
	b, _ := a.get(1000)
	done := false
	a.put(b, 1000, func() (bool, error) { return done, nil })
	b2, _ := a.get(1000)
	if b2 == b {
		t.Fatal("a block still used by the communication stream was handed out again")
	}
	a.put(b2, 1000, nil)
	done = true
	b3, _ := a.get(1000)
	b4, _ := a.get(1000)
	if b3 != b && b4 != b {
		t.Error("the block was not reused once the other stream was done with it")
	}
}

func TestAllocatorLimit(t *testing.T) {
	mem := newFakeMemory(1 << 30)
	a := newAllocator(mem, 1024)
	b1, _ := a.get(600)
	b2, _ := a.get(600)
	a.put(b1, 600, nil)
	a.put(b2, 600, nil) // over the 1 KiB cache limit: back to the driver
	if mem.frees != 1 || a.memStats().PooledBytes != 1024 {
		t.Errorf("frees %d, pooled %d; want 1 and 1024", mem.frees, a.memStats().PooledBytes)
	}
	if err := a.trim(); err != nil {
		t.Fatal(err)
	}
	if len(mem.live) != 0 {
		t.Errorf("%d blocks left after trim", len(mem.live))
	}
}
