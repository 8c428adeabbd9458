package main

import "syscall"

// rankProcAttr puts a rank in a process group of its own (signals from
// the terminal reach launch only, which passes them on once) and kills it
// when launch dies.
func rankProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
