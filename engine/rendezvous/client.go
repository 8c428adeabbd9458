package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultTimeout is the timeout of Dial and Join when they are given none:
// TCPStore's default.
const DefaultTimeout = 300 * time.Second

var (
	// ErrClosed is returned by the requests of a client after its Close.
	ErrClosed = errors.New("rendezvous: the client is closed")
	// ErrTimeout matches (errors.Is) every error of a wait that timed out.
	ErrTimeout = errors.New("rendezvous: timed out")
	// ErrLost matches every error caused by the loss of the connection to
	// the store: the server shut down, its process died, the network failed.
	ErrLost = errors.New("rendezvous: lost the store")
)

// TimeoutError is the error of a Get or Wait whose keys did not all
// appear in time.
type TimeoutError struct {
	Missing []string      // the keys that did not appear
	Total   int           // how many keys were waited for
	Timeout time.Duration // how long
}

func (e *TimeoutError) Error() string {
	if e.Total == 1 && len(e.Missing) == 1 {
		return fmt.Sprintf("rendezvous: key %q did not appear within %s", e.Missing[0], fmtDuration(e.Timeout))
	}
	return fmt.Sprintf("rendezvous: %d of %d keys did not appear within %s: %s",
		len(e.Missing), e.Total, fmtDuration(e.Timeout), listOf(e.Missing, strconv.Quote))
}

// Is makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// lostError is the error of every request once the connection is gone.
type lostError struct {
	addr  string
	cause error
}

func (e *lostError) Error() string {
	return fmt.Sprintf("rendezvous: lost the store at %s: %v", e.addr, e.cause)
}
func (e *lostError) Is(target error) bool { return target == ErrLost }
func (e *lostError) Unwrap() error        { return e.cause }

var errShutDown = errors.New("the store was shut down")

// abortedError ends a wait when one of its abort keys appears.
type abortedError struct {
	key   string
	value []byte
}

func (e *abortedError) Error() string {
	return fmt.Sprintf("rendezvous: wait ended by key %q: %s", e.key, e.value)
}

// Client talks to a store over one TCP connection. It is safe for
// concurrent use: requests carry ids and are multiplexed on the
// connection, so a Get that waits for a key does not delay a Set made by
// another goroutine meanwhile. If the connection drops, every request
// outstanding and every later one fails with an error that matches
// ErrLost; the client does not reconnect.
type Client struct {
	addr    string
	nc      net.Conn
	timeout atomic.Int64

	wmu sync.Mutex // serializes writes of whole frames

	mu      sync.Mutex
	pending map[uint32]chan result
	nextID  uint32
	err     error // once set, the client is dead
}

type result struct {
	f   frame
	err error
}

// Dial connects to the store at addr. It retries, with a short backoff,
// until the store answers or timeout passes (≤ 0: DefaultTimeout), since
// rank 0 may start its server after the other ranks start dialing.
// timeout is also the client's timeout for Get (see SetTimeout).
func Dial(ctx context.Context, addr string, timeout time.Duration) (*Client, error) {
	return dial(ctx, addr, addr, nil, timeout, -1)
}

// DialWithSecret is Dial to a store made by ListenWithSecret: the client
// and the store each prove that they know secret before any request.
func DialWithSecret(ctx context.Context, addr string, secret []byte, timeout time.Duration) (*Client, error) {
	if err := CheckSecret(secret); err != nil {
		return nil, err
	}
	return dial(ctx, addr, addr, secret, timeout, -1)
}

// dial dials addr and names the store name in errors (rank 0 dials its own
// server on loopback, but names it as the other ranks know it). Its hello
// claims rank, unless that is negative.
//
// A store that closes the connection before the handshake ends is full
// of connections that do not authenticate, and made room for a newer
// one (admission.go): dial retries, since its next connection gets the
// time it needs unless the flood is very fast, and says so if it never
// gets in.
func dial(ctx context.Context, addr, name string, secret []byte, timeout time.Duration, rank int) (*Client, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	backoff := 10 * time.Millisecond
	var last error
	closed := 0 // connections the store closed before the handshake ended
	for {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, noStore(name, timeout, last, closed)
		}
		d := net.Dialer{Timeout: min(remaining, 5*time.Second), KeepAliveConfig: keepAlive}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			var c *Client
			c, err = handshake(nc, name, secret, min(remaining, 5*time.Second), rank)
			if err == nil {
				c.timeout.Store(int64(timeout))
				return c, nil
			}
			var pe *protocolError
			if errors.As(err, &pe) {
				return nil, err
			}
			if errors.Is(err, errClosedEarly) {
				closed++
			}
		}
		last = err
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rendezvous: dialing the store at %s: %w", name, context.Cause(ctx))
		}
		t := time.NewTimer(min(backoff, time.Until(deadline)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("rendezvous: dialing the store at %s: %w", name, context.Cause(ctx))
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// noStoreError is Dial's error when nothing answered in time.
type noStoreError struct {
	addr    string
	timeout time.Duration
	last    error
}

// noStore is Dial's error when it did not get in within timeout; closed
// of its attempts were closed by the store before the handshake ended.
func noStore(addr string, timeout time.Duration, last error, closed int) error {
	if errors.Is(last, errClosedEarly) {
		return &floodedError{addr, timeout, closed}
	}
	return &noStoreError{addr, timeout, last}
}

func (e *noStoreError) Error() string {
	msg := fmt.Sprintf("rendezvous: no store at %s after %s (is MASTER_ADDR/MASTER_PORT right, and has rank 0 started?)", e.addr, fmtDuration(e.timeout))
	// Connection refused is what the message already says; other causes
	// (a name that does not resolve, a service that does not answer) are worth showing.
	if e.last != nil && !errors.Is(e.last, syscall.ECONNREFUSED) {
		msg += ": last attempt: " + e.last.Error()
	}
	return msg
}

func (e *noStoreError) Unwrap() error { return e.last }

// errClosedEarly is the error of a handshake whose connection the store
// closed: a store full of connections that do not authenticate makes
// room that way (admission.go).
var errClosedEarly = errors.New("the store closed the connection before authenticating")

// floodedError is Dial's error when the store is there but closed every
// connection, up to the last, before it authenticated.
type floodedError struct {
	addr    string
	timeout time.Duration
	closed  int
}

func (e *floodedError) Error() string {
	return fmt.Sprintf("rendezvous: dialing the store at %s: the store closed the connection before authenticating: "+
		"it may be flooded by connections that do not authenticate (a stranger on its network?); it closed %d attempt(s) in %s",
		e.addr, e.closed, fmtDuration(e.timeout))
}

func (e *floodedError) Unwrap() error { return errClosedEarly }

// protocolError says that the peer is not a store this client can use;
// Dial does not retry it.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

// handshake introduces the client (as rank, unless negative), checks
// that a store answers and, if the store sends a challenge, proves that
// this client knows secret and checks the store's proof that it does too
// (auth.go).
func handshake(nc net.Conn, addr string, secret []byte, timeout time.Duration, rank int) (*Client, error) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	_ = nc.SetDeadline(time.Now().Add(timeout))
	fail := func(err error) (*Client, error) {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	// exchange sends one frame and reads the reply.
	exchange := func(op byte, fields ...[]byte) (frame, error) {
		if _, err := nc.Write(encodeFrame(op, 0, fields...)); err != nil {
			if closedByPeer(err) {
				err = errClosedEarly
			}
			return frame{}, err
		}
		f, err := readFrame(br)
		switch {
		case errors.Is(err, errMalformed):
			return f, &protocolError{fmt.Sprintf("rendezvous: %s is not a rendezvous store (another service on MASTER_PORT?): %v", addr, err)}
		case err != nil && closedByPeer(err), err == nil && f.op == rGoodbye:
			// A goodbye: the store is shutting down, and will be
			// gone at the next attempt.
			return f, errClosedEarly
		case err != nil:
			return f, err
		case f.op == rError && len(f.fields) == 1:
			return f, &protocolError{fmt.Sprintf("rendezvous: the store at %s refused this client: %s", addr, f.fields[0])}
		}
		return f, nil
	}
	hello := [][]byte{[]byte(protoMagic), {protoVersion}}
	if rank >= 0 {
		hello = append(hello, strconv.AppendInt(nil, int64(rank), 10))
	}
	f, err := exchange(opHello, hello...)
	if err != nil {
		return fail(err)
	}
	if f.op != rOK || len(f.fields) != 3 || string(f.fields[0]) != protoMagic {
		return fail(&protocolError{fmt.Sprintf("rendezvous: %s is not a rendezvous store of this version (another service on MASTER_PORT, or another zeroeng?): bad hello", addr)})
	}
	challenge := f.fields[2]
	switch {
	case len(challenge) == 0 && secret != nil:
		return fail(&protocolError{fmt.Sprintf("rendezvous: the store at %s does not authenticate its clients, but this process has the job's secret (ZEROENG_JOB_TOKEN): is it another job's store, or was rank 0 started without the secret?", addr)})
	case len(challenge) != 0 && secret == nil:
		return fail(&protocolError{fmt.Sprintf("rendezvous: the store at %s admits only the processes that have the job's secret: set ZEROENG_JOB_TOKEN to the value rank 0 has", addr)})
	case len(challenge) != 0:
		mine := nonce()
		f, err := exchange(opAuth, mine, proof(secret, "client", challenge, mine))
		if err != nil {
			return fail(err)
		}
		if f.op != rOK || len(f.fields) != 1 || !hmac.Equal(f.fields[0], proof(secret, "server", mine, challenge)) {
			return fail(&protocolError{fmt.Sprintf("rendezvous: the store at %s could not prove that it has the job's secret (another job's store?)", addr)})
		}
	}
	_ = nc.SetDeadline(time.Time{})
	c := &Client{addr: addr, nc: nc, pending: map[uint32]chan result{}, nextID: 1}
	go c.read(br)
	return c, nil
}

// closedByPeer tells the errors of a connection that the peer closed.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// read dispatches replies to the requests waiting for them.
func (c *Client) read(br *bufio.Reader) {
	for {
		f, err := readFrame(br)
		if err != nil {
			c.fail(&lostError{c.addr, err})
			return
		}
		if f.op == rGoodbye {
			c.fail(&lostError{c.addr, errShutDown})
			return
		}
		c.mu.Lock()
		ch := c.pending[f.id]
		delete(c.pending, f.id)
		c.mu.Unlock()
		if ch != nil { // nil: its caller gave up (context)
			ch <- result{f: f}
		}
	}
}

// fail kills the client: the first error sticks and goes to every request.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	for id, ch := range c.pending {
		ch <- result{err: c.err}
		delete(c.pending, id)
	}
	c.mu.Unlock()
	c.nc.Close()
}

// Close closes the connection. Requests outstanding fail with ErrClosed.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	return nil
}

// Addr is the address the client dialed.
func (c *Client) Addr() string { return c.addr }

// Timeout is how long Get waits, and Wait when given no timeout.
func (c *Client) Timeout() time.Duration { return time.Duration(c.timeout.Load()) }

// SetTimeout changes Timeout (≤ 0: DefaultTimeout).
func (c *Client) SetTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultTimeout
	}
	c.timeout.Store(int64(d))
}

// call sends a request and waits for its reply.
func (c *Client) call(ctx context.Context, op byte, fields ...[]byte) (frame, error) {
	if frameSize(fields) > MaxFrame {
		return frame{}, fmt.Errorf("rendezvous: a request of %d bytes is over the limit of %d", frameSize(fields), MaxFrame)
	}
	ch := make(chan result, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return frame{}, err
	}
	id := c.nextID
	c.nextID++
	if c.nextID == 0 {
		c.nextID = 1
	}
	c.pending[id] = ch
	c.mu.Unlock()

	buf := encodeFrame(op, id, fields...)
	c.wmu.Lock()
	_, err := c.nc.Write(buf)
	c.wmu.Unlock()
	if err != nil {
		c.fail(&lostError{c.addr, err})
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return frame{}, r.err
		}
		if r.f.op == rError {
			return frame{}, fmt.Errorf("rendezvous: %s", bytes.Join(r.f.fields, []byte("; ")))
		}
		return r.f, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return frame{}, context.Cause(ctx)
	}
}

// replyErr checks that an rOK reply has n fields of the given sizes (-1: any).
func replyErr(f frame, sizes ...int) error {
	if f.op != rOK || len(f.fields) != len(sizes) {
		return fmt.Errorf("rendezvous: unexpected reply (op %d, %d fields)", f.op, len(f.fields))
	}
	for i, n := range sizes {
		if n >= 0 && len(f.fields[i]) != n {
			return fmt.Errorf("rendezvous: unexpected reply (field %d of %d bytes)", i, len(f.fields[i]))
		}
	}
	return nil
}

func checkKeys(keys ...string) error {
	if len(keys) >= maxFields {
		return fmt.Errorf("rendezvous: %d keys in one request; the limit is %d", len(keys), maxFields-1)
	}
	for _, k := range keys {
		if len(k) > MaxKey {
			return fmt.Errorf("rendezvous: key %s… of %d bytes is over the limit of %d", strconv.Quote(k[:32]), len(k), MaxKey)
		}
	}
	return nil
}

func checkValue(key string, v []byte) error {
	if len(v) > MaxValue {
		return fmt.Errorf("rendezvous: value of key %q (%d bytes) is over the limit of %d", key, len(v), MaxValue)
	}
	return nil
}

// Set stores value under key, replacing what was there, and wakes the
// requests waiting for key.
func (c *Client) Set(key string, value []byte) error {
	if err := checkKeys(key); err != nil {
		return err
	}
	if err := checkValue(key, value); err != nil {
		return err
	}
	f, err := c.call(context.Background(), opSet, []byte(key), value)
	if err != nil {
		return err
	}
	return replyErr(f)
}

// Get returns the value of key, waiting up to the client's Timeout for
// it to be set.
func (c *Client) Get(key string) ([]byte, error) {
	vals, err := c.wait(context.Background(), []string{key}, nil, c.Timeout(), true)
	if err != nil {
		return nil, err
	}
	return vals[0], nil
}

// MultiGet returns the values of keys, in order, waiting up to the
// client's Timeout for all of them to be set.
func (c *Client) MultiGet(keys []string) ([][]byte, error) {
	return c.wait(context.Background(), keys, nil, c.Timeout(), true)
}

// Wait waits until every key exists, up to timeout (≤ 0: the client's
// Timeout). On timeout the error is a *TimeoutError listing the keys that
// are missing.
func (c *Client) Wait(keys []string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = c.Timeout()
	}
	_, err := c.wait(context.Background(), keys, nil, timeout, false)
	return err
}

// waitGrace is how much longer than its timeout a wait gives the server
// to answer before the client decides by itself that it timed out.
const waitGrace = 2 * time.Second

// wait is the one request that blocks: it ends when all keys exist (with
// their values if fetch), when one of the abort keys exists (an
// *abortedError), on timeout (a *TimeoutError; timeout ≤ 0: never), or
// when ctx is done.
func (c *Client) wait(ctx context.Context, keys, abort []string, timeout time.Duration, fetch bool) ([][]byte, error) {
	if err := checkKeys(append(keys[:len(keys):len(keys)], abort...)...); err != nil {
		return nil, err
	}
	fields := make([][]byte, 0, 1+len(keys)+len(abort))
	fields = append(fields, waitParams(fetch, int64(max(timeout, 0)), len(keys)))
	for _, k := range keys {
		fields = append(fields, []byte(k))
	}
	for _, k := range abort {
		fields = append(fields, []byte(k))
	}
	if timeout > 0 && timeout < 1<<62 {
		// The server times the wait; this only guards against a server
		// that is alive but never answers.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout+waitGrace, &TimeoutError{Missing: keys, Total: len(keys), Timeout: timeout})
		defer cancel()
	}
	f, err := c.call(ctx, opWait, fields...)
	if err != nil {
		return nil, err
	}
	switch f.op {
	case rTimeout:
		missing := make([]string, len(f.fields))
		for i, k := range f.fields {
			missing[i] = string(k)
		}
		return nil, &TimeoutError{Missing: missing, Total: distinct(keys), Timeout: timeout}
	case rAborted:
		if len(f.fields) != 2 {
			return nil, replyErr(f, -1, -1)
		}
		return nil, &abortedError{key: string(f.fields[0]), value: f.fields[1]}
	}
	if !fetch {
		return nil, replyErr(f)
	}
	// The server answers for distinct keys; map them back to the request.
	uniq := uniqueKeys(keys)
	if len(f.fields) != len(uniq) || f.op != rOK {
		return nil, replyErr(f, make([]int, len(uniq))...)
	}
	if len(uniq) == len(keys) {
		return f.fields, nil
	}
	byKey := make(map[string][]byte, len(uniq))
	for i, k := range uniq {
		byKey[k] = f.fields[i]
	}
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = byKey[k]
	}
	return vals, nil
}

func uniqueKeys(keys []string) []string {
	if len(keys) < 2 {
		return keys
	}
	seen := make(map[string]bool, len(keys))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func distinct(keys []string) int { return len(uniqueKeys(keys)) }

// Add adds delta to the decimal integer stored under key (a missing key
// counts as 0) and returns the sum, atomically.
func (c *Client) Add(key string, delta int64) (int64, error) {
	if err := checkKeys(key); err != nil {
		return 0, err
	}
	f, err := c.call(context.Background(), opAdd, []byte(key), i64(delta))
	if err != nil {
		return 0, err
	}
	if err := replyErr(f, 8); err != nil {
		return 0, err
	}
	return int64(binary.BigEndian.Uint64(f.fields[0])), nil
}

// CompareSet sets key to desired if its value is expected, atomically,
// as TCPStore's compare_set: a missing key matches an empty expected.
// It returns the value the key holds afterwards, so the swap happened if
// and only if that equals desired — with TCPStore's quirk that a missing
// key and a non-empty expected return expected, not an empty value.
func (c *Client) CompareSet(key string, expected, desired []byte) ([]byte, error) {
	if err := checkKeys(key); err != nil {
		return nil, err
	}
	if err := checkValue(key, expected); err != nil {
		return nil, err
	}
	if err := checkValue(key, desired); err != nil {
		return nil, err
	}
	return c.compareSet(context.Background(), key, expected, desired)
}

func (c *Client) compareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	f, err := c.call(ctx, opCompareSet, []byte(key), expected, desired)
	if err != nil {
		return nil, err
	}
	if err := replyErr(f, -1); err != nil {
		return nil, err
	}
	return f.fields[0], nil
}

// Check reports whether every key exists, without waiting.
func (c *Client) Check(keys []string) (bool, error) {
	if err := checkKeys(keys...); err != nil {
		return false, err
	}
	fields := make([][]byte, len(keys))
	for i, k := range keys {
		fields[i] = []byte(k)
	}
	f, err := c.call(context.Background(), opCheck, fields...)
	if err != nil {
		return false, err
	}
	if err := replyErr(f, 1); err != nil {
		return false, err
	}
	return f.fields[0][0] == 1, nil
}

// Delete removes key and reports whether it existed.
func (c *Client) Delete(key string) (bool, error) {
	if err := checkKeys(key); err != nil {
		return false, err
	}
	f, err := c.call(context.Background(), opDelete, []byte(key))
	if err != nil {
		return false, err
	}
	if err := replyErr(f, 1); err != nil {
		return false, err
	}
	return f.fields[0][0] == 1, nil
}

// OnDrop asks the store to set key to value, unless key exists by then,
// when this client's connection ends for any reason: its process died, was
// killed, lost the network, or called Close. An empty key cancels it. A
// rank uses it to leave word of its own death.
func (c *Client) OnDrop(key string, value []byte) error {
	if key != "" {
		if err := checkKeys(key); err != nil {
			return err
		}
	}
	if len(value) > MaxValue {
		return fmt.Errorf("rendezvous: value of %d bytes is over the limit of %d", len(value), MaxValue)
	}
	f, err := c.call(context.Background(), opOnDrop, []byte(key), value)
	if err != nil {
		return err
	}
	return replyErr(f)
}

// NumKeys is the number of keys in the store, the rendezvous' own
// (under "rdzv/") included.
func (c *Client) NumKeys() (int, error) {
	f, err := c.call(context.Background(), opNumKeys)
	if err != nil {
		return 0, err
	}
	if err := replyErr(f, 8); err != nil {
		return 0, err
	}
	return int(binary.BigEndian.Uint64(f.fields[0])), nil
}

// fmtDuration prints a duration for people: 30s, 300ms, 1.5s, 2m0s.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.String()
}

// listOf joins at most 16 items and says how many more there are.
func listOf[T any](items []T, show func(T) string) string {
	const most = 16
	var b strings.Builder
	for i, it := range items {
		if i == most {
			fmt.Fprintf(&b, " and %d more", len(items)-most)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(show(it))
	}
	return b.String()
}
