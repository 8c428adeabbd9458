package mpi

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// benchEnv turns the bandwidth measurement on; benchNPEnv sets its
// number of processes (2 by default).
const (
	benchEnv   = "ZEROENG_MPI_BENCH"
	benchNPEnv = "ZEROENG_MPI_BENCH_NP"
)

// TestAllReduceBandwidth measures the float32 all-reduce's bus bandwidth
// over MPI on this machine (loopback, shared memory), from 4 KiB to 64
// MiB, as nccl-tests does (busbw = bytes·2(n-1)/n / time), through the
// engine (Group.AllReduce: 20 all-reduces in flight, then wait; and one
// at a time) and, for comparison, through a blocking MPI_Allreduce on the
// communication goroutine. It is skipped unless ZEROENG_MPI_BENCH is set:
//
//	ZEROENG_MPI_BENCH=1 go test -run TestAllReduceBandwidth -v ./mpi/
func TestAllReduceBandwidth(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("set " + benchEnv + "=1 to measure")
	}
	if !isChild() {
		np := 2
		if v, err := strconv.Atoi(os.Getenv(benchNPEnv)); err == nil && v > 0 {
			np = v
		}
		needMPI(t)
		out, err := job{np: np, test: t.Name(), env: []string{benchEnv + "=1"}}.run(t, 600*time.Second)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "bench:") {
				t.Log(line[strings.Index(line, "bench:")+len("bench:"):])
			}
		}
		return
	}
	w := childWorld(t)
	pg, rt := w.Group(0).(*Group), newRuntime()
	n := pg.Size()
	say := func(format string, args ...any) {
		if pg.Rank() == 0 {
			fmt.Printf("bench:"+format+"\n", args...)
		}
	}
	say(" %d processes, %s", n, w.Lib().Version)
	say(" %10s | %-22s | %-22s | %-22s", "bytes", "engine, 20 in flight", "engine, one at a time", "blocking MPI_Allreduce")
	busbw := func(bytes int, d time.Duration) float64 {
		return float64(bytes) * 2 * float64(n-1) / float64(n) / d.Seconds() / 1e9
	}
	for size := 4 << 10; size <= 64<<20; size *= 4 {
		numel := size / 4
		iters := max(5, min(1000, (1<<30)/size))
		x := rt.Ones(dtype.Float32, numel)
		// In flight together, as DDP issues its buckets.
		run := func(iters, depth int) time.Duration {
			if err := pg.Barrier().Wait(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var works []*dist.Work
			for i := range iters {
				works = append(works, pg.AllReduce(x, dist.Sum))
				if len(works) == depth || i == iters-1 {
					for _, w := range works {
						if err := w.Wait(); err != nil {
							t.Fatal(err)
						}
					}
					works = works[:0]
				}
			}
			return time.Since(start) / time.Duration(iters)
		}
		run(max(2, iters/10), 20)
		overlapped := run(iters, 20)
		single := run(iters, 1)
		raw := rawAllReduce(t, pg, x, iters)
		cell := func(d time.Duration) string {
			return fmt.Sprintf("%9.1fµs %6.2fGB/s", float64(d.Nanoseconds())/1e3, busbw(size, d))
		}
		say(" %10d | %s | %s | %s", size, cell(overlapped), cell(single), cell(raw))
		x.Release()
	}
}

// rawAllReduce times iters blocking MPI_Allreduce calls of x, in place,
// made by the communication goroutine itself.
func rawAllReduce(t *testing.T, g *Group, x *tensor.Tensor, iters int) time.Duration {
	b, _ := tensor.HostBytes(x)
	l := g.e.lib
	var took time.Duration
	var failed error
	o := g.newOp(kBarrier, "MPI_Allreduce loop", 0)
	o.stages = []stage{func(o *op) error {
		start := time.Now()
		for range iters {
			// int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count,
			//     MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
			if rc := call(l.allreduce, inPlace, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)/4), l.typeFloat, l.opSum, g.comm); rc != success {
				failed = l.err("MPI_Allreduce", rc)
				return nil
			}
		}
		took = time.Since(start)
		return nil
	}}
	if err := g.Barrier().Wait(); err != nil {
		t.Fatal(err)
	}
	if err := g.submit(o, nil).Wait(); err != nil || failed != nil {
		t.Fatal(err, failed)
	}
	return took / time.Duration(iters)
}
