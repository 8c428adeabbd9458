package hookabi

import "unsafe"

// The host functions of module "zeroeng", one binding each, with the wasm signatures of
// docs/wasm-hook-abi.md: int32 is i32, int64 is i64, float64 is f64, and unsafe.Pointer is
// an i32 offset into the guest's linear memory (passing the pointer, not a uintptr, keeps
// the Go object it points into alive for the duration of the call). Every one returns the
// i32 status. The linker imports only the ones a module calls.

//go:wasmimport zeroeng bucket_info
func bucketInfo(bucket int32, out unsafe.Pointer) int32

//go:wasmimport zeroeng bucket_param
func bucketParam(bucket, i int32, out, namePtr unsafe.Pointer, nameCap int32) int32

//go:wasmimport zeroeng tensor_new
func tensorNew(dtype int32, numel int64, outHandle unsafe.Pointer) int32

//go:wasmimport zeroeng tensor_free
func tensorFree(h int32) int32

//go:wasmimport zeroeng tensor_info
func tensorInfo(h int32, out unsafe.Pointer) int32

//go:wasmimport zeroeng tensor_read
func tensorRead(h int32, byteOffset int64, ptr unsafe.Pointer, n int32) int32

//go:wasmimport zeroeng tensor_write
func tensorWrite(h int32, byteOffset int64, ptr unsafe.Pointer, n int32) int32

//go:wasmimport zeroeng all_reduce
func allReduce(h, op int32) int32

//go:wasmimport zeroeng broadcast
func broadcast(h, root int32) int32

//go:wasmimport zeroeng reduce_scatter
func reduceScatter(out, in, op int32) int32

//go:wasmimport zeroeng all_gather
func allGather(out, in int32) int32

//go:wasmimport zeroeng copy
func copyTensor(dst, src int32) int32

//go:wasmimport zeroeng scale
func scale(h int32, factor float64) int32

//go:wasmimport zeroeng sign
func sign(dst, src int32) int32

//go:wasmimport zeroeng norm
func norm(h int32, p float64, out unsafe.Pointer) int32

//go:wasmimport zeroeng topk
func topk(src int32, k int64, values, indices int32) int32

//go:wasmimport zeroeng scatter_add
func scatterAdd(dst, indices, values int32) int32

//go:wasmimport zeroeng log
func hostLog(ptr unsafe.Pointer, n int32) int32
