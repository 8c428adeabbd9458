//go:build !linux

package main

import "syscall"

// rankProcAttr puts a rank in a process group of its own: signals from
// the terminal reach launch only, which passes them on once.
func rankProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// mpirunProcAttr puts mpirun in a process group of its own, where signals
// to launch's group do not reach it.
func mpirunProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
