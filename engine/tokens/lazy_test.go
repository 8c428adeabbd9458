package tokens

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/npy"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// writeFile writes data to dir/name and returns the path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// wholeStream is the old reader: every file read whole and decoded, by
// hand, into one stream (the reference the lazy reader must match).
func wholeStream(t *testing.T, paths []string) []int64 {
	t.Helper()
	var out []int64
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(p, ".npy"):
			a, err := npy.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			for i := range a.Shape[0] {
				switch a.DType {
				case dtype.Int32:
					out = append(out, int64(int32(binary.LittleEndian.Uint32(a.Data[4*i:]))))
				case dtype.Int64:
					out = append(out, int64(binary.LittleEndian.Uint64(a.Data[8*i:])))
				default:
					t.Fatalf("%s: %v", p, a.DType)
				}
			}
		case strings.HasSuffix(p, ".bin"):
			width := 2
			if binary.LittleEndian.Uint32(b) == magicLlama3 {
				width = 4
			}
			for i := headerBytes; i < len(b); i += width {
				if width == 2 {
					out = append(out, int64(binary.LittleEndian.Uint16(b[i:])))
				} else {
					out = append(out, int64(binary.LittleEndian.Uint32(b[i:])))
				}
			}
		default:
			for _, c := range b {
				out = append(out, int64(c))
			}
		}
	}
	return out
}

// oldBatches is the in-memory loader this package had before it read
// windows from the files: its window order (PCG seeded with the seed and
// the epoch, Fisher-Yates, Lemire's bounded draw) and its batches, copied
// so that a change of either shows here. It returns the first steps
// batches of rank o.Rank, inputs then targets.
func oldBatches(stream []int64, o LoaderOptions, steps int) [][2][]int64 {
	windows := (len(stream) - 1) / o.SeqLen
	global := o.Batch * o.World
	order := func(epoch int) []int {
		ord := make([]int, windows)
		for i := range ord {
			ord[i] = i
		}
		if !o.Shuffle {
			return ord
		}
		rng := rand.NewPCG(o.Seed, uint64(epoch))
		for i := len(ord) - 1; i > 0; i-- {
			n := uint64(i + 1)
			var j int
			for {
				hi, lo := bits.Mul64(rng.Uint64(), n)
				if lo >= n || lo >= -n%n {
					j = int(hi)
					break
				}
			}
			ord[i], ord[j] = ord[j], ord[i]
		}
		return ord
	}
	epoch, pos, ord := 0, 0, order(0)
	var out [][2][]int64
	for range steps {
		if pos+global > windows {
			epoch, pos = epoch+1, 0
			ord = order(epoch)
		}
		var x, y []int64
		for b := range o.Batch {
			start := ord[pos+o.Rank*o.Batch+b] * o.SeqLen
			x = append(x, stream[start:start+o.SeqLen]...)
			y = append(y, stream[start+1:start+o.SeqLen+1]...)
		}
		out = append(out, [2][]int64{x, y})
		pos += global
	}
	return out
}

// next draws a batch as int64s.
func next(t *testing.T, rt *tensor.Runtime, l *Loader) [2][]int64 {
	t.Helper()
	x, y, err := l.Next(rt)
	if err != nil {
		t.Fatal(err)
	}
	xs, err := x.Int64s()
	if err != nil {
		t.Fatal(err)
	}
	ys, err := y.Int64s()
	if err != nil {
		t.Fatal(err)
	}
	return [2][]int64{xs, ys}
}

// mixedFiles writes shards of both widths, .npy files of int32 and int64
// ids and a text file, small enough that windows span them.
func mixedFiles(t *testing.T) []string {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	gpt2 := func(n int) []byte {
		v := make([]uint16, n)
		for i := range v {
			v[i] = uint16(rng.IntN(vocabGPT2))
		}
		return shard(magicGPT2, versionGPT2, int32(n), u16s(v...))
	}
	llama3 := func(n int) []byte {
		v := make([]uint32, n)
		for i := range v {
			v[i] = uint32(rng.IntN(vocabLlama3))
		}
		return shard(magicLlama3, versionLlama3, int32(n), u32s(v...))
	}
	ids := func(n, width int) []byte {
		b := make([]byte, n*width)
		for i := range n {
			v := uint64(rng.IntN(100000))
			if width == 4 {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
			} else {
				binary.LittleEndian.PutUint64(b[8*i:], v)
			}
		}
		return b
	}
	return []string{
		writeFile(t, dir, "a_000.bin", gpt2(37)),
		writeFile(t, dir, "a_001.bin", llama3(23)),
		writeFile(t, dir, "a_002.bin", gpt2(3)), // shorter than a window
		writeFile(t, dir, "a_003.bin", shard(magicGPT2, versionGPT2, 0, nil)),
		writeFile(t, dir, "b.npy", npyOf(t, dtype.Int32, []int{19}, ids(19, 4))),
		writeFile(t, dir, "c.txt", []byte("windows span the files of a dataset")),
		writeFile(t, dir, "d.npy", npyOf(t, dtype.Int64, []int{31}, ids(31, 8))),
		writeFile(t, dir, "e_000.bin", llama3(41)),
		writeFile(t, dir, "e_001.bin", gpt2(50)),
	}
}

// TestLoaderMatchesInMemoryStream: windows read from the files are the
// old in-memory loader's batches, bit for bit: every batch of four epochs,
// shuffled and in file order, on 1 and 3 ranks, over shards of both
// widths, .npy files and text, with windows spanning files; a position
// saved mid-epoch resumes at the same window on a dataset opened anew;
// slices read the same tokens as the stream's.
func TestLoaderMatchesInMemoryStream(t *testing.T) {
	rt := newRT()
	paths := mixedFiles(t)
	stream := wholeStream(t, paths)
	d, err := Load(paths[:4]...) // patterns and plain paths alike
	if err != nil {
		t.Fatal(err)
	}
	more, err := Load(paths[4:]...)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := Load(append(paths[:4:4], paths[4:]...)...)
	if err != nil {
		t.Fatal(err)
	}
	if d.Len()+more.Len() != len(stream) || ds.Len() != len(stream) || ds.Vocab != vocabLlama3 {
		t.Fatalf("%d + %d tokens, %d together with vocabulary %d; the files hold %d", d.Len(), more.Len(), ds.Len(), ds.Vocab, len(stream))
	}
	if got := values(t, ds); !slices.Equal(got, stream) {
		t.Fatalf("At reads %v, the files hold %v", got, stream)
	}
	for _, T := range []int{5, 7} {
		for _, world := range []int{1, 3} {
			for _, shuffle := range []bool{true, false} {
				for _, prefetch := range []int{0, 1, 3} {
					t.Run(fmt.Sprintf("T=%d world=%d shuffle=%v prefetch=%d", T, world, shuffle, prefetch), func(t *testing.T) {
						for rank := range world {
							o := LoaderOptions{Batch: 2, SeqLen: T, Rank: rank, World: world, Shuffle: shuffle, Seed: 11, Prefetch: prefetch}
							l, err := NewLoader(ds, o)
							if err != nil {
								t.Fatal(err)
							}
							defer l.Close()
							steps := 4*l.StepsPerEpoch() + 1
							want := oldBatches(stream, o, steps)
							for step := range steps {
								if got := next(t, rt, l); !slices.Equal(got[0], want[step][0]) || !slices.Equal(got[1], want[step][1]) {
									t.Fatalf("rank %d step %d: %v, want %v", rank, step, got, want[step])
								}
								if step == l.StepsPerEpoch()+1 {
									// Resume from here on a dataset opened anew.
									fresh, err := Load(paths...)
									if err != nil {
										t.Fatal(err)
									}
									r, err := NewLoader(fresh, o)
									if err != nil {
										t.Fatal(err)
									}
									defer r.Close()
									if err := r.SetPosition(l.Position()); err != nil {
										t.Fatal(err)
									}
									for k := step + 1; k < steps; k++ {
										if got := next(t, rt, r); !slices.Equal(got[0], want[k][0]) || !slices.Equal(got[1], want[k][1]) {
											t.Fatalf("rank %d resumed at step %d, step %d: %v, want %v", rank, step+1, k, got, want[k])
										}
									}
								}
							}
						}
					})
				}
			}
		}
	}
	for _, cut := range [][2]int{{0, 10}, {10, 150}, {36, 38}, {60, 63}, {100, len(stream)}, {7, 7}} {
		s, err := ds.Slice(cut[0], cut[1])
		if err != nil {
			t.Fatal(err)
		}
		if got := values(t, s); !slices.Equal(got, stream[cut[0]:cut[1]]) || s.Vocab != ds.Vocab {
			t.Fatalf("slice %v: %v, want %v", cut, got, stream[cut[0]:cut[1]])
		}
	}
}

// TestInMemoryDatasetsMatchTheirIDs: FromInt64s (16 and 32 bits) and
// FromBytes read back what they were given.
func TestInMemoryDatasetsMatchTheirIDs(t *testing.T) {
	for _, ids := range [][]int64{{3, 65535, 0}, {3, 65536, 1<<31 - 1}, {}} {
		d, err := FromInt64s(ids, "tensor")
		if err != nil {
			t.Fatal(err)
		}
		if got := values(t, d); !slices.Equal(got, ids) {
			t.Errorf("FromInt64s(%v) reads %v", ids, got)
		}
	}
	if got := values(t, FromBytes([]byte("hé"), "text")); !slices.Equal(got, []int64{'h', 0xc3, 0xa9}) {
		t.Errorf("FromBytes reads %v", got)
	}
	if _, err := FromInt64s([]int64{1, -1}, "tensor"); err == nil || !strings.Contains(err.Error(), "element 1 is -1") {
		t.Errorf("negative id: %v", err)
	}
}

// rss is the process's resident memory in bytes, from /proc/self/status.
func rss(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status to measure resident memory with: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("/proc/self/status has no VmRSS")
	return 0
}

// sparseShard writes an llm.c shard header declaring n tokens of the
// given width and extends the file to its full size without writing the
// tokens (a sparse file of zeros).
func sparseShard(t *testing.T, path string, magic, version int32, n int64, width int64) {
	t.Helper()
	if err := os.WriteFile(path, shardHeader(magic, version, int(n)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, headerBytes+n*width); err != nil {
		t.Skipf("cannot make a sparse file of %d bytes here: %v", headerBytes+n*width, err)
	}
}

// TestLoadHugeSparseShards: 10 GB of llm.c shards (sparse files of zero
// tokens: one GPT-2 shard as large as the format's int32 count allows,
// 2³¹-1 tokens, and a Llama 3 shard of 1.5·10⁹ tokens) open in well under
// a second, and a loader serves batches from them, shuffled, with the
// process's resident memory growing by a small fraction of the data.
func TestLoadHugeSparseShards(t *testing.T) {
	dir := t.TempDir()
	sparseShard(t, filepath.Join(dir, "big_000.bin"), magicGPT2, versionGPT2, maxID, 2)
	sparseShard(t, filepath.Join(dir, "big_001.bin"), magicLlama3, versionLlama3, 1_500_000_000, 4)
	before := rss(t)
	start := time.Now()
	ds, err := Load(filepath.Join(dir, "big_*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Since(start)
	const wantTokens = maxID + 1_500_000_000
	if ds.Len() != wantTokens || ds.Vocab != vocabLlama3 {
		t.Fatalf("%d tokens, vocabulary %d; want %d and %d", ds.Len(), ds.Vocab, wantTokens, vocabLlama3)
	}
	if opened > time.Second {
		t.Errorf("opening 10 GB of shards took %v", opened)
	}
	rt := newRT()
	l, err := NewLoader(ds, LoaderOptions{Batch: 4, SeqLen: 1024, Shuffle: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b := next(t, rt, l)
		if len(b[0]) != 4*1024 || slices.ContainsFunc(b[0], func(v int64) bool { return v != 0 }) {
			t.Fatal("a batch of the sparse shards is not 4×1024 zero tokens")
		}
	}
	grown := rss(t) - before
	t.Logf("opened in %v; resident memory grew by %d MB for %d GB of shards", opened, grown>>20, (headerBytes*2+maxID*2+6_000_000_000)/1_000_000_000)
	if grown > 300<<20 {
		t.Errorf("resident memory grew by %d MB", grown>>20)
	}
}

// TestLoadReadsHeadersOnly: opening 100 shards checks each header (a bad
// one fails the open, naming it) and reads no token: a shard whose body
// holds an id beyond GPT-2's vocabulary opens, and fails only when a
// window there is read, naming the file, the token's byte offset and the
// step.
func TestLoadReadsHeadersOnly(t *testing.T) {
	dir := t.TempDir()
	const files, per = 100, 64
	for f := range files {
		toks := make([]uint16, per)
		for i := range toks {
			toks[i] = uint16((f*per + i) % vocabGPT2)
		}
		if f == 73 {
			toks[10] = 0xffff
		}
		if err := WriteShard(filepath.Join(dir, fmt.Sprintf("train_%06d.bin", f)), toks); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := Load(filepath.Join(dir, "train_*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	rt := newRT()
	const B, T = 4, 16
	l, err := NewLoader(ds, LoaderOptions{Batch: B, SeqLen: T})
	if err != nil {
		t.Fatal(err)
	}
	bad := 73*per + 10 // the bad token's index: window 292, step 73
	for range bad / T / B {
		next(t, rt, l)
	}
	_, _, err = l.Next(rt)
	want := fmt.Sprintf("tokens: %s: byte offset %d: token id 65535 is outside the vocabulary [0, 50257) (loader: epoch 0, step 73)",
		filepath.Join(dir, "train_000073.bin"), headerBytes+2*10)
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant %s", err, want)
	}
	if p := l.Position(); p != (Position{Windows: 73 * B}) {
		t.Errorf("after the failure the loader is at %+v, want step 73", p)
	}

	broken := filepath.Join(dir, "train_000040.bin")
	b, err := os.ReadFile(broken)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(b[8:], per+1)
	writeFile(t, dir, "train_000040.bin", b)
	if _, err := Load(filepath.Join(dir, "train_*.bin")); err == nil || !strings.Contains(err.Error(), broken+": the header declares 65 tokens (130 bytes) but 128 bytes follow it") {
		t.Fatalf("a bad header among 100 shards: %v", err)
	}
}

// TestLoaderCatchesChangedFiles: a shard truncated, grown or rewritten
// in place after its open fails the next batch read from it, naming the
// file, the offset and the step, and the loader stays at that step; one
// unlinked (or replaced by a rename) reads on as it was opened.
func TestLoaderCatchesChangedFiles(t *testing.T) {
	rt := newRT()
	toks := make([]uint16, 1000)
	for i := range toks {
		toks[i] = uint16(i)
	}
	for _, tc := range []struct {
		name   string
		change func(path string) error
		want   string // "" when reading goes on
	}{
		{"truncated", func(p string) error { return os.Truncate(p, headerBytes+2*500) }, "the file is 2024 bytes now, 3024 when it was opened: truncated or rewritten while in use"},
		{"grown", func(p string) error { return os.Truncate(p, headerBytes+2*2000) }, "the file is 5024 bytes now, 3024 when it was opened"},
		{"header rewritten", func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt(shardHeader(magicLlama3, versionLlama3, 500), 0)
			return err
		}, "its header is not what it was when the file was opened"},
		{"unlinked", os.Remove, ""},
		{"replaced by a rename", func(p string) error { return WriteShard(p, []uint16{1, 2, 3}) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "train.bin")
			if err := WriteShard(path, toks); err != nil {
				t.Fatal(err)
			}
			ds, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			l, err := NewLoader(ds, LoaderOptions{Batch: 2, SeqLen: 10})
			if err != nil {
				t.Fatal(err)
			}
			next(t, rt, l)
			next(t, rt, l)
			if err := tc.change(path); err != nil {
				t.Fatal(err)
			}
			x, _, err := l.Next(rt)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if xs, _ := x.Int64s(); xs[0] != 40 {
					t.Fatalf("step 2 starts with token %d, want 40", xs[0])
				}
				return
			}
			var re *ReadError
			if err == nil || !errors.As(err, &re) || re.File != path || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "byte offset 1104") || !strings.HasSuffix(err.Error(), "(loader: epoch 0, step 2)") {
				t.Fatalf("error %v, want one naming %s, byte offset 1104, step 2 and %q", err, path, tc.want)
			}
			if p := l.Position(); p != (Position{Windows: 4}) {
				t.Errorf("position %+v after the failure", p)
			}
		})
	}
}

// TestLoaderVocab: a loader checks every id against the smaller of its
// Vocab and the dataset's: a small model trains on a GPT-2 shard whose
// ids fit it, and an id beyond it fails naming where it is.
func TestLoaderVocab(t *testing.T) {
	rt := newRT()
	toks := make([]uint16, 400)
	for i := range toks {
		toks[i] = uint16(i % 300)
	}
	path := filepath.Join(t.TempDir(), "train.bin")
	if err := WriteShard(path, toks); err != nil {
		t.Fatal(err)
	}
	ds, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	fits, err := NewLoader(ds, LoaderOptions{Batch: 4, SeqLen: 32, Vocab: 512})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		next(t, rt, fits)
	}
	small, err := NewLoader(ds, LoaderOptions{Batch: 4, SeqLen: 32, Vocab: 256})
	if err != nil {
		t.Fatal(err)
	}
	next(t, rt, small) // tokens 0 to 128
	_, _, err = small.Next(rt)
	want := fmt.Sprintf("tokens: %s: byte offset %d: token id 256 is outside the vocabulary [0, 256) (loader: epoch 0, step 1)", path, headerBytes+2*256)
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant %s", err, want)
	}
	if _, err := NewLoader(ds, LoaderOptions{Batch: 1, SeqLen: 4, Vocab: -1}); err == nil {
		t.Error("a negative vocabulary size is accepted")
	}
}

// TestLoadSharesOpenFiles: datasets of one process that name the same
// file, loaded one after another or at once, read it through one open
// file; a file replaced since is opened anew, and the older datasets read
// on what they opened.
func TestLoadSharesOpenFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "train.bin")
	if err := WriteShard(path, []uint16{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	first, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	others := make([]*Dataset, 4)
	errs := make([]error, 4)
	for i := range others {
		wg.Go(func() { others[i], errs[i] = Load(filepath.Join(dir, "*.bin")) })
	}
	wg.Wait()
	for i, d := range others {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if d.segs[0].src != first.segs[0].src {
			t.Errorf("load %d opened the file again", i)
		}
	}
	if err := WriteShard(path, []uint16{9, 8, 7}); err != nil {
		t.Fatal(err)
	}
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if again.segs[0].src == first.segs[0].src {
		t.Fatal("the replaced file is read through the old one's open file")
	}
	if got, old := values(t, again), values(t, first); !slices.Equal(got, []int64{9, 8, 7}) || !slices.Equal(old, []int64{1, 2, 3, 4}) {
		t.Fatalf("new dataset reads %v, the old one %v", got, old)
	}
}

// TestLoadersOnGoroutines: loaders of one dataset, one per in-process
// rank, read concurrently through the shared files (run with -race).
func TestLoadersOnGoroutines(t *testing.T) {
	paths := mixedFiles(t)
	stream := wholeStream(t, paths)
	ds, err := Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	const world = 3
	var wg sync.WaitGroup
	errs := make([]error, world)
	for r := range world {
		wg.Go(func() {
			rt := newRT()
			o := LoaderOptions{Batch: 2, SeqLen: 5, Rank: r, World: world, Shuffle: true, Seed: 4}
			l, err := NewLoader(ds, o)
			if err != nil {
				errs[r] = err
				return
			}
			want := oldBatches(stream, o, 3*l.StepsPerEpoch())
			for step := range want {
				x, _, err := l.Next(rt)
				if err != nil {
					errs[r] = err
					return
				}
				if xs, _ := x.Int64s(); !slices.Equal(xs, want[step][0]) {
					errs[r] = fmt.Errorf("rank %d step %d: %v, want %v", r, step, xs, want[step][0])
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// npyRaw is a version 1.0 .npy file with the given header dict.
func npyRaw(header string, body []byte) []byte {
	h := header + strings.Repeat(" ", (64-(10+len(header)+1)%64)%64) + "\n"
	b := append([]byte(npyMagic+"\x01\x00"), byte(len(h)), byte(len(h)>>8))
	return append(append(b, h...), body...)
}

// TestParseNpyLikeNpy: the .npy forms NumPy writes for token ids (byte
// orders, the Fortran flag of a 1-d array, Python 2's L, version 2.0
// headers, the 1-byte types) read as engine/npy reads them (its
// ReadHeader checks the preamble for both).
func TestParseNpyLikeNpy(t *testing.T) {
	v2 := npyRaw("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", u16s(5, 6))
	hlen := len(v2) - 10 - 4 // less the preamble and the data
	v2 = append(append([]byte(npyMagic+"\x02\x00"), byte(hlen), byte(hlen>>8), 0, 0), v2[10:]...)
	for _, tc := range []struct {
		name  string
		data  []byte
		want  []int64
		vocab int
	}{
		{"big-endian uint16", npyRaw("{'descr': '>u2', 'fortran_order': True, 'shape': (3L,), }", []byte{1, 0, 0, 2, 255, 255}), []int64{256, 2, 65535}, 65536},
		{"int8", npyRaw(`{"descr": "|i1", "fortran_order": False, "shape": (2,)}`, []byte{5, 127}), []int64{5, 127}, 128},
		{"uint8", npyRaw("{'shape': (2,), 'descr': '|u1', 'fortran_order': False}", []byte{5, 7}), []int64{5, 7}, 256},
		{"big-endian int64", npyRaw("{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }", []byte{0, 0, 0, 0, 0, 1, 0, 0}), []int64{65536}, 65537},
		{"version 2.0", v2, []int64{5, 6}, 7},
		{"uint32", npyRaw("{'descr': '<u4', 'fortran_order': False, 'shape': (1,), }", u32s(99)), []int64{99}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse(tc.data, "ids.npy")
			sameAsNpy(t, tc.data, d, err)
			if err != nil {
				t.Fatal(err)
			}
			if got := values(t, d); !slices.Equal(got, tc.want) || d.Vocab != tc.vocab {
				t.Fatalf("%v vocab %d, want %v vocab %d", got, d.Vocab, tc.want, tc.vocab)
			}
		})
	}
	for _, tc := range []struct{ header, want string }{
		{"{'descr': '<i2', 'fortran_order': False, 'shape': (1,), 'x': 1}", "unknown key 'x'"},
		{"{'descr': '<i2', 'fortran_order': False, 'shape': (1), }", "(1) is not a tuple"},
		{"{'descr': '<i2', 'descr': '<i2'}", "duplicate key 'descr'"},
		{"{'descr': '=i2', 'fortran_order': False, 'shape': (1,), }", "native byte order"},
		{"{'descr': '<u8', 'fortran_order': False, 'shape': (1,), }", "uint64 does not fit in int64"},
		{"{'descr': '<i2', 'fortran_order': 0, 'shape': (1,), }", "fortran_order is the integer 0, not True or False"},
		{"{'descr': '<i2', 'fortran_order': False, 'shape': (-1,), }", "dimension 0 is negative"},
	} {
		data := npyRaw(tc.header, u16s(1))
		_, err := Parse(data, "ids.npy")
		sameAsNpy(t, data, nil, err)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "tokens: ids.npy: ") {
			t.Errorf("%s: error %v, want one naming the file and containing %q", tc.header, err, tc.want)
		}
	}
}

// TestTokensBeyondTheFormat: an id its format cannot hold reads as an
// error naming the file and the token's byte offset, not as a token.
func TestTokensBeyondTheFormat(t *testing.T) {
	for _, tc := range []struct {
		data []byte
		want string
	}{
		{shard(magicGPT2, 1, 2, u16s(1, 50257)), "tokens: s.bin: byte offset 1026: token id 50257 is outside the vocabulary [0, 50257)"},
		{shard(magicLlama3, 7, 2, u32s(7, 1<<31)), "tokens: s.bin: byte offset 1028: token id 2147483648 is outside the vocabulary [0, 128256)"},
	} {
		d, err := Parse(tc.data, "s.bin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.At(1); err == nil || err.Error() != tc.want {
			t.Errorf("error %v, want %s", err, tc.want)
		}
	}
	if _, err := seq(3).At(3); err == nil || !strings.Contains(err.Error(), "token 3 of seq, which holds 3 tokens") {
		t.Errorf("At past the end: %v", err)
	}
}

// TestLoaderPrefetch: a loader reading ahead (Prefetch) reports a batch
// that fails at the Next that reaches it, after the batches before it,
// and stays there, as without reading ahead; moving it (SetPosition)
// drops what it read ahead; Close ends its goroutine.
func TestLoaderPrefetch(t *testing.T) {
	rt := newRT()
	before := runtime.NumGoroutine()
	toks := make([]uint16, 1000)
	for i := range toks {
		toks[i] = uint16(i % 500)
	}
	toks[65] = 60000 // beyond GPT-2's 50257 ids: step 3's second window (tokens 60 to 70)
	path := filepath.Join(t.TempDir(), "train.bin")
	if err := WriteShard(path, toks); err != nil {
		t.Fatal(err)
	}
	ds, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, prefetch := range []int{0, 1, 4} {
		l, err := NewLoader(ds, LoaderOptions{Batch: 2, SeqLen: 10, Prefetch: prefetch})
		if err != nil {
			t.Fatal(err)
		}
		for step := range 3 {
			if got := next(t, rt, l); got[0][0] != int64(20*step) {
				t.Fatalf("prefetch %d: step %d starts with token %d", prefetch, step, got[0][0])
			}
		}
		for range 2 { // and again: the loader stays at the failed step
			_, _, err := l.Next(rt)
			if err == nil || !strings.Contains(err.Error(), "byte offset 1154: token id 60000 is outside the vocabulary") ||
				!strings.HasSuffix(err.Error(), "(loader: epoch 0, step 3)") {
				t.Fatalf("prefetch %d: %v", prefetch, err)
			}
			if p := l.Position(); p != (Position{Windows: 6}) {
				t.Fatalf("prefetch %d: position %+v after the failure", prefetch, p)
			}
		}
		if err := l.SetPosition(Position{Windows: 8}); err != nil {
			t.Fatal(err)
		}
		if got := next(t, rt, l); got[0][0] != 80 {
			t.Fatalf("prefetch %d: after SetPosition, a batch from token %d", prefetch, got[0][0])
		}
		l.Close()
	}
	if _, err := NewLoader(ds, LoaderOptions{Batch: 2, SeqLen: 10, Prefetch: -1}); err == nil || !strings.Contains(err.Error(), "prefetch -1") {
		t.Errorf("a negative prefetch: %v", err)
	}
	for i := 0; i < 100 && runtime.NumGoroutine() > before; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}

// TestLoadUntilStops: a load asks stop before each file and through a
// wide .npy array's scan, and ends with its error: a 1 GB array of int32
// ids (a sparse file) stops within one piece of the scan.
func TestLoadUntilStops(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ids.npy")
	const n = 1 << 28
	head := npyRaw(fmt.Sprintf("{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }", n), nil)
	if err := os.WriteFile(path, head, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(len(head))+4*n); err != nil {
		t.Skipf("cannot make a sparse file here: %v", err)
	}
	stopped := errors.New("stopped")
	for _, after := range []int{0, 1, 5} {
		calls := 0
		_, err := LoadUntil(func() error {
			calls++
			if calls > after {
				return stopped
			}
			return nil
		}, path)
		if !errors.Is(err, stopped) || calls != after+1 {
			t.Errorf("stop after %d calls: %v after %d calls", after, err, calls)
		}
	}
}
