// Package jobenv owns how a process learns its place in a job of several
// processes from its environment: the variables that torchrun (and
// `zeroeng launch`) set, those of Open MPI's mpirun, of a PMI launcher
// (MPICH, Intel MPI, srun --mpi=pmi2) and of Slurm's srun.
//
// The variables are read in that order of precedence: RANK and
// WORLD_SIZE, when set, say what the user or the launcher chose, and win
// over the MPI and Slurm ones (torchrun run inside an srun step sets both).
// A process that finds none of them is a job of its own (Found is false).
//
// Every variable is checked: a value that is not a number, a rank outside
// the world or a local rank outside the node is an error that names the
// variable and its value, so that a wrong launch line fails at once
// instead of hanging at the rendezvous.
package jobenv

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DefaultPort is the rendezvous port when MASTER_PORT is not set under
// a launcher that does not set it (mpirun, srun), as in PyTorch.
const DefaultPort = 29500

// Place is this process's place in a job.
type Place struct {
	// Source names the launcher whose variables gave the place:
	// "torchrun" (RANK/WORLD_SIZE), "openmpi", "pmi" or "slurm".
	Source string
	// Rank and Size place the process among all the job's processes.
	Rank, Size int
	// LocalRank and LocalSize place it among the processes of its node;
	// LocalRank picks its GPU.
	LocalRank, LocalSize int
	// MasterAddr and MasterPort locate the rendezvous store that rank 0
	// serves. MasterAddr is empty when the launcher gave no address (an
	// MPI job, whose ranks can meet through MPI itself).
	MasterAddr string
	MasterPort int
	// AgentStore is set under torchrun with its static rendezvous
	// (TORCHELASTIC_USE_AGENT_STORE=True): torchrun's own TCPStore holds
	// MASTER_PORT on rank 0's node, so zeroeng's store takes StorePort.
	AgentStore bool
}

// StorePort is the port of zeroeng's rendezvous store: MASTER_PORT, or
// the next one when torchrun's agent holds MASTER_PORT.
func (p Place) StorePort() int {
	switch {
	case !p.AgentStore:
		return p.MasterPort
	case p.MasterPort == 65535:
		return p.MasterPort - 1
	}
	return p.MasterPort + 1
}

// Addr is MasterAddr:StorePort(), where rank 0 serves zeroeng's
// rendezvous store, ready for net.Dial.
func (p Place) Addr() string {
	return net.JoinHostPort(p.MasterAddr, strconv.Itoa(p.StorePort()))
}

func (p Place) String() string {
	s := fmt.Sprintf("rank %d of %d (local %d of %d, from %s variables)", p.Rank, p.Size, p.LocalRank, p.LocalSize, p.Source)
	if p.MasterAddr != "" {
		s += ", store " + p.Addr()
	}
	return s
}

// Variables are the environment variables that FromEnv reads, for
// messages and for launchers that must not pass stale ones on.
var Variables = []string{
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
	"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
	"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_ID", "SLURM_STEP_TASKS_PER_NODE",
	"SLURM_NODEID", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
}

// FromEnv reads the place from getenv (os.Getenv). found is false when no
// launcher's variables are set: the process runs a job of its own.
func FromEnv(getenv func(string) string) (p Place, found bool, err error) {
	r := reader{getenv: getenv}
	switch {
	case getenv("RANK") != "" || getenv("WORLD_SIZE") != "":
		p, err = r.torchrun()
	case getenv("OMPI_COMM_WORLD_SIZE") != "":
		p, err = r.mpi("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
	case getenv("PMI_SIZE") != "":
		p, err = r.mpi("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
	case getenv("SLURM_STEP_ID") != "" && getenv("SLURM_PROCID") != "":
		// SLURM_STEP_ID tells an srun step from the batch script, where
		// SLURM_PROCID is 0 and SLURM_NTASKS the job's whole allocation.
		p, err = r.slurm()
	default:
		return Place{}, false, nil
	}
	if err != nil {
		return Place{}, true, err
	}
	return p, true, p.check()
}

type reader struct {
	getenv func(string) string
	err    error
}

// int reads a required non-negative integer variable.
func (r *reader) int(name string) int {
	v, ok := r.optional(name)
	if !ok && r.err == nil {
		r.err = fmt.Errorf("jobenv: %s is not set", name)
	}
	return v
}

// optional reads a non-negative integer variable that may be unset.
func (r *reader) optional(name string) (int, bool) {
	s := strings.TrimSpace(r.getenv(name))
	if s == "" {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	if (err != nil || v < 0) && r.err == nil {
		r.err = fmt.Errorf("jobenv: %s=%q is not a non-negative integer", name, r.getenv(name))
	}
	return v, true
}

// master reads MASTER_ADDR and MASTER_PORT; required says whether the
// launcher must have set them.
func (r *reader) master(p *Place, required bool) {
	p.MasterAddr = strings.TrimSpace(r.getenv("MASTER_ADDR"))
	port, ok := r.optional("MASTER_PORT")
	switch {
	case ok && (port < 1 || port > 65535):
		if r.err == nil {
			r.err = fmt.Errorf("jobenv: MASTER_PORT=%d is not a TCP port (1-65535)", port)
		}
	case ok:
		p.MasterPort = port
	default:
		p.MasterPort = DefaultPort
	}
	if required && p.Size > 1 && r.err == nil {
		switch {
		case p.MasterAddr == "":
			r.err = fmt.Errorf("jobenv: WORLD_SIZE=%d but MASTER_ADDR is not set: every rank needs the address of rank 0's rendezvous store", p.Size)
		case !ok:
			r.err = fmt.Errorf("jobenv: WORLD_SIZE=%d but MASTER_PORT is not set: every rank needs the port of rank 0's rendezvous store", p.Size)
		}
	}
}

func (r *reader) torchrun() (Place, error) {
	p := Place{Source: "torchrun", Rank: r.int("RANK"), Size: r.int("WORLD_SIZE")}
	var ok bool
	if p.LocalRank, ok = r.optional("LOCAL_RANK"); !ok {
		p.LocalRank = p.Rank // one node, set up by hand
	}
	if p.LocalSize, ok = r.optional("LOCAL_WORLD_SIZE"); !ok {
		p.LocalSize = p.Size
	}
	r.master(&p, true)
	p.AgentStore = r.getenv("TORCHELASTIC_USE_AGENT_STORE") == "True"
	return p, r.err
}

func (r *reader) mpi(source, rank, size, localRank, localSize string) (Place, error) {
	p := Place{Source: source, Rank: r.int(rank), Size: r.int(size)}
	var ok bool
	if p.LocalRank, ok = r.optional(localRank); !ok {
		p.LocalRank = p.Rank
	}
	if p.LocalSize, ok = r.optional(localSize); !ok {
		p.LocalSize = p.Size
	}
	r.master(&p, false)
	return p, r.err
}

func (r *reader) slurm() (Place, error) {
	p := Place{Source: "slurm", Rank: r.int("SLURM_PROCID"), Size: r.int("SLURM_NTASKS"), LocalRank: r.int("SLURM_LOCALID")}
	node := r.int("SLURM_NODEID")
	if r.err != nil {
		return p, r.err
	}
	p.LocalSize = p.Size
	if tasks := r.getenv("SLURM_STEP_TASKS_PER_NODE"); tasks != "" {
		counts, err := ExpandTaskCounts(tasks)
		if err != nil {
			return p, fmt.Errorf("jobenv: SLURM_STEP_TASKS_PER_NODE=%q: %v", tasks, err)
		}
		if node >= len(counts) {
			return p, fmt.Errorf("jobenv: SLURM_NODEID=%d but SLURM_STEP_TASKS_PER_NODE=%q lists %d nodes", node, tasks, len(counts))
		}
		p.LocalSize = counts[node]
	}
	r.master(&p, false)
	if p.MasterAddr == "" {
		list := r.getenv("SLURM_STEP_NODELIST")
		if list == "" {
			list = r.getenv("SLURM_JOB_NODELIST")
		}
		if list != "" {
			host, err := FirstHost(list)
			if err != nil {
				return p, fmt.Errorf("jobenv: SLURM_STEP_NODELIST=%q: %v", list, err)
			}
			p.MasterAddr = host
		}
	}
	return p, r.err
}

func (p Place) check() error {
	switch {
	case p.Size < 1:
		return fmt.Errorf("jobenv: the world size (%s variables) is %d; it must be at least 1", p.Source, p.Size)
	case p.Rank >= p.Size:
		return fmt.Errorf("jobenv: rank %d is outside a world of %d ranks (%s variables)", p.Rank, p.Size, p.Source)
	case p.LocalSize < 1 || p.LocalSize > p.Size:
		return fmt.Errorf("jobenv: %d local ranks in a world of %d (%s variables)", p.LocalSize, p.Size, p.Source)
	case p.LocalRank >= p.LocalSize:
		return fmt.Errorf("jobenv: local rank %d is outside the node's %d ranks (%s variables)", p.LocalRank, p.LocalSize, p.Source)
	}
	return nil
}

// ExpandTaskCounts expands Slurm's tasks-per-node notation, "2(x3),1",
// into one count per node: [2 2 2 1].
func ExpandTaskCounts(s string) ([]int, error) {
	var counts []int
	for _, part := range strings.Split(s, ",") {
		count, times := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			count, times = part[:i], part[i+2:len(part)-1]
		}
		c, err1 := strconv.Atoi(count)
		n, err2 := strconv.Atoi(times)
		if err1 != nil || err2 != nil || c < 1 || n < 1 || n > 1<<16 {
			return nil, fmt.Errorf("%q is not a task count such as 4 or 4(x2)", part)
		}
		for range n {
			counts = append(counts, c)
		}
	}
	return counts, nil
}

// FirstHost is the first host name of a Slurm host list such as
// "gpu[003-004,010],login1": "gpu003", the host of rank 0.
func FirstHost(list string) (string, error) {
	list = strings.TrimSpace(list)
	i := strings.IndexAny(list, "[,")
	if i < 0 {
		if list == "" {
			return "", fmt.Errorf("empty host list")
		}
		return list, nil
	}
	if list[i] == ',' {
		if i == 0 {
			return "", fmt.Errorf("empty host name")
		}
		return list[:i], nil
	}
	prefix, rest := list[:i], list[i+1:]
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return "", fmt.Errorf("no ] after %q", list[:i+1])
	}
	first := rest[:end]
	if j := strings.IndexAny(first, ",-"); j >= 0 {
		first = first[:j]
	}
	if first == "" || strings.Trim(first, "0123456789") != "" {
		return "", fmt.Errorf("%q is not a node number", first)
	}
	// The suffix after ] belongs to every host: "n[1-2]-ib" gives "n1-ib".
	suffix := rest[end+1:]
	if k := strings.IndexByte(suffix, ','); k >= 0 {
		suffix = suffix[:k]
	}
	if strings.ContainsAny(suffix, "[]") {
		return "", fmt.Errorf("host lists with several ranges per name are not supported")
	}
	return prefix + first + suffix, nil
}
