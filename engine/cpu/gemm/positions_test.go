package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// positionsCases are GemmPositionsA shapes: m rows of A (multiples of 32,
// which the positions kernel takes), depth k, B of rows window rows of
// width positions, stride apart.
var positionsCases = []windowsCase{
	{32, 144, 14, 14, 15}, // the CNN's 16→32 convolution: whole 14-position tiles
	{32, 288, 14, 14, 16}, // flattened rows' padded width
	{32, 9, 28, 28, 30},   // two tiles a row
	{32, 400, 14, 3, 16},  // two K blocks
	{64, 1000, 5, 2, 7},   // rows narrower than a tile, three K blocks, two panels of A
	{32, 7, 20, 2, 20},    // a partial second tile, rows abutting
	{32, 144, 16, 16, 18}, // a ResNet's 32→32 convolution: two 8-position tiles a row
	{64, 300, 8, 8, 10},   // one 8-position tile a row, two K blocks
	{32, 50, 7, 5, 9},     // a partial 8-position tile
	{96, 10, 13, 3, 0},    // stride 0: every row the same windows, three panels of A
	{32, 1, 1, 1, 1},
	{32, 0, 14, 2, 14}, // no depth: C is the bias (or zero)
}

// positionsOperands builds the float32 operands of pc: the problem (A
// and C as newWindows makes them), B's windows over a Base exactly long
// enough, A, and the number of columns.
func positionsOperands(rng *rand.Rand, pc windowsCase) (*problem, Windows[float32], []float32, int) {
	p, base, offs := newWindows(rng, pc, 1, 0)
	b := exact32(len(base))
	copy(b, to32(base))
	return p, Windows[float32]{b, offs, pc.width, pc.stride}, to32(p.a), pc.width * pc.rows
}

// TestGemmPositions holds GemmPositionsA to GemmWindowsA bit for bit, with
// and without a bias (GemmWindowsA's onto C filled with it), on every
// kernel that has a positions kernel.
func TestGemmPositions(t *testing.T) {
	ran := false
	forEachKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, pc := range positionsCases {
			if PositionsTile[float32](pc.m, pc.width) == 0 {
				continue
			}
			ran = true
			p, win, a, n := positionsOperands(rng, pc)
			threads := 1
			if pc.rows > 1 {
				threads = 3
			}
			bias := make([]float32, pc.m)
			for i := range bias {
				bias[i] = float32(rng.Float64()*2 - 1)
			}
			wa := PackWindowsA(make([]float32, WindowsALen[float32](pc.m, pc.k)), pc.m, pc.k, a, p.lda)
			pa := PackPositionsA(make([]float32, PositionsALen[float32](pc.m, pc.k)), pc.m, pc.k, a, p.lda)
			for _, withBias := range []bool{false, true} {
				want := to32(p.c) // stale values where the bias does not go
				var bs []float32
				var beta float32
				if withBias {
					bs, beta = bias, 1
					for i := range pc.m {
						for j := range n {
							want[i*p.ldc+j] = bias[i]
						}
					}
				}
				GemmWindowsA(wa, n, 1, win, beta, want, p.ldc, threads)
				if !withBias {
					p.check(t, to64(want), 1e-6)
				}
				for range 2 { // the packed A serves any number of products
					got := to32(p.c)
					GemmPositionsA(pa, n, win, bs, got, p.ldc, threads)
					sameBits(t, "float32", []string{"GemmWindowsA", "GemmPositionsA"}, [][]float32{want, got})
				}
			}
		}
	})
	if !ran {
		t.Skip("no positions kernel on this machine (AVX-512 only)")
	}
}

// TestPositionsTile: the tile that computes the fewest positions a row,
// the taller on a tie, and none where no kernel's width divides the rows
// of A.
func TestPositionsTile(t *testing.T) {
	for _, m := range []int{0, 16, 24, 48, 33} {
		if tile := PositionsTile[float32](m, 14); tile != 0 {
			t.Errorf("PositionsTile(%d, 14) = %d, want 0: no kernel's width divides it", m, tile)
		}
	}
	if PositionsTile[float64](32, 14) != 0 {
		t.Error("PositionsTile[float64](32, 14) != 0: there is no float64 positions kernel")
	}
	if PositionsTile[float32](32, 14) == 0 {
		t.Skip("no positions kernel on this machine (AVX-512 only)")
	}
	for _, tc := range []struct{ m, width, want int }{
		{32, 14, 14}, {64, 28, 14}, {32, 13, 14}, // 14 against 16
		{32, 16, 8}, {32, 8, 8}, {32, 24, 8}, {32, 32, 8}, // 16 against 28, …
		{32, 7, 8}, {32, 1, 8}, // 8 against 14
	} {
		if got := PositionsTile[float32](tc.m, tc.width); got != tc.want {
			t.Errorf("PositionsTile(%d, %d) = %d, want %d", tc.m, tc.width, got, tc.want)
		}
	}
}

// TestGemmPositionsRandom holds GemmPositionsA to GemmWindowsA bit for
// bit on random shapes: rows of any width up to several tiles (whole and
// partial tiles of either height), strides from 0 (every row the same
// windows) to past the row, depths across K blocks, with and without a
// bias, on 1 to 3 threads.
func TestGemmPositionsRandom(t *testing.T) {
	if PositionsTile[float32](32, 14) == 0 {
		t.Skip("no positions kernel on this machine (AVX-512 only)")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	tries := 300
	if testing.Short() {
		tries = 60
	}
	for range tries {
		width := 1 + rng.IntN(40)
		pc := windowsCase{m: 32 * (1 + rng.IntN(3)), k: rng.IntN(900), width: width, rows: 1 + rng.IntN(4)}
		if rng.IntN(4) > 0 {
			pc.stride = width + rng.IntN(5)
		}
		p, win, a, n := positionsOperands(rng, pc)
		threads := 1 + rng.IntN(3)
		var bias []float32
		var beta float32
		want := to32(p.c)
		if rng.IntN(2) == 0 {
			bias, beta = make([]float32, pc.m), 1
			for i := range bias {
				bias[i] = float32(rng.Float64()*2 - 1)
				for j := range n {
					want[i*p.ldc+j] = bias[i]
				}
			}
		}
		wa := PackWindowsA(make([]float32, WindowsALen[float32](pc.m, pc.k)), pc.m, pc.k, a, p.lda)
		GemmWindowsA(wa, n, 1, win, beta, want, p.ldc, threads)
		pa := PackPositionsA(make([]float32, PositionsALen[float32](pc.m, pc.k)), pc.m, pc.k, a, p.lda)
		got := to32(p.c)
		GemmPositionsA(pa, n, win, bias, got, p.ldc, threads)
		sameBits(t, "float32", []string{"GemmWindowsA", "GemmPositionsA"}, [][]float32{want, got})
		if t.Failed() {
			t.Fatalf("m=%d k=%d width=%d rows=%d stride=%d bias=%v threads=%d", pc.m, pc.k, pc.width, pc.rows, pc.stride, bias != nil, threads)
		}
	}
}

// TestPositionsKernels runs every positions kernel alone against the
// definition (checkTile): column p of A the mr elements at a + offs[p].
func TestPositionsKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, kern := range kernels32.all {
		for _, pk := range kern.positions {
			for _, k := range []int{0, 1, 3, 4, 9, 33} {
				offs := make([]int32, max(1, k))
				for p := range offs {
					offs[p] = int32(rng.IntN(40))
				}
				a := smallInts(rng, 40+pk.mr)
				checkTile(t, rng, fmt.Sprintf("%s positions %d×%d k=%d", kern.name, pk.mr, pk.nr, k), pk.mr, pk.nr, k,
					func(r, p int) float32 { return a[int(offs[p])+r] },
					func(b, c []float32, ldc int, alpha, beta float32) {
						pk.fn(k, &a[0], &offs[0], &b[0], &c[0], ldc, alpha, beta)
					})
			}
		}
	}
}
