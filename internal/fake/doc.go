// Package fake builds stand-ins for NVIDIA's libraries (libcuda, libnvrtc,
// libcublas, libnccl) from the C files in this folder, for tests on machines
// without a GPU. They keep "device" memory in host memory and record the
// arguments they receive, so that tests check the purego bindings'
// marshalling (argument order, widths, floats, structs by value, pointer
// arrays) against real C calling conventions. They do not run kernels.
//
// Each library is built once per test binary with a C compiler
// (internal/clib); without one, the test is skipped.
package fake
