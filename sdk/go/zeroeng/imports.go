package zeroeng

import "unsafe"

// The host functions of module "zeroeng" (docs/wasm-program-abi.md), one
// binding each: int32 is i32, and unsafe.Pointer an i32 offset into the
// program's memory (passing the pointer, not a uintptr, keeps the Go
// object it points into alive for the duration of the call). Each returns
// the i32 status.

//go:wasmimport zeroeng abi_info
func abiInfo(out unsafe.Pointer) int32

//go:wasmimport zeroeng error_message
func errorMessage(buf unsafe.Pointer, capacity int32, lenOut unsafe.Pointer) int32

//go:wasmimport zeroeng error_clear
func errorClear() int32

//go:wasmimport zeroeng call
func hostCall(path unsafe.Pointer, pathLen int32, args unsafe.Pointer, argsLen int32, out unsafe.Pointer, outCap int32, outLen unsafe.Pointer) int32

//go:wasmimport zeroeng call_method
func hostCallMethod(h int32, name unsafe.Pointer, nameLen int32, args unsafe.Pointer, argsLen int32, out unsafe.Pointer, outCap int32, outLen unsafe.Pointer) int32

//go:wasmimport zeroeng get
func hostGet(h int32, name unsafe.Pointer, nameLen int32, out unsafe.Pointer, outCap int32, outLen unsafe.Pointer) int32

//go:wasmimport zeroeng set
func hostSet(h int32, name unsafe.Pointer, nameLen int32, value unsafe.Pointer, valueLen int32) int32

//go:wasmimport zeroeng result_read
func resultRead(out unsafe.Pointer, capacity int32) int32

//go:wasmimport zeroeng release
func release(h int32) int32

//go:wasmimport zeroeng scope_open
func scopeOpen(out unsafe.Pointer) int32

//go:wasmimport zeroeng scope_close
func scopeClose(id int32, keep unsafe.Pointer, n int32) int32

//go:wasmimport zeroeng grad_enabled
func gradEnabled(on int32, prevOut unsafe.Pointer) int32

//go:wasmimport zeroeng tensor_from_bytes
func tensorFromBytes(dtype int32, shape unsafe.Pointer, ndim int32, data unsafe.Pointer, nbytes int32, out unsafe.Pointer) int32

//go:wasmimport zeroeng tensor_data
func tensorRead(h int32, buf unsafe.Pointer, capacity int32, lenOut unsafe.Pointer) int32

//go:wasmimport zeroeng tensor_shape
func tensorInfo(h int32, out unsafe.Pointer) int32

// The marker export that declares the ABI's major version.
//
//go:wasmexport zeroeng_program_abi_v1
func abiMarker() {}

// ABI 1.1: callbacks and handle-only calls.

//go:wasmimport zeroeng function_new
func functionNew(id int32, out unsafe.Pointer) int32

//go:wasmimport zeroeng frame_args
func frameArgs(frame int32, out unsafe.Pointer, capacity int32, lenOut unsafe.Pointer) int32

//go:wasmimport zeroeng frame_return
func frameReturn(frame int32, value unsafe.Pointer, valueLen int32) int32

//go:wasmimport zeroeng error_set
func errorSet(msg unsafe.Pointer, msgLen int32) int32

//go:wasmimport zeroeng lookup
func lookup(path unsafe.Pointer, pathLen int32, out unsafe.Pointer) int32

//go:wasmimport zeroeng invoke
func invoke(f int32, args unsafe.Pointer, n int32, out unsafe.Pointer) int32

//go:wasmimport zeroeng invoke_method
func invokeMethod(h int32, name unsafe.Pointer, nameLen int32, args unsafe.Pointer, n int32, out unsafe.Pointer) int32

//go:wasmimport zeroeng forget
func forget(h int32) int32
