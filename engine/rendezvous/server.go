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
	"log"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// keepAlive detects a peer whose host vanished without closing its
// connection (power loss, a network partition) in about 20 s, rather than
// the kernel's default of more than two hours.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 5 * time.Second, Count: 3}

const (
	// handshakeTimeout is how long a new connection has to pass the
	// handshake: two round trips, which a client does in milliseconds. It
	// is short so that a connection that stays silent gives its room back
	// soon even when nobody needs it (admission.go).
	handshakeTimeout = 3 * time.Second
	// handshakeBuffer is the read buffer of a connection in its handshake:
	// room for one handshake frame, so that a flood of connections costs
	// little memory; a client gets a large one once admitted.
	handshakeBuffer = 512
	// maxQueued bounds the replies queued for one connection whose peer
	// does not read them; past it the connection is closed.
	maxQueued = 2 * MaxFrame
	// goodbyeTimeout bounds how long Close waits to flush a connection.
	goodbyeTimeout = time.Second
)

// Server serves a store on a TCP listener: a map from keys to byte
// values, with operations that wait for keys to appear. Each connection
// has a goroutine that reads and executes its requests and one that
// writes its replies, so a client that waits, or does not read, never
// holds up another.
type Server struct {
	ln   net.Listener
	addr string

	secret []byte // nil: clients are not authenticated (auth.go)

	mu       sync.Mutex
	store    map[string][]byte
	watch    map[string]map[*waiter]role // waiters by the keys they watch
	conns    map[*conn]struct{}
	closed   bool
	changed  chan struct{} // closed and replaced when a connection goes
	admitted int           // connections that passed the handshake and are still there
	hellos   int           // clients that ever passed the handshake

	// Admission (admission.go).
	pending       map[*conn]struct{} // connections still in their handshake
	accepted      uint64             // connections accepted so far: their order
	refused       int                // connections refused since the last report
	refusedLogged time.Time          // when refusals were last reported
	refusals      Refusals           // connections refused since the start
	claimRanks    int                // ranks below this have their wrong-secret refusals counted
	wrongClaims   map[int]claimRefusals

	logf atomic.Pointer[func(error)]
	wg   sync.WaitGroup
}

// role says why a waiter watches a key; a key can be both.
type role uint8

const (
	roleAll   role = 1 // the waiter needs the key
	roleAbort role = 2 // the key's appearance ends the wait
)

// waiter is one Wait (or Get) that could not be answered at once.
type waiter struct {
	c         *conn
	id        uint32
	keys      []string // distinct keys that must all exist
	abort     []string // distinct keys any of which ends the wait
	fetch     bool
	remaining int // keys of keys that do not exist yet
	timer     *time.Timer
	done      bool
}

// Listen serves a new store on addr ("host:port"; port 0 picks a free
// port, which Addr reports). Its clients are not authenticated: any
// process that reaches the port can use it (see ListenWithSecret).
func Listen(addr string) (*Server, error) { return ListenWithSecret(addr, nil) }

// ListenWithSecret serves a store that admits only clients that know
// secret (random enough for CheckSecret; nil: anyone), which
// DialWithSecret proves without sending it (auth.go).
func ListenWithSecret(addr string, secret []byte) (*Server, error) {
	return listen(addr, secret, 0)
}

// listen is ListenWithSecret for a job of ranks processes (0: not a
// job), whose refusals for a wrong secret are counted by the rank that
// the refused connections claimed, so that Join can name them.
func listen(addr string, secret []byte, ranks int) (*Server, error) {
	if err := CheckSecret(secret); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{KeepAliveConfig: keepAlive}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("rendezvous: cannot serve the store on %s: the port is in use (another job, or a stale process?); pick another MASTER_PORT", addr)
		}
		return nil, fmt.Errorf("rendezvous: cannot serve the store on %s: %w", addr, err)
	}
	s := &Server{
		ln:      ln,
		addr:    ln.Addr().String(),
		secret:  secret,
		store:   map[string][]byte{},
		watch:   map[string]map[*waiter]role{},
		conns:   map[*conn]struct{}{},
		changed: make(chan struct{}),

		pending:     map[*conn]struct{}{},
		claimRanks:  ranks,
		wrongClaims: map[int]claimRefusals{},
	}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the server listens on, with the port it got.
func (s *Server) Addr() string { return s.addr }

// SetErrorLog sets the function that hears of connections cut off for a
// protocol error (garbage, an oversized frame, a peer that does not read).
// The default writes to the standard logger; nil discards them.
func (s *Server) SetErrorLog(f func(error)) {
	if f == nil {
		f = func(error) {}
	}
	s.logf.Store(&f)
}

func (s *Server) logError(err error) {
	if f := s.logf.Load(); f != nil {
		(*f)(err)
		return
	}
	log.Print(err)
}

// Close stops the server: it closes the listener and every connection.
// Requests still waiting fail at their clients with an error that says the
// store was shut down. Close waits, about a second at most, for replies
// already due to reach their clients.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.shutdown()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// numConns is the number of connected clients, the number that ever
// connected, and a channel that is closed when one leaves. Connections
// that did not pass the handshake do not count.
func (s *Server) numConns() (now, ever int, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admitted, s.hellos, s.changed
}

// missing returns the keys that do not exist.
func (s *Server) missing(keys []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, k := range keys {
		if _, ok := s.store[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

func (s *Server) accept() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait and retry, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logError(fmt.Errorf("rendezvous: store at %s: accept: %w", s.addr, err))
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		c := &conn{s: s, nc: nc, waiters: map[*waiter]struct{}{}, host: hostOf(nc.RemoteAddr()), claim: -1}
		c.cond.L = &c.mu
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		// A full store makes room rather than turning the newcomer away,
		// so that nobody can hold the room (admission.go).
		var evicted *conn
		if len(s.pending) >= maxUnauthenticated {
			evicted = s.victim()
			evicted.evicted = true
			delete(s.pending, evicted)
		}
		c.order = s.accepted
		s.accepted++
		s.pending[c] = struct{}{}
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		if evicted != nil {
			evicted.kill()
			s.refuse(evicted, errEvicted)
		}
		go c.read()
		go c.write()
	}
}

// conn is one client connection.
type conn struct {
	s  *Server
	nc net.Conn

	mu      sync.Mutex
	cond    sync.Cond
	queue   [][]byte // replies not yet written
	queued  int
	closing bool // flush the queue, then close
	dead    bool // close now

	waiters map[*waiter]struct{} // guarded by s.mu
	// admitted is set, under s.mu, when the handshake is done; until
	// then challenge is what the client must answer (auth.go).
	admitted  bool
	challenge []byte
	// What the store knows of a connection in its handshake, for choosing
	// which one to close when it needs room (admission.go). order and host
	// are set at accept; the others are guarded by s.mu.
	order   uint64 // its place in the order of arrival
	host    string // its peer's address, without the port
	silent  bool   // it had not said hello when the store first looked
	hello   bool   // it has said hello
	claim   int    // the rank its hello claimed, or -1
	evicted bool   // the store closed it to make room
	refused bool   // counted among the refusals (under the store's mu)
	// dropKey and dropValue, when dropKey is set, are stored when the
	// connection ends (opOnDrop), guarded by s.mu.
	dropKey   string
	dropValue []byte
}

// send queues a reply; it never blocks, so it may be called with s.mu held.
func (c *conn) send(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.dead {
		return
	}
	if c.queued+len(b) > maxQueued {
		c.dead = true
		c.cond.Signal()
		c.s.logError(fmt.Errorf("rendezvous: store at %s: closed the connection from %s: it does not read its replies", c.s.addr, c.nc.RemoteAddr()))
		return
	}
	c.queue = append(c.queue, b)
	c.queued += len(b)
	c.cond.Signal()
}

// shutdown says goodbye and closes the connection once its queue is written.
func (c *conn) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closing && !c.dead {
		c.queue = append(c.queue, encodeFrame(rGoodbye, 0))
		c.closing = true
		_ = c.nc.SetWriteDeadline(time.Now().Add(goodbyeTimeout))
	}
	c.cond.Signal()
}

// kill closes the connection without flushing.
func (c *conn) kill() {
	c.mu.Lock()
	c.dead = true
	c.cond.Signal()
	c.mu.Unlock()
}

func (c *conn) write() {
	defer c.s.wg.Done()
	defer c.nc.Close() // ends read() too
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closing && !c.dead {
			c.cond.Wait()
		}
		if c.dead || (c.closing && len(c.queue) == 0) {
			c.mu.Unlock()
			return
		}
		bufs := net.Buffers(c.queue)
		c.queue, c.queued = nil, 0
		c.mu.Unlock()
		if _, err := bufs.WriteTo(c.nc); err != nil {
			c.kill()
			return
		}
	}
}

func (c *conn) read() {
	defer c.s.wg.Done()
	defer c.gone()
	br := bufio.NewReaderSize(c.nc, handshakeBuffer)
	deadline := time.Now().Add(handshakeTimeout)
	if err := c.awaitHello(br); err != nil {
		if !errors.Is(err, net.ErrClosed) {
			c.s.refuse(c, err)
		}
		return
	}
	_ = c.nc.SetReadDeadline(deadline)
	for admitted := false; ; {
		limit := MaxFrame
		if !admitted {
			limit = maxHandshakeFrame
		}
		f, err := readFrameLimit(br, limit)
		if err != nil {
			switch {
			case !admitted:
				// A connection the store closed itself was counted when
				// it was evicted, or is no refusal (Close).
				if !errors.Is(err, net.ErrClosed) {
					c.s.refuse(c, err)
				}
			case !quietEnd(err):
				c.s.logError(fmt.Errorf("rendezvous: store at %s: closed the connection from %s: %w", c.s.addr, c.nc.RemoteAddr(), err))
			}
			return
		}
		if !admitted {
			ok, err := c.handshake(f)
			if err != nil {
				c.s.refuse(c, err)
				return
			}
			if ok {
				admitted = true
				_ = c.nc.SetReadDeadline(time.Time{})
				br = bufio.NewReaderSize(carryOver(br, c.nc), 64<<10)
			}
			continue
		}
		if f.op == opHello || f.op == opAuth || f.op >= rOK {
			c.s.logError(fmt.Errorf("rendezvous: store at %s: closed the connection from %s: unexpected op %d", c.s.addr, c.nc.RemoteAddr(), f.op))
			return
		}
		c.s.handle(c, f)
	}
}

// quietEnd tells the ordinary ends of a connection from protocol errors.
func quietEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET)
}

// handshake takes the hello and, on a store with a secret, the answer to
// its challenge; it reports when the client is admitted.
func (c *conn) handshake(f frame) (admitted bool, err error) {
	if c.challenge == nil {
		if f.op != opHello || !bytes.Equal(f.fields[0], []byte(protoMagic)) {
			return false, errors.New("not a rendezvous client (bad hello)")
		}
		if v := f.fields[1]; len(v) != 1 || v[0] != protoVersion {
			err := errors.New("client of another protocol version")
			c.s.refuse(c, err) // counted before the client hears it
			c.refuseWith(f.id, fmt.Sprintf("the store speaks protocol version %d, this client another", protoVersion))
			return false, err
		}
		if c.s.secret == nil {
			if !c.admit() {
				return false, errEvicted
			}
			c.send(encodeFrame(rOK, f.id, []byte(protoMagic), []byte{protoVersion}, nil))
			return true, nil
		}
		c.helloed(f)
		c.challenge = nonce()
		c.send(encodeFrame(rOK, f.id, []byte(protoMagic), []byte{protoVersion}, c.challenge))
		return false, nil
	}
	if f.op != opAuth {
		return false, fmt.Errorf("op %d before authenticating", f.op)
	}
	clientNonce, mac := f.fields[0], f.fields[1]
	if !hmac.Equal(mac, proof(c.s.secret, "client", c.challenge, clientNonce)) {
		// Counted before the client hears it: a job that sees the
		// stranger fail finds it in Refused and in its timeout messages.
		c.s.refuse(c, errWrongSecret)
		c.refuseWith(f.id, "authentication failed: this process does not have the job's secret (ZEROENG_JOB_TOKEN)")
		return false, errWrongSecret
	}
	if !c.admit() {
		return false, errEvicted
	}
	c.send(encodeFrame(rOK, f.id, proof(c.s.secret, "server", clientNonce, c.challenge)))
	return true, nil
}

// refuseWith writes why the client is refused before the connection
// closes (nothing else is queued during the handshake).
func (c *conn) refuseWith(id uint32, msg string) {
	_ = c.nc.SetWriteDeadline(time.Now().Add(goodbyeTimeout))
	_, _ = c.nc.Write(encodeFrame(rError, id, []byte(msg)))
}

// admit counts a client that passed the handshake, unless the store
// closed its connection meanwhile to make room for another.
func (c *conn) admit() bool {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.evicted {
		return false
	}
	c.admitted = true
	delete(s.pending, c)
	s.admitted++
	s.hellos++
	return true
}

// gone forgets a connection whose reader ended.
func (c *conn) gone() {
	c.kill()
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range c.waiters {
		s.finish(w)
	}
	if _, ok := s.store[c.dropKey]; c.dropKey != "" && !ok && !s.closed {
		s.set(c.dropKey, c.dropValue)
	}
	if _, ok := s.conns[c]; ok {
		if c.admitted {
			s.admitted--
		}
		delete(s.pending, c)
		delete(s.conns, c)
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// handle executes one request.
func (s *Server) handle(c *conn, f frame) {
	fs := f.fields
	reply := func(fields ...[]byte) { c.send(encodeFrame(rOK, f.id, fields...)) }
	fail := func(format string, args ...any) {
		c.send(encodeFrame(rError, f.id, fmt.Appendf(nil, format, args...)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch f.op {
	case opSet:
		s.set(string(fs[0]), keep(fs[1], f))
		reply()
	case opAdd:
		key := string(fs[0])
		delta := int64(binary.BigEndian.Uint64(fs[1]))
		var cur int64
		if v, ok := s.store[key]; ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				fail("add to key %q: its value %s is not a decimal integer", key, quote(v))
				return
			}
			cur = n
		}
		sum := cur + delta
		if (delta > 0 && sum < cur) || (delta < 0 && sum > cur) {
			fail("add %d to key %q: %d overflows int64", delta, key, cur)
			return
		}
		s.set(key, strconv.AppendInt(nil, sum, 10))
		reply(i64(sum))
	case opCompareSet:
		// As TCPStore's compare_set: a missing key counts as the empty
		// value, and the reply is the value the key holds afterwards —
		// except that for a missing key and a non-empty expected value,
		// TCPStore replies with the expected value, and so do we.
		key, expected, desired := string(fs[0]), fs[1], fs[2]
		cur, ok := s.store[key]
		switch {
		case !ok && len(expected) == 0, ok && bytes.Equal(cur, expected):
			v := keep(desired, f)
			s.set(key, v)
			reply(v)
		case !ok:
			reply(expected)
		default:
			reply(cur)
		}
	case opCheck:
		all := byte(1)
		for _, k := range fs {
			if _, ok := s.store[string(k)]; !ok {
				all = 0
				break
			}
		}
		reply([]byte{all})
	case opDelete:
		key := string(fs[0])
		_, ok := s.store[key]
		if ok {
			delete(s.store, key)
			for w, r := range s.watch[key] {
				if r&roleAll != 0 {
					w.remaining++
				}
			}
		}
		reply([]byte{b2i(ok)})
	case opNumKeys:
		reply(i64(int64(len(s.store))))
	case opOnDrop:
		c.dropKey, c.dropValue = string(fs[0]), bytes.Clone(fs[1])
		reply()
	case opWait:
		s.wait(c, f)
	}
}

// keep returns v for storing: a value much smaller than its frame is
// copied so that the store does not pin the rest of the frame.
func keep(v []byte, f frame) []byte {
	total := 0
	for _, x := range f.fields {
		total += len(x)
	}
	if total-len(v) > 1<<10 {
		return bytes.Clone(v)
	}
	return v
}

func b2i(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// set stores a value and wakes the waiters of a key that did not exist.
func (s *Server) set(key string, v []byte) {
	_, existed := s.store[key]
	s.store[key] = v
	if existed {
		return
	}
	for w, r := range s.watch[key] {
		switch {
		case r&roleAbort != 0:
			s.finish(w)
			w.c.send(encodeFrame(rAborted, w.id, []byte(key), v))
		case r&roleAll != 0:
			w.remaining--
			if w.remaining == 0 {
				s.finish(w)
				s.replyWait(w)
			}
		}
	}
}

// wait answers a Wait at once if it can, and otherwise registers a waiter.
func (s *Server) wait(c *conn, f frame) {
	p := f.fields[0]
	w := &waiter{c: c, id: f.id, fetch: p[0]&waitFetch != 0}
	timeout := time.Duration(binary.BigEndian.Uint64(p[1:9]))
	nAll := int(binary.BigEndian.Uint32(p[9:]))
	seen := map[string]role{}
	for i, k := range f.fields[1:] {
		key := string(k)
		r := roleAll
		if i >= nAll {
			r = roleAbort
		}
		if seen[key]&r != 0 {
			continue
		}
		seen[key] |= r
		if r == roleAll {
			w.keys = append(w.keys, key)
		} else {
			w.abort = append(w.abort, key)
		}
	}
	for _, k := range w.abort {
		if v, ok := s.store[k]; ok {
			c.send(encodeFrame(rAborted, f.id, []byte(k), v))
			return
		}
	}
	for _, k := range w.keys {
		if _, ok := s.store[k]; !ok {
			w.remaining++
		}
	}
	if w.remaining == 0 {
		s.replyWait(w)
		return
	}
	for k, r := range seen {
		m := s.watch[k]
		if m == nil {
			m = map[*waiter]role{}
			s.watch[k] = m
		}
		m[w] = r
	}
	c.waiters[w] = struct{}{}
	if timeout > 0 {
		w.timer = time.AfterFunc(timeout, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if w.done {
				return
			}
			s.finish(w)
			var missing [][]byte
			for _, k := range w.keys {
				if _, ok := s.store[k]; !ok {
					missing = append(missing, []byte(k))
				}
			}
			w.c.send(encodeFrame(rTimeout, w.id, missing...))
		})
	}
}

// replyWait answers a wait whose keys all exist.
func (s *Server) replyWait(w *waiter) {
	if !w.fetch {
		w.c.send(encodeFrame(rOK, w.id))
		return
	}
	vals := make([][]byte, len(w.keys))
	for i, k := range w.keys {
		vals[i] = s.store[k]
	}
	if frameSize(vals) > MaxFrame {
		w.c.send(encodeFrame(rError, w.id, fmt.Appendf(nil, "the values of %d keys are too large for one reply (over %d bytes)", len(vals), MaxFrame)))
		return
	}
	w.c.send(encodeFrame(rOK, w.id, vals...))
}

// finish unregisters a waiter.
func (s *Server) finish(w *waiter) {
	if w.done {
		return
	}
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
	for _, ks := range [][]string{w.keys, w.abort} {
		for _, k := range ks {
			if m := s.watch[k]; m != nil {
				delete(m, w)
				if len(m) == 0 {
					delete(s.watch, k)
				}
			}
		}
	}
	delete(w.c.waiters, w)
}

// quote shows a value in an error message, shortened if long.
func quote(v []byte) string {
	if len(v) > 40 {
		return strconv.Quote(string(v[:40])) + "…"
	}
	return strconv.Quote(string(v))
}
