//go:build (darwin || freebsd || linux || netbsd) && (amd64 || arm64)

package cuda_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/gpu/cuda"
)

func TestStreamsAndEvents(t *testing.T) {
	fc, c := setup(t)

	for _, nonBlocking := range []bool{false, true} {
		s, err := c.NewStream(nonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if nonBlocking {
			want = 1 // CU_STREAM_NON_BLOCKING
		}
		if got := fc.StreamFlags(s.Handle()); got != want {
			t.Errorf("NewStream(%v): flags %d, want %d", nonBlocking, got, want)
		}
		if s.Context() != c {
			t.Error("Stream.Context() is not its context")
		}
		if err := s.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	for _, timing := range []bool{false, true} {
		e, err := c.NewEvent(timing)
		if err != nil {
			t.Fatal(err)
		}
		want := 2 // CU_EVENT_DISABLE_TIMING
		if timing {
			want = 0
		}
		if got := fc.EventFlags(e.Handle()); got != want {
			t.Errorf("NewEvent(%v): flags %d, want %d", timing, got, want)
		}
		if err := e.Destroy(); err != nil {
			t.Fatal(err)
		}
	}

	s1, err := c.NewStream(true)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.NewStream(true)
	if err != nil {
		t.Fatal(err)
	}
	start, err := c.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	end, err := c.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	untimed, err := c.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name string
		do   func() error
	}{
		{"record start", func() error { return start.Record(s1) }},
		{"record on the NULL stream", func() error { return untimed.Record(nil) }},
		{"wait", func() error { return s2.WaitEvent(start) }},
		{"query stream", func() error { return done(s2.Query()) }},
		{"query event", func() error { return done(start.Query()) }},
		{"sync event", start.Sync},
		{"sleep", func() error { time.Sleep(3 * time.Millisecond); return nil }},
		{"record end", func() error { return end.Record(s2) }},
		{"sync streams", func() error { return errors.Join(s1.Sync(), s2.Sync(), c.Synchronize()) }},
		{"elapsed", func() error {
			d, err := cuda.Elapsed(start, end)
			if err == nil && (d < 3*time.Millisecond || d > time.Minute) {
				err = fmt.Errorf("Elapsed = %v, want about 3ms", d)
			}
			return err
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}

	// Not ready is an answer, not an error; other failures are errors.
	fc.Fail(t, "cuStreamQuery", int(cuda.ErrorNotReady))
	if ok, err := s1.Query(); ok || err != nil {
		t.Errorf("Query of a busy stream = %v, %v; want false, nil", ok, err)
	}
	fc.Fail(t, "cuEventQuery", int(cuda.ErrorNotReady))
	if ok, err := start.Query(); ok || err != nil {
		t.Errorf("Query of a pending event = %v, %v; want false, nil", ok, err)
	}
	fc.Fail(t, "cuEventQuery", int(cuda.ErrorIllegalAddress))
	if _, err := start.Query(); !errors.Is(err, cuda.ErrorIllegalAddress) {
		t.Errorf("Query after a fault: %v", err)
	}
	fc.Fail(t, "cuStreamSynchronize", int(cuda.ErrorLaunchFailed))
	if err := s1.Sync(); err == nil || err.Error() != "cuStreamSynchronize: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure" {
		t.Errorf("Sync after a failed kernel: %v", err)
	}
	if _, err := cuda.Elapsed(start, untimed); !errors.Is(err, cuda.ErrorInvalidHandle) {
		t.Errorf("Elapsed to an event without timing: %v", err)
	}

	// Destroyed handles fail without reaching the driver.
	for _, x := range []interface{ Destroy() error }{s1, s2, start, end, untimed} {
		if err := x.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	before := fc.Calls(t, "cuStreamSynchronize") + fc.Calls(t, "cuEventRecord") + fc.Calls(t, "cuStreamDestroy_v2")
	uses := []struct {
		name string
		err  error
	}{
		{"Sync", s1.Sync()},
		{"Destroy", s1.Destroy()},
		{"Record", end.Record(s2)},
		{"Record on a destroyed stream", func() error { e, _ := c.NewEvent(false); defer e.Destroy(); return e.Record(s1) }()},
		{"CopyHtoD", s1.CopyHtoD(0, []byte{1})},
		{"WaitEvent", func() error { s, _ := c.NewStream(false); defer s.Destroy(); return s.WaitEvent(end) }()},
		{"Elapsed", func() error { _, err := cuda.Elapsed(start, end); return err }()},
	}
	for _, u := range uses {
		if !errors.Is(u.err, cuda.ErrorInvalidHandle) {
			t.Errorf("%s after Destroy: %v", u.name, u.err)
		}
	}
	if after := fc.Calls(t, "cuStreamSynchronize") + fc.Calls(t, "cuEventRecord") + fc.Calls(t, "cuStreamDestroy_v2"); after != before+1 {
		// +1: the stream made for WaitEvent.
		t.Errorf("destroyed handles reached the driver: %d calls, want %d", after, before+1)
	}
}

func done(ok bool, err error) error {
	if err == nil && !ok {
		err = errors.New("not done")
	}
	return err
}

// TestContextPerThread checks that each call makes its own context
// current: the fake, like the driver, fails calls without a current
// context, and stream calls whose stream belongs to another context.
func TestContextPerThread(t *testing.T) {
	t.Setenv("FAKECUDA_DEVICES", "2")
	fc, d := load(t)
	c0, c1 := context(t, d, 0), context(t, d, 1)
	s0, err := c0.NewStream(false)
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Destroy()
	s1, err := c1.NewStream(false)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Destroy()

	// Alternate contexts on one goroutine.
	p1, err := c1.MemAlloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.MemFree(p1)
	// The fake fails a stream call unless the stream's context is current:
	// s0's call must make c0 current again.
	if err := s0.MemsetD8(p1, 1, 64); err != nil {
		t.Fatal(err)
	}
	if err := s1.Sync(); err != nil {
		t.Fatal(err)
	}

	// Do makes the context current on the locked thread.
	for _, c := range []*cuda.Context{c0, c1, c0} {
		err := c.Do(func() error {
			if got := fc.CurrentContext(); got != c.Handle() {
				return fmt.Errorf("current context %#x, want %#x", got, c.Handle())
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}

	// Many goroutines, more than threads, each alternating contexts.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			mine, other := c0, c1
			if g%2 == 1 {
				mine, other = c1, c0
			}
			s, err := mine.NewStream(true)
			if err != nil {
				errs <- err
				return
			}
			defer s.Destroy()
			src := pattern(512, byte(g))
			got := make([]byte, len(src))
			for range 50 {
				p, err := mine.MemAlloc(uint64(len(src)))
				if err != nil {
					errs <- err
					return
				}
				if _, _, err := other.MemGetInfo(); err != nil {
					errs <- err
					return
				}
				runtime.Gosched()
				err = errors.Join(s.CopyHtoD(p, src), s.CopyDtoH(got, p), s.Sync(), mine.MemFree(p))
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, src) {
					errs <- fmt.Errorf("goroutine %d: round trip changed the data", g)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestContextRelease(t *testing.T) {
	fc, d := load(t)
	dev, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	refs := fc.ContextRefs(0)
	c, err := dev.RetainPrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	if c.Device() != dev || fc.ContextRefs(0) != refs+1 {
		t.Fatalf("after retain: device %p (want %p), %d retains (want %d)", c.Device(), dev, fc.ContextRefs(0), refs+1)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if fc.ContextRefs(0) != refs {
		t.Errorf("after release: %d retains, want %d", fc.ContextRefs(0), refs)
	}
	if err := c.Release(); !errors.Is(err, cuda.ErrorInvalidContext) {
		t.Errorf("second Release: %v", err)
	}
	// The fake destroys a primary context at its last release, and then
	// refuses to make it current, as the driver does.
	if refs == 0 {
		if _, err := c.MemAlloc(8); !errors.Is(err, cuda.ErrorInvalidContext) {
			t.Errorf("MemAlloc in a released context: %v", err)
		}
	}
}
