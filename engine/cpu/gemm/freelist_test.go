package gemm

import (
	"sync"
	"testing"
)

// TestFreeListStripes: a workspace returned by one goroutine is found by
// another whose stripe is empty (so that there are never more workspaces
// than products running at once), a goroutine finds its own where it left
// it, and the list keeps no more than freeMax.
func TestFreeListStripes(t *testing.T) {
	var l freeList[float32]
	ws := l.get() // empty: a new one
	l.put(ws)
	var got *workspace[float32]
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // another goroutine, most likely another stripe
		defer wg.Done()
		got = l.get()
	}()
	wg.Wait()
	if got != ws {
		t.Fatal("a workspace on another stripe was not taken: a new one was made")
	}
	l.put(got)
	if again := l.get(); again != ws {
		t.Fatal("the goroutine did not find the workspace it returned")
	}
	for range 2 * freeMax {
		l.put(newWorkspace[float32]())
	}
	n := 0
	for i := range l.s {
		n += len(l.s[i].ws)
	}
	if n > freeMax {
		t.Fatalf("the list keeps %d workspaces, more than %d", n, freeMax)
	}
}
