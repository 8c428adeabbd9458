package rendezvous_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zeroeng/zeroeng/engine/rendezvous"
)

func ExampleClient() {
	srv, err := rendezvous.Listen("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	c, err := rendezvous.Dial(context.Background(), srv.Addr(), 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	go c.Set("nccl/id", []byte("0123456789abcdef")) // another rank, usually
	id, _ := c.Get("nccl/id")                       // waits until it is set
	n, _ := c.Add("arrived", 1)
	err = c.Wait([]string{"nccl/id", "never"}, 10*time.Millisecond)
	fmt.Printf("%s %d\n%v\n", id, n, err)
	// Output:
	// 0123456789abcdef 1
	// rendezvous: 1 of 2 keys did not appear within 10ms: "never"
}

func ExampleJoin() {
	// Two ranks of one job, here as goroutines; in a real job each is a
	// process and the address is MASTER_ADDR:MASTER_PORT.
	srv, _ := rendezvous.Listen("127.0.0.1:0")
	defer srv.Close()
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			me := rendezvous.Member{Rank: rank, Size: 2, Host: "node-1", PID: 1000 + rank}
			r, err := rendezvous.Join(context.Background(), srv.Addr(), me, 10*time.Second, false)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer r.Close()
			if rank == 0 {
				r.Client().Set("nccl/id", []byte("id-from-rank-0"))
			} else {
				id, _ := r.Client().Get("nccl/id")
				fmt.Printf("rank 1 of %v got %s\n", r.Members(), id)
			}
			r.Barrier(context.Background(), "done", 0)
		})
	}
	wg.Wait()
	// Output:
	// rank 1 of [{0 2 node-1 1000 } {1 2 node-1 1001 }] got id-from-rank-0
}
