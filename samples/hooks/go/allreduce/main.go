// Command allreduce is the averaging comm hook, zeroeng's built-in one as a Wasm module:
// every rank scales its bucket by 1/world and the ranks sum it, in place. The factor is
// float32(1)/float32(world), the built-in hook's, so the results are bit-identical to it.
package main

import "github.com/zeroeng/zeroeng/samples/hooks/go/hookabi"

func main() {}

var inv float64 // 1/world, rounded to float32 as the built-in hook does

//go:wasmexport init
func initHook(rank, world int32) int32 {
	inv = float64(float32(1) / float32(world))
	return 0
}

//go:wasmexport on_bucket
func onBucket(b hookabi.Handle) int32 {
	if err := hookabi.Scale(b, inv); err != nil {
		return hookabi.Result(err)
	}
	return hookabi.Result(hookabi.AllReduce(b, hookabi.Sum))
}
