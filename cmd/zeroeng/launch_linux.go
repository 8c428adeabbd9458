package main

import "syscall"

// rankProcAttr puts a rank in a process group of its own (signals from
// the terminal reach launch only, which passes them on once) and kills it
// when launch dies.
func rankProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// mpirunProcAttr puts mpirun in a process group of its own, where signals
// to launch's group do not reach it, and sends it SIGTERM, on which it
// ends the job, when launch dies.
func mpirunProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
