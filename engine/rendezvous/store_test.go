package rendezvous

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// newStore serves a store on loopback and dials it; both close with the test.
func newStore(t testing.TB) (*Server, *Client) {
	t.Helper()
	srv, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, testDial(t, srv.Addr())
}

func testDial(t testing.TB, addr string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestSemantics runs each operation against a fresh store, step by step.
func TestSemantics(t *testing.T) {
	type step struct {
		op   string // set, get, add, cas, check, delete, numKeys
		args []string
		want string // the result, printed; "err: ..." for an error containing ...
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"set and get", []step{
			{"set", []string{"a", "1"}, ""},
			{"get", []string{"a"}, "1"},
			{"set", []string{"a", "two"}, ""},
			{"get", []string{"a"}, "two"},
			{"set", []string{"empty", ""}, ""},
			{"get", []string{"empty"}, ""},
		}},
		{"add", []step{
			{"add", []string{"n", "5"}, "5"},
			{"add", []string{"n", "-7"}, "-2"},
			{"get", []string{"n"}, "-2"},
			{"set", []string{"s", "40"}, ""},
			{"add", []string{"s", "2"}, "42"},
			{"set", []string{"x", "abc"}, ""},
			{"add", []string{"x", "1"}, `err: add to key "x": its value "abc" is not a decimal integer`},
			{"set", []string{"big", strconv.FormatInt(1<<62, 10)}, ""},
			{"add", []string{"big", strconv.FormatInt(1<<62, 10)}, "err: overflows int64"},
		}},
		{"compare set", []step{
			{"cas", []string{"k", "", "first"}, "first"},  // missing, expected empty: set
			{"cas", []string{"k", "", "second"}, "first"}, // mismatch: current value
			{"cas", []string{"k", "first", "third"}, "third"},
			{"get", []string{"k"}, "third"},
			{"cas", []string{"m", "x", "y"}, "x"}, // missing, expected non-empty: TCPStore returns expected
			{"check", []string{"m"}, "false"},
		}},
		{"check, delete and numKeys", []step{
			{"numKeys", nil, "0"},
			{"check", []string{}, "true"},
			{"set", []string{"a", "1"}, ""},
			{"set", []string{"b", "2"}, ""},
			{"check", []string{"a", "b"}, "true"},
			{"check", []string{"a", "c"}, "false"},
			{"numKeys", nil, "2"},
			{"delete", []string{"a"}, "true"},
			{"delete", []string{"a"}, "false"},
			{"check", []string{"a"}, "false"},
			{"numKeys", nil, "1"},
		}},
		{"limits", []step{
			{"set", []string{strings.Repeat("k", MaxKey), "ok"}, ""},
			{"set", []string{strings.Repeat("k", MaxKey+1), "x"}, "err: over the limit of 4096"},
			{"check", []string{strings.Repeat("k", MaxKey+1)}, "err: over the limit"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newStore(t)
			for i, s := range tt.steps {
				var got any
				var err error
				switch s.op {
				case "set":
					err = c.Set(s.args[0], []byte(s.args[1]))
					got = ""
				case "get":
					var v []byte
					v, err = c.Get(s.args[0])
					got = string(v)
				case "add":
					d, _ := strconv.ParseInt(s.args[1], 10, 64)
					got, err = c.Add(s.args[0], d)
				case "cas":
					var v []byte
					v, err = c.CompareSet(s.args[0], []byte(s.args[1]), []byte(s.args[2]))
					got = string(v)
				case "check":
					got, err = c.Check(s.args)
				case "delete":
					got, err = c.Delete(s.args[0])
				case "numKeys":
					got, err = c.NumKeys()
				}
				if want, ok := strings.CutPrefix(s.want, "err: "); ok {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Fatalf("step %d %s%q: error %v, want one containing %q", i, s.op, s.args, err, want)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d %s%q: %v", i, s.op, s.args, err)
				}
				if g := fmt.Sprint(got); g != s.want {
					t.Fatalf("step %d %s%q = %q, want %q", i, s.op, s.args, g, s.want)
				}
			}
		})
	}
}

func TestGetWaitsForSet(t *testing.T) {
	srv, c := newStore(t)
	other := testDial(t, srv.Addr())
	tests := []struct {
		name string
		set  func() error
		want string
	}{
		{"set", func() error { return other.Set("k1", []byte("v")) }, "v"},
		{"add", func() error { _, err := other.Add("k2", 3); return err }, "3"},
		{"compareSet", func() error { _, err := other.CompareSet("k3", nil, []byte("c")); return err }, "c"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "k" + strconv.Itoa(i+1)
			got := make(chan string, 1)
			go func() {
				v, err := c.Get(key)
				if err != nil {
					got <- "error: " + err.Error()
					return
				}
				got <- string(v)
			}()
			// The Get waits; meanwhile the same client serves other requests.
			time.Sleep(20 * time.Millisecond)
			if err := c.Set("unrelated", nil); err != nil {
				t.Fatal(err)
			}
			select {
			case g := <-got:
				t.Fatalf("Get returned %q before the key was set", g)
			default:
			}
			if err := tt.set(); err != nil {
				t.Fatal(err)
			}
			select {
			case g := <-got:
				if g != tt.want {
					t.Fatalf("Get = %q, want %q", g, tt.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Get did not wake")
			}
		})
	}
}

func TestWaitAfterDelete(t *testing.T) {
	srv, c := newStore(t)
	other := testDial(t, srv.Addr())
	if err := c.Set("a", nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait([]string{"a", "b"}, 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	// "a" goes away again before "b" comes: the wait must go on.
	if _, err := other.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if err := other.Set("b", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) while a was deleted", err)
	case <-time.After(30 * time.Millisecond):
	}
	if err := other.Set("a", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWaitTimeout(t *testing.T) {
	_, c := newStore(t)
	if err := c.Set("here", nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"wait", func() error { return c.Wait([]string{"here", "x", "y"}, 50*time.Millisecond) },
			`rendezvous: 2 of 3 keys did not appear within 50ms: "x", "y"`},
		{"get", func() error {
			c.SetTimeout(40 * time.Millisecond)
			defer c.SetTimeout(5 * time.Second)
			_, err := c.Get("nothing")
			return err
		}, `rendezvous: key "nothing" did not appear within 40ms`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("errors.Is(%v, ErrTimeout) is false", err)
			}
		})
	}
	// The timed-out waits left nothing behind, and the client still works.
	if err := c.Wait([]string{"here"}, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentAdd(t *testing.T) {
	srv, _ := newStore(t)
	const clients, goroutines, adds = 4, 8, 50
	var wg sync.WaitGroup
	for range clients {
		c := testDial(t, srv.Addr())
		for range goroutines {
			wg.Go(func() {
				for range adds {
					if _, err := c.Add("n", 1); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	c := testDial(t, srv.Addr())
	if n, err := c.Add("n", 0); err != nil || n != clients*goroutines*adds {
		t.Fatalf("sum = %d, %v; want %d", n, err, clients*goroutines*adds)
	}
}

func TestServerCloseWakesClients(t *testing.T) {
	srv, c := newStore(t)
	other := testDial(t, srv.Addr())
	errs := make(chan error, 3)
	go func() { _, err := c.Get("never"); errs <- err }()
	go func() { errs <- c.Wait([]string{"never"}, time.Minute) }()
	go func() { errs <- other.Wait([]string{"never"}, time.Minute) }()
	time.Sleep(30 * time.Millisecond)
	start := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "rendezvous: lost the store at "+srv.Addr()) {
				t.Fatalf("error %v, want the store lost", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiting client did not wake")
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waking the clients took %v", d)
	}
	if err := c.Set("k", nil); !errors.Is(err, ErrLost) {
		t.Fatalf("Set after the server closed: %v, want ErrLost", err)
	}
}

func TestClientClose(t *testing.T) {
	_, c := newStore(t)
	done := make(chan error, 1)
	go func() { _, err := c.Get("never"); done <- err }()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Get on a closing client: %v, want ErrClosed", err)
	}
	if err := c.Set("k", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set on a closed client: %v, want ErrClosed", err)
	}
}

func TestDialRetriesUntilServerStarts(t *testing.T) {
	addr := freePort(t)
	type res struct {
		c   *Client
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, err := Dial(context.Background(), addr, 10*time.Second)
		done <- res{c, err}
	}()
	time.Sleep(150 * time.Millisecond)
	srv, err := Listen(addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer srv.Close()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if err := r.c.Set("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}

func TestDialErrors(t *testing.T) {
	// A TCP service that is not a store: it answers like an HTTP server.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			nc.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			nc.Close()
		}
	}()
	closed := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		addr    string
		timeout time.Duration
		want    string
		within  time.Duration
	}{
		{"nobody", context.Background(), closed, 300 * time.Millisecond,
			"rendezvous: no store at " + closed + " after 300ms (is MASTER_ADDR/MASTER_PORT right, and has rank 0 started?)", 2 * time.Second},
		{"another service", context.Background(), ln.Addr().String(), 10 * time.Second,
			"rendezvous: " + ln.Addr().String() + " is not a rendezvous store (another service on MASTER_PORT?)", 2 * time.Second},
		{"cancelled", ctx, closed, 10 * time.Second, "context canceled", 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			c, err := Dial(tt.ctx, tt.addr, tt.timeout)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q, want one containing %q", err, tt.want)
			}
			if d := time.Since(start); d > tt.within {
				t.Fatalf("Dial took %v", d)
			}
		})
	}
}

func TestListenPortInUse(t *testing.T) {
	srv, _ := newStore(t)
	_, err := Listen(srv.Addr())
	want := "rendezvous: cannot serve the store on " + srv.Addr() + ": the port is in use (another job, or a stale process?); pick another MASTER_PORT"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// logRecorder collects what a server logs.
type logRecorder struct {
	mu     sync.Mutex
	logged []string
}

func (l *logRecorder) record(err error) {
	l.mu.Lock()
	l.logged = append(l.logged, err.Error())
	l.mu.Unlock()
}

func (l *logRecorder) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.logged)
}

// waitFor waits until a logged line contains want.
func (l *logRecorder) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		lines := l.lines()
		if len(lines) > 0 && strings.Contains(lines[len(lines)-1], want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("logged %q, want an error containing %q", lines, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sendRaw writes b on a raw connection to addr and waits for the server
// to close it.
func sendRaw(t *testing.T, addr string, b []byte) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		t.Fatalf("the server did not close the connection: %v", err)
	}
}

// TestMalformedFrames sends garbage on raw connections: the server cuts
// each off and goes on serving its clients. Garbage from a client that
// passed the handshake is logged with its reason; connections that never
// pass it are counted, and reported in one line at most every
// refusalLogEvery, however many there are.
func TestMalformedFrames(t *testing.T) {
	srv, c := newStore(t)
	var log logRecorder
	srv.SetErrorLog(log.record)
	if err := c.Set("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	hello := encodeFrame(opHello, 0, []byte(protoMagic), []byte{protoVersion})
	for i, b := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		{0xff, 0xff, 0xff, 0xff, 1, 2, 3},
		{0, 0, 0, 2, 1, 2},
		encodeFrame(opHello, 0, []byte("someone else"), []byte{1}),
		encodeFrame(opSet, 1, []byte("k"), []byte("x")),
		encodeFrame(opHello, 0, []byte(protoMagic), make([]byte, 300)),
	} {
		sendRaw(t, srv.Addr(), b)
		if i == 0 {
			log.waitFor(t, "refused 1 connection(s) that did not pass the handshake")
		}
	}
	time.Sleep(50 * time.Millisecond)
	if lines := log.lines(); len(lines) != 1 {
		t.Fatalf("logged %q, want one line for six strangers", lines)
	}
	srv.mu.Lock()
	srv.refusedLogged = time.Now().Add(-time.Hour)
	srv.mu.Unlock()
	sendRaw(t, srv.Addr(), []byte("GET / HTTP/1.1\r\n\r\n"))
	log.waitFor(t, "refused 6 connection(s)")

	tests := []struct {
		name string
		send []byte
		want string // in the logged error
	}{
		{"unknown op", append(hello, encodeFrame(99, 1)...), "unknown op 99"},
		{"field overruns", append(hello, 0, 0, 0, 10, opSet, 0, 0, 0, 1, 0, 0, 0, 200, 'k'), "overruns the frame"},
		{"wrong field count", append(hello, encodeFrame(opSet, 1, []byte("k"))...), "wants 2 fields"},
		{"key too long", append(hello, encodeFrame(opDelete, 1, make([]byte, MaxKey+1))...), "key of 4097 bytes"},
		{"bad add", append(hello, encodeFrame(opAdd, 1, []byte("k"), []byte{1})...), "add delta of 1 bytes"},
		{"bad wait", append(hello, encodeFrame(opWait, 1, waitParams(false, 0, 5), []byte("k"))...), "wait for 5 keys with 1 given"},
		{"reply op", append(hello, encodeFrame(rOK, 1)...), "unexpected op"},
		{"second hello", append(hello, hello...), "unexpected op 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sendRaw(t, srv.Addr(), tt.send)
			log.waitFor(t, tt.want)
			if v, err := c.Get("k"); err != nil || string(v) != "v" {
				t.Fatalf("after the garbage, Get = %q, %v", v, err)
			}
		})
	}
	if n, _, _ := srv.numConns(); n != 1 {
		t.Fatalf("%d connections left, want 1", n)
	}
}

// TestReadFrameBoundedAllocation checks that a peer announcing a huge
// frame and sending little costs little memory.
func TestReadFrameBoundedAllocation(t *testing.T) {
	var before, after runtime.MemStats
	data := binary.BigEndian.AppendUint32(nil, MaxFrame)
	data = append(data, make([]byte, 100)...)
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, err := readFrame(strings.NewReader(string(data))); err == nil {
			t.Fatal("a truncated frame parsed")
		}
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 2<<20 {
		t.Fatalf("10 truncated frames allocated %d bytes", d)
	}
}

func BenchmarkSetGet(b *testing.B) {
	_, c := newStore(b)
	v := []byte("0123456789abcdef0123456789abcdef")
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Set("key", v); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Get("key"); err != nil {
			b.Fatal(err)
		}
	}
}
