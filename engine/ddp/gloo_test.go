package ddp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// glooInput is rank's buffer of n elements in testdata/gen_gloo.py.
func glooInput(rank, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		u := float64((uint64(i)*2654435761+uint64(rank)*40503+12345)%(1<<32)) / (1 << 32)
		v := float64((uint64(i)*40503+uint64(rank)*2654435761+777)%(1<<32)) / (1 << 32)
		out[i] = float32((u - 0.5) * math.Exp2(math.Floor(v*20)-10))
	}
	return out
}

// TestHooksMatchGlooBitForBit runs DDP's all-reduce hook and fp16
// compression hook on 2, 3 and 4 in-process ranks, over buffers small and
// large (12 MB: several of gloo's segments a rank), and holds rank 0's
// result to PyTorch's over gloo bit for bit (the SHA-256 of its bytes,
// testdata/gen_gloo.py): the same division, the same conversions, and
// the same order of additions as gloo's ring all-reduce.
func TestHooksMatchGlooBitForBit(t *testing.T) {
	raw, err := os.ReadFile("testdata/gloo.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]string
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	sizes := []int{4097, 3000001}
	if testing.Short() {
		sizes = sizes[:1]
	}
	hooks := map[string]func(dist.ProcessGroup) CommHook{"allreduce": AllReduceHook, "fp16": FP16CompressHook}
	for name, hook := range hooks {
		for _, world := range []int{2, 3, 4} {
			for _, n := range sizes {
				key := fmt.Sprintf("%s/%d/%d", name, world, n)
				t.Run(key, func(t *testing.T) {
					w, err := dist.NewWorld(world, dist.Options{})
					if err != nil {
						t.Fatal(err)
					}
					defer w.Close()
					var got []float32
					errs := make([]error, world)
					var wg sync.WaitGroup
					for rank := range world {
						wg.Go(func() {
							rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
							buf := rt.FromFloat32s(glooInput(rank, n), n).Persist()
							defer buf.Release()
							out, err := hook(w.Group(rank))(&Bucket{Buffer: buf, IsLast: true})()
							if err == nil && rank == 0 {
								got, err = out.Float32s()
							}
							errs[rank] = err
						})
					}
					wg.Wait()
					for rank, err := range errs {
						if err != nil {
							t.Fatalf("rank %d: %v", rank, err)
						}
					}
					b := make([]byte, 4*len(got))
					for i, v := range got {
						binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
					}
					sum := sha256.Sum256(b)
					if h := hex.EncodeToString(sum[:]); h != want[key] {
						t.Errorf("SHA-256 %s, PyTorch over gloo %s", h, want[key])
					}
				})
			}
		}
	}
}
