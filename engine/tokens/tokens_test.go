package tokens

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/npy"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// shard builds an llm.c shard with the given header words and token bytes.
func shard(magic, version, n int32, body []byte) []byte {
	return append(shardHeader(magic, version, int(n)), body...)
}

func u16s(v ...uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func u32s(v ...uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func npyOf(t *testing.T, dt dtype.DType, shape []int, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := npy.Write(&b, &npy.Array{DType: dt, Shape: shape, Data: data}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// values reads every token of d with At.
func values(t *testing.T, d *Dataset) []int64 {
	t.Helper()
	out := make([]int64, d.Len())
	for i := range out {
		v, err := d.At(i)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

func TestParse(t *testing.T) {
	i64 := func(v ...int64) []byte {
		b := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		want    []int64
		vocab   int
		wantErr string
	}{
		// The shards' vocabularies are their formats', the tokenizers'.
		{"llm.c GPT-2 shard", shard(magicGPT2, 1, 4, u16s(50256, 1, 2, 3)), []int64{50256, 1, 2, 3}, 50257, ""},
		{"llm.c Llama 3 shard", shard(magicLlama3, 7, 3, u32s(128000, 9, 70000)), []int64{128000, 9, 70000}, 128256, ""},
		{"empty shard", shard(magicGPT2, 1, 0, nil), []int64{}, 50257, ""},
		{"truncated shard", shard(magicGPT2, 1, 4, u16s(1, 2, 3)), nil, 0, "declares 4 tokens (8 bytes) but 6 bytes follow"},
		{"trailing bytes", shard(magicGPT2, 1, 1, u16s(1, 2)), nil, 0, "declares 1 tokens"},
		{"negative count", shard(magicGPT2, 1, -1, nil), nil, 0, "declares -1 tokens"},
		{"unknown version", shard(magicGPT2, 2, 0, nil), nil, 0, "magic 20240520 with version 2"},
		{"short header", shard(magicGPT2, 1, 0, nil)[:100], nil, 0, "needs a 1024-byte header, the file has 100 bytes"},
		{"npy int64", npyOf(t, dtype.Int64, []int{3}, i64(5, 0, 70000)), []int64{5, 0, 70000}, 70001, ""},
		{"npy uint8", npyOf(t, dtype.Uint8, []int{2}, []byte{7, 8}), []int64{7, 8}, 256, ""},
		{"npy int32", npyOf(t, dtype.Int32, []int{2}, u32s(300, 2)), []int64{300, 2}, 301, ""},
		{"npy beyond int32", npyOf(t, dtype.Int64, []int{2}, i64(1, 1<<31)), nil, 0, "element 1 is 2147483648, not a token id"},
		{"npy 2-d", npyOf(t, dtype.Int64, []int{1, 2}, i64(1, 2)), nil, 0, "must be a 1-d array, the file holds shape [1 2]"},
		{"npy float", npyOf(t, dtype.Float32, []int{1}, u32s(0)), nil, 0, "must be integers, the array is float32"},
		{"npy negative", npyOf(t, dtype.Int64, []int{2}, i64(1, -4)), nil, 0, "element 1 is -4"},
		{"npy broken", npyOf(t, dtype.Int64, []int{2}, i64(1, 2))[:60], nil, 0, "tokens: data.npy: npy:"},
		{"text", []byte("héllo"), []int64{'h', 0xc3, 0xa9, 'l', 'l', 'o'}, 256, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse(tc.data, "data.npy")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "data.npy") {
					t.Fatalf("error %v, want one naming the file and containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := values(t, d); !slices.Equal(got, tc.want) || d.Vocab != tc.vocab {
				t.Fatalf("tokens %v vocab %d, want %v vocab %d", got, d.Vocab, tc.want, tc.vocab)
			}
		})
	}
}

func TestLoadConcatenatesShardsInOrder(t *testing.T) {
	dir := t.TempDir()
	for i, toks := range [][]uint16{{1, 2, 3}, {4, 5}, {6}} {
		if err := WriteShard(filepath.Join(dir, "train_00000"+string(rune('0'+2-i))+".bin"), toks); err != nil {
			t.Fatal(err)
		}
	}
	// Written in reverse: the files are 000002 {1,2,3}, 000001 {4,5}, 000000 {6}.
	d, err := Load(filepath.Join(dir, "train_*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if got := values(t, d); !slices.Equal(got, []int64{6, 4, 5, 1, 2, 3}) || d.Vocab != vocabGPT2 {
		t.Fatalf("tokens %v vocab %d", got, d.Vocab)
	}
	os.WriteFile(filepath.Join(dir, "wide.npy"), npyOf(t, dtype.Int64, []int{1}, []byte{0x80, 0x38, 1, 0, 0, 0, 0, 0}), 0o644)
	d, err = Load(filepath.Join(dir, "train_000000.bin"), filepath.Join(dir, "wide.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if got := values(t, d); !slices.Equal(got, []int64{6, 80000}) || d.Vocab != 80001 {
		t.Fatalf("mixed widths: tokens %v vocab %d", got, d.Vocab)
	}
	if _, err := Load(filepath.Join(dir, "val_*.bin")); err == nil || !strings.Contains(err.Error(), "no file matches") {
		t.Fatalf("missing files: %v", err)
	}
	s, err := d.Slice(1, 2)
	if err != nil || !slices.Equal(values(t, s), []int64{80000}) {
		t.Fatalf("slice: %v", err)
	}
	if _, err := d.Slice(1, 3); err == nil {
		t.Fatal("slice past the end")
	}
}

// seq is a dataset whose token i is i, so that a window's first token
// names it.
func seq(n int) *Dataset {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(i)
	}
	d, err := FromInt64s(ids, "seq")
	if err != nil {
		panic(err)
	}
	return d
}

func newRT() *tensor.Runtime { return tensor.NewRuntime(cpu.New(cpu.Options{}), 0) }

// batch draws one batch from l and returns the window index of each row,
// checking that targets are the inputs shifted by one.
func batch(t *testing.T, rt *tensor.Runtime, l *Loader, T int) []int {
	t.Helper()
	x, y, err := l.Next(rt)
	if err != nil {
		t.Fatal(err)
	}
	xs, _ := x.Int64s()
	ys, _ := y.Int64s()
	var rows []int
	for i := 0; i < len(xs); i += T {
		if xs[i]%int64(T) != 0 {
			t.Fatalf("row starts at token %d, not a window start", xs[i])
		}
		for j := range T {
			if xs[i+j] != xs[i]+int64(j) || ys[i+j] != xs[i+j]+1 {
				t.Fatalf("row %d: inputs %v targets %v", i/T, xs[i:i+T], ys[i:i+T])
			}
		}
		rows = append(rows, int(xs[i])/T)
	}
	return rows
}

func TestLoaderSplitsEpochsAcrossRanks(t *testing.T) {
	rt := newRT()
	const T, B, world = 4, 2, 3
	ds := seq(4*50 + 1) // 50 windows: 8 global batches of 6, 2 left over
	var ranks []*Loader
	for r := range world {
		l, err := NewLoader(ds, LoaderOptions{Batch: B, SeqLen: T, Rank: r, World: world, Shuffle: true, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		ranks = append(ranks, l)
	}
	one, _ := NewLoader(ds, LoaderOptions{Batch: B * world, SeqLen: T, Shuffle: true, Seed: 7})
	if ranks[0].StepsPerEpoch() != 8 {
		t.Fatalf("%d steps per epoch, want 8", ranks[0].StepsPerEpoch())
	}
	var epochs [2][]int
	for step := range 16 {
		want := batch(t, rt, one, T) // the one-rank run's global batch
		var got []int
		for _, l := range ranks {
			got = append(got, batch(t, rt, l, T)...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: ranks take %v, the global batch is %v", step, got, want)
		}
		epochs[step/8] = append(epochs[step/8], got...)
	}
	for e, ws := range epochs {
		sorted := slices.Clone(ws)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != 48 {
			t.Fatalf("epoch %d repeats windows: %v", e, ws)
		}
	}
	if slices.Equal(epochs[0], epochs[1]) {
		t.Fatal("the second epoch has the first one's order")
	}
	if p := ranks[1].Position(); p != (Position{Epoch: 1, Windows: 48}) {
		t.Fatalf("position %+v", p)
	}
}

func TestLoaderResumesAndKeepsFileOrder(t *testing.T) {
	rt := newRT()
	ds := seq(8*10 + 1)
	a, _ := NewLoader(ds, LoaderOptions{Batch: 2, SeqLen: 8, Shuffle: true, Seed: 3})
	for range 7 {
		batch(t, rt, a, 8)
	}
	saved := a.Position()
	b, _ := NewLoader(ds, LoaderOptions{Batch: 1, SeqLen: 8, Rank: 1, World: 2, Shuffle: true, Seed: 3})
	if err := b.SetPosition(saved); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		want := batch(t, rt, a, 8)[1]
		if got := batch(t, rt, b, 8)[0]; got != want {
			t.Fatalf("resumed on 2 ranks: rank 1 got window %d, want %d", got, want)
		}
	}
	plain, _ := NewLoader(ds, LoaderOptions{Batch: 5, SeqLen: 8})
	if got := batch(t, rt, plain, 8); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("without shuffle: %v", got)
	}
	for _, p := range []Position{{Epoch: -1}, {Windows: 3}, {Windows: 12}} {
		if err := a.SetPosition(p); err == nil {
			t.Errorf("position %+v accepted", p)
		}
	}
}

func TestLoaderErrors(t *testing.T) {
	for _, tc := range []struct {
		ds   *Dataset
		o    LoaderOptions
		want string
	}{
		{seq(10), LoaderOptions{Batch: 0, SeqLen: 4}, "must be positive"},
		{seq(10), LoaderOptions{Batch: 1, SeqLen: 4, Rank: 2, World: 2}, "rank 2 of 2"},
		{seq(10), LoaderOptions{Batch: 2, SeqLen: 4, World: 2}, "holds 10 tokens, 2 windows of 4+1, fewer than a global batch of 2×2"},
		{seq(0), LoaderOptions{Batch: 1, SeqLen: 4}, "holds 0 tokens"},
	} {
		if _, err := NewLoader(tc.ds, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.o, err, tc.want)
		}
	}
}

// FuzzParse: no input makes Parse (the header and format checks of Load,
// over memory) panic; every token of what it accepts either reads as an id
// below the vocabulary size or fails to read, naming the file; and a .npy
// file reads as engine/npy reads it: accepted exactly when npy accepts a
// 1-d integer array of ids in [0, 2³¹), with the same ids.
func FuzzParse(f *testing.F) {
	f.Add(shard(magicGPT2, 1, 2, u16s(1, 2)))
	f.Add(shard(magicGPT2, 1, 2, u16s(1, 60000)))
	f.Add(shard(magicLlama3, 7, 1, u32s(5)))
	f.Add([]byte("\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }"))
	f.Add([]byte("plain text"))
	f.Add(npyRaw("{'descr': '>u2', 'fortran_order': True, 'shape': (3L,), }", []byte{1, 0, 0, 2, 255, 255}))
	f.Add(npyRaw(`{"descr": "|i1", "fortran_order": False, "shape": (2,)}`, []byte{5, 127}))
	f.Add(npyRaw("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", u32s(1<<31)))
	seeds, _ := filepath.Glob("../npy/testdata/*.npy")
	for _, name := range seeds {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data, "fuzz")
		if bytes.HasPrefix(data, []byte(npyMagic)) {
			sameAsNpy(t, data, d, err)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokens: fuzz: ") {
				t.Fatalf("error %q does not name the input", err)
			}
			return
		}
		for i := range d.Len() {
			v, err := d.At(i)
			if err != nil {
				var re *ReadError
				if !errors.As(err, &re) || re.File != "fuzz" {
					t.Fatalf("token %d: error %v does not name the input", i, err)
				}
				continue
			}
			if v < 0 || v >= int64(d.Vocab) {
				t.Fatalf("token %d = %d outside vocab %d", i, v, d.Vocab)
			}
		}
	})
}

// sameAsNpy checks Parse's verdict on a .npy file (d, err) against
// engine/npy's.
func sameAsNpy(t *testing.T, data []byte, d *Dataset, err error) {
	a, nerr := npy.Parse(data)
	var ids []int64
	if nerr == nil && len(a.Shape) == 1 {
		switch a.DType {
		case dtype.Uint8:
			for _, b := range a.Data {
				ids = append(ids, int64(b))
			}
		case dtype.Int32:
			for i := 0; i < len(a.Data); i += 4 {
				ids = append(ids, int64(int32(binary.LittleEndian.Uint32(a.Data[i:]))))
			}
		case dtype.Int64:
			for i := 0; i < len(a.Data); i += 8 {
				ids = append(ids, int64(binary.LittleEndian.Uint64(a.Data[i:])))
			}
		default:
			nerr = errors.New("not integers")
		}
	} else if nerr == nil {
		nerr = errors.New("not 1-d")
	}
	for _, v := range ids {
		if v < 0 || v > maxID {
			nerr = errors.New("not token ids")
		}
	}
	if (err == nil) != (nerr == nil) {
		t.Fatalf("Parse: %v; npy.Parse of token ids: %v", err, nerr)
	}
	if err == nil {
		if got := values(t, d); !slices.Equal(got, ids) {
			t.Fatalf("Parse reads %v, npy %v", got, ids)
		}
	}
}

// TestLoadRefusesEndlessFiles: a device or a FIFO named as a token file
// is an error naming it at once, not a read that never ends.
func TestLoadRefusesEndlessFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "train.bin")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/dev/zero", fifo} {
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), path+": not a regular file") {
			t.Errorf("Load(%s): %v", path, err)
		}
	}
}
