// Package vmath owns the float32 slice kernels behind the CPU backend's
// elementwise operations: transcendentals (exp, log, tanh, sigmoid, erf),
// activations and their gradients (GELU in both forms, SiLU, ReLU, tanh,
// sigmoid), the row kernels of softmax, log-softmax and layer norm, basic
// arithmetic and reductions, and the in-place optimizer steps of AdamW, Adam
// and SGD.
//
// Every function works on slices the caller owns: it never allocates, never
// starts goroutines and never reads or writes past the slices it is given.
// Callers split large tensors across cores with engine/cpu/parallel and call
// these kernels on the pieces. Slices passed together must have equal
// lengths (a function panics otherwise); an output may alias an input.
//
// Numerics follow PyTorch 1.13: the activation, softmax, layer-norm and
// optimizer formulas are PyTorch's, including the order of floating-point
// operations where that order decides the rounding. The transcendentals are
// accurate to within 2 ulp of the correctly rounded result (the error bound
// measured for each variant is written next to each function).
//
// Each function has a portable pure-Go implementation, which is also the
// reference the tests compare against. On amd64, hot kernels have assembly
// versions for AVX-512 and for AVX2 with FMA, chosen once at start-up from
// the CPU's features; Implementation reports which one is in use.
package vmath
