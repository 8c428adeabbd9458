// Package asmcheck holds checks of the module's assembly that do not need
// the CPU it targets: its test reads every .s file and refuses what faults
// only on some machines. The AVX-512 kernels run only where a CPU has
// AVX-512, which CI's machines may lack; a fault there would first show on
// a user's machine (the AVX-512 log kernel's did, on the first AVX-512
// machine it met).
package asmcheck
