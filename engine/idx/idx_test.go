package idx

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

type fixture struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Data  string `json:"data"`
}

func sameArray(a, b *Array) bool {
	return a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && bytes.Equal(a.Data, b.Data)
}

// TestFixtures reads the synthetic files of every type code (written by
// testdata/gen_fixtures.py with Python's struct) with ReadFile, Parse and
// Read, and compares with what NumPy says they hold.
func TestFixtures(t *testing.T) {
	b, err := os.ReadFile("testdata/fixtures.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]fixture
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 8 {
		t.Fatalf("%d fixtures", len(m))
	}
	for name, fx := range m {
		path := "testdata/" + name
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := dtype.Parse(fx.DType)
		data, _ := hex.DecodeString(fx.Data)
		want := &Array{DType: d, Shape: fx.Shape, Data: data}
		fromFile, ferr := ReadFile(path)
		parsed, perr := Parse(raw)
		streamed, serr := Read(bytes.NewReader(raw))
		for i, got := range []*Array{fromFile, parsed, streamed} {
			if err := []error{ferr, perr, serr}[i]; err != nil {
				t.Errorf("%s: reader %d: %v", name, i, err)
				continue
			}
			if !sameArray(got, want) {
				t.Errorf("%s: reader %d: got %v %v % x\nwant %v %v % x", name, i, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
			}
		}
	}
}

// idxFile builds an idx file: type code, dims, n bytes of data.
func idxFile(code byte, dims []uint32, n int) []byte {
	b := []byte{0, 0, code, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, make([]byte, n)...)
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// badInputs has a case for every validation rule, raw and compressed;
// the errors name the offending values and, through ReadFile, the file.
func badInputs() []badInput {
	images := idxFile(0x08, []uint32{3, 28, 28}, 3*28*28)
	for i := 16; i < len(images); i++ {
		images[i] = byte(i * i * 31 % 251) // not too compressible
	}
	corrupt := gz(images)
	corrupt[len(corrupt)-6] ^= 0xff // the CRC
	garbled := gz(images)
	garbled[10] = 0x07 // the first deflate block: reserved type 3
	// A gzip stream whose header declares a terabyte of data, in 1 kB.
	huge := gz(idxFile(0x08, []uint32{1 << 20, 1 << 20}, 1000))

	return []badInput{
		{"empty", []byte{}, []string{"0 bytes, too short for the header"}},
		{"short", []byte{0, 0, 8}, []string{"3 bytes, too short for the header"}},
		{"bad magic", []byte{0, 1, 8, 1, 0, 0, 0, 0}, []string{"bad magic number 0x00010801"}},
		{"text file", []byte("hello world\n"), []string{"bad magic number 0x68656C6C"}},
		{"unknown type", idxFile(0x0A, []uint32{1}, 1), []string{"magic number 0x00000A01: unknown type code 0x0A"}},
		{"zero dims", []byte{0, 0, 8, 0}, []string{"magic number 0x00000800: zero dimensions"}},
		{"short dims", []byte{0, 0, 8, 3, 0, 0, 0, 1}, []string{"8 bytes, too short for the header"}},
		{"overflow", idxFile(0x0E, []uint32{1 << 31, 1 << 31, 1 << 31}, 0), []string{"dimensions [2147483648 2147483648 2147483648] of double: the size overflows"}},
		{"widened overflow", idxFile(0x09, []uint32{1 << 31, 1 << 31, 1 << 30}, 0), []string{"dimensions [2147483648 2147483648 1073741824] of signed byte: the size overflows"}},
		{"truncated", idxFile(0x08, []uint32{2, 28, 28}, 1000), []string{"data is 1000 bytes, but shape [2 28 28] of unsigned byte (type 0x08) needs 1568"}},
		{"truncated float", idxFile(0x0D, []uint32{10}, 39), []string{"data is 39 bytes, but shape [10] of float (type 0x0D) needs 40"}},
		{"huge declared", idxFile(0x08, []uint32{1 << 20, 1 << 20}, 1000), []string{"data is 1000 bytes, but shape [1048576 1048576] of unsigned byte (type 0x08) needs 1099511627776"}},
		{"trailing", idxFile(0x0C, []uint32{2}, 9), []string{"1 trailing bytes after the 8 bytes of data that shape [2] of int (type 0x0C) needs"}},
		{"gzip truncated data", gz(idxFile(0x08, []uint32{2, 28, 28}, 1000)), []string{"data is 1000 bytes, but shape [2 28 28] of unsigned byte (type 0x08) needs 1568"}},
		{"gzip huge declared", huge, []string{"data is 1000 bytes, but shape [1048576 1048576]", "needs 1099511627776"}},
		{"gzip trailing", gz(idxFile(0x08, []uint32{4}, 7)), []string{"3 trailing bytes after the 4 bytes"}},
		{"gzip short header", gz([]byte{0, 0, 8}), []string{"decompressed data is 3 bytes, too short for the header"}},
		{"gzip bad magic", gz([]byte{1, 2, 3, 4, 5}), []string{"bad magic number 0x01020304"}},
		{"gzip cut", gz(images)[:100], []string{"reading the data, after 75 of the 2352 bytes that shape [3 28 28] of unsigned byte (type 0x08) needs: unexpected EOF"}},
		{"gzip bad crc", corrupt, []string{"gzip: invalid checksum"}},
		{"gzip corrupt stream", garbled, []string{"flate: corrupt input"}},
		{"gzip header only", []byte{0x1f, 0x8b, 8, 0}, []string{"gzip: ", "unexpected EOF"}},
		{"gzip bad header", []byte{0x1f, 0x8b, 9, 0, 0, 0, 0, 0, 0, 0}, []string{"gzip: invalid header"}},
	}
}

type badInput struct {
	name  string
	input []byte
	want  []string
}

// TestBadInputs runs each bad input through Parse, Read and ReadFile.
func TestBadInputs(t *testing.T) {
	tests := badInputs()
	dir := t.TempDir()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(path, tc.input, 0o644); err != nil {
				t.Fatal(err)
			}
			_, perr := Parse(tc.input)
			_, rerr := Read(bytes.NewReader(tc.input))
			var ferr error
			n := allocated(func() { _, ferr = ReadFile(path) })
			if n > allocLimit(len(tc.input)+4096) {
				t.Errorf("ReadFile allocated %d bytes for a %d-byte file", n, len(tc.input))
			}
			for i, err := range []error{perr, rerr, ferr} {
				reader := []string{"Parse", "Read", "ReadFile"}[i]
				if err == nil {
					t.Errorf("%s: no error", reader)
					continue
				}
				want := tc.want
				if reader == "ReadFile" {
					want = append(want, "idx: "+path+": ")
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not contain %q", reader, err, w)
					}
				}
			}
		})
	}
}

func TestGoodEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		input []byte
		want  *Array
	}{
		{idxFile(0x08, []uint32{0, 28, 28}, 0), &Array{dtype.Uint8, []int{0, 28, 28}, []byte{}}},
		{idxFile(0x0B, []uint32{0}, 0), &Array{dtype.Int32, []int{0}, []byte{}}},
		{gz(idxFile(0x0D, []uint32{1}, 4)), &Array{dtype.Float32, []int{1}, make([]byte, 4)}},
		// Concatenated gzip members are one stream, as gzip -c a b > ab makes.
		{append(gz([]byte{0, 0, 8, 1, 0, 0, 0, 2}), gz([]byte{7, 9})...), &Array{dtype.Uint8, []int{2}, []byte{7, 9}}},
	} {
		for _, got := range []func([]byte) (*Array, error){Parse, func(b []byte) (*Array, error) { return Read(bytes.NewReader(b)) }} {
			arr, err := got(tc.input)
			if err != nil || !sameArray(arr, tc.want) {
				t.Errorf("got %v, %v; want %v", arr, err, tc.want)
			}
		}
	}
}

func TestWriteRoundTrip(t *testing.T) {
	for _, arr := range []*Array{
		{dtype.Uint8, []int{2, 3}, []byte{1, 2, 3, 4, 5, 6}},
		{dtype.Int32, []int{2}, []byte{1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff}},
		{dtype.Float32, []int{1, 1}, []byte{0, 0, 0xc0, 0x3f}},
		{dtype.Float64, []int{1}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{dtype.Uint8, []int{70000}, bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, 10000)},
		{dtype.Float64, []int{10000}, bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 10000)},
	} {
		var buf bytes.Buffer
		if err := Write(&buf, arr); err != nil {
			t.Fatal(err)
		}
		got, err := Parse(buf.Bytes())
		if err != nil || !sameArray(got, arr) {
			t.Errorf("%v %v: round trip gave %v", arr.DType, arr.Shape, err)
		}
	}
	for _, tc := range []struct {
		arr  *Array
		want string
	}{
		{&Array{dtype.Int64, []int{1}, make([]byte, 8)}, "int64 has no idx type code"},
		{&Array{dtype.Uint8, []int{}, make([]byte, 1)}, "1 to 255 dimensions"},
		{&Array{dtype.Uint8, []int{-1}, nil}, "dimensions must be in [0, 2^32)"},
		{&Array{dtype.Uint8, []int{2}, make([]byte, 3)}, "shape [2] of uint8 needs 2 bytes, Data has 3"},
	} {
		if err := Write(&bytes.Buffer{}, tc.arr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write: %v, want %q", err, tc.want)
		}
	}
}

// TestFashionMNIST reads Debian's dataset-fashion-mnist and checks values
// computed independently with Python's gzip and NumPy.
func TestFashionMNIST(t *testing.T) {
	const dir = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("Fashion-MNIST is not installed (%v); apt-get install dataset-fashion-mnist", err)
	}
	if testing.Short() {
		t.Skip("reads 31 MB of gzip data")
	}
	for _, tc := range []struct {
		file       string
		shape      []int
		sha256     string
		first      []byte // the first labels, or row 14 of the first image
		perClass   int
		pixelTotal uint64
	}{
		{"train-images-idx3-ubyte.gz", []int{60000, 28, 28}, "2e487a6c89124f78f2d7521542223cafe96f7123c3ca13d447772ac6ecbb3012",
			[]byte{0, 0, 1, 4, 6, 7, 2, 0, 0, 0, 0, 0, 237, 226, 217, 223, 222, 219, 222, 221, 216, 223, 229, 215, 218, 255, 77, 0}, 0, 3431114169},
		{"t10k-images-idx3-ubyte.gz", []int{10000, 28, 28}, "c867c93ff95360594e8ec3287995350b824dd110b11595c0e13d5423f621867a",
			[]byte{0, 0, 0, 0, 0, 0, 2, 4, 1, 0, 0, 0, 98, 136, 110, 109, 110, 162, 135, 144, 149, 159, 167, 144, 158, 169, 119, 0}, 0, 573469082},
		{"train-labels-idx1-ubyte.gz", []int{60000}, "657fbd221bfc9f4198cc14b5619cc33ec57c58dd0e47af4d99d6650759e869a7",
			[]byte{9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9}, 6000, 270000},
		{"t10k-labels-idx1-ubyte.gz", []int{10000}, "3d0e6c6ea990b53b6f8f500a41cac93881d981b315f84578b7d915342ade01e9",
			[]byte{9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5}, 1000, 45000},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s is missing: %v", path, err)
			}
			arr, err := ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if arr.DType != dtype.Uint8 || !slices.Equal(arr.Shape, tc.shape) {
				t.Fatalf("got %v %v, want uint8 %v", arr.DType, arr.Shape, tc.shape)
			}
			if sum := sha256.Sum256(arr.Data); hex.EncodeToString(sum[:]) != tc.sha256 {
				t.Errorf("sha256 %x", sum)
			}
			var total uint64
			var counts [256]int
			for _, v := range arr.Data {
				total += uint64(v)
				counts[v]++
			}
			if total != tc.pixelTotal {
				t.Errorf("sum of values %d, want %d", total, tc.pixelTotal)
			}
			if tc.perClass > 0 {
				if !bytes.Equal(arr.Data[:len(tc.first)], tc.first) {
					t.Errorf("first labels %v, want %v", arr.Data[:len(tc.first)], tc.first)
				}
				for c := range 10 {
					if counts[c] != tc.perClass {
						t.Errorf("class %d has %d labels, want %d", c, counts[c], tc.perClass)
					}
				}
			} else if row := arr.Data[14*28 : 15*28]; !bytes.Equal(row, tc.first) {
				t.Errorf("row 14 of image 0 is %v, want %v", row, tc.first)
			}
		})
	}
}
