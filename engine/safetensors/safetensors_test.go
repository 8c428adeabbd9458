package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/internal/fileio"
	"github.com/zeroeng/zeroeng/internal/hostmem"
)

var update = flag.Bool("update", false, "rewrite testdata/go_written.safetensors")

// fixtureTensors are the tensors of testdata/gen_fixtures.py's tensors(), built
// independently here.
func fixtureTensors() []Tensor {
	base := []float32{-1.5, 0, 0.1, 2.5, 65504, -3.0e-8}
	var f32, f64, bf16, f16 []byte
	for _, v := range base {
		f32 = binary.LittleEndian.AppendUint32(f32, math.Float32bits(v))
		f64 = binary.LittleEndian.AppendUint64(f64, math.Float64bits(float64(v)))
		bf16 = binary.LittleEndian.AppendUint16(bf16, uint16(dtype.BF16FromFloat32(v)))
		f16 = binary.LittleEndian.AppendUint16(f16, uint16(dtype.F16FromFloat32(v)))
	}
	var i64, i32, emb []byte
	for _, v := range []int64{math.MinInt64, -1, 0, math.MaxInt64} {
		i64 = binary.LittleEndian.AppendUint64(i64, uint64(v))
	}
	for _, v := range []int32{math.MinInt32, -1, 0, math.MaxInt32} {
		i32 = binary.LittleEndian.AppendUint32(i32, uint32(v))
	}
	for i := range 12 {
		emb = binary.LittleEndian.AppendUint32(emb, math.Float32bits(float32(i)/7))
	}
	return []Tensor{
		{"f32", dtype.Float32, []int{2, 3}, f32},
		{"f64", dtype.Float64, []int{2, 3}, f64},
		{"bf16", dtype.BFloat16, []int{2, 3}, bf16},
		{"f16", dtype.Float16, []int{2, 3}, f16},
		{"i64", dtype.Int64, []int{4}, i64},
		{"i32", dtype.Int32, []int{2, 2}, i32},
		{"u8", dtype.Uint8, []int{6}, []byte{0, 51, 102, 153, 204, 255}},
		{"bool", dtype.Bool, []int{3}, []byte{1, 0, 1}},
		{"scalar", dtype.Float32, []int{}, binary.LittleEndian.AppendUint32(nil, math.Float32bits(3.25))},
		{"empty", dtype.Float32, []int{0, 3}, []byte{}},
		{"emb.é\"q", dtype.Float32, []int{3, 4}, emb},
	}
}

var fixtureMeta = map[string]string{"format": "pt", "source": "gen_fixtures.py"}

// sameTensors reports how got differs from want, ignoring order.
func sameTensors(t *testing.T, got, want []Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d tensors, want %d", len(got), len(want))
	}
	byName := make(map[string]Tensor)
	for _, g := range got {
		byName[g.Name] = g
	}
	for _, w := range want {
		g, ok := byName[w.Name]
		if !ok {
			t.Errorf("tensor %q missing", w.Name)
			continue
		}
		if g.DType != w.DType || !sameShape(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("tensor %q: got %v %v % x, want %v %v % x", w.Name, g.DType, g.Shape, g.Data, w.DType, w.Shape, w.Data)
		}
	}
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sameMeta(a, b map[string]string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// TestReadTorchFixture reads files written from PyTorch tensors by
// testdata/gen_fixtures.py.
func TestReadTorchFixture(t *testing.T) {
	for _, tc := range []struct {
		file     string
		meta     map[string]string
		reversed bool
	}{
		{"testdata/torch.safetensors", fixtureMeta, false},
		{"testdata/unordered.safetensors", nil, true},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			f, err := ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(f.Metadata, tc.meta) {
				t.Errorf("metadata %v, want %v", f.Metadata, tc.meta)
			}
			sameTensors(t, f.Tensors, fixtureTensors())
			// Data order, whatever the header order.
			want := []string{"i64", "f64", "emb.é\"q", "empty", "f32", "scalar", "i32", "bf16", "f16", "u8", "bool"}
			if tc.reversed {
				slices.Reverse(want)
			}
			if got := f.Names(); !reflect.DeepEqual(got, want) {
				t.Errorf("Names() = %q, want %q", got, want)
			}
			for _, tt := range fixtureTensors() {
				g, ok := f.Get(tt.Name)
				if !ok || g.Name != tt.Name || !bytes.Equal(g.Data, tt.Data) {
					t.Errorf("Get(%q) = %v, %v", tt.Name, g, ok)
				}
			}
			if _, ok := f.Get("nope"); ok {
				t.Error("Get of a missing name succeeded")
			}
		})
	}
}

// TestWriteForTorch checks that Write lays out the fixture tensors exactly as
// the safetensors library does (reproduced by gen_fixtures.py), and keeps
// testdata/go_written.safetensors, which `python3 gen_fixtures.py verify
// go_written.safetensors` loads with torch. Run with -update to rewrite it.
func TestWriteForTorch(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, fixtureTensors(), fixtureMeta); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := WriteFile("testdata/go_written.safetensors", fixtureTensors(), fixtureMeta); err != nil {
			t.Fatal(err)
		}
	}
	for _, golden := range []string{"testdata/torch.safetensors", "testdata/go_written.safetensors"} {
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("Write differs from %s:\n got %q\nwant %q", golden, buf.Bytes(), want)
		}
	}
}

// TestKnownAnswers checks Write against the byte strings of the reference
// implementation's own serialisation tests.
func TestKnownAnswers(t *testing.T) {
	f32 := func(vs ...float32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		header  string
	}{
		{"one tensor", []Tensor{{"attn.0", dtype.Float32, []int{1, 2, 3}, f32(0, 1, 2, 3, 4, 5)}}, nil,
			`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`},
		{"forced alignment", []Tensor{{"attn0", dtype.Float32, []int{1, 1, 2, 3}, f32(0, 1, 2, 3, 4, 5)}}, nil,
			`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       `},
		{"empty", nil, nil, `{}      `},
		{"empty with metadata", nil, map[string]string{"framework": "pt"}, `{"__metadata__":{"framework":"pt"}}     `},
	} {
		var buf bytes.Buffer
		if err := Write(&buf, tc.tensors, tc.meta); err != nil {
			t.Fatal(err)
		}
		want := binary.LittleEndian.AppendUint64(nil, uint64(len(tc.header)))
		want = append(want, tc.header...)
		for _, tt := range tc.tensors {
			want = append(want, tt.Data...)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, buf.Bytes(), want)
		}
		f, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		sameTensors(t, f.Tensors, tc.tensors)
	}
}

// TestWriteOrder checks the data order: descending alignment, then name; and
// the JSON string escapes.
func TestWriteOrder(t *testing.T) {
	var ts []Tensor
	for i, d := range dtype.All {
		ts = append(ts, Tensor{Name: string(rune('z' - i)), DType: d, Shape: []int{1}, Data: make([]byte, d.Size())})
		ts = append(ts, Tensor{Name: "a" + d.String(), DType: d, Shape: []int{1}, Data: make([]byte, d.Size())})
	}
	ts = append(ts, Tensor{Name: "ctl\x01\n\t\"\\<>&\u2028é", DType: dtype.Uint8, Shape: []int{0}, Data: nil})
	var buf bytes.Buffer
	if err := Write(&buf, ts, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"aint64", "v", "afloat64", "y", "afloat32", "z", "aint32", "u", "abfloat16", "x", "afloat16", "w", "auint8", "ctl\x01\n\t\"\\<>&\u2028é", "t", "abool", "s"}
	if got := f.Names(); !reflect.DeepEqual(got, want) {
		t.Errorf("data order %q, want %q", got, want)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"ctl\u0001\n\t\"\\<>&`+"\u2028é\"")) {
		t.Errorf("escapes differ from serde_json's: %q", buf.Bytes())
	}
}

// TestAlignment checks that the data section of ReadFile starts a fresh
// allocation and that Write's order aligns every tensor to its element size.
func TestAlignment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.safetensors")
	var ts []Tensor
	for _, d := range dtype.All {
		for _, n := range []int{1, 3} {
			ts = append(ts, Tensor{Name: d.String() + string(rune('0'+n)), DType: d, Shape: []int{n}, Data: make([]byte, n*d.Size())})
		}
	}
	if err := WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range f.Tensors {
		if len(tt.Data) > 0 && addr(tt.Data)%uintptr(tt.DType.Size()) != 0 {
			t.Errorf("tensor %q of %v is not aligned", tt.Name, tt.DType)
		}
	}
}

// mk builds a file from a raw header and n bytes of data.
func mk(header string, n int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, n)...)
}

func withLen(n uint64, rest string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
}

const t4 = `"dtype":"F32","shape":[4]`

// badInputs has a case for every validation rule. Each input goes through
// Parse, Read and ReadFile; every error must name the offending tensor and
// values, and ReadFile's also the file.
func badInputs() []badInput {
	return []badInput{
		{"short file", []byte{1, 2, 3}, []string{"file is 3 bytes", "8-byte header length"}},
		{"header longer than file", withLen(100, "{}"), []string{"header length 100", "2 bytes that follow"}},
		{"header over limit", withLen(200_000_000, "{}"), []string{"header length 200000000", "100000000-byte limit"}},
		{"header length overflows", withLen(math.MaxUint64, "{}"), []string{"header length 18446744073709551615", "limit"}},
		{"empty header", mk("", 0), []string{"not a JSON object", "empty"}},
		{"invalid UTF-8", mk("{\"a\xff\":1}", 0), []string{"not valid UTF-8", "0xff at offset 3"}},
		{"not an object", mk("[1,2]", 0), []string{"not a JSON object", "starts with an array"}},
		{"string header", mk(`"x"`, 0), []string{"not a JSON object", `the string "x"`}},
		{"invalid JSON", mk(`{"a":`, 0), []string{"not valid JSON"}},
		{"bad JSON after object", mk(`{} x`, 0), []string{"not valid JSON after the object", "invalid character 'x'"}},
		{"second object", mk(`{}{}`, 0), []string{"an object after the JSON object"}},
		{"metadata not an object", mk(`{"__metadata__":[1]}`, 0), []string{"__metadata__ is an array"}},
		{"metadata value not string", mk(`{"__metadata__":{"k":1}}`, 0), []string{`__metadata__["k"] is the number 1, not a string`}},
		{"metadata nested", mk(`{"__metadata__":{"k":{"a":"b"}}}`, 0), []string{`__metadata__["k"] is an object`}},
		{"metadata duplicate key", mk(`{"__metadata__":{"k":"a","k":"b"}}`, 0), []string{`__metadata__ has duplicate key "k"`}},
		{"two metadata", mk(`{"__metadata__":{},"__metadata__":{}}`, 0), []string{`two "__metadata__"`}},
		{"tensor not object", mk(`{"t":5}`, 0), []string{`tensor "t": entry is the number 5`}},
		{"missing dtype", mk(`{"t":{"shape":[4],"data_offsets":[0,16]}}`, 16), []string{`tensor "t": missing key "dtype"`}},
		{"missing shape", mk(`{"t":{"dtype":"F32","data_offsets":[0,16]}}`, 16), []string{`tensor "t": missing key "shape"`}},
		{"missing offsets", mk(`{"t":{`+t4+`}}`, 16), []string{`tensor "t": missing key "data_offsets"`}},
		{"extra key", mk(`{"t":{`+t4+`,"data_offsets":[0,16],"strides":[1]}}`, 16), []string{`tensor "t": unknown key "strides"`}},
		{"duplicate key", mk(`{"t":{`+t4+`,"dtype":"F32","data_offsets":[0,16]}}`, 16), []string{`tensor "t": duplicate key "dtype"`}},
		{"dtype not string", mk(`{"t":{"dtype":4,"shape":[4],"data_offsets":[0,16]}}`, 16), []string{`tensor "t": dtype is the number 4`}},
		{"dtype F8_E4M3", mk(`{"t":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}}`, 4), []string{`tensor "t": unsupported dtype "F8_E4M3"`}},
		{"dtype I16", mk(`{"w.1":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}}`, 4), []string{`tensor "w.1": unsupported dtype "I16"`}},
		{"shape not array", mk(`{"t":{"dtype":"F32","shape":4,"data_offsets":[0,16]}}`, 16), []string{`tensor "t": shape is the number 4, not an array`}},
		{"shape negative", mk(`{"t":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}}`, 24), []string{`tensor "t": shape[1] = -3 is negative`}},
		{"shape fraction", mk(`{"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), []string{`tensor "t": shape[0] = 1.5 is not an integer`}},
		{"shape exponent", mk(`{"t":{"dtype":"F32","shape":[1e1],"data_offsets":[0,40]}}`, 40), []string{`tensor "t": shape[0] = 1e1 is not an integer`}},
		{"shape string", mk(`{"t":{"dtype":"F32","shape":["4"],"data_offsets":[0,16]}}`, 16), []string{`tensor "t": shape[0] is the string "4", not an integer`}},
		{"shape entry overflow", mk(`{"t":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,0]}}`, 0), []string{`tensor "t": shape[0] = 99999999999999999999 overflows int64`}},
		{"element count overflow", mk(`{"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0), []string{`tensor "t": shape [4294967296,4294967296] of U8`, "overflows"}},
		{"byte size overflow", mk(`{"t":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}`, 0), []string{`tensor "t": shape [4611686018427387904] of F64`, "overflows"}},
		{"offsets not array", mk(`{"t":{`+t4+`,"data_offsets":16}}`, 16), []string{`tensor "t": data_offsets is the number 16`}},
		{"one offset", mk(`{"t":{`+t4+`,"data_offsets":[16]}}`, 16), []string{`tensor "t": data_offsets [16] has 1 entries, not [begin, end]`}},
		{"three offsets", mk(`{"t":{`+t4+`,"data_offsets":[0,8,16]}}`, 16), []string{`tensor "t": data_offsets [0, 8, 16] has 3 entries`}},
		{"negative offset", mk(`{"t":{`+t4+`,"data_offsets":[-1,15]}}`, 16), []string{`tensor "t": data_offsets[0] = -1 is negative`}},
		{"begin after end", mk(`{"t":{`+t4+`,"data_offsets":[16,0]}}`, 16), []string{`tensor "t": data_offsets [16, 0]: begin is after end`}},
		{"end beyond data", mk(`{"t":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}}`, 16), []string{`tensor "t": data_offsets [0, 400]: end is beyond the data section of 16 bytes`}},
		{"huge end", mk(`{"t":{"dtype":"U8","shape":[1000000000000],"data_offsets":[0,1000000000000]}}`, 16), []string{`tensor "t": data_offsets [0, 1000000000000]: end is beyond the data section of 16 bytes`}},
		{"size mismatch", mk(`{"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}`, 20), []string{`tensor "t": data_offsets [0, 20] hold 20 bytes but shape [2,3] of F32 needs 24`}},
		{"overlap", mk(`{"a":{`+t4+`,"data_offsets":[0,16]},"b":{`+t4+`,"data_offsets":[8,24]}}`, 24), []string{`tensor "b": data_offsets [8, 24] overlap tensor "a" at [0, 16]`}},
		{"same offsets", mk(`{"a":{`+t4+`,"data_offsets":[0,16]},"b":{`+t4+`,"data_offsets":[0,16]}}`, 16), []string{`tensor "b": data_offsets [0, 16] overlap tensor "a" at [0, 16]`}},
		{"hole", mk(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}}`, 24), []string{`hole at bytes [8, 16), before tensor "b" at [16, 24]`}},
		{"hole at start", mk(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, 16), []string{`hole at bytes [0, 8), before tensor "a" at [8, 16]`}},
		{"trailing bytes", mk(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 16), []string{"trailing bytes", "8"}},
		{"data without tensors", mk(`{}`, 3), []string{"trailing bytes"}},
		{"duplicate name", mk(`{"a":{`+t4+`,"data_offsets":[0,16]},"a":{`+t4+`,"data_offsets":[16,32]}}`, 32), []string{`duplicate tensor name "a"`}},
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
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".safetensors")
			if err := os.WriteFile(path, tc.input, 0o644); err != nil {
				t.Fatal(err)
			}
			_, perr := Parse(tc.input)
			_, rerr := Read(bytes.NewReader(tc.input))
			_, ferr := ReadFile(path)
			for i, err := range []error{perr, rerr, ferr} {
				reader := []string{"Parse", "Read", "ReadFile"}[i]
				if err == nil {
					t.Errorf("%s: no error", reader)
					continue
				}
				msg := err.Error()
				want := tc.want
				if reader == "ReadFile" {
					want = append(want, "safetensors: "+path+": ")
				}
				for _, w := range want {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: error %q does not contain %q", reader, msg, w)
					}
				}
			}
		})
	}
}

// TestGoodInputs checks the edge cases that must be accepted.
func TestGoodInputs(t *testing.T) {
	tests := []struct {
		name  string
		input []byte
		names []string
		meta  map[string]string
	}{
		{"no tensors", mk(`{}`, 0), []string{}, nil},
		{"whitespace", mk(" \n{ \"a\" : { \"shape\" : [ 2 ] , \"data_offsets\":[0,8],\"dtype\":\"I32\"} }\t\r\n ", 8), []string{"a"}, nil},
		{"null metadata", mk(`{"__metadata__":null}`, 0), []string{}, nil},
		{"metadata last", mk(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":{"k":"v","":""}}`, 1), []string{"a"}, map[string]string{"k": "v", "": ""}},
		{"zero-size tensors share offsets", mk(`{"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"e":{"dtype":"F64","shape":[3,0],"data_offsets":[4,4]},"b":{"dtype":"U8","shape":[],"data_offsets":[4,5]},"c":{"dtype":"BOOL","shape":[0],"data_offsets":[0,0]}}`, 5), []string{"c", "a", "e", "z", "b"}, nil},
		{"huge zero-size shape", mk(`{"z":{"dtype":"F32","shape":[0,4294967296,1000000],"data_offsets":[0,0]}}`, 0), []string{"z"}, nil},
		{"escaped name", mk(`{"a\u00e9\n\"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), []string{"aé\n\""}, nil},
	}
	for _, tc := range tests {
		for i, parse := range []func([]byte) (*File, error){Parse, func(b []byte) (*File, error) { return Read(bytes.NewReader(b)) }} {
			f, err := parse(tc.input)
			if err != nil {
				t.Errorf("%s (%d): %v", tc.name, i, err)
				continue
			}
			if got := f.Names(); !reflect.DeepEqual(got, tc.names) {
				t.Errorf("%s: names %q, want %q", tc.name, got, tc.names)
			}
			if !reflect.DeepEqual(f.Metadata, tc.meta) {
				t.Errorf("%s: metadata %v, want %v", tc.name, f.Metadata, tc.meta)
			}
		}
	}
}

// TestStreamNeverAllocatesDeclaredSize reads streams whose header declares a
// terabyte of data.
func TestStreamNeverAllocatesDeclaredSize(t *testing.T) {
	input := mk(`{"t":{"dtype":"U8","shape":[1000000000000],"data_offsets":[0,1000000000000]}}`, 1000)
	allocs := allocated(func() {
		_, err := Read(bytes.NewReader(input))
		if err == nil || !strings.Contains(err.Error(), "end is beyond the data section of 1000 bytes") {
			t.Errorf("err = %v", err)
		}
	})
	if allocs > 1<<20 {
		t.Errorf("reading a 1 kB stream allocated %d bytes", allocs)
	}
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		var ts []Tensor
		for i := range rng.IntN(10) {
			d := dtype.All[rng.IntN(len(dtype.All))]
			shape := make([]int, rng.IntN(4))
			n := 1
			for j := range shape {
				shape[j] = rng.IntN(5)
				n *= shape[j]
			}
			data := make([]byte, n*d.Size())
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
			ts = append(ts, Tensor{Name: string(rune('a'+rng.IntN(26))) + string(rune('0'+i)), DType: d, Shape: shape, Data: data})
		}
		meta := map[string]string{}
		for range rng.IntN(3) {
			meta[string(rune('k'+rng.IntN(5)))] = "v\x00\"é"
		}
		var buf bytes.Buffer
		if err := Write(&buf, ts, meta); err != nil {
			t.Fatal(err)
		}
		hlen := binary.LittleEndian.Uint64(buf.Bytes())
		if hlen%8 != 0 {
			t.Errorf("header length %d is not a multiple of 8", hlen)
		}
		f, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, f.Tensors, ts)
		if !sameMeta(f.Metadata, meta) {
			t.Errorf("metadata %v, want %v", f.Metadata, meta)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"short data", []Tensor{{"w", dtype.Float32, []int{2, 3}, make([]byte, 20)}}, nil, `tensor "w": shape [2 3] of float32 needs 24 bytes, Data has 20`},
		{"negative dim", []Tensor{{"w", dtype.Float32, []int{-1}, nil}}, nil, `tensor "w": shape [-1] has a negative dimension`},
		{"overflow", []Tensor{{"w", dtype.Float32, []int{1 << 62, 4}, nil}}, nil, `tensor "w": shape [4611686018427387904 4]`},
		{"invalid dtype", []Tensor{{"w", dtype.Invalid, []int{1}, nil}}, nil, `tensor "w": invalid dtype`},
		{"duplicate", []Tensor{{"w", dtype.Uint8, []int{1}, []byte{1}}, {"w", dtype.Uint8, []int{1}, []byte{1}}}, nil, `duplicate tensor name "w"`},
		{"reserved", []Tensor{{"__metadata__", dtype.Uint8, []int{1}, []byte{1}}}, nil, `tensor "__metadata__": the name is reserved`},
		{"bad name", []Tensor{{"a\xff", dtype.Uint8, []int{1}, []byte{1}}}, nil, `tensor "a\xff": name is not valid UTF-8`},
		{"bad metadata", nil, map[string]string{"k": "\xff"}, `metadata "k": "\xff": not valid UTF-8`},
	}
	dir := t.TempDir()
	for _, tc := range tests {
		err := Write(&bytes.Buffer{}, tc.tensors, tc.meta)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Write error %v, want %q", tc.name, err, tc.want)
		}
		path := filepath.Join(dir, "w.safetensors")
		err = WriteFile(path, tc.tensors, tc.meta)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: WriteFile error %v, want %q and the path", tc.name, err, tc.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: WriteFile left %v", tc.name, entries)
		}
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n < len(p) {
		return 0, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	if err := WriteFile(path, fixtureTensors(), fixtureMeta); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v", fi.Mode(), err)
	}
	// A failure half way leaves the target as it was and no temporary file.
	err := fileio.WriteAtomic("test", path, func(f *os.File) error {
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
	// Replacing works, and the result reads back.
	if err := WriteFile(path, fixtureTensors()[:2], nil); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, f.Tensors, fixtureTensors()[:2])
	// A missing directory is an error naming it.
	if err := WriteFile(filepath.Join(dir, "no", "x.safetensors"), nil, nil); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "no")) {
		t.Errorf("err = %v", err)
	}
	// Write errors carry the tensor name.
	err = Write(&failWriter{n: 800}, fixtureTensors(), nil)
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "tensor ") {
		t.Errorf("err = %v", err)
	}
}

func TestReadFileMissing(t *testing.T) {
	_, err := ReadFile("testdata/does-not-exist.safetensors")
	if err == nil || !strings.Contains(err.Error(), "testdata/does-not-exist.safetensors") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v", err)
	}
}

// TestFileLargerThanMemory: a sparse file with an honest header whose
// data is larger than the memory available is an error naming the file
// and both sizes, before anything is allocated (not Go's fatal
// out-of-memory).
func TestFileLargerThanMemory(t *testing.T) {
	avail, ok := hostmem.Available()
	if !ok {
		t.Skip("the memory available is unknown here (no /proc/meminfo)")
	}
	elems := (avail + 1<<30) / 4
	hdr := fmt.Sprintf(`{"big":{"dtype":"F32","shape":[%d],"data_offsets":[0,%d]}}`, elems, 4*elems)
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	path := filepath.Join(t.TempDir(), "big.safetensors")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.Write(f, binary.LittleEndian, uint64(len(hdr)))
	f.WriteString(hdr)
	if err := f.Truncate(int64(8+len(hdr)) + 4*elems); err != nil {
		t.Skipf("no sparse file of %d bytes here: %v", 4*elems, err)
	}
	f.Close()
	_, err = ReadFile(path)
	if err == nil || !strings.Contains(err.Error(), "big.safetensors") || !strings.Contains(err.Error(), "of memory available") {
		t.Fatalf("err = %v", err)
	}
}
