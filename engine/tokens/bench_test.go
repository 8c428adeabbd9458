package tokens

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// benchShard is the GPT-2 shard the benchmarks read: ZEROENG_TOKENS_BENCH_MB
// megabytes of tokens (default 1000), written to ZEROENG_TOKENS_BENCH_FILE
// and kept there (a file already there is used as it is), or to a
// temporary directory.
func benchShard(b *testing.B) string {
	mb := 1000
	if s := os.Getenv("ZEROENG_TOKENS_BENCH_MB"); s != "" {
		var err error
		if mb, err = strconv.Atoi(s); err != nil || mb < 1 || mb > 4000 {
			b.Fatalf("ZEROENG_TOKENS_BENCH_MB=%q: want 1 to 4000", s)
		}
	}
	path := os.Getenv("ZEROENG_TOKENS_BENCH_FILE")
	if path == "" {
		path = filepath.Join(b.TempDir(), "bench_000000.bin")
	} else if _, err := os.Stat(path); err == nil {
		return path
	} else if !errors.Is(err, fs.ErrNotExist) {
		b.Fatal(err)
	}
	n := mb * 1_000_000 / 2
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.Write(shardHeader(magicGPT2, versionGPT2, n))
	var tok [2]byte
	for i := range n {
		binary.LittleEndian.PutUint16(tok[:], uint16(i*7919%vocabGPT2))
		w.Write(tok[:])
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkLoader measures the tokens one Loader serves per second
// (B=8, T=1024, shuffled windows: llm.c's GPT-2 batch) from a GPT-2
// shard (benchShard), against what bounds it:
//
//   - Loader: the loader, the shard in the page cache (read once whole
//     first) or, with ZEROENG_TOKENS_BENCH_COLD=1, wherever it is (after
//     dropping the page cache: the disk's random reads);
//   - Pread: the shard read through the page cache with 1 MiB positioned
//     reads, the bandwidth of the reads themselves;
//   - Copy: a plain copy of the shard's bytes in memory, the memory
//     bandwidth no reader of them can beat;
//   - Check: the check of a file a batch makes before reading it (fstat
//     and a read of its header).
//
// See docs/benchmarks-io.md for the commands and the numbers.
func BenchmarkLoader(b *testing.B) {
	path := benchShard(b)
	const B, T = 8, 1024
	b.Run("Loader", func(b *testing.B) {
		if os.Getenv("ZEROENG_TOKENS_BENCH_COLD") != "1" {
			if _, err := os.ReadFile(path); err != nil {
				b.Fatal(err)
			}
		}
		ds, err := Load(path)
		if err != nil {
			b.Fatal(err)
		}
		l, err := NewLoader(ds, LoaderOptions{Batch: B, SeqLen: T, Shuffle: true, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		rt := newRT()
		b.SetBytes(B * T * 2) // the file's bytes a batch serves
		b.ReportAllocs()
		for b.Loop() {
			x, y, err := l.Next(rt)
			if err != nil {
				b.Fatal(err)
			}
			x.Release()
			y.Release()
		}
		b.ReportMetric(float64(b.N)*B*T/b.Elapsed().Seconds(), "tokens/s")
	})
	b.Run("Pread", func(b *testing.B) {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 1<<20)
		b.SetBytes(fi.Size())
		for b.Loop() {
			for off := int64(0); off < fi.Size(); off += int64(len(buf)) {
				if _, err := f.ReadAt(buf, off); err != nil && off+int64(len(buf)) <= fi.Size() {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N)*float64(fi.Size())/2/b.Elapsed().Seconds(), "tokens/s")
	})
	b.Run("Copy", func(b *testing.B) {
		whole, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		dst := make([]byte, len(whole))
		b.SetBytes(int64(len(whole)))
		for b.Loop() {
			copy(dst, whole)
		}
		b.ReportMetric(float64(b.N)*float64(len(whole))/2/b.Elapsed().Seconds(), "tokens/s")
	})
	b.Run("Check", func(b *testing.B) {
		ds, err := Load(path)
		if err != nil {
			b.Fatal(err)
		}
		scratch := make([]byte, headCheck)
		for b.Loop() {
			if err := ds.segs[0].src.check(scratch); err != nil {
				b.Fatal(err)
			}
		}
	})
}
