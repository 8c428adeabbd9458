package main

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/rendezvous"
	"github.com/zeroeng/zeroeng/nccl"
)

// TestShareNCCLID: the ranks of a job bootstrapped through the store all
// get rank 0's NCCL id, whoever arrives first; rank 0's failure to make
// one is its error.
func TestShareNCCLID(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	l.Close()
	var want nccl.UniqueID
	for i := range want {
		want[i] = byte(i * 7)
	}
	const size = 3
	ids := make([]nccl.UniqueID, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for rank := size - 1; rank >= 0; rank-- { // rank 0 last
		wg.Go(func() {
			rdv, err := rendezvous.Join(context.Background(), addr, rendezvous.Member{Rank: rank, Size: size}, 10*time.Second, rank == 0)
			if err != nil {
				errs[rank] = err
				return
			}
			defer rdv.Close()
			ids[rank], errs[rank] = shareNCCLID(rdv, rank, func() (nccl.UniqueID, error) { return want, nil })
		})
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	for rank := range size {
		if errs[rank] != nil || ids[rank] != want {
			t.Errorf("rank %d: %v, id matches: %v", rank, errs[rank], ids[rank] == want)
		}
	}

	boom := errors.New("ncclGetUniqueId: ncclSystemError")
	rdv, err := rendezvous.Join(context.Background(), addr, rendezvous.Member{Rank: 0, Size: 1}, time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	defer rdv.Close()
	if _, err := shareNCCLID(rdv, 0, func() (nccl.UniqueID, error) { return nccl.UniqueID{}, boom }); !errors.Is(err, boom) {
		t.Errorf("rank 0's failure: %v", err)
	}
}
