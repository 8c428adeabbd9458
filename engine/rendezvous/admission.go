package rendezvous

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Admission. The store holds at most maxUnauthenticated connections in
// their handshake, so that strangers cannot exhaust its memory or file
// descriptors. When it has no room it does not turn the newcomer away —
// a stranger holding every place, and re-taking each one that frees,
// would then keep the job's ranks out until their rendezvous timeout —
// but closes one of the connections it holds (victim) and takes the new
// one. Nobody can hold a place, then: a stranger's connection lasts only
// until maxUnauthenticated newer ones have come, while a rank's passes
// the handshake, two round trips, in milliseconds. Which connection goes
// is chosen so that a flood closes its own connections first:
//
//   - one from the address that holds the most places: a stranger on
//     another host than a rank's cannot close that rank's connection at
//     all, however fast it connects. There is no cap per address, since
//     every rank of a node comes from one address (127.0.0.1 on rank 0's
//     node) and a cap would lock out a node of many ranks;
//   - of those, one found silent: no hello had come helloPatience after
//     the store first looked for it, nor has since. A rank's hello comes
//     with its connection, a silent stranger's never. A connection whose
//     hello the store has not looked for yet is not silent: under a flood
//     a rank's often is one, and must not go first;
//   - of those, the oldest.
//
// So a stranger on another host never closes a rank's connection, nor
// does a silent one on the same host, unless it connects so fast that its
// connections go before they are found silent. Otherwise a stranger is
// told from a rank only by age: a rank gets in if it passes the handshake
// before maxUnauthenticated newer connections come, which takes many
// connections a millisecond. A silent connection also gives its place
// back after handshakeTimeout.
// A client whose connection is closed before it authenticated retries
// until its own timeout, and then says that the store may be flooded.
//
// Every refusal is counted (Refused) and logged at most every
// refusalLogEvery. On the store Join serves, a connection whose hello
// claims a rank (Join's do) and whose proof is wrong is counted under that
// rank too, in the key refusedKey(rank), so that when the rank never
// arrives every rank's error can say that connections claiming it were
// refused for a wrong secret. It cannot do more: the claim comes before
// the proof, so a stranger can make it too, and failing the job on it
// would let any stranger stop a job.

// helloPatience is how long the store waits for a hello before it calls
// the connection silent. A client's hello follows its connect at once,
// so that it comes with the connection or within a millisecond; waiting
// longer would let a fast flood close its connections before they are
// called silent.
const helloPatience = 2 * time.Millisecond

var (
	errEvicted     = errors.New("closed to make room for a newer connection: more than " + strconv.Itoa(maxUnauthenticated) + " were in their handshake")
	errWrongSecret = errors.New("wrong job secret")
)

// Refusals counts the connections a store closed before they passed its
// handshake.
type Refusals struct {
	Total int // all of them
	// WrongSecret counts those that answered the challenge without the
	// job's secret: processes with another ZEROENG_JOB_TOKEN, or strangers.
	WrongSecret int
	// Evicted counts those closed to make room for a newer connection
	// while maxUnauthenticated were in their handshake: a flood.
	Evicted int
}

// String describes the refusals in one line, for a log.
func (r Refusals) String() string {
	msg := fmt.Sprintf("the rendezvous store refused %d connection(s) that did not pass its handshake", r.Total)
	var parts []string
	if r.WrongSecret > 0 {
		parts = append(parts, fmt.Sprintf("%d without the job's secret (ZEROENG_JOB_TOKEN)", r.WrongSecret))
	}
	if r.Evicted > 0 {
		parts = append(parts, fmt.Sprintf("%d closed to make room during a flood of connections", r.Evicted))
	}
	if len(parts) > 0 {
		msg += ": " + strings.Join(parts, ", ")
	}
	return msg
}

// Refused counts the connections the store has refused since it started.
// Rank 0 can report it at exit: a count that is not zero means that
// something without the job's secret reached the store.
func (s *Server) Refused() Refusals {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusals
}

// claimRefusals counts the connections that claimed one rank and were
// refused for a wrong secret.
type claimRefusals struct {
	n    int
	last string // the address of the last one
}

// hostOf is the address a connection comes from, without its port.
func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// victim chooses the connection in its handshake that makes room for a
// new one; s.mu is held and s.pending is not empty.
func (s *Server) victim() *conn {
	perHost := make(map[string]int, 4)
	for c := range s.pending {
		perHost[c.host]++
	}
	var v *conn
	for c := range s.pending {
		switch {
		case v == nil:
		case perHost[c.host] != perHost[v.host]:
			if perHost[c.host] < perHost[v.host] {
				continue
			}
		case c.quiet() != v.quiet():
			if !c.quiet() {
				continue
			}
		case c.order > v.order:
			continue
		}
		v = c
	}
	return v
}

// quiet tells a connection that had not said hello when the store first
// looked, and has not yet; s.mu is held.
func (c *conn) quiet() bool { return c.silent && !c.hello }

// awaitHello looks for the hello, which a client sends as soon as it
// connects, and marks the connection silent if it is not there within
// helloPatience. It does not take the hello: the handshake does.
func (c *conn) awaitHello(br *bufio.Reader) error {
	_ = c.nc.SetReadDeadline(time.Now().Add(helloPatience))
	_, err := br.Peek(1)
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	c.s.mu.Lock()
	c.silent = true
	c.s.mu.Unlock()
	return nil
}

// helloed records that a connection said hello, and the rank its hello
// claims if it is one of the job's.
func (c *conn) helloed(f frame) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c.hello = true
	if len(f.fields) > 2 {
		if r, err := strconv.Atoi(string(f.fields[2])); err == nil && r >= 0 && r < s.claimRanks {
			c.claim = r
		}
	}
}

// refuse counts a connection dropped before it passed the handshake and
// reports the count at most every refusalLogEvery: one line, not one per
// stranger.
func (s *Server) refuse(c *conn, why error) {
	from := c.nc.RemoteAddr()
	s.mu.Lock()
	if c.refused || c.evicted && !errors.Is(why, errEvicted) {
		s.mu.Unlock() // counted already (when refused, or evicted)
		return
	}
	c.refused = true
	s.refused++
	s.refusals.Total++
	switch {
	case errors.Is(why, errEvicted):
		s.refusals.Evicted++
	case errors.Is(why, errWrongSecret):
		s.refusals.WrongSecret++
		if c.claim >= 0 {
			// At most claimRanks entries, whatever strangers claim.
			cr := s.wrongClaims[c.claim]
			cr.n++
			cr.last = c.host
			s.wrongClaims[c.claim] = cr
			s.set(refusedKey(c.claim), []byte(cr.describe(c.claim)))
		}
	}
	n := s.refused
	report := time.Since(s.refusedLogged) >= refusalLogEvery
	if report {
		s.refused, s.refusedLogged = 0, time.Now()
	}
	claim := c.claim
	s.mu.Unlock()
	if report {
		if claim >= 0 {
			why = fmt.Errorf("claiming rank %d: %w", claim, why)
		}
		s.logError(fmt.Errorf("rendezvous: store at %s: refused %d connection(s) that did not pass the handshake (the last from %s: %v)", s.addr, n, from, why))
	}
}

// refusedKey is the key where Join's store describes the connections
// that claimed rank and were refused for a wrong secret.
func refusedKey(rank int) string { return "rdzv/refused/" + strconv.Itoa(rank) }

// describe says what cr counts: "2 connections claiming rank 1 (the last
// from 10.0.0.2)".
func (cr claimRefusals) describe(rank int) string {
	if cr.n == 1 {
		return fmt.Sprintf("1 connection claiming rank %d (from %s)", rank, cr.last)
	}
	return fmt.Sprintf("%d connections claiming rank %d (the last from %s)", cr.n, rank, cr.last)
}

// numPending is the number of connections in their handshake.
func (s *Server) numPending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// carryOver is what an admitted client's connection reads from: what
// the handshake's small buffer holds still, then the connection.
func carryOver(br *bufio.Reader, nc net.Conn) io.Reader {
	n := br.Buffered()
	if n == 0 {
		return nc
	}
	rest, _ := br.Peek(n)
	return io.MultiReader(bytes.NewReader(bytes.Clone(rest)), nc)
}
