package rendezvous

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// Member is one process's place in a job.
type Member struct {
	Rank int `json:"rank"`
	Size int `json:"size"` // WORLD_SIZE
	// Host and PID name the process in error messages; Join fills them
	// in (os.Hostname, os.Getpid) when they are empty.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// JobID, when set (a launcher's run id), must be the same on every
	// rank: a rank that finds another job's id on the store fails at once
	// instead of joining it. Empty matches any job.
	JobID string `json:"job,omitempty"`
}

func (m Member) where() string { return fmt.Sprintf("%s pid %d", m.Host, m.PID) }

// The keys of a rendezvous. The job record has a fixed name so that any
// rank can find it; everything else lives under a prefix made of the
// nonce rank 0 drew, so that the keys of two jobs that meet on one store
// never mix.
const (
	jobKey = "rdzv/job"
)

// jobRecord is what rank 0 publishes under jobKey.
type jobRecord struct {
	Member
	Nonce string `json:"nonce"`
}

// record is what a rank claims its rank with; the token tells two
// claims apart even when they come from the same process.
type record struct {
	Member
	Token string `json:"token"`
}

// Rendezvous is a joined job: every rank registered, and each knows the
// others. It owns its client, and on rank 0 the server.
type Rendezvous struct {
	client  *Client
	server  *Server // rank 0 when it served the store
	me      Member
	members []Member
	job     jobRecord
	prefix  string
	timeout time.Duration

	mu   sync.Mutex
	gens map[string]int // barrier generations by name

	watchOnce sync.Once
	failed    chan string
	stopWatch context.CancelFunc // guarded by mu

	closeOnce sync.Once
	closeErr  error
}

// Join makes this process a member of a job. Rank 0 serves the store on
// addr ("MASTER_ADDR:MASTER_PORT") unless serve is false (a store is
// already there); every rank dials it, claims its rank and waits for all
// ranks to arrive, up to timeout (≤ 0: DefaultTimeout). Rank 0 listens on
// every interface at addr's port, unless addr's host is a loopback address.
//
// Join fails, without waiting for the timeout where it can, when ranks do
// not arrive (the error names them and those that did), when the ranks
// disagree on the world size, when two processes claim one rank, and when
// the store belongs to a job with another JobID. A rank that finds a
// problem that concerns the whole job writes it to the store, and every
// waiting rank fails with it.
func Join(ctx context.Context, addr string, me Member, timeout time.Duration, serve bool) (*Rendezvous, error) {
	return JoinWithSecret(ctx, addr, me, nil, timeout, serve)
}

// JoinWithSecret is Join in a job whose ranks share secret (random
// enough for CheckSecret; nil: none): rank 0's store admits only the processes
// that prove they have it, and every rank checks that the store has it too
// (auth.go), so that no stranger can read or write the job's keys, claim
// a rank, or learn the NCCL unique id. The secret is never sent.
func JoinWithSecret(ctx context.Context, addr string, me Member, secret []byte, timeout time.Duration, serve bool) (*Rendezvous, error) {
	if me.Size < 1 {
		return nil, fmt.Errorf("rendezvous: WORLD_SIZE is %d; it must be at least 1", me.Size)
	}
	if me.Rank < 0 || me.Rank >= me.Size {
		return nil, fmt.Errorf("rendezvous: RANK %d is out of range for WORLD_SIZE %d (0 to %d)", me.Rank, me.Size, me.Size-1)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if err := CheckSecret(secret); err != nil {
		return nil, err
	}
	if me.Host == "" {
		me.Host, _ = os.Hostname()
	}
	if me.PID == 0 {
		me.PID = os.Getpid()
	}
	// No deadline on ctx: each wait carries what is left of timeout, and
	// the server's reply to a wait that timed out names the missing keys.
	start := time.Now()

	r := &Rendezvous{me: me, timeout: timeout, gens: map[string]int{}}
	dialAddr := addr
	if serve && me.Rank == 0 {
		srv, err := listen(listenAddr(addr), secret, me.Size)
		if err != nil {
			return nil, err
		}
		r.server = srv
		_, port, _ := net.SplitHostPort(srv.Addr())
		dialAddr = net.JoinHostPort(loopbackOf(addr), port)
	}
	c, err := dial(ctx, dialAddr, addr, secret, time.Until(start.Add(timeout)), me.Rank)
	if err != nil {
		if r.server != nil {
			r.server.Close()
		}
		return nil, err
	}
	c.SetTimeout(timeout)
	r.client = c
	if err := r.join(ctx, start); err != nil {
		c.Close()
		if r.server != nil {
			go linger(r.server, me.Size, start.Add(timeout))
		}
		return nil, err
	}
	// A rank whose connection ends before it closes the rendezvous died
	// (or lost the network): the store reports it as that rank's failure,
	// so that the others stop at once instead of waiting in a collective
	// until its timeout.
	lost := fmt.Sprintf("rank %d (%s) failed: it lost its connection to the store at %s (killed, crashed or cut off)", me.Rank, me.where(), addr)
	if err := c.OnDrop(r.prefix+"failed", []byte(lost)); err != nil {
		c.Close()
		return nil, r.waitErr(err, "registering with the store")
	}
	return r, nil
}

// linger keeps a failed job's store up, after rank 0's Join has returned,
// until every rank has come and gone again or the Join deadline passes: a
// rank that arrives meanwhile learns at once why the job failed, from the
// error key, instead of waiting for its own timeout to find no store.
func linger(s *Server, size int, deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		now, ever, changed := s.numConns()
		if now == 0 && ever >= size {
			break
		}
		select {
		case <-changed:
			continue
		case <-t.C:
		}
		break
	}
	s.Close()
}

// listenAddr is the address rank 0 serves on: addr's port on every
// interface, since MASTER_ADDR names the host as the other ranks reach
// it, which need not be an address of this host (NAT, a service name);
// but only the loopback interface when that is what addr names.
func listenAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // Listen will say what is wrong
	}
	if isLoopback(host) {
		return addr
	}
	return net.JoinHostPort("", port)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackOf is the address rank 0 dials its own server on.
func loopbackOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil && isLoopback(host) {
		return host
	}
	return "127.0.0.1"
}

func (r *Rendezvous) join(ctx context.Context, start time.Time) error {
	c, me := r.client, r.me
	timeout := r.timeout
	remaining := func() time.Duration { return max(time.Until(start.Add(timeout)), time.Millisecond) }

	// Rank 0 publishes the job; the others read it.
	if me.Rank == 0 {
		nonce := make([]byte, 8)
		_, _ = rand.Read(nonce)
		r.job = jobRecord{Member: me, Nonce: hex.EncodeToString(nonce)}
		mine, _ := json.Marshal(r.job)
		got, err := c.compareSet(ctx, jobKey, nil, mine)
		if err != nil {
			return r.waitErr(err, "publishing the job")
		}
		if !bytes.Equal(got, mine) {
			var other jobRecord
			if err := json.Unmarshal(got, &other); err != nil {
				return fmt.Errorf("rendezvous: the store at %s holds a job record this process cannot read: %v", c.addr, err)
			}
			if other.JobID != me.JobID {
				return anotherJob(c.addr, other.Member, me)
			}
			msg := fmt.Sprintf("rank 0 joined twice (%s and %s)", other.where(), me.where())
			r.prefix = "rdzv/" + other.Nonce + "/"
			r.publishError(ctx, msg)
			return fmt.Errorf("rendezvous: %s; if %s is gone, the store still holds the record of a job that did not close: restart the store",
				msg, other.where())
		}
	} else {
		vals, err := c.wait(ctx, []string{jobKey}, nil, remaining(), true)
		if err != nil {
			if errors.Is(err, ErrTimeout) {
				return fmt.Errorf("rendezvous: rank 0 did not join within %s (the store at %s is up, but no job was started on it)", fmtDuration(timeout), c.addr)
			}
			return r.waitErr(err, "waiting for rank 0")
		}
		if err := json.Unmarshal(vals[0], &r.job); err != nil {
			return fmt.Errorf("rendezvous: the store at %s holds a job record this process cannot read: %v", c.addr, err)
		}
		if r.job.JobID != "" && me.JobID != "" && r.job.JobID != me.JobID {
			// Another job's store: say so, and leave that job alone.
			return anotherJob(c.addr, r.job.Member, me)
		}
		r.prefix = "rdzv/" + r.job.Nonce + "/"
		if r.job.Size != me.Size {
			r.publishError(ctx, fmt.Sprintf("rank %d (%s) has WORLD_SIZE %d but rank 0 (%s) started a job of %d",
				me.Rank, me.where(), me.Size, r.job.where(), r.job.Size))
			return fmt.Errorf("rendezvous: this process has WORLD_SIZE %d but rank 0 (%s) started a job of %d",
				me.Size, r.job.where(), r.job.Size)
		}
	}
	r.prefix = "rdzv/" + r.job.Nonce + "/"

	// Claim this rank.
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	mine, _ := json.Marshal(record{Member: me, Token: hex.EncodeToString(token)})
	got, err := c.compareSet(ctx, r.rankKey(me.Rank), nil, mine)
	if err != nil {
		return r.waitErr(err, "claiming rank "+strconv.Itoa(me.Rank))
	}
	if !bytes.Equal(got, mine) {
		var other record
		_ = json.Unmarshal(got, &other)
		msg := fmt.Sprintf("rank %d joined twice (%s and %s)", me.Rank, other.where(), me.where())
		r.publishError(ctx, msg)
		return errors.New("rendezvous: " + msg)
	}

	// Wait for everyone, or for someone's error.
	keys := make([]string, me.Size)
	for i := range keys {
		keys[i] = r.rankKey(i)
	}
	vals, err := c.wait(ctx, keys, []string{r.prefix + "error"}, remaining(), true)
	var te *TimeoutError
	switch {
	case errors.As(err, &te):
		msg := r.missingRanks(ctx, keys, te.Missing)
		r.publishError(ctx, msg)
		return errors.New("rendezvous: " + msg)
	case err != nil:
		return r.waitErr(err, "waiting for the other ranks")
	}
	r.members = make([]Member, me.Size)
	for i, v := range vals {
		var rec record
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("rendezvous: the record of rank %d cannot be read: %v", i, err)
		}
		r.members[i] = rec.Member
	}
	return nil
}

func anotherJob(addr string, job, me Member) error {
	return fmt.Errorf("rendezvous: the store at %s serves job %q (rank 0 on %s), not this job %q: is another job using MASTER_PORT?",
		addr, job.JobID, job.where(), me.JobID)
}

func (r *Rendezvous) rankKey(rank int) string { return r.prefix + "rank/" + strconv.Itoa(rank) }

// publishError tells the job why this rank gives up; the first error wins.
func (r *Rendezvous) publishError(ctx context.Context, msg string) {
	_, _ = r.client.compareSet(ctx, r.prefix+"error", nil, []byte(msg))
}

// waitErr turns the error of a request during Join into Join's error.
func (r *Rendezvous) waitErr(err error, doing string) error {
	var ab *abortedError
	switch {
	case errors.As(err, &ab):
		return errors.New("rendezvous: " + string(ab.value))
	case errors.Is(err, ErrLost):
		return fmt.Errorf("%w (while %s; did rank 0 fail?)", err, doing)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("rendezvous: join stopped while %s: %w", doing, err)
	}
	return err
}

// missingRanks describes the ranks that did not arrive, and those that did.
func (r *Rendezvous) missingRanks(ctx context.Context, keys, missing []string) string {
	gone := map[string]bool{}
	for _, k := range missing {
		gone[k] = true
	}
	var absent []int
	var present []string
	for i, k := range keys {
		if gone[k] {
			absent = append(absent, i)
		} else {
			present = append(present, k)
		}
	}
	arrived := "none"
	if len(present) > 0 {
		var members []Member
		if vals, err := r.client.wait(ctx, present, nil, time.Second, true); err == nil {
			for _, v := range vals {
				var rec record
				if json.Unmarshal(v, &rec) == nil {
					members = append(members, rec.Member)
				}
			}
		}
		arrived = listOf(members, func(m Member) string { return fmt.Sprintf("%d on %s", m.Rank, m.where()) })
	}
	noun := "ranks"
	if len(absent) == 1 {
		noun = "rank"
	}
	msg := fmt.Sprintf("%s %s of %d did not join within %s (arrived: %s)",
		noun, listOf(absent, strconv.Itoa), r.me.Size, fmtDuration(r.timeout), arrived)
	// The store Join served describes the connections that claimed a
	// missing rank and were refused (admission.go): most likely that
	// rank, with another secret. Only likely: anyone can claim a rank, so
	// it is news, not a verdict.
	var refused []string
	for _, rank := range absent[:min(len(absent), 16)] {
		if vals, err := r.client.wait(ctx, []string{refusedKey(rank)}, nil, time.Millisecond, true); err == nil {
			refused = append(refused, string(vals[0]))
		}
	}
	if len(refused) > 0 {
		msg += "; the store refused " + listOf(refused, func(s string) string { return s }) +
			" for a wrong job secret: does that process have this job's ZEROENG_JOB_TOKEN?"
	}
	return msg
}

// Client is the rendezvous' client, for the job's own keys (the NCCL
// unique id, say). Keys under "rdzv/" are the rendezvous'.
func (r *Rendezvous) Client() *Client { return r.client }

// Server is the store's server on rank 0 when Join started it, else nil.
func (r *Rendezvous) Server() *Server { return r.server }

// Me is this process's Member, with Host and PID filled in.
func (r *Rendezvous) Me() Member { return r.me }

// Members lists every rank, in rank order.
func (r *Rendezvous) Members() []Member { return append([]Member(nil), r.members...) }

// Fail tells the other ranks that this one failed, and why. The first
// failure reported in a job is the one every rank sees.
func (r *Rendezvous) Fail(msg string) error {
	const most = 64 << 10
	if len(msg) > most {
		msg = msg[:most] + "…"
	}
	v := fmt.Sprintf("rank %d (%s) failed: %s", r.me.Rank, r.me.where(), msg)
	_, err := r.client.compareSet(context.Background(), r.prefix+"failed", nil, []byte(v))
	return err
}

// Failed returns a channel that receives the failure of a rank ("rank 2
// (host-b pid 77) failed: ..."; this rank's own too), or the loss of the
// store (rank 0 died), once; it is closed after that, when the
// rendezvous is closed, and when rank 0 shut its store down in order. The watch starts at the first call.
func (r *Rendezvous) Failed() <-chan string {
	r.watchOnce.Do(func() {
		r.failed = make(chan string, 1)
		ctx, cancel := context.WithCancel(context.Background())
		r.mu.Lock()
		r.stopWatch = cancel
		r.mu.Unlock()
		go func() {
			defer close(r.failed)
			vals, err := r.client.wait(ctx, []string{r.prefix + "failed"}, nil, 0, true)
			switch {
			case err == nil:
				r.failed <- string(vals[0])
			case errors.Is(err, errShutDown):
				// Rank 0 ended and shut its store down in order: no
				// failure, only no more news of one.
			case errors.Is(err, ErrLost):
				r.failed <- err.Error()
			}
		}()
	})
	return r.failed
}

// Barrier waits until every rank has reached the barrier of this name (a
// barrier can be passed any number of times; each rank counts its own
// passes), up to timeout (≤ 0: the Join timeout). It fails early if a
// rank reports a failure (Fail), and on timeout names the ranks that did
// not arrive.
func (r *Rendezvous) Barrier(ctx context.Context, name string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = r.timeout
	}
	r.mu.Lock()
	gen := r.gens[name]
	r.gens[name]++
	r.mu.Unlock()
	base := r.prefix + "barrier/" + strconv.Itoa(gen) + "/" + name + "/"
	if err := r.client.Set(base+strconv.Itoa(r.me.Rank), nil); err != nil {
		return fmt.Errorf("rendezvous: barrier %q: %w", name, err)
	}
	keys := make([]string, r.me.Size)
	for i := range keys {
		keys[i] = base + strconv.Itoa(i)
	}
	_, err := r.client.wait(ctx, keys, []string{r.prefix + "failed"}, timeout, false)
	var te *TimeoutError
	var ab *abortedError
	switch {
	case errors.As(err, &te):
		return fmt.Errorf("rendezvous: barrier %q timed out after %s waiting for %s of %d", name, fmtDuration(timeout),
			r.rankList(keys, te.Missing), r.me.Size)
	case errors.As(err, &ab):
		return fmt.Errorf("rendezvous: barrier %q: %s", name, ab.value)
	case err != nil:
		return fmt.Errorf("rendezvous: barrier %q: %w", name, err)
	}
	return nil
}

// rankList names the ranks whose keys are missing: "ranks 2, 3".
func (r *Rendezvous) rankList(keys, missing []string) string {
	gone := map[string]bool{}
	for _, k := range missing {
		gone[k] = true
	}
	var ranks []int
	for i, k := range keys {
		if gone[k] {
			ranks = append(ranks, i)
		}
	}
	if len(ranks) == 1 {
		return "rank " + strconv.Itoa(ranks[0])
	}
	return "ranks " + listOf(ranks, strconv.Itoa)
}

// Close leaves the job. On rank 0 with its own server, it first waits
// until every other rank has closed (or lost its connection), up to the
// Join timeout, so that no rank loses the store while it still reads from
// it; if some never close, the error names them and the store is closed
// anyway. On rank 0 with a store it did not start, Close removes the job
// record so that the store can serve a next job.
func (r *Rendezvous) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.close() })
	return r.closeErr
}

func (r *Rendezvous) close() error {
	r.mu.Lock()
	if r.stopWatch != nil {
		r.stopWatch()
	}
	r.mu.Unlock()
	c := r.client
	_ = c.OnDrop("", nil) // leaving is not dying
	closedKey := func(rank int) string { return r.prefix + "closed/" + strconv.Itoa(rank) }
	_ = c.Set(closedKey(r.me.Rank), nil)
	var err error
	switch {
	case r.me.Rank == 0 && r.server != nil:
		// Every other rank closes its connection after it says it closed;
		// a rank that died lost its connection. Either way, rank 0's is the
		// last one left.
		deadline := time.NewTimer(r.timeout)
		defer deadline.Stop()
	wait:
		for {
			n, _, changed := r.server.numConns()
			if n <= 1 {
				break
			}
			select {
			case <-changed:
			case <-deadline.C:
				keys := make([]string, r.me.Size)
				for i := range keys {
					keys[i] = closedKey(i)
				}
				if missing := r.server.missing(keys); len(missing) > 0 {
					err = fmt.Errorf("rendezvous: %s of %d did not close within %s; closed the store anyway",
						r.rankList(keys, missing), r.me.Size, fmtDuration(r.timeout))
				}
				break wait
			}
		}
	case r.me.Rank == 0:
		_, _ = c.Delete(jobKey)
	}
	c.Close()
	if r.server != nil {
		if e := r.server.Close(); err == nil && e != nil && !errors.Is(e, net.ErrClosed) {
			err = e
		}
	}
	return err
}
