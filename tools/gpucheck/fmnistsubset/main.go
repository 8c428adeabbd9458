// Command fmnistsubset writes the first N items of gzipped IDX files (the
// Fashion-MNIST format) into a folder, so that the GPU validation kit
// (make gpu-check) carries a few megabytes of data instead of 30:
//
//	go run ./tools/gpucheck/fmnistsubset -n 12000 -o DIR FILE.gz...
//
// A file with fewer items is copied whole.
package main

import (
	"compress/gzip"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	n := flag.Int("n", 12000, "items to keep from each file")
	out := flag.String("o", "", "output folder")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 || *n < 1 {
		fmt.Fprintln(os.Stderr, "usage: fmnistsubset -n N -o DIR FILE.gz...")
		os.Exit(2)
	}
	for _, f := range flag.Args() {
		if err := subset(f, filepath.Join(*out, filepath.Base(f)), *n); err != nil {
			fmt.Fprintf(os.Stderr, "fmnistsubset: %s: %v\n", f, err)
			os.Exit(1)
		}
	}
}

func subset(in, out string, n int) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	var magic [4]byte
	if _, err := io.ReadFull(zr, magic[:]); err != nil {
		return err
	}
	if magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] == 0 || magic[3] > 4 {
		return errors.New("not an IDX file of unsigned bytes")
	}
	dims := make([]uint32, magic[3])
	if err := binary.Read(zr, binary.BigEndian, dims); err != nil {
		return err
	}
	item := int64(1)
	for _, d := range dims[1:] {
		item *= int64(d)
	}
	keep := min(int64(n), int64(dims[0]))
	dims[0] = uint32(keep)

	tmp := out + ".tmp"
	o, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	zw, _ := gzip.NewWriterLevel(o, gzip.BestCompression)
	zw.Write(magic[:])
	binary.Write(zw, binary.BigEndian, dims)
	if _, err := io.CopyN(zw, zr, keep*item); err != nil {
		o.Close()
		return fmt.Errorf("reading %d items: %w", keep, err)
	}
	if err := zw.Close(); err != nil {
		o.Close()
		return err
	}
	if err := o.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
