package mpi

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// yield lets the OS run another thread on this core, if one is waiting
// (sched_yield): the communication goroutine polls without holding a core
// from the process's other threads, or from the other ranks on the node.
func yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

const (
	futexWaitPrivate = 128 | 0 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 128 | 1 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// bell is how the communication goroutine sleeps and is woken: a futex
// on which it waits in a system call, which wakes in microseconds, where
// parking a goroutine locked to its thread and readying it again goes
// through the scheduler (tens of microseconds). While it waits, its P is
// free for the process's other goroutines (the runtime treats the wait as
// any blocking system call).
type bell struct{ asleep atomic.Uint32 }

// wait sleeps until ring, or for at most d (forever when d <= 0), unless
// ready reports that there is work already.
func (b *bell) wait(d time.Duration, ready func() bool) {
	b.asleep.Store(1)
	if ready() {
		b.asleep.Store(0)
		return
	}
	var ts *syscall.Timespec
	if d > 0 {
		t := syscall.NsecToTimespec(int64(d))
		ts = &t
	}
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&b.asleep)), futexWaitPrivate, 1, uintptr(unsafe.Pointer(ts)), 0, 0)
	b.asleep.Store(0)
}

// ring wakes the waiter, if it sleeps.
func (b *bell) ring() {
	if b.asleep.CompareAndSwap(1, 0) {
		syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&b.asleep)), futexWakePrivate, 1, 0, 0, 0)
	}
}
