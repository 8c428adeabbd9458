package disttest_test

import (
	"fmt"
	"os"
	"sync"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dist/disttest"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// runProcess is what each process of a multi-process backend (MPI: one
// process per rank) runs once it has made its process group and a
// runtime on its device: every case that fits the group, in the order of
// Cases, the same in every process, reporting each failure. It returns
// the process's exit status; the launcher fails when any rank's is not 0.
func runProcess(pg dist.ProcessGroup, rt *tensor.Runtime) int {
	status := 0
	for _, c := range disttest.Cases() {
		if !c.Fits(pg.Size()) {
			continue
		}
		if err := c.Run(pg, rt); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", c.Name, err)
			status = 1
		}
	}
	return status
}

// A backend whose ranks are processes runs the cases in each of them.
// Here two goroutines of an in-process world stand for the processes.
func Example_multiProcess() {
	w, err := dist.NewWorld(2, dist.Options{})
	if err != nil {
		panic(err)
	}
	defer w.Close()
	status := make([]int, 2)
	var wg sync.WaitGroup
	for rank := range status {
		wg.Go(func() {
			// In a process of its own, the rank would make its group
			// from the launcher's environment instead.
			rt := tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), 0)
			status[rank] = runProcess(w.Group(rank), rt)
		})
	}
	wg.Wait()
	fmt.Println("exit statuses:", status)
	// Output: exit statuses: [0 0]
}
