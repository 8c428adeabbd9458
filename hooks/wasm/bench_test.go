package wasm

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// BenchmarkCompile: what a rank waits for the first time a module is used
// on a machine (cold) and in every later run (from the on-disk cache),
// for the averaging and top-k Go samples (2 and 3.4 MB).
func BenchmarkCompile(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"allreduce", "topk"} {
		module := hookbuild.Sample(b, name)
		for _, disk := range []bool{false, true} {
			label := name + "/cold"
			if disk {
				label = name + "/disk-cache"
			}
			b.Run(label, func(b *testing.B) {
				cache := wazero.NewCompilationCache()
				if disk {
					var err error
					if cache, err = wazero.NewCompilationCacheWithDir(b.TempDir()); err != nil {
						b.Fatal(err)
					}
				}
				compileOnce := func() {
					rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
					defer rt.Close(ctx)
					if _, err := rt.CompileModule(ctx, module); err != nil {
						b.Fatal(err)
					}
				}
				if disk {
					compileOnce() // fills the cache
				}
				b.ResetTimer()
				for range b.N {
					if !disk {
						// A fresh in-memory cache: nothing to reuse.
						cache = wazero.NewCompilationCache()
					}
					compileOnce()
				}
			})
		}
	}
}
