package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/zeroeng/zeroeng/bench"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/jobenv"
	"github.com/zeroeng/zeroeng/engine/rendezvous"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/gpu"
	"github.com/zeroeng/zeroeng/mpi"
	"github.com/zeroeng/zeroeng/nccl"
	"github.com/zeroeng/zeroeng/script"
)

// This file is how `zeroeng run` takes its place in a job of several
// processes, one rank each, started by zeroeng launch, torchrun, mpirun
// or srun (engine/jobenv reads which). The ranks talk:
//
//   - on GPUs, NCCL: rank 0 serves a rendezvous store (engine/rendezvous)
//     on MASTER_ADDR:MASTER_PORT, makes the NCCL unique id and hands it to
//     the others through it; LOCAL_RANK picks the GPU;
//   - on the CPU, Open MPI (package mpi): the job must be an MPI job
//     (mpirun, srun --mpi=pmix), which MPI_Init joins by itself.
//
// The store also carries failures: a rank that fails says so, and the
// others stop at once with an error naming it instead of waiting for a
// collective's timeout.

// launchedEnv is set by zeroeng launch in the environment of the
// processes it starts: it prefixes their output with their rank itself.
const launchedEnv = "ZEROENG_LAUNCHED"

// processJob is this process's part of a job of several processes.
type processJob struct {
	place    jobenv.Place
	cuda     bool
	dist     dist.Options
	timeout  time.Duration   // of the rendezvous
	ctx      context.Context // the job's: cancelled by SIGINT and SIGTERM
	launched bool

	made *processBackend // the backend backend made, once it has
}

// stopDelay is how long a rank that another rank's failure stopped waits
// before it exits: the failed rank's process, which is ending too, then
// ends first, and a launcher that names the first rank to fail names it.
const stopDelay = 500 * time.Millisecond

// stoppedByAnother reports whether the job stopped because a rank of
// another process failed.
func (p *processJob) stoppedByAnother() bool {
	if p.made == nil {
		return false
	}
	p.made.mu.Lock()
	defer p.made.mu.Unlock()
	return p.made.external
}

// apply sets the job options that place this process's single
// rank in the job: its rank, its device and its backend.
func (p *processJob) apply(jo *script.JobOptions) {
	jo.Ranks, jo.FirstRank, jo.WorldSize, jo.FirstLocalRank, jo.LocalWorldSize = 1, p.place.Rank, p.place.Size, p.place.LocalRank, p.place.LocalSize
	jo.NoPrefix = p.launched
	if p.cuda {
		jo.NewDevice = func(int) (device.Device, error) {
			d, err := gpu.Open(gpu.Options{Ordinal: p.place.LocalRank, Index: p.place.Rank, MaxMemory: jo.MaxMemory})
			if err != nil {
				return nil, fmt.Errorf("--device cuda: GPU %d (LOCAL_RANK): %w", p.place.LocalRank, err)
			}
			return d, nil
		}
	} else {
		jo.NewDevice = nil
	}
	jo.NewBackend = p.backend
}

// storeAddr is where rank 0 serves the rendezvous store.
func (p *processJob) storeAddr() (string, error) {
	if p.place.MasterAddr != "" {
		return p.place.Addr(), nil
	}
	if p.place.LocalSize == p.place.Size {
		// Every rank is on this node: loopback will do.
		q := p.place
		q.MasterAddr = "127.0.0.1"
		return q.Addr(), nil
	}
	return "", fmt.Errorf("run: the ranks span several nodes (%d of %d here) and MASTER_ADDR is not set: say where rank 0 serves the rendezvous store", p.place.LocalSize, p.place.Size)
}

func (p *processJob) join() (*rendezvous.Rendezvous, error) {
	addr, err := p.storeAddr()
	if err != nil {
		return nil, err
	}
	secret, err := jobSecret(addr)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	me := rendezvous.Member{Rank: p.place.Rank, Size: p.place.Size, Host: host, PID: os.Getpid()}
	ctx := p.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	return rendezvous.JoinWithSecret(ctx, addr, me, secret, p.timeout, p.place.Rank == 0)
}

// jobTokenEnv names the job's secret, which every rank must have: rank
// 0's rendezvous store admits only the processes that prove they know it
// (engine/rendezvous/auth.go). zeroeng launch makes one for a job of one
// node; the ranks of a job across nodes, or started by hand, get it from
// the user. It is never printed.
const jobTokenEnv = "ZEROENG_JOB_TOKEN"

// jobSecret is the job's secret from ZEROENG_JOB_TOKEN. Without one, a
// store on a loopback address is open to this host's processes (as
// PyTorch's TCPStore is); one that the network reaches is refused.
func jobSecret(addr string) ([]byte, error) {
	tok := os.Getenv(jobTokenEnv)
	if tok == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil && isLoopbackHost(host) {
			return nil, nil
		}
		return nil, fmt.Errorf("run: the rendezvous store at %s is reachable from the network, and %s is not set: give every rank the same secret of at least %d characters (for example export %s=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')), or start the job with zeroeng launch, which makes one", addr, jobTokenEnv, rendezvous.MinSecretLen, jobTokenEnv)
	}
	if err := rendezvous.CheckSecret([]byte(tok)); err != nil {
		return nil, fmt.Errorf("run: %s: %v", jobTokenEnv, strings.TrimPrefix(err.Error(), "rendezvous: "))
	}
	return []byte(tok), nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// backend makes this rank's process group (script.JobOptions.NewBackend).
func (p *processJob) backend(devs []device.Device) (script.Backend, error) {
	if !p.cuda {
		if !mpi.InJob() {
			// Meet the others anyway: a wrong world size or a rank that
			// never starts is then found before the script runs.
			rdv, err := p.join()
			if err != nil {
				return nil, err
			}
			why := fmt.Errorf("dist: collectives between processes on the CPU run on Open MPI, and this job was not started by mpirun (its ranks come from %s variables): start it with `mpirun -np %d zeroeng run ...`, or with `zeroeng launch`, which uses mpirun on the CPU", p.place.Source, p.place.Size)
			p.made = newProcessBackend(noTransport{rank: p.place.Rank, size: p.place.Size, err: why}, nil, rdv)
			return p.made, nil
		}
		lib, err := mpi.Load()
		if err != nil {
			return nil, fmt.Errorf("run: rank %d of %d on the CPU needs Open MPI: %w", p.place.Rank, p.place.Size, err)
		}
		w, err := mpi.NewWorld(lib, p.dist)
		if err != nil {
			return nil, err
		}
		if w.Rank() != p.place.Rank || w.Size() != p.place.Size {
			w.Abort(errors.New("mismatched world"))
			w.Close()
			return nil, fmt.Errorf("run: MPI says this is rank %d of %d, the %s variables say rank %d of %d", w.Rank(), w.Size(), p.place.Source, p.place.Rank, p.place.Size)
		}
		return newProcessBackend(w.Group(0), w, nil), nil
	}

	lib, err := nccl.Load()
	if err != nil {
		return nil, fmt.Errorf("run: rank %d of %d on a GPU needs NCCL: %w", p.place.Rank, p.place.Size, err)
	}
	rdv, err := p.join()
	if err != nil {
		return nil, err
	}
	id, err := shareNCCLID(rdv, p.place.Rank, lib.GetUniqueID)
	if err != nil {
		rdv.Fail(err.Error())
		rdv.Close()
		return nil, fmt.Errorf("run: NCCL unique id: %w", err)
	}
	g, err := nccl.NewGroupFromID(lib, devs[0].(*gpu.Device), id, p.place.Rank, p.place.Size, p.dist)
	if err != nil {
		rdv.Fail(err.Error())
		rdv.Close()
		return nil, err
	}
	p.made = newProcessBackend(g, g, rdv)
	return p.made, nil
}

// shareNCCLID gives every rank the unique id of the job's NCCL
// communicator: rank 0 makes it and puts it in the store, the others read
// it (waiting for it up to the store client's timeout).
func shareNCCLID(rdv *rendezvous.Rendezvous, rank int, newID func() (nccl.UniqueID, error)) (nccl.UniqueID, error) {
	const key = "nccl/world"
	var id nccl.UniqueID
	if rank == 0 {
		id, err := newID()
		if err != nil {
			return id, err
		}
		return id, rdv.Client().Set(key, id[:])
	}
	b, err := rdv.Client().Get(key)
	if err != nil {
		return id, err
	}
	if len(b) != len(id) {
		return id, fmt.Errorf("the store holds a %d-byte NCCL id, not %d", len(b), len(id))
	}
	copy(id[:], b)
	return id, nil
}

// processBackend is the script.Backend of one rank in its own process:
// its group, what aborts and closes it, and the rendezvous that tells the
// other ranks when this one fails (and this one when another fails).
type processBackend struct {
	group dist.ProcessGroup
	owner interface {
		Abort(error)
		Close() error
	}
	rdv *rendezvous.Rendezvous

	once     sync.Once
	mu       sync.Mutex
	external bool       // aborted because another rank failed
	stopped  chan error // that failure, for script.RunJob
}

// Stopped delivers the failure of another rank (script.RunJob stops the
// job with it).
func (b *processBackend) Stopped() <-chan error { return b.stopped }

func newProcessBackend(g dist.ProcessGroup, owner interface {
	Abort(error)
	Close() error
}, rdv *rendezvous.Rendezvous) *processBackend {
	b := &processBackend{group: g, owner: owner, rdv: rdv, stopped: make(chan error, 1)}
	if rdv != nil {
		self := fmt.Sprintf("rank %d (", g.Rank())
		go func() {
			msg, ok := <-rdv.Failed()
			if !ok || strings.HasPrefix(msg, self) {
				return // closed, or this rank's own failure
			}
			b.mu.Lock()
			b.external = true
			b.mu.Unlock()
			err := fmt.Errorf("dist: stopped: %s", msg)
			b.abort(err)
			b.stopped <- err
		}()
	}
	return b
}

func (b *processBackend) Group(int) dist.ProcessGroup { return b.group }

// Leave tells a backend that can (mpi.World) that this rank's script has
// ended, so that the other ranks' collectives that need it fail at once
// instead of at their timeout, as on the in-process backend.
func (b *processBackend) Leave(local int) {
	if l, ok := b.owner.(interface{ Leave(int) }); ok {
		l.Leave(local)
	}
}

// Abort stops this rank's collectives; unless another rank's failure
// caused it, the others learn of it through the store.
func (b *processBackend) Abort(err error) {
	var stop *script.StopError
	var se *script.Error
	if errors.As(err, &stop) && errors.As(stop.Cause, &se) && se.Exit != nil && se.Exit.Code == 0 {
		// process.exit(0), or the exit after a checkpoint on SIGTERM,
		// which every rank makes together: not a failure, and MPI is
		// finalised as after a normal end.
		return
	}
	b.mu.Lock()
	external := b.external
	b.mu.Unlock()
	if b.rdv != nil && !external {
		why := err.Error()
		var stop *script.StopError
		if errors.As(err, &stop) && stop.Cause != nil {
			why = stop.Cause.Error()
		}
		if line, _, cut := strings.Cut(why, "\n"); cut {
			why = line + " …"
		}
		b.rdv.Fail(why)
	}
	b.abort(err)
}

func (b *processBackend) abort(err error) {
	b.once.Do(func() {
		if b.owner != nil {
			b.owner.Abort(err)
		}
	})
}

func (b *processBackend) Close() error {
	var err error
	if b.owner != nil {
		err = b.owner.Close()
	}
	if b.rdv != nil {
		err = errors.Join(err, b.rdv.Close())
		// Rank 0's store: whatever reached it without the job's secret.
		if s := b.rdv.Server(); s != nil {
			if ref := s.Refused(); ref.Total > 0 {
				fmt.Fprintln(os.Stderr, "zeroeng:", ref)
			}
		}
	}
	return err
}

// noTransport is the process group of a rank that has no way to move
// tensors to the others: every collective fails with err.
type noTransport struct {
	rank, size int
	err        error
}

func (n noTransport) Rank() int { return n.rank }
func (n noTransport) Size() int { return n.size }
func (n noTransport) AllReduce(*tensor.Tensor, dist.ReduceOp) *dist.Work {
	return dist.Failed(n.err)
}
func (n noTransport) Broadcast(*tensor.Tensor, int) *dist.Work { return dist.Failed(n.err) }
func (n noTransport) ReduceScatter(_, _ *tensor.Tensor, _ dist.ReduceOp) *dist.Work {
	return dist.Failed(n.err)
}
func (n noTransport) AllGather(_, _ *tensor.Tensor) *dist.Work { return dist.Failed(n.err) }
func (n noTransport) AllGatherInto([]*tensor.Tensor, *tensor.Tensor) *dist.Work {
	return dist.Failed(n.err)
}
func (n noTransport) AllToAll(_, _ *tensor.Tensor) *dist.Work     { return dist.Failed(n.err) }
func (n noTransport) Barrier() *dist.Work                         { return dist.Failed(n.err) }
func (n noTransport) Send(*tensor.Tensor, int) *dist.Work         { return dist.Failed(n.err) }
func (n noTransport) Recv(*tensor.Tensor, int) *dist.Work         { return dist.Failed(n.err) }
func (n noTransport) BroadcastObject([]byte, int) ([]byte, error) { return nil, n.err }
func (n noTransport) GatherObject([]byte, int) ([][]byte, error)  { return nil, n.err }
func (n noTransport) NewGroup([]int) (dist.ProcessGroup, error)   { return nil, n.err }

// perRankFile names rank's own copy of an output file in a job of several
// processes, which must not write one file each over the others:
// "trace.json" becomes "trace.rank1.json". Paths that are not regular
// files (/dev/stdout, a pipe) are shared as they are.
func perRankFile(path string, rank int) string {
	if path == "" {
		return ""
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return path
	}
	dot := strings.LastIndexByte(path, '.')
	if dot <= strings.LastIndexByte(path, '/') {
		return fmt.Sprintf("%s.rank%d", path, rank)
	}
	return fmt.Sprintf("%s.rank%d%s", path[:dot], rank, path[dot:])
}

// benchProcess runs a data-parallel bench workload as this process's rank
// of an MPI job; rank 0 prints the line.
func benchProcess(name string, place jobenv.Place) error {
	if !mpi.InJob() {
		return fmt.Errorf("bench: %s across processes runs on Open MPI: start it with mpirun -np %d zeroeng bench %s", name, place.Size, name)
	}
	lib, err := mpi.Load()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	w, err := mpi.NewWorld(lib, dist.Options{})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r, err := bench.RunProcess(name, w.Group(0))
	if err != nil {
		w.Abort(err)
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if w.Rank() == 0 {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	return nil
}
