package rendezvous

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef-test-secret")

func newSecretStore(t *testing.T) (*Server, *logRecorder) {
	t.Helper()
	srv, err := ListenWithSecret("127.0.0.1:0", testSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	log := &logRecorder{}
	srv.SetErrorLog(log.record)
	return srv, log
}

// TestAuthentication: a client with the secret works; without it, with
// another, or against a store without one, the client fails at once with
// an error that says which, instead of retrying until its timeout.
func TestAuthentication(t *testing.T) {
	srv, _ := newSecretStore(t)
	c, err := DialWithSecret(context.Background(), srv.Addr(), testSecret, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get("k"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	plain, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, tt := range []struct {
		name   string
		addr   string
		secret []byte
		want   string
	}{
		{"no secret", srv.Addr(), nil, "admits only the processes that have the job's secret: set ZEROENG_JOB_TOKEN"},
		{"another secret", srv.Addr(), []byte("another-secret-of-the-right-length"), "does not have the job's secret"},
		{"a store without one", plain.Addr(), testSecret, "does not authenticate its clients"},
		{"too short", srv.Addr(), []byte("short"), "needs at least 16"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			var c *Client
			var err error
			if tt.secret == nil {
				c, err = Dial(context.Background(), tt.addr, 10*time.Second)
			} else {
				c, err = DialWithSecret(context.Background(), tt.addr, tt.secret, 10*time.Second)
			}
			if err == nil {
				c.Close()
				t.Fatal("dialed")
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), string(testSecret)) {
				t.Errorf("error %q, want %q (and never the secret)", err, tt.want)
			}
			if time.Since(start) > 2*time.Second {
				t.Errorf("took %v: the client retried instead of failing", time.Since(start))
			}
		})
	}
}

// TestImpostorStore: a store that sends a challenge but cannot prove it
// has the secret (one that only replays what it saw) is refused.
func TestImpostorStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		if _, err := readFrame(nc); err != nil {
			return
		}
		nc.Write(encodeFrame(rOK, 0, []byte(protoMagic), []byte{protoVersion}, nonce()))
		f, err := readFrame(nc)
		if err != nil {
			return
		}
		nc.Write(encodeFrame(rOK, 0, f.fields[1])) // the client's own proof back
		time.Sleep(time.Second)
	}()
	_, err = DialWithSecret(context.Background(), ln.Addr().String(), testSecret, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "could not prove that it has the job's secret") {
		t.Fatalf("err = %v", err)
	}
}

// TestStrangers: processes on 127.0.0.1 without the secret can neither
// write nor read a key, nor hold the store up: a request before or
// instead of the handshake ends the connection, each idle connection
// beyond maxUnauthenticated closes the oldest idle one, none of them
// counts as a client (rank 0's orderly end waits for clients only), the
// log gets one line, and the store's clients go on.
func TestStrangers(t *testing.T) {
	srv, log := newSecretStore(t)
	c, err := DialWithSecret(context.Background(), srv.Addr(), testSecret, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set("rdzv/job", []byte("secret record")); err != nil {
		t.Fatal(err)
	}
	hello := encodeFrame(opHello, 0, []byte(protoMagic), []byte{protoVersion})
	for _, attempt := range [][]byte{
		encodeFrame(opSet, 1, []byte("failed"), []byte("by a stranger")),
		append(hello, encodeFrame(opSet, 1, []byte("failed"), []byte("by a stranger"))...),
		append(hello, encodeFrame(opWait, 1, waitParams(true, 0, 1), []byte("rdzv/job"))...),
		append(hello, encodeFrame(opAuth, 1, nonce(), make([]byte, 32))...),
	} {
		nc, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(attempt)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		var got []byte
		buf := make([]byte, 4096)
		for {
			n, err := nc.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		nc.Close()
		if strings.Contains(string(got), "secret record") {
			t.Fatalf("a stranger read the job record: %q", got)
		}
	}
	if ok, err := c.Check([]string{"failed"}); err != nil || ok {
		t.Fatalf("a stranger wrote a key (%v, %v)", ok, err)
	}

	// Idle strangers: the store holds maxUnauthenticated, and each one
	// more takes the place of the oldest.
	var idle []net.Conn
	dial := func(n int) {
		for range n {
			nc, err := net.Dial("tcp", srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			idle = append(idle, nc)
		}
		deadline := time.Now().Add(5 * time.Second)
		for srv.numQuiet() < min(len(idle), maxUnauthenticated) {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections found silent, want %d", srv.numQuiet(), min(len(idle), maxUnauthenticated))
			}
			time.Sleep(time.Millisecond)
		}
	}
	dial(maxUnauthenticated)
	dial(20)
	closed := make([]bool, len(idle))
	var wg sync.WaitGroup
	for i, nc := range idle {
		wg.Go(func() {
			nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			_, err := nc.Read(make([]byte, 1))
			closed[i] = err != nil && !isTimeout(err)
		})
	}
	wg.Wait()
	for i, c := range closed {
		if c != (i < 20) {
			t.Errorf("idle stranger %d of %d: closed %v, want only the oldest 20 closed", i, len(idle), c)
		}
	}
	if n, _, _ := srv.numConns(); n != 1 {
		t.Errorf("numConns = %d with %d strangers connected, want the one client", n, len(idle))
	}
	if v, err := c.Get("rdzv/job"); err != nil || string(v) != "secret record" {
		t.Fatalf("the client after the strangers: %q, %v", v, err)
	}
	if lines := log.lines(); len(lines) != 1 {
		t.Errorf("logged %d lines for the strangers, want 1: %q", len(lines), lines)
	}
	for _, nc := range idle {
		nc.Close()
	}
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Close hung")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestJoinWithSecret: a job whose ranks share a secret joins; a rank
// with another secret fails naming ZEROENG_JOB_TOKEN, and so does the job.
func TestJoinWithSecret(t *testing.T) {
	addr := freePort(t)
	join := func(rank int, secret []byte) (*Rendezvous, error) {
		return JoinWithSecret(context.Background(), addr, Member{Rank: rank, Size: 3}, secret, 3*time.Second, true)
	}
	var wg sync.WaitGroup
	rs := make([]*Rendezvous, 3)
	errs := make([]error, 3)
	for rank := range 3 {
		wg.Go(func() { rs[rank], errs[rank] = join(rank, testSecret) })
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
	var closing sync.WaitGroup
	for _, r := range rs {
		closing.Go(func() { r.Close() })
	}
	closing.Wait()

	addr = freePort(t)
	for rank := range 2 {
		secret := testSecret
		if rank == 1 {
			secret = []byte("not-the-job-secret-at-all")
		}
		wg.Go(func() {
			r, err := JoinWithSecret(context.Background(), addr, Member{Rank: rank, Size: 2}, secret, 2*time.Second, true)
			if r != nil {
				r.Close()
			}
			errs[rank] = err
		})
	}
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "ZEROENG_JOB_TOKEN") {
		t.Errorf("rank 1 with another secret: %v", errs[1])
	}
	if errs[0] == nil {
		t.Errorf("rank 0 joined without rank 1")
	}
}
