//go:build (darwin || freebsd || linux || netbsd) && (amd64 || arm64)

package cuda_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/zeroeng/zeroeng/gpu/cuda"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestMemoryRoundTrip(t *testing.T) {
	fc, c := setup(t)
	s, err := c.NewStream(false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	live := fc.LiveDeviceAllocs()
	free0, total, err := c.MemGetInfo()
	if err != nil || total != 80<<30 || free0 > total {
		t.Fatalf("MemGetInfo() = %d, %d, %v", free0, total, err)
	}

	for _, n := range []int{1, 3, 255, 4096, 1<<20 + 5} {
		a, err := c.MemAlloc(uint64(n))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.MemAlloc(uint64(n))
		if err != nil {
			t.Fatal(err)
		}
		if a%256 != 0 || b%256 != 0 {
			t.Errorf("MemAlloc(%d) = %#x, %#x, not 256-byte aligned", n, a, b)
		}
		if free, _, _ := c.MemGetInfo(); free != free0-2*uint64(n) {
			t.Errorf("after allocating 2×%d bytes, free = %d, want %d", n, free, free0-2*uint64(n))
		}

		src := pattern(n, 1)
		if err := s.CopyHtoD(a, src); err != nil {
			t.Fatal(err)
		}
		if err := s.CopyDtoD(b, a, uint64(n)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := s.CopyDtoH(got, b); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("%d bytes: HtoD, DtoD, DtoH changed the data", n)
		}

		// Memsets of the middle of b: bytes, then 32-bit words.
		want := bytes.Clone(src)
		if n >= 3 {
			if err := s.MemsetD8(b+1, 0x5A, uint64(n-2)); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < n-1; i++ {
				want[i] = 0x5A
			}
		}
		if words := n / 4; words >= 2 {
			if err := s.MemsetD32(b+4, 0xCAFEF00D, uint64(words-1)); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < words; i++ {
				binary.NativeEndian.PutUint32(want[4*i:], 0xCAFEF00D)
			}
		}
		if err := s.CopyDtoH(got, b); err != nil {
			t.Fatal(err)
		}
		s.Sync()
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: memsets wrote %x..., want %x...", n, got[:min(n, 16)], want[:min(n, 16)])
		}

		// Copies beyond an allocation fail (and show that the fake checks
		// the arguments' order and widths).
		if err := s.CopyDtoH(make([]byte, n+1), a); !errors.Is(err, cuda.ErrorInvalidValue) {
			t.Errorf("CopyDtoH of %d bytes from a %d-byte allocation: %v", n+1, n, err)
		}
		if err := c.MemFree(a); err != nil {
			t.Fatal(err)
		}
		if err := c.MemFree(b); err != nil {
			t.Fatal(err)
		}
	}
	if got := fc.LiveDeviceAllocs(); got != live {
		t.Errorf("%d allocations live, want %d", got, live)
	}
	if err := c.MemFree(0x1234); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Errorf("MemFree of a bad pointer: %v", err)
	}
	if err := s.CopyHtoD(0, nil); err != nil {
		t.Errorf("CopyHtoD of nothing: %v", err)
	}
}

func TestHostAlloc(t *testing.T) {
	fc, c := setup(t)
	live := fc.LiveHostAllocs()
	h, err := c.HostAlloc(10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 10000 || fc.LiveHostAllocs() != live+1 {
		t.Fatalf("HostAlloc(10000): %d bytes, %d live", len(h), fc.LiveHostAllocs())
	}
	copy(h, pattern(len(h), 3))
	d, err := c.MemAlloc(uint64(len(h)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(d)
	s, err := c.NewStream(true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	if err := s.CopyHtoD(d, h); err != nil {
		t.Fatal(err)
	}
	clear(h)
	if err := s.CopyDtoH(h, d); err != nil {
		t.Fatal(err)
	}
	s.Sync()
	if !bytes.Equal(h, pattern(len(h), 3)) {
		t.Error("round trip through page-locked memory changed the data")
	}
	if err := c.HostFree(h); err != nil {
		t.Fatal(err)
	}
	if fc.LiveHostAllocs() != live {
		t.Errorf("HostFree left %d live", fc.LiveHostAllocs())
	}
	for _, n := range []int{0, -1} {
		if _, err := c.HostAlloc(n); !errors.Is(err, cuda.ErrorInvalidValue) {
			t.Errorf("HostAlloc(%d): %v", n, err)
		}
	}
	if err := c.HostFree(nil); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Errorf("HostFree(nil): %v", err)
	}
}
