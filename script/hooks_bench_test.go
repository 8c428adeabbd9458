package script

import (
	"io"
	"testing"
	"time"
	"unsafe"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// The comm-hook benchmarks (docs/benchmarks.md) run one rank's hook on
// one bucket, b.N times: what a hook costs per bucket on top of its
// communication.

// noopWAT and noopGo are hooks that leave the bucket as it is.
const noopWAT = `(module (memory (export "memory") 1) (func (export "zeroeng_hook_abi_v1"))
  (func (export "on_bucket") (param i32) (result i32) (i32.const 0)))`

const noopGo = `package main

import _ "github.com/zeroeng/zeroeng/samples/hooks/go/hookabi"

//go:wasmexport on_bucket
func onBucket(b int32) int32 { return 0 }

func main() {}
`

func benchBucket(b *testing.B, numel int) (*tensor.Runtime, dist.ProcessGroup, *ddp.Bucket) {
	w, err := dist.NewWorld(1, dist.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Close)
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	buf := rt.RandnWith(tensor.NewGenerator(1), dtype.Float32, numel).Persist()
	p := rt.Zeros(dtype.Float32, numel).Persist()
	return rt, w.Group(0), &ddp.Bucket{Index: 0, IsLast: true, Buffer: buf, Params: []*tensor.Tensor{p}, Names: []string{"0.weight"}, Offsets: []int{0}}
}

func runHook(b *testing.B, hook ddp.CommHook, bucket *ddp.Bucket) {
	b.ReportAllocs()
	b.SetBytes(int64(bucket.Buffer.Numel() * 4))
	b.ResetTimer()
	for range b.N {
		if _, err := hook(bucket)(); err != nil {
			b.Fatal(err)
		}
	}
}

func benchWasm(b *testing.B, name string, module []byte, cfg wasm.Config, numel int) {
	m, err := wasm.Compile(name, module, cfg)
	if err != nil {
		b.Fatal(err)
	}
	rt, pg, bucket := benchBucket(b, numel)
	h, err := m.NewHook(pg, rt, wasm.Options{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	runHook(b, h.CommHook(), bucket)
}

// BenchmarkCommHookOverhead: a hook that does nothing, per bucket, in
// Go, in Wasm (hand-written and Go-built, with and without a time limit)
// and in JavaScript.
func BenchmarkCommHookOverhead(b *testing.B) {
	b.Run("native", func(b *testing.B) {
		_, _, bucket := benchBucket(b, 1)
		runHook(b, func(bk *ddp.Bucket) func() (*tensor.Tensor, error) {
			return func() (*tensor.Tensor, error) { return bk.Buffer, nil }
		}, bucket)
	})
	// The default compiles the loop checks in; trusted leaves them out;
	// a time limit adds a timer to every call.
	b.Run("wasm-wat", func(b *testing.B) { benchWasm(b, "noop.wasm", hookbuild.WAT(b, noopWAT), wasm.Config{}, 1) })
	b.Run("wasm-wat-trusted", func(b *testing.B) {
		benchWasm(b, "noop.wasm", hookbuild.WAT(b, noopWAT), wasm.Config{Trusted: true}, 1)
	})
	b.Run("wasm-wat-timeout", func(b *testing.B) {
		benchWasm(b, "noop.wasm", hookbuild.WAT(b, noopWAT), wasm.Config{Timeout: time.Second}, 1)
	})
	b.Run("wasm-go", func(b *testing.B) { benchWasm(b, "noop.wasm", hookbuild.GoSource(b, noopGo), wasm.Config{}, 1) })
	b.Run("wasm-go-trusted", func(b *testing.B) {
		benchWasm(b, "noop.wasm", hookbuild.GoSource(b, noopGo), wasm.Config{Trusted: true}, 1)
	})
	b.Run("js", func(b *testing.B) {
		r, err := New(Options{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		fn, err := r.RunString("hook.js", "(state, bucket) => bucket.buffer")
		if err != nil {
			b.Fatal(err)
		}
		f, _ := goja.AssertFunction(fn)
		_, _, bucket := benchBucket(b, 1)
		hook := r.jsCommHook(goja.Null(), f)
		b.ReportAllocs()
		b.ResetTimer()
		for done := 0; done < b.N; done += 1000 {
			// The script's objects are released a step at a time.
			sc := r.rt.OpenScope()
			for range min(1000, b.N-done) {
				if _, err := hook(bucket)(); err != nil {
					b.Fatal(err)
				}
			}
			sc.Close()
		}
	})
}

// BenchmarkCodec4MiB: a CPU data-plane codec (scale by 1/world, to
// bfloat16, all-reduce, back to float32) on a 4 MiB bucket, in native Go
// on the bucket's memory and in Wasm guests (Go and C) that copy the
// bucket into their memory and back.
func BenchmarkCodec4MiB(b *testing.B) {
	const numel = 1 << 20
	b.Run("native-go", func(b *testing.B) {
		_, pg, bucket := benchBucket(b, numel)
		runHook(b, nativeBF16Codec(pg), bucket)
	})
	// What every variant shares: the bfloat16 all-reduce alone.
	b.Run("allreduce-only", func(b *testing.B) {
		rt, pg, bucket := benchBucket(b, numel)
		half := rt.Zeros(dtype.BFloat16, numel).Persist()
		runHook(b, func(*ddp.Bucket) func() (*tensor.Tensor, error) {
			w := pg.AllReduce(half, dist.Sum)
			return func() (*tensor.Tensor, error) { return bucket.Buffer, w.Wait() }
		}, bucket)
	})
	b.Run("wasm-go", func(b *testing.B) { benchWasm(b, "codec.wasm", hookbuild.Sample(b, "codec"), wasm.Config{}, numel) })
	b.Run("wasm-go-trusted", func(b *testing.B) {
		benchWasm(b, "codec.wasm", hookbuild.Sample(b, "codec"), wasm.Config{Trusted: true}, numel)
	})
	b.Run("wasm-go-timeout", func(b *testing.B) {
		benchWasm(b, "codec.wasm", hookbuild.Sample(b, "codec"), wasm.Config{Timeout: time.Minute}, numel)
	})
	b.Run("wasm-c", func(b *testing.B) { benchWasm(b, "codec_c.wasm", hookbuild.Sample(b, "codec_c"), wasm.Config{}, numel) })
	b.Run("wasm-c-trusted", func(b *testing.B) {
		benchWasm(b, "codec_c.wasm", hookbuild.Sample(b, "codec_c"), wasm.Config{Trusted: true}, numel)
	})
}

// nativeBF16Codec is the samples' codec in Go, on the bucket's own bytes.
func nativeBF16Codec(pg dist.ProcessGroup) ddp.CommHook {
	var half *tensor.Tensor
	return func(bk *ddp.Bucket) func() (*tensor.Tensor, error) {
		if half == nil {
			half = bk.Buffer.Runtime().Zeros(dtype.BFloat16, bk.Buffer.Numel()).Persist()
		}
		srcBytes, _ := tensor.HostBytes(bk.Buffer)
		dstBytes, _ := tensor.HostBytes(half)
		// The engine's buffers are aligned host memory; view them as
		// elements (little-endian, as the ABI's bytes are).
		src := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(srcBytes))), len(srcBytes)/4)
		dst := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(dstBytes))), len(dstBytes)/2)
		inv := float32(1) / float32(pg.Size())
		for i, f := range src {
			dst[i] = uint16(dtype.BF16FromFloat32(f * inv))
		}
		w := pg.AllReduce(half, dist.Sum)
		return func() (*tensor.Tensor, error) {
			if err := w.Wait(); err != nil {
				return nil, err
			}
			for i, h := range dst {
				src[i] = dtype.BF16(h).Float32()
			}
			return bk.Buffer, nil
		}
	}
}
