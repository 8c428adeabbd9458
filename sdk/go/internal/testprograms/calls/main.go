// calls times n small calls into the API (t.add(t) on a tensor of 4
// elements, each result released), the per-call cost of the bridge.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	ze "github.com/zeroeng/zeroeng/sdk/go/zeroeng"
)

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	t := ze.Must(ze.T("tensor.ones", []int{4}))
	start := time.Now()
	for range n {
		u := ze.Must(t.M("add", t))
		u.Release()
	}
	fmt.Printf("%d calls: %.2f us each\n", n, float64(time.Since(start).Microseconds())/float64(n))
}
