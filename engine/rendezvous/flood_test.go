package rendezvous

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// flood is a stranger on the store's host: n goroutines, each holding one
// connection to addr and opening a new one as soon as the store closes
// it, silent or, if hello, after a hello (a stranger cannot answer the
// challenge that follows). It runs until the returned stop, which says
// how many connections it opened.
func flood(addr string, n int, hello bool) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var opened atomic.Int64
	for range n {
		wg.Go(func() {
			buf := make([]byte, 512)
			for ctx.Err() == nil {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				opened.Add(1)
				if hello {
					nc.Write(encodeFrame(opHello, 0, []byte(protoMagic), []byte{protoVersion}))
				}
				unblock := context.AfterFunc(ctx, func() { nc.Close() })
				for {
					if _, err := nc.Read(buf); err != nil {
						break
					}
				}
				unblock()
				nc.Close()
			}
		})
	}
	return func() int {
		cancel()
		wg.Wait()
		return int(opened.Load())
	}
}

// TestFlood: a stranger that holds more connections than the store lets
// handshake at once, and re-opens each one the store closes as fast as
// it can, does not keep the job out: its ranks, on the stranger's host,
// join within seconds.
func TestFlood(t *testing.T) {
	for _, tt := range []struct {
		name  string
		hello bool
	}{
		{"silent", false},
		{"hello", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := newSecretStore(t)
			stop := flood(srv.Addr(), maxUnauthenticated+16, tt.hello)
			stopped := false
			defer func() {
				if !stopped {
					stop()
				}
			}()
			// Let the flood fill the store's room, and churn, before
			// the ranks come.
			deadline := time.Now().Add(5 * time.Second)
			for srv.numPending() < maxUnauthenticated {
				if time.Now().After(deadline) {
					t.Fatalf("the flood holds %d connections after 5s", srv.numPending())
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)

			const size = 3
			start := time.Now()
			rs := make([]*Rendezvous, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for rank := range size {
				wg.Go(func() {
					rs[rank], errs[rank] = JoinWithSecret(context.Background(), srv.Addr(), Member{Rank: rank, Size: size}, testSecret, 5*time.Second, false)
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			for rank, err := range errs {
				if err != nil {
					t.Errorf("rank %d under the flood: %v", rank, err)
				}
			}
			var closing sync.WaitGroup
			for _, r := range rs {
				if r != nil {
					closing.Go(func() { r.Close() })
				}
			}
			closing.Wait()
			n := stop()
			stopped = true
			ref := srv.Refused()
			t.Logf("%d ranks joined in %v while the flood opened %d connections; %v", size, elapsed, n, ref)
			if ref.Evicted == 0 || ref.Evicted > ref.Total {
				t.Errorf("Refused() = %+v: no connection was evicted, so there was no flood", ref)
			}
		})
	}
}

// TestEvictedClient: a client whose connection the store closes before
// the handshake ends, every time, says that the store may be flooded,
// not that there is no store.
func TestEvictedClient(t *testing.T) {
	for _, tt := range []struct {
		name  string
		reply bool // answer the hello with a challenge before closing
	}{
		{"before the hello's reply", false},
		{"after the challenge", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
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
					if _, err := readFrame(nc); err == nil && tt.reply {
						nc.Write(encodeFrame(rOK, 0, []byte(protoMagic), []byte{protoVersion}, nonce()))
						readFrame(nc)
					}
					nc.Close()
				}
			}()
			start := time.Now()
			c, err := DialWithSecret(context.Background(), ln.Addr().String(), testSecret, 500*time.Millisecond)
			if err == nil {
				c.Close()
				t.Fatal("dialed")
			}
			const want = "the store closed the connection before authenticating: it may be flooded"
			if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "has rank 0 started") {
				t.Errorf("error %q, want one containing %q", err, want)
			}
			if d := time.Since(start); d < 400*time.Millisecond || d > 3*time.Second {
				t.Errorf("Dial returned after %v; it should retry until its timeout of 500ms", d)
			}
		})
	}
}

// numQuiet is the number of connections found silent in their handshake.
func (s *Server) numQuiet() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.pending {
		if c.quiet() {
			n++
		}
	}
	return n
}

// TestVictim: a store without room closes a connection from the address
// that holds the most places, of those one found silent, of those the
// oldest.
func TestVictim(t *testing.T) {
	type c struct {
		host   string
		silent bool
		hello  bool
	}
	for _, tt := range []struct {
		name  string
		conns []c // in the order they came
		want  int
	}{
		{"the oldest", []c{{"a", false, true}, {"a", false, true}, {"a", false, false}}, 0},
		{"the oldest silent", []c{{"a", false, true}, {"a", true, false}, {"a", true, false}}, 1},
		{"silent, not just without hello yet", []c{{"a", false, false}, {"a", true, false}}, 1},
		{"silent then helloed is not silent", []c{{"a", true, true}, {"a", true, false}}, 1},
		{"the most crowded address", []c{{"b", true, false}, {"a", false, true}, {"a", false, true}}, 1},
		{"silent on the most crowded address", []c{{"b", true, false}, {"a", false, true}, {"a", true, false}}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{pending: map[*conn]struct{}{}}
			var conns []*conn
			for i, x := range tt.conns {
				cn := &conn{s: s, host: x.host, order: uint64(i), silent: x.silent, hello: x.hello}
				conns = append(conns, cn)
				s.pending[cn] = struct{}{}
			}
			if v := s.victim(); v != conns[tt.want] {
				t.Errorf("victim is connection %d, want %d", v.order, tt.want)
			}
		})
	}
}

// TestWrongSecretNamedAtTimeout: when a rank never arrives, rank 0's
// error says that connections claiming it were refused for a wrong
// secret, and the other ranks hear it too; but such a connection does
// not end the job, which a stranger could then do: the real rank that
// comes after it joins.
func TestWrongSecretNamedAtTimeout(t *testing.T) {
	wrong := []byte("not-the-job-secret-at-all")
	addr := freePort(t)
	// Ranks 0 and 2 wait from the start; the two refused attempts must
	// be counted before they give up. Each attempt is asserted to take
	// under a second, so a timeout of three leaves room on a loaded
	// machine (at 1.5 s, two slow attempts under make test's compiles
	// came after the waits had ended, and the errors named no refusal).
	const timeout = 3 * time.Second
	type res struct {
		r   *Rendezvous
		err error
	}
	join := func(rank, size int, secret []byte) <-chan res {
		ch := make(chan res, 1)
		go func() {
			r, err := JoinWithSecret(context.Background(), addr, Member{Rank: rank, Size: size, Host: "host-a", PID: 100 + rank}, secret, timeout, true)
			ch <- res{r, err}
		}()
		return ch
	}
	rank0, rank2 := join(0, 3, testSecret), join(2, 3, testSecret)
	for range 2 {
		start := time.Now()
		r := <-join(1, 3, wrong)
		if r.err == nil || !strings.Contains(r.err.Error(), "ZEROENG_JOB_TOKEN") {
			t.Fatalf("rank 1 with a wrong secret: %v", r.err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("rank 1 with a wrong secret failed after %v, want at once", d)
		}
	}
	const want = "rank 1 of 3 did not join within 3s (arrived: 0 on host-a pid 100, 2 on host-a pid 102); " +
		"the store refused 2 connections claiming rank 1 (the last from 127.0.0.1) for a wrong job secret: " +
		"does that process have this job's ZEROENG_JOB_TOKEN?"
	for rank, ch := range map[int]<-chan res{0: rank0, 2: rank2} {
		r := <-ch
		if r.err == nil || !strings.Contains(r.err.Error(), want) {
			t.Errorf("rank %d: %v, want an error containing %q", rank, r.err, want)
		}
	}

	// A stranger claiming rank 1, then rank 1.
	addr = freePort(t)
	rank0 = join(0, 2, testSecret)
	if c, err := dial(context.Background(), addr, addr, wrong, 5*time.Second, 1); err == nil {
		c.Close()
		t.Fatal("a stranger with a wrong secret dialed")
	}
	r1 := <-join(1, 2, testSecret)
	r0 := <-rank0
	if r0.err != nil || r1.err != nil {
		t.Fatalf("the job after a stranger claimed rank 1: rank 0: %v; rank 1: %v", r0.err, r1.err)
	}
	// The store counts a refusal before it answers the stranger (a loaded
	// machine once saw 0 here when it counted after).
	if got := r0.r.Server().Refused(); got.WrongSecret != 1 || got.Total != 1 {
		t.Errorf("Refused() = %+v, want the one stranger", got)
	}
	closeAll(t, []*Rendezvous{r0.r, r1.r})
}

// TestLowEntropySecret: a secret long enough but with few distinct bytes
// is refused, everywhere, with a way to make a good one, and never shown.
func TestLowEntropySecret(t *testing.T) {
	for _, tt := range []struct {
		secret string
		want   string // "": accepted
	}{
		{"aaaaaaaaaaaaaaaaaaaaaaaa", "has only 1 distinct characters in 24"},
		{"abcabcabcabcabcabcabcabc", "has only 3 distinct characters in 24"},
		{"passwordpassword", "has only 7 distinct characters in 16"},
		{"short", "has 5 bytes; it needs at least 16"},
		{"abcdefghabcdefgh", ""},
		{"3f9a0c1b7e6d2a4f8c0b1e7d9a3c5f60", ""},
	} {
		err := CheckSecret([]byte(tt.secret))
		if tt.want == "" {
			if err != nil {
				t.Errorf("CheckSecret(%q) = %v", tt.secret, err)
			}
			continue
		}
		const advice = "make one with export ZEROENG_JOB_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')"
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), advice) || strings.Contains(err.Error(), tt.secret) {
			t.Errorf("CheckSecret(%q) = %v, want an error containing %q and %q, and not the secret", tt.secret, err, tt.want, advice)
		}
	}
	bad := []byte("aaaaaaaaaaaaaaaaaaaaaaaa")
	const want = "distinct characters"
	if srv, err := ListenWithSecret("127.0.0.1:0", bad); err == nil || !strings.Contains(err.Error(), want) {
		if srv != nil {
			srv.Close()
		}
		t.Errorf("ListenWithSecret: %v", err)
	}
	if c, err := DialWithSecret(context.Background(), freePort(t), bad, time.Second); err == nil || !strings.Contains(err.Error(), want) {
		if c != nil {
			c.Close()
		}
		t.Errorf("DialWithSecret: %v", err)
	}
	if r, err := JoinWithSecret(context.Background(), freePort(t), Member{Rank: 0, Size: 1}, bad, time.Second, true); err == nil || !strings.Contains(err.Error(), want) {
		if r != nil {
			r.Close()
		}
		t.Errorf("JoinWithSecret: %v", err)
	}
}

// TestRequestWithTheHello: requests that come in the same segment as the
// hello are served: the small buffer of the handshake passes them on.
func TestRequestWithTheHello(t *testing.T) {
	srv, c := newStore(t)
	nc, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hello := encodeFrame(opHello, 0, []byte(protoMagic), []byte{protoVersion})
	set := encodeFrame(opSet, 1, []byte("k"), []byte("v"))
	if _, err := nc.Write(append(hello, set...)); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get("k"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
}
