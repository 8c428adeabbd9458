//go:build !linux

package mpi

import (
	"sync"
	"time"
)

// yield does nothing where sched_yield is not at hand.
func yield() {}

// bell is how the communication goroutine sleeps and is woken; here, a
// channel.
type bell struct {
	once sync.Once
	c    chan struct{}
}

func (b *bell) ch() chan struct{} {
	b.once.Do(func() { b.c = make(chan struct{}, 1) })
	return b.c
}

func (b *bell) wait(d time.Duration, ready func() bool) {
	if ready() {
		return
	}
	if d <= 0 {
		<-b.ch()
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.ch():
	case <-t.C:
	}
}

func (b *bell) ring() {
	select {
	case b.ch() <- struct{}{}:
	default:
	}
}
