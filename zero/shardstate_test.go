package zero

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestGatherParam: under stage 3 GatherParam puts any range of a
// parameter together from the ranks' slices, on one rank or on all,
// without gathering a unit (the device's live bytes do not move); the
// slices FlatBucket describes tile each bucket; a slice written through
// ParamSlice and SliceWritten is what the next gather sends.
func TestGatherParam(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			onRanks(t, n, func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
				m := mlp(t, rt)
				var want [][]float64
				for _, p := range m.Parameters() {
					v, _ := p.Float64s()
					want = append(want, v)
				}
				units, owner := layerUnits(m, true)
				z, err := New(pg, optim.AdamW, m.Parameters(), optim.DefaultAdamW().Group(), Options{Stage: 3, Units: units})
				if err != nil {
					return err
				}
				defer z.Close()
				live := rt.Stats().LiveBytes
				for i, p := range m.Parameters() {
					for _, r := range [][2]int{{0, p.Numel()}, {1, p.Numel() / 2}, {3, 3}} {
						for _, to := range []int{-1, n - 1} {
							b, err := z.GatherParam(p, r[0], r[1], to)
							if err != nil {
								return err
							}
							if to >= 0 && rank != to {
								if b != nil {
									return fmt.Errorf("rank %d got %d bytes of a gather to rank %d", rank, len(b), to)
								}
								continue
							}
							got := floats(b)
							if !slices.Equal(got, want[i][r[0]:r[1]]) {
								return fmt.Errorf("parameter %d, elements %v on rank %d: %v, want %v", i, r, rank, got, want[i][r[0]:r[1]])
							}
						}
					}
				}
				if d := rt.Stats().LiveBytes - live; d != 0 {
					return fmt.Errorf("gathering parameters changed the live bytes by %d", d)
				}
				// The slices tile every bucket, in rank order.
				for i := range z.NumFlatBuckets() {
					_, _, numel, lo, hi := z.FlatBucket(i)
					if lo != rank*numel/n || hi-lo != numel/n {
						return fmt.Errorf("bucket %d: rank %d's slice [%d, %d) of %d", i, rank, lo, hi, numel)
					}
					s, err := z.ParamSlice(i)
					if err != nil {
						return err
					}
					if s.Numel() != hi-lo {
						return fmt.Errorf("bucket %d: a slice of %d elements for [%d, %d)", i, s.Numel(), lo, hi)
					}
					if err := s.Fill(float64(i + 1)); err != nil {
						return err
					}
					if err := z.SliceWritten(i); err != nil {
						return err
					}
				}
				// The next forward gathers the written values.
				x := rt.Ones(dtype.Float32, 2, 16)
				if _, err := forwardUnits(z, m, owner, x, nil, func(u *Unit) {
					for _, b := range u.buckets {
						for _, p := range b.params {
							v, _ := p.Float64s()
							if v[0] != float64(slices.Index(z.flat.buckets, b)+1) {
								t.Errorf("unit %d gathered %v after its slices were written", u.index, v[0])
							}
						}
					}
				}); err != nil {
					return err
				}
				return nil
			})
		})
	}
}

func floats(b []byte) []float64 {
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}
