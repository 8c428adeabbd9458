package npy

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/zeroeng/zeroeng/internal/fileio"
	"math/rand/v2"
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
	Error string `json:"error"`
}

func loadManifest(t testing.TB) map[string]fixture {
	b, err := os.ReadFile("testdata/fixtures.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]fixture
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func sameArray(a, b *Array) bool {
	return a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && bytes.Equal(a.Data, b.Data)
}

// TestNumPyFixtures reads every file of testdata (written by NumPy, see
// gen_fixtures.py) with ReadFile, Parse and Read, and compares with what NumPy
// says the file holds.
func TestNumPyFixtures(t *testing.T) {
	m := loadManifest(t)
	if len(m) < 35 {
		t.Fatalf("only %d fixtures", len(m))
	}
	for name, fx := range m {
		t.Run(name, func(t *testing.T) {
			path := "testdata/" + name + ".npy"
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fromFile, ferr := ReadFile(path)
			parsed, perr := Parse(raw)
			streamed, serr := Read(bytes.NewReader(raw))
			if fx.Error != "" {
				for i, err := range []error{ferr, perr, serr} {
					if err == nil || !strings.Contains(err.Error(), fx.Error) {
						t.Errorf("reader %d: error %v, want %q", i, err, fx.Error)
					}
				}
				if ferr != nil && !strings.Contains(ferr.Error(), "npy: "+path+": ") {
					t.Errorf("error %q does not name the file", ferr)
				}
				return
			}
			for _, err := range []error{ferr, perr, serr} {
				if err != nil {
					t.Fatal(err)
				}
			}
			d, ok := dtype.Parse(fx.DType)
			if !ok {
				t.Fatalf("bad dtype %q in the manifest", fx.DType)
			}
			data, _ := hex.DecodeString(fx.Data)
			want := &Array{DType: d, Shape: fx.Shape, Data: data}
			for _, got := range []*Array{fromFile, parsed, streamed} {
				if !sameArray(got, want) {
					t.Errorf("got %v %v % x\nwant %v %v % x", got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
				}
			}
		})
	}
}

// TestWriteMatchesNumPy checks that Write reproduces np.save's bytes.
func TestWriteMatchesNumPy(t *testing.T) {
	files, _ := filepath.Glob("testdata/save_*.npy")
	if len(files) < 10 {
		t.Fatalf("found %d save_*.npy fixtures", len(files))
	}
	for _, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		arr, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := Write(&buf, arr); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), raw) {
			t.Errorf("%s: Write differs from np.save:\n got %q\nwant %q", path, buf.Bytes(), raw)
		}
	}
}

// npyFile builds a file from a header and n bytes of data.
func npyFile(major byte, hdr string, n int) []byte {
	b := append([]byte(magic), major, 0)
	if major == 1 {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(hdr)))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(hdr)))
	}
	b = append(b, hdr...)
	return append(b, make([]byte, n)...)
}

func h(descr, fortran, shape string) string {
	return "{'descr': " + descr + ", 'fortran_order': " + fortran + ", 'shape': " + shape + ", }\n"
}

// badInputs has a case for every validation rule; the errors name the
// offending values (and, through ReadFile, the file).
func badInputs() []badInput {
	return []badInput{
		{"short", []byte(magic), []string{"file is 6 bytes, too short"}},
		{"bad magic", append([]byte("\x93NUMPZ\x01\x00\x10\x00"), h("'<f4'", "False", "()")...), []string{`magic string is "\x93NUMPZ"`}},
		{"zip file", []byte("PK\x03\x04\x14\x00\x00\x00\x08\x00"), []string{`not a .npy file: magic string is "PK\x03\x04\x14\x00"`}},
		{"version 4.0", npyFile(4, h("'<f4'", "False", "()"), 4), []string{"unsupported format version 4.0"}},
		{"version 1.1", append([]byte(magic+"\x01\x01\x00\x00"), "{}"...), []string{"unsupported format version 1.1"}},
		{"header longer than file", append([]byte(magic+"\x01\x00\xff\x00"), "{}"...), []string{"header length 255 is larger than the 2 bytes that follow"}},
		{"header over limit", append([]byte(magic+"\x02\x00\x00\x00\x00\x10"), "{}"...), []string{"header length 268435456 is larger than the 1048576-byte limit"}},
		{"not a dict", npyFile(1, "['<f4', False, ()]\n", 0), []string{"want '{', found '['"}},
		{"missing key", npyFile(1, "{'descr': '<f4', 'shape': (), }\n", 4), []string{"missing key 'fortran_order'"}},
		{"extra key", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}\n", 4), []string{"unknown key 'x'"}},
		{"duplicate key", npyFile(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}\n", 4), []string{"duplicate key 'descr'"}},
		{"descr not a string", npyFile(1, h("4", "False", "()"), 4), []string{"descr is the integer 4, not a string"}},
		{"fortran not bool", npyFile(1, h("'<f4'", "0", "()"), 4), []string{"fortran_order is the integer 0, not True or False"}},
		{"fortran string", npyFile(1, h("'<f4'", "'False'", "()"), 4), []string{"fortran_order is the string 'False'"}},
		{"shape int", npyFile(1, h("'<f4'", "False", "5"), 20), []string{"shape is the integer 5, not a tuple", "(5,)"}},
		{"shape parenthesised int", npyFile(1, h("'<f4'", "False", "(5)"), 20), []string{"(5) is not a tuple", "(5,)"}},
		{"shape list", npyFile(1, h("'<f4'", "False", "[2, 3]"), 24), []string{"shape is the list [2, 3], not a tuple"}},
		{"shape float", npyFile(1, h("'<f4'", "False", "(2.0,)"), 8), []string{"only decimal integers", "'.' after 2"}},
		{"shape hex", npyFile(1, h("'<f4'", "False", "(0x10,)"), 64), []string{"only decimal integers", "'x' after 0"}},
		{"shape string", npyFile(1, h("'<f4'", "False", "('2',)"), 8), []string{"want an integer or ')' in a tuple, found '\\''"}},
		{"negative dim", npyFile(1, h("'<f4'", "False", "(2, -3)"), 0), []string{"shape (2, -3): dimension 1 is negative (-3)"}},
		{"dim overflow", npyFile(1, h("'<f4'", "False", "(99999999999999999999,)"), 0), []string{"integer 99999999999999999999 overflows int64"}},
		{"count overflow", npyFile(1, h("'<f4'", "False", "(4294967296, 4294967296)"), 0), []string{"shape (4294967296, 4294967296): the element count overflows"}},
		{"byte overflow", npyFile(1, h("'<f8'", "False", "(4611686018427387904,)"), 0), []string{"shape (4611686018427387904,) of '<f8': the byte size overflows"}},
		{"leading zero", npyFile(1, h("'<f4'", "False", "(07,)"), 28), []string{"integer 07 has a leading zero"}},
		{"escape", npyFile(1, h("'<f\\x34'", "False", "()"), 4), []string{"escape sequences"}},
		{"unterminated string", npyFile(1, "{'descr': '<f4", 4), []string{"unterminated string"}},
		{"trailing garbage", npyFile(1, h("'<f4'", "False", "()")+"x", 4), []string{"unexpected 'x' after the dict"}},
		{"bad literal", npyFile(1, h("'<f4'", "None", "()"), 4), []string{"want a string, True, False, an integer or a tuple, found 'N'"}},
		{"Truex", npyFile(1, h("'<f4'", "Truex", "()"), 4), []string{"unexpected 'x' after True"}},
		{"int16 size", npyFile(1, h("'<i16'", "False", "()"), 16), []string{"unsupported descr '<i16': no such size"}},
		{"native order", npyFile(1, h("'=f4'", "False", "()"), 4), []string{"unsupported descr '=f4': native byte order"}},
		{"pipe on f4", npyFile(1, h("'|f4'", "False", "()"), 4), []string{"unsupported descr '|f4'", "multi-byte"}},
		{"bad order", npyFile(1, h("'!f4'", "False", "()"), 4), []string{"unsupported descr '!f4': unknown byte order '!'"}},
		{"short descr", npyFile(1, h("'f4'", "False", "()"), 4), []string{"unsupported descr 'f4'"}},
		{"uint64", npyFile(1, h("'<u8'", "False", "()"), 8), []string{"unsupported descr '<u8': uint64 does not fit in int64"}},
		{"float128", npyFile(1, h("'<f16'", "False", "()"), 16), []string{"unsupported descr '<f16'"}},
		{"truncated", npyFile(1, h("'<f4'", "False", "(2, 3)"), 20), []string{"data is 20 bytes, but shape (2, 3) of '<f4' needs 24"}},
		{"truncated huge", npyFile(1, h("'|u1'", "False", "(1000000000000,)"), 1000), []string{"data is 1000 bytes, but shape (1000000000000,) of '|u1' needs 1000000000000"}},
		{"trailing bytes", npyFile(1, h("'<f4'", "False", "(2, 3)"), 25), []string{"1 trailing bytes after the 24 bytes of data that shape (2, 3) of '<f4' needs"}},
		{"v2 truncated", npyFile(2, h("'<i8'", "True", "(3,)"), 16), []string{"data is 16 bytes, but shape (3,) of '<i8' needs 24"}},
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
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".npy")
			if err := os.WriteFile(path, tc.input, 0o644); err != nil {
				t.Fatal(err)
			}
			_, perr := Parse(tc.input)
			_, rerr := Read(bytes.NewReader(tc.input))
			_, ferr := ReadFile(path)
			_, herr := ReadHeader(bytes.NewReader(tc.input), int64(len(tc.input)), path)
			for i, err := range []error{perr, rerr, ferr, herr} {
				reader := []string{"Parse", "Read", "ReadFile", "ReadHeader"}[i]
				if reader == "Read" && strings.HasPrefix(tc.name, "trailing bytes") {
					if err != nil {
						t.Errorf("Read must stop after the data: %v", err)
					}
					continue
				}
				if err == nil {
					t.Errorf("%s: no error", reader)
					continue
				}
				want := tc.want
				if reader == "ReadFile" || reader == "ReadHeader" {
					want = append(want, "npy: "+path+": ")
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

// TestReadHeader: the preamble of a written array, read without its
// data, says where the data is and how long it is.
func TestReadHeader(t *testing.T) {
	var buf bytes.Buffer
	arr := &Array{DType: dtype.Int64, Shape: []int{3, 2}, Data: make([]byte, 48)}
	if err := Write(&buf, arr); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	h, err := ReadHeader(bytes.NewReader(b), int64(len(b)), "a.npy")
	if err != nil {
		t.Fatal(err)
	}
	if h.Descr != "<i8" || !slices.Equal(h.Shape, []int{3, 2}) || h.Fortran || h.DataBytes != 48 || h.DataOffset != int64(len(b)-48) {
		t.Errorf("%+v for %d bytes", h, len(b))
	}
}

// TestGoodHeaders checks header spellings NumPy and Python 2 produce.
func TestGoodHeaders(t *testing.T) {
	for _, hdr := range []string{
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
		`{"descr":"<f4","fortran_order":False,"shape":(2,3)}`,
		"{'shape': (2L, 3L), 'fortran_order': False, 'descr': '<f4'}          \n",
		"{\n 'descr' : '<f4' ,\n 'fortran_order' : False ,\n 'shape' : ( 2 , 3 , ) ,\n}\n",
	} {
		arr, err := Parse(npyFile(1, hdr, 24))
		if err != nil {
			t.Errorf("%q: %v", hdr, err)
			continue
		}
		if arr.DType != dtype.Float32 || !slices.Equal(arr.Shape, []int{2, 3}) {
			t.Errorf("%q: got %v %v", hdr, arr.DType, arr.Shape)
		}
	}
}

func randomArray(rng *rand.Rand) *Array {
	ds := []dtype.DType{dtype.Float32, dtype.Float64, dtype.Float16, dtype.Int64, dtype.Int32, dtype.Uint8, dtype.Bool}
	d := ds[rng.IntN(len(ds))]
	shape := make([]int, rng.IntN(5))
	n := 1
	for j := range shape {
		shape[j] = rng.IntN(5)
		n *= shape[j]
	}
	data := make([]byte, n*d.Size())
	for j := range data {
		data[j] = byte(rng.Uint32())
	}
	return &Array{DType: d, Shape: shape, Data: data}
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		arr := randomArray(rng)
		var buf bytes.Buffer
		if err := Write(&buf, arr); err != nil {
			t.Fatal(err)
		}
		if buf.Len()-len(arr.Data) != 128 && buf.Len()-len(arr.Data) != 192 || (buf.Len()-len(arr.Data))%64 != 0 {
			t.Errorf("header of %d bytes", buf.Len()-len(arr.Data))
		}
		got, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if !sameArray(got, arr) {
			t.Errorf("round trip of %v %v changed it", arr.DType, arr.Shape)
		}
	}
}

// TestReadConsecutive reads arrays that np.save wrote one after another.
func TestReadConsecutive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var buf bytes.Buffer
	var want []*Array
	for range 5 {
		arr := randomArray(rng)
		want = append(want, arr)
		if err := Write(&buf, arr); err != nil {
			t.Fatal(err)
		}
	}
	r := bytes.NewReader(buf.Bytes())
	for i, w := range want {
		got, err := Read(r)
		if err != nil {
			t.Fatalf("array %d: %v", i, err)
		}
		if !sameArray(got, w) {
			t.Errorf("array %d differs", i)
		}
	}
	if _, err := Read(r); err == nil || !strings.Contains(err.Error(), "file is 0 bytes") {
		t.Errorf("after the last array: %v", err)
	}
}

func TestStreamNeverAllocatesDeclaredSize(t *testing.T) {
	input := npyFile(1, h("'|u1'", "False", "(1000000000000,)"), 1000)
	n := allocated(func() { Read(bytes.NewReader(input)) })
	if n > 1<<20 {
		t.Errorf("reading a 1 kB stream allocated %d bytes", n)
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		arr  *Array
		want string
	}{
		{&Array{DType: dtype.BFloat16, Shape: []int{1}, Data: make([]byte, 2)}, "bfloat16 has no NumPy descriptor"},
		{&Array{DType: dtype.Invalid, Shape: []int{1}, Data: make([]byte, 2)}, "invalid dtype"},
		{&Array{DType: dtype.Float32, Shape: []int{2, 3}, Data: make([]byte, 20)}, "shape [2 3] of float32 needs 24 bytes, Data has 20"},
		{&Array{DType: dtype.Float32, Shape: []int{-1}}, "shape [-1] has a negative dimension"},
		{&Array{DType: dtype.Float32, Shape: []int{1 << 62, 1 << 2}}, "overflows"},
	} {
		if err := Write(&bytes.Buffer{}, tc.arr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write: %v, want %q", err, tc.want)
		}
		path := filepath.Join(dir, "a.npy")
		if err := WriteFile(path, tc.arr); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("WriteFile: %v, want %q and the path", err, tc.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("WriteFile left %v", entries)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.npy")
	arr := &Array{DType: dtype.Int32, Shape: []int{2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0}}
	if err := WriteFile(path, arr); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil || !sameArray(got, arr) {
		t.Fatalf("%v %v", got, err)
	}
	old, _ := os.ReadFile(path)
	err = fileio.WriteAtomic("test", path, func(f *os.File) error {
		f.Write([]byte("partial"))
		return errors.New("injected failure")
	})
	if err == nil || err.Error() != "injected failure" {
		t.Errorf("err = %v", err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, old) {
		t.Error("target changed by a failed write")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %v", entries)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode())
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.npy")); err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.npy") {
		t.Errorf("err = %v", err)
	}
}

// TestFortranToC checks the transposition against index arithmetic.
func TestFortranToC(t *testing.T) {
	for _, shape := range [][]int{{2, 3}, {3, 1, 4}, {2, 3, 4, 5}, {1, 7}, {7, 1}, {2, 0, 3}} {
		n := 1
		for _, d := range shape {
			n *= d
		}
		f := make([]byte, 2*n) // 2-byte elements: the Fortran linear index
		for i := range n {
			binary.LittleEndian.PutUint16(f[2*i:], uint16(i))
		}
		c := fortranToC(f, shape, 2)
		idx := make([]int, len(shape))
		for ci := range n {
			// Fortran linear index of the C index idx.
			fi, s := 0, 1
			for j := range shape {
				fi += idx[j] * s
				s *= shape[j]
			}
			if got := int(binary.LittleEndian.Uint16(c[2*ci:])); got != fi {
				t.Fatalf("shape %v: C element %d is Fortran element %d, want %d", shape, ci, got, fi)
			}
			for j := len(shape) - 1; j >= 0; j-- {
				if idx[j]++; idx[j] < shape[j] {
					break
				}
				idx[j] = 0
			}
		}
	}
}

// TestReadFileOfUnknownSize covers ReadFile of a pipe or device, whose size
// Stat does not tell: the trailing-bytes check happens after the data.
func TestReadFileOfUnknownSize(t *testing.T) {
	good := npyFile(1, h("'<i4'", "False", "(2,)"), 8)
	if _, err := read(bytes.NewReader(good), "pipe", -1, true); err != nil {
		t.Error(err)
	}
	_, err := read(bytes.NewReader(append(good, 1)), "pipe", -1, true)
	if err == nil || !strings.Contains(err.Error(), "npy: pipe: trailing bytes after the 8 bytes of data that shape (2,) of '<i4' needs") {
		t.Errorf("err = %v", err)
	}
}
