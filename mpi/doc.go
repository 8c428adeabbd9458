// Package mpi owns CPU training across processes over Open MPI: it binds
// libmpi at run time and implements dist.ProcessGroup over
// MPI_COMM_WORLD and communicators split from it, with the in-process
// backend's semantics (engine/dist), so that DDP, ZeRO and the comm hooks
// run unchanged when `mpirun -np 4 zeroeng run train.js` starts one rank
// per process.
//
// # Binding
//
// Load opens libmpi.so.40 (then libmpi.so; $ZEROENG_MPI_LIB names a file
// instead) with purego and RTLD_GLOBAL, which Open MPI's own plugins
// (mca_*.so) need; the binary is still built with CGO_ENABLED=0. Only
// Open MPI's ABI (versions 3 to 5) is supported: its handles are the
// addresses of global objects, found with dlsym (MPI_COMM_WORLD is
// &ompi_mpi_comm_world, MPI_FLOAT &ompi_mpi_float, MPI_SUM
// &ompi_mpi_op_sum, MPI_REQUEST_NULL &ompi_request_null), and its
// constants are mpi.h's (MPI_IN_PLACE is (void *) 1, MPI_UNDEFINED
// -32766, MPI_Status five fields in 24 bytes). MPICH and its derivatives
// use integer handles; Load says so when the library lacks Open MPI's
// symbols. Every call's return code is checked: a failure is an *Error
// naming the call, with MPI_Error_string's text, and the communicators use
// MPI_ERRORS_RETURN so that errors come back instead of aborting the job.
// InJob tells whether mpirun (or srun with PMIx or PMI-2) started the
// process.
//
// # Threading
//
// NewWorld starts the world's communication goroutine, which locks itself
// to its OS thread, calls MPI_Init_thread asking for MPI_THREAD_FUNNELED
// (it checks what was provided) and then makes every MPI call of the
// process. Collectives are queued to it in the order the rank issues
// them, which is the order MPI needs on every rank. It starts each with
// non-blocking calls, keeps several in flight (up to 32 a group, and
// up to 4 MiB of them unless one is larger, since big collectives move
// their data faster one after another), and tests them with
// MPI_Testsome: Open MPI moves data only inside MPI calls. While requests
// are in flight it tests back to back, yielding the core (sched_yield)
// between calls, for 100µs after the last completion plus the time the
// bytes in flight take at 1 GB/s (at most 20ms); then it sleeps between
// tests, from 4µs doubling to 250µs. With nothing in flight it sleeps on
// a futex, which a new call wakes in microseconds (parking a goroutine
// locked to its thread costs tens of them), without holding a CPU. When a
// rank issues its collectives one at a time (its last sleep there was
// shorter than 50µs), it first looks for the next call for 50µs, yielding
// the core between looks, so that it takes it without a wake-up; it parks
// at once when it has just started a goroutine, which another thread
// takes sooner from a P in a system call than from a running one.
//
// A group's collectives complete in issue order, on a goroutine of the
// group that runs their Works' continuations (so the communication
// goroutine never runs user code): a continuation may issue collectives
// but must not wait for a later work of its group. That goroutine too,
// once it has finished the completed ones, waits up to 50µs for the next
// one (yielding its P, to the goroutines it woke, and the core between
// looks) when the previous one ended less than 50µs before a collective
// completed: a goroutine started by the communication goroutine can wait
// tens of microseconds for a P. While it waits it runs the reductions the
// communication goroutine offloads. Messages (Send, Recv)
// start at once and complete as soon as MPI has completed them,
// independently of the collectives and of each other, as in the
// in-process backend: a ring in which every rank sends before it
// receives works. Subgroups (NewGroup: an all-gather that checks that
// every rank passed the same list, then MPI_Comm_split) have their own
// communicator and order and share the communication goroutine.
// BroadcastObject and GatherObject (the length, then the bytes, with
// MPI_Ibcast, MPI_Iallgather and MPI_Igatherv) block the caller and hold
// back the group's later collectives until their own calls are made.
//
// # Collectives and element types
//
// All-reduce and reduce-scatter use the in-process backend's algorithm
// and arithmetic over MPI messages (MPI_Isend and MPI_Irecv, with a tag
// per collective): rank k receives part k of every rank's data, combines
// the parts in rank order a chunk at a time (on a goroutine of its own
// for large parts), and (for an all-reduce) sends the result to the
// others. Each rank moves 2(n-1)/n of the data, as a ring would, in two
// steps; an all-reduce of more than 2 MiB goes in segments of 2 MiB, each
// a collective of its own, so that one segment's reduction overlaps the
// next one's messages. The results are bit for bit the in-process
// backend's, whatever the number of ranks: bfloat16 and
// float16 are summed in float32 and rounded once (to nearest, ties to
// even), an average is the sum divided by the number of ranks, max and
// min propagate NaN, integer sums wrap. (Open MPI 4.1's MPI_Iallreduce
// falls back to a reduce-then-broadcast tree in place and below 4 ranks,
// which moves twice the data; its MPI_Ireduce_scatter_block reduces to
// rank 0 and scatters; MPI_MAX drops a NaN in one of the operand orders;
// and there is no bfloat16.) Broadcast, all-gather, all-to-all and the
// messages move every dtype as unsigned integers of its size
// (MPI_Ibcast, MPI_Iallgather, MPI_Ialltoall): counts stay in elements.
// All-reduces, broadcasts and messages of more than 2^31-1 elements are
// split into several calls; a block of an all-gather or all-to-all must
// fit a C int.
//
// Tensors must be contiguous CPU tensors. Arguments are checked as the
// in-process backend checks them, with its words: a call that fails its
// checks returns a failed Work, calls nothing and leaves the group
// usable. The memory of a collective's tensors is kept alive
// (tensor.Retain) until its Work completes; outputs are marked written
// (tensor.WritableView). With dist.Options.Debug, every collective first
// all-gathers a description of each rank's call (kind, dtype, op, size,
// root, shape) and fails on every rank, before any data moves, when they
// differ; MPI itself does not check (a mismatch hangs until the timeout,
// or fails with a truncation). dist.Options.Trace records the
// collectives on the comm lanes and the messages on the p2p lane, as the
// in-process backend does; Options.Net is not used.
//
// # Timeouts and faults
//
// dist.Options.Timeout (dist.DefaultTimeout when zero) bounds each work
// from the moment it is issued. At the deadline the rank asks the other
// members of the group what they have called (status.go; every rank's
// communication goroutine answers, idle or not), and after their answers
// or two seconds the work fails with an error naming the collective, its
// size, the rank, the timeout and the ranks that have not called it or
// did not answer ("mpi: AllReduce of 1048576 float32 on rank 1 timed out
// after 10s: rank 2 has not called it (it called 41 of the group's
// collectives before it; its last call of any kind was 10.2s ago)"). MPI
// cannot cancel a collective, so the world is then
// broken: the works in flight fail with errors that wrap that one, and
// later calls fail at once. A failed MPI call breaks it the same way.
// World.Abort fails the pending and later works at once, with no MPI call
// (a job calls it when its script fails). The memory of works that were
// in flight at a failure is never given back: MPI may still write into
// it. World.Close finalises MPI (MPI_Finalize, which waits for every rank)
// once the works in flight have completed, and only if nothing failed:
// after a failure it returns at once, since MPI_Finalize would wait for
// ranks that may be dead; the process is then expected to exit with a
// failure. Under mpirun a rank that exits non-zero, or without
// MPI_Finalize, or dies, makes mpirun kill the whole job, so no rank
// waits for a dead one longer than that; World.Kill ends the job at once
// (MPI_Abort). A process not started by mpirun initialises MPI as a
// singleton, a world of one rank.
//
// World.Leave says that the rank's script has ended without an error (a
// job calls it before Close), so that the others need not wait for their
// timeout on a rank that is done, as with the in-process backend's
// World.Leave. It sends every other rank a notice, without waiting for
// it: an MPI_Isend, whose request is freed at once, on a communicator of
// the notices' own (an MPI_Comm_dup of MPI_COMM_WORLD made by NewWorld,
// so that it never matches the groups' traffic), saying how many
// collectives the rank issued in each group the two share, and how many
// messages to and from that rank. Every rank keeps a receive from any
// rank posted there, which the communication goroutine tests with the
// works' requests (in the same MPI_Testsome: no probing, and no MPI call
// while nothing is in flight). When a notice arrives, every work that
// needs the rank that left and that it never issued (a collective of a
// group that contains it, past the ones it issued there; a message to or
// from it, past the ones it issued) fails at once, and so does every
// such work issued later, without an MPI call, with an error that names
// it ("mpi: AllReduce of 4 float32 on rank 0: rank 1 has finished its
// script; this collective can never complete"). The works the rank did
// issue complete as usual, though its notice may arrive before their
// data; works of groups without it, and messages between other ranks, go
// on. A failed work that MPI had cannot be cancelled: its memory is
// never given back, World.Err returns its error, and Close returns one
// that says so without calling MPI_Finalize (the process is expected to
// exit with a failure, as after a timeout). When every rank finishes,
// the notices are only recorded; Close cancels the posted receive and
// frees the communicator before MPI_Finalize. Open MPI 4.1's
// MPI_Finalize waits for every rank (a PMIx fence), so a rank that left
// early waits there for the others; if one fails and exits instead,
// mpirun ends the job at once.
//
// # Launching
//
// mpirun binds each process to one core by default when there are at
// most two (and to a socket beyond), and Go then runs the rank's kernels
// on that core alone: start ranks that should use several cores each
// with `mpirun --bind-to none` (or `--map-by socket:PE=N`). As root,
// mpirun needs --allow-run-as-root; with more ranks than cores,
// --oversubscribe.
package mpi
