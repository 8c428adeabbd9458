// calls times n small calls into the API (t.add(t) on a tensor of 4
// elements, each result released), the per-call cost of the bridge: with
// JSON arguments and result (Method, "json") or handles only (Op, "op").
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
	mode := "op"
	if len(os.Args) > 2 {
		mode = os.Args[2]
	}
	t := ze.Must(ze.T("tensor.ones", []int{4}))
	start := time.Now()
	for range n {
		var u ze.Tensor
		if mode == "json" {
			u = ze.Must(t.M("add", t))
		} else {
			u = ze.Must(t.Op("add", t))
		}
		u.Release()
	}
	fmt.Printf("%d calls (%s): %.2f us each\n", n, mode, float64(time.Since(start).Microseconds())/float64(n))
}
