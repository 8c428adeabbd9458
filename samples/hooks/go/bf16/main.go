// Command bf16 is PyTorch's bf16_compress_hook built from host primitives: each rank scales
// its bucket by 1/world, rounds it to bfloat16 into a temporary tensor, the ranks sum the
// bfloat16 tensors, and the sum is copied back into the bucket. It halves the bytes on the
// wire.
//
// PyTorch:
//
//	compressed = bucket.buffer().div_(world).to(torch.bfloat16)
//	all_reduce(compressed); bucket.buffer().copy_(compressed)
//
// (div_ divides; scale multiplies by float32(1/world), as zeroeng's averaging hook does, so
// for a world size that is not a power of two a value can differ in its last bit before the
// rounding to bfloat16.) The temporary of each bucket index is made once and reused every
// step.
package main

import (
	"errors"

	"github.com/zeroeng/zeroeng/samples/hooks/go/hookabi"
)

func main() {}

type temp struct {
	h     hookabi.Handle
	numel int
}

var (
	inv   float64           // 1/world, as float32
	temps = map[int]*temp{} // bucket index -> its bfloat16 temporary
)

//go:wasmexport init
func initHook(rank, world int32) int32 {
	inv = float64(float32(1) / float32(world))
	return 0
}

func tempFor(index, numel int) (*temp, error) {
	t := temps[index]
	if t != nil && t.numel == numel {
		return t, nil
	}
	if t != nil {
		if err := hookabi.TensorFree(t.h); err != nil {
			return nil, err
		}
		delete(temps, index)
	}
	h, err := hookabi.TensorNew(hookabi.BFloat16, numel)
	if err != nil {
		return nil, err
	}
	t = &temp{h: h, numel: numel}
	temps[index] = t
	return t, nil
}

func onBucketErr(b hookabi.Handle) error {
	info, err := hookabi.BucketInfo(b)
	if err != nil {
		return err
	}
	t, err := tempFor(info.Index, info.Numel)
	if err != nil {
		return err
	}
	if err := hookabi.Scale(b, inv); err != nil {
		return err
	}
	if err := hookabi.Copy(t.h, b); err != nil {
		return err
	}
	if err := hookabi.AllReduce(t.h, hookabi.Sum); err != nil {
		return err
	}
	return nil
}

//go:wasmexport on_bucket
func onBucket(b hookabi.Handle) int32 { return hookabi.Result(onBucketErr(b)) }

//go:wasmexport on_bucket_done
func onBucketDone(b hookabi.Handle) int32 {
	info, err := hookabi.BucketInfo(b)
	if err != nil {
		return hookabi.Result(err)
	}
	t := temps[info.Index]
	if t == nil {
		return hookabi.Result(errors.New("on_bucket_done for a bucket that on_bucket did not see"))
	}
	return hookabi.Result(hookabi.Copy(b, t.h))
}
