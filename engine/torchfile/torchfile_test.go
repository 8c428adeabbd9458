package torchfile

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// describe is testdata/gen.py's describe(): a JSON view of an object,
// every value tagged with its type, tensors as dtype, shape and values.
func describe(v any) any {
	switch x := v.(type) {
	case nil:
		return map[string]any{"none": nil}
	case bool:
		return map[string]any{"bool": x}
	case int64:
		return map[string]any{"int": x}
	case float64:
		return map[string]any{"float": x}
	case string:
		return map[string]any{"str": x}
	case *Tensor:
		return map[string]any{"tensor": x.DType.String(), "shape": x.Shape, "values": values(x)}
	case *Dict:
		items := [][]any{}
		for _, it := range x.Items {
			items = append(items, []any{it.Key, describe(it.Value)})
		}
		return map[string]any{"dict": items}
	case *List:
		items := []any{}
		for _, e := range x.Items {
			items = append(items, describe(e))
		}
		if x.Tuple {
			return map[string]any{"tuple": items}
		}
		return map[string]any{"list": items}
	}
	return map[string]any{"unknown": strconv.Quote(typeName(v))}
}

// values decodes a tensor's elements.
func values(t *Tensor) []any {
	es := t.DType.Size()
	out := []any{}
	for i := 0; i+es <= len(t.Data); i += es {
		b := t.Data[i : i+es]
		switch t.DType {
		case dtype.Float32:
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
		case dtype.Float64:
			out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(b)))
		case dtype.Float16:
			out = append(out, float64(dtype.F16(binary.LittleEndian.Uint16(b)).Float32()))
		case dtype.BFloat16:
			out = append(out, float64(dtype.BF16(binary.LittleEndian.Uint16(b)).Float32()))
		case dtype.Int64:
			out = append(out, int64(binary.LittleEndian.Uint64(b)))
		case dtype.Int32:
			out = append(out, int64(int32(binary.LittleEndian.Uint32(b))))
		default: // uint8, bool
			out = append(out, int64(b[0]))
		}
	}
	return out
}

// canonical re-reads JSON with every number spelled one way (Python
// writes 2.0 where Go writes 2), and the engine's int32 for the int8 and
// int16 tensors it widens.
func canonical(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			if i, err := x.Int64(); err == nil {
				return strconv.FormatInt(i, 10)
			}
			f, _ := x.Float64()
			if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				return strconv.FormatInt(int64(f), 10)
			}
			return strconv.FormatFloat(f, 'g', -1, 64)
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = walk(x[k])
			}
			if x["tensor"] == "int8" || x["tensor"] == "int16" {
				x["tensor"] = "int32"
			}
		}
		return v
	}
	return walk(v)
}

func sameJSON(t *testing.T, got any, want []byte) {
	t.Helper()
	g, err := json.Marshal(describe(got))
	if err != nil {
		t.Fatal(err)
	}
	gc, wc := canonical(t, g), canonical(t, want)
	gj, _ := json.Marshal(gc)
	wj, _ := json.Marshal(wc)
	if !bytes.Equal(gj, wj) {
		t.Errorf("read\n%s\nwant (torch.load)\n%s", gj, wj)
	}
}

func expected(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile("testdata/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestReadTorchFixtures: every file torch.save wrote (testdata/gen.py) reads
// as torch.load reads it: the zip and the legacy formats, every dtype,
// views, shared storages, a nested checkpoint with an optimizer's state,
// Parameters, pickle protocol 4, storage views of old legacy files and
// big-endian storages; ReadFile and Parse agree.
func TestReadTorchFixtures(t *testing.T) {
	want := expected(t)
	for _, name := range []string{"dtypes.pt", "views.pt", "nested.pt", "legacy.pt", "proto4.pt",
		"params.pt", "tensor.pt", "legacy_views.pt", "bigendian.pt"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", name)
			obj, err := ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, obj, want[name])
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, parsed, want[name])
		})
	}
	if len(want) != 9 {
		t.Errorf("expected.json has %d fixtures, the test reads 9", len(want))
	}
}

// TestViewsShareOrCopy: a tensor twice in the object is one *Tensor; a
// contiguous run of a storage shares its memory; a strided view has memory
// of its own.
func TestViewsShareOrCopy(t *testing.T) {
	for _, name := range []string{"views.pt", "legacy.pt"} {
		obj, err := ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		d := obj.(*Dict)
		get := func(k string) *Tensor { v, _ := d.Get(k); return v.(*Tensor) }
		base, row, tr := get("module.base"), get("module.row"), get("module.t")
		if get("module.tied") != base {
			t.Errorf("%s: the tied tensor is read as two tensors", name)
		}
		if !within(row.Data, base.Data) {
			t.Errorf("%s: a contiguous row was copied", name)
		}
		if within(tr.Data, base.Data) {
			t.Errorf("%s: a transpose shares its storage's memory", name)
		}
	}
}

func within(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa >= pb && pa+uintptr(len(a)) <= pb+uintptr(len(b))
}

// pickle assembles a pickle from opcodes and literal bytes.
func pickle(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch x := p.(type) {
		case byte:
			b = append(b, x)
		case int:
			b = append(b, byte(x))
		case rune: // the opcode constants
			b = append(b, byte(x))
		case string:
			b = append(b, x...)
		case []byte:
			b = append(b, x...)
		}
	}
	return b
}

// str is a BINUNICODE string.
func str(s string) []byte {
	return append(binary.LittleEndian.AppendUint32([]byte{opBinUnicode}, uint32(len(s))), s...)
}

// zipWith is a zip file as torch.save writes it, of the given pickle and
// storages.
func zipWith(t *testing.T, pkl []byte, storages ...[]byte) []byte {
	t.Helper()
	e := &encoder{pkl: pkl}
	for _, s := range storages {
		e.tensors = append(e.tensors, &Tensor{Data: s})
	}
	var buf bytes.Buffer
	if err := e.writeZip(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tensorPickle is a pickle of {"w": tensor} over storage "0" of type
// FloatStorage and numel elements, with size and stride given as pickled
// tuples.
func tensorPickle(numel int, offset int, size, stride []byte) []byte {
	return pickle(opProto, 2, opEmptyDict, opMark, str("w"),
		opGlobal, "torch._utils\n_rebuild_tensor_v2\n", opMark,
		opMark, str("storage"), opGlobal, "torch\nFloatStorage\n", str("0"), str("cpu"), opBinInt1, numel, opTuple, opBinPersID,
		opBinInt1, offset, size, stride, opNewFalse, opGlobal, "collections\nOrderedDict\n", opEmptyTuple, opReduce,
		opTuple, opReduce, opSetItems, opStop)
}

// TestRefused: what a restricted unpickler must not run, and files that
// are malformed, are errors that name the problem, never a panic.
func TestRefused(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	f32 := make([]byte, 24)
	ok := tensorPickle(6, 0, pickle(opBinInt1, 2, opBinInt1, 3, opTuple2), pickle(opBinInt1, 3, opBinInt1, 1, opTuple2))
	if _, err := Parse(zipWith(t, ok, f32)); err != nil {
		t.Fatalf("the well-formed file of the cases below: %v", err)
	}
	dtypes := read("dtypes.pt")
	legacy := read("legacy.pt")
	ten := pickle(opMark, str("storage"), opGlobal, "torch\nFloatStorage\n", str("0"), str("cpu"), opBinInt1, 6, opTuple, opBinPersID)
	crc := bytes.Clone(zipWith(t, ok, f32))
	crc[bytes.LastIndex(crc, make([]byte, 24))] = 1 // a storage's byte changed
	deflated := func() []byte {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "a/data.pkl", Method: zip.Deflate})
		w.Write(pickle(opProto, 2, opNone, opStop))
		zw.Close()
		return buf.Bytes()
	}()
	deep := pickle(opProto, 2)
	for range MaxDepth + 2 { // the innermost at depth MaxDepth+1
		deep = append(deep, opEmptyList)
	}
	for range MaxDepth + 1 {
		deep = append(deep, opAppend)
	}
	deep = append(deep, opStop)
	// A list of 2 copies of a list of 2 copies ... 60 deep: 2^60 leaves,
	// each container walked once.
	wide := pickle(opProto, 2, opNone)
	for range 60 {
		wide = append(wide, opDup, opTuple2)
	}
	wide = append(wide, opStop)
	expand := pickle(opProto, 2, opEmptyList)
	for range 200 { // 200 views of 1M elements, stride 0, over one element
		expand = append(expand, pickle(opGlobal, "torch._utils\n_rebuild_tensor_v2\n", opMark,
			opMark, str("storage"), opGlobal, "torch\nFloatStorage\n", str("0"), str("cpu"), opBinInt1, 1, opTuple, opBinPersID,
			opBinInt1, 0, opBinInt, 0, 0, 16, 0, opTuple1, opBinInt1, 0, opTuple1, opNewFalse,
			opGlobal, "collections\nOrderedDict\n", opEmptyTuple, opReduce, opTuple, opReduce, opAppend)...)
	}
	expand = append(expand, opStop)

	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"os.system", read("evil_system.pt"), "global posix.system is not allowed"},
		{"builtins.eval, legacy", read("evil_eval_legacy.pt"), "global builtins.eval is not allowed"},
		{"a class", zipWith(t, pickle(opProto, 2, opGlobal, "__main__\nNet\n", opEmptyTuple, opReduce, opStop)), "global __main__.Net is not allowed"},
		{"stack global", zipWith(t, pickle(opProto, 4, str("subprocess"), str("run"), opStackGlobal, opStop)), "global subprocess.run is not allowed"},
		{"inst", zipWith(t, pickle(opProto, 2, opMark, opInst, "os\nsystem\n", opStop)), "INST at byte 3: not supported: it makes an object"},
		{"obj", zipWith(t, pickle(opProto, 2, opMark, opGlobal, "collections\nOrderedDict\n", opObj, opStop)), "OBJ at byte"},
		{"newobj", zipWith(t, pickle(opProto, 2, opGlobal, "collections\nOrderedDict\n", opEmptyTuple, opNewObj, opStop)), "NEWOBJ at byte"},
		{"ext1", zipWith(t, pickle(opProto, 2, opExt1, 1, opStop)), "EXT1 at byte 2: not supported"},
		{"build on a list", zipWith(t, pickle(opProto, 2, opEmptyList, opEmptyDict, opBuild, opStop)), "setting the state of a list"},
		{"build with a list state", zipWith(t, pickle(opProto, 2, opEmptyDict, opEmptyList, opBuild, opStop)), "a dict's state is a list"},
		{"calling a storage type", zipWith(t, pickle(opProto, 2, opGlobal, "torch\nFloatStorage\n", opEmptyTuple, opReduce, opStop)), "calling the storage type torch.FloatStorage"},
		{"calling a string", zipWith(t, pickle(opProto, 2, str("x"), opEmptyTuple, opReduce, opStop)), "calling a string"},
		{"OrderedDict with items", zipWith(t, pickle(opProto, 2, opGlobal, "collections\nOrderedDict\n", opEmptyList, opTuple1, opReduce, opStop)), "collections.OrderedDict called with 1 arguments"},
		{"bytes", zipWith(t, pickle(opProto, 3, opShortBinBytes, 1, "x", opStop)), "bytes values are not supported"},
		{"set", zipWith(t, pickle(opProto, 4, opEmptySet, opStop)), "sets are not supported"},
		{"protocol 0", zipWith(t, pickle(opInt, "1\n", opStop)), "protocol 0 is not supported"},
		{"protocol 6", zipWith(t, pickle(opProto, 6, opNone, opStop)), "pickle protocol 6"},
		{"unknown opcode", zipWith(t, pickle(opProto, 2, 0xfe, opStop)), "opcode 0xfe at byte 2: not a pickle opcode"},
		{"complex", zipWith(t, pickle(opProto, 2, opGlobal, "torch\nComplexFloatStorage\n", opStop)), "complex64 tensors are not supported"},
		{"new dtypes", zipWith(t, pickle(opProto, 2, opGlobal, "torch._utils\n_rebuild_tensor_v3\n", opStop)), "uint16"},
		{"a bare storage", zipWith(t, pickle(opProto, 2, ten, opStop), f32), "the object is a storage outside of any tensor"},
		{"a global as a value", zipWith(t, pickle(opProto, 2, opEmptyList, opGlobal, "collections\nOrderedDict\n", opAppend, opStop)), "the object[0] is the global collections.OrderedDict"},
		{"a wide integer", zipWith(t, pickle(opProto, 2, opLong1, 9, "\x00\x00\x00\x00\x00\x00\x00\x00\x01", opStop)), "wider than 64 bits"},
		{"an integer of 17 bytes", zipWith(t, pickle(opProto, 2, opLong1, 17, strings.Repeat("\x01", 17), opStop)), "an integer of 17 bytes"},
		{"a float key", zipWith(t, pickle(opProto, 2, opEmptyDict, opBinFloat, "\x00\x00\x00\x00\x00\x00\x00\x00", opNone, opSetItem, opStop)), "a dict key that is a float"},
		{"invalid UTF-8", zipWith(t, pickle(opProto, 2, opShortBinUnicode, 2, "\xff\xfe", opStop)), "not valid UTF-8"},
		{"self-containing list", zipWith(t, pickle(opProto, 2, opEmptyList, opBinPut, 0, opBinGet, 0, opAppend, opStop)), "the object[0] contains itself"},
		{"too deep", zipWith(t, deep), "nest more than 100 deep"},
		{"append to a tuple", zipWith(t, pickle(opProto, 2, opEmptyTuple, opNone, opAppend, opStop)), "appending to a tuple of 0"},
		{"setitem on a list", zipWith(t, pickle(opProto, 2, opEmptyList, opNone, opNone, opSetItem, opStop)), "setting items of a list"},
		{"empty stack", zipWith(t, pickle(opProto, 2, opPop, opStop)), "POP at byte 2: the stack is empty"},
		{"pop below a mark", zipWith(t, pickle(opProto, 2, opNone, opMark, opAppend, opStop)), "APPEND at byte 4: the stack is empty"},
		{"no mark", zipWith(t, pickle(opProto, 2, opTuple, opStop)), "TUPLE at byte 2: no MARK"},
		{"unset memo", zipWith(t, pickle(opProto, 2, opBinGet, 7, opStop)), "memo entry 7 was never set"},
		{"two objects at STOP", zipWith(t, pickle(opProto, 2, opNone, opNone, opStop)), "the stack holds 2 objects"},
		{"no STOP", zipWith(t, pickle(opProto, 2, opNone)), "the pickle ends at byte 3, before its STOP"},
		{"a string past the end", zipWith(t, pickle(opProto, 2, opBinUnicode, "\xff\xff\xff\x7f", opStop)), "the pickle ends"},
		{"bytes after STOP", zipWith(t, pickle(opProto, 2, opNone, opStop, opNone)), "1 bytes after the end of archive/data.pkl's pickle"},
		{"a long GLOBAL line", zipWith(t, pickle(opProto, 2, opGlobal, strings.Repeat("a", 2000), opStop)), "a line longer than 1024 bytes"},
		{"a view past its storage", zipWith(t, tensorPickle(6, 1, pickle(opBinInt1, 2, opBinInt1, 3, opTuple2), pickle(opBinInt1, 3, opBinInt1, 1, opTuple2)), f32),
			"size [2 3], stride [3 1] and offset 1 reach past the 6 elements"},
		{"a stride past its storage", zipWith(t, tensorPickle(6, 0, pickle(opBinInt1, 2, opTuple1), pickle(opBinInt, "\xff\xff\xff\x7f", opTuple1)), f32), "reach past the 6 elements"},
		{"size and stride differ", zipWith(t, tensorPickle(6, 0, pickle(opBinInt1, 6, opTuple1), pickle(opEmptyTuple)), f32), "differ in length"},
		{"a negative size", zipWith(t, tensorPickle(6, 0, pickle(opBinInt, "\xff\xff\xff\xff", opTuple1), pickle(opBinInt1, 1, opTuple1)), f32), "not a non-negative integer"},
		{"a storage larger than the file", zipWith(t, tensorPickle(255, 0, pickle(opEmptyTuple), pickle(opEmptyTuple)), f32), "255 elements of torch.FloatStorage, more than the"},
		{"a storage record of another size", zipWith(t, tensorPickle(5, 0, pickle(opEmptyTuple), pickle(opEmptyTuple)), f32), "record archive/data/0 is 24 bytes, but storage \"0\" of 5 elements"},
		{"no storage record", zipWith(t, ok), "storage \"0\" has no record archive/data/0"},
		{"overlapping views beyond the budget", zipWith(t, expand, make([]byte, 4)), "more than the"},
		{"a corrupt storage", crc, "checksum mismatch"},
		{"a compressed record", deflated, "record a/data.pkl is compressed"},
		{"truncated zip", dtypes[:len(dtypes)-100], "not a valid zip archive"},
		{"TorchScript", func() []byte {
			var buf bytes.Buffer
			zw := zip.NewWriter(&buf)
			for _, n := range []string{"m/data.pkl", "m/constants.pkl"} {
				w, _ := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Store})
				w.Write(pickle(opProto, 2, opNone, opStop))
			}
			zw.Close()
			return buf.Bytes()
		}(), "a TorchScript archive"},
		{"a record outside a folder", func() []byte {
			var buf bytes.Buffer
			zw := zip.NewWriter(&buf)
			zw.Create("data.pkl")
			zw.Close()
			return buf.Bytes()
		}(), "is not in a folder"},
		{"legacy, truncated storages", legacy[:len(legacy)-1], "remain in the file"},
		{"legacy, trailing bytes", append(bytes.Clone(legacy), 0), "1 bytes after the last storage"},
		{"legacy, truncated pickle", legacy[:200], "the pickle ends"},
		{"legacy, another magic number", pickle(opProto, 2, opBinInt1, 1, opStop), "a pickle of an int, not the magic number"},
		{"legacy, a storage in the header", pickle(opProto, 2, ten, opStop), "a persistent id (a storage) where none may be"},
		{"empty", nil, "it is empty"},
		{"npy", []byte("\x93NUMPY\x01\x00"), "use io.loadNpy"},
		{"safetensors", []byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"), "use io.loadSafetensors"},
		{"text", []byte("hello"), `it starts with "hello"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj, err := Parse(c.data)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q (read %v)", err, c.want, describe(obj))
			}
			if !strings.HasPrefix(err.Error(), "torchfile: ") {
				t.Errorf("error %q does not start with the package name", err)
			}
		})
	}
	// A DAG of 2^60 paths is walked in linear time, and loads.
	if _, err := Parse(zipWith(t, wide)); err != nil {
		t.Errorf("a shared list: %v", err)
	}
}

// TestReadFileErrorsNameThePath: errors of ReadFile name the file.
func TestReadFileErrorsNameThePath(t *testing.T) {
	path := filepath.Join("testdata", "evil_system.pt")
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), path+": ") {
		t.Errorf("error %v does not name %s", err, path)
	}
	if _, err := ReadFile("testdata"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("reading a directory: %v", err)
	}
}

// sample is an object of every kind Write takes.
func sample() *Dict {
	f32 := &Tensor{dtype.Float32, []int{2, 3}, nil}
	for i := range 6 {
		f32.Data = binary.LittleEndian.AppendUint32(f32.Data, math.Float32bits(float32(i)/4-1))
	}
	tensors := &Dict{}
	for _, dt := range dtype.All {
		tensors.Items = append(tensors.Items, Item{dt.String(), &Tensor{dt, []int{4}, bytes.Repeat([]byte{1}, 4*dt.Size())}})
	}
	return &Dict{Items: []Item{
		{"model", &Dict{Items: []Item{{"module.w", f32}, {"module.tied", f32},
			{"scalar", &Tensor{dtype.Float64, []int{}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(-2.5))}},
			{"empty", &Tensor{dtype.Int64, []int{0, 3}, nil}},
			{"5d", &Tensor{dtype.Uint8, []int{1, 2, 1, 2, 1}, []byte{1, 2, 3, 4}}}}}},
		{"dtypes", tensors},
		{"state", &Dict{Items: []Item{{int64(0), &Dict{Items: []Item{{"step", int64(3)}}}}, {int64(-1), nil}}}},
		{"groups", &List{Items: []any{&Dict{Items: []Item{{"lr", 0.001}, {"betas", &List{Items: []any{0.9, 0.999}, Tuple: true}},
			{"params", &List{Items: []any{int64(0), int64(1)}}}, {"amsgrad", false}, {"foreach", nil}}}}}},
		{"ints", &List{Items: []any{int64(255), int64(256), int64(65536), int64(-1), int64(1 << 40), int64(math.MinInt64), int64(math.MaxInt64)}}},
		{"name", "modèle"},
		{"empty", &List{Tuple: true}},
		{"many", &List{Items: func() []any {
			var l []any
			for i := range 2500 { // more than one APPENDS batch, and memo indices past 255
				l = append(l, &List{Items: []any{int64(i)}})
			}
			return l
		}()}},
	}}
}

// TestWriteReadsBack: what Write writes, Parse reads as the same object;
// the storages are 64-byte aligned, and a tensor twice is one storage.
func TestWriteReadsBack(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	got, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(describe(sample()))
	sameJSON(t, got, want)
	model, _ := got.(*Dict).Get("model")
	w, _ := model.(*Dict).Get("module.w")
	tied, _ := model.(*Dict).Get("module.tied")
	if w != tied {
		t.Error("a tensor written twice reads as two")
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		off, _ := f.DataOffset()
		if off%alignment != 0 {
			t.Errorf("%s starts at %d, not a multiple of %d", f.Name, off, alignment)
		}
	}
	if n := len(names); n != 3+1+len(dtype.All)+3 || names[0] != "archive/data.pkl" || names[n-1] != "archive/version" {
		t.Errorf("records %v", names)
	}
	var again bytes.Buffer
	if err := Write(&again, got); err != nil || !bytes.Equal(again.Bytes(), buf.Bytes()) {
		t.Errorf("writing what was read gives other bytes (%v)", err)
	}
}

// TestWriteErrors: objects a PyTorch file cannot hold are errors naming
// where they are, and WriteFile leaves no file.
func TestWriteErrors(t *testing.T) {
	cyclic := &List{}
	cyclic.Items = []any{&Dict{Items: []Item{{"back", cyclic}}}}
	deep := &List{}
	for range MaxDepth + 1 {
		deep = &List{Items: []any{deep}}
	}
	cases := []struct {
		name string
		obj  any
		want string
	}{
		{"a Go int", &Dict{Items: []Item{{"n", 3}}}, `the object["n"] is a int`},
		{"a cycle", cyclic, `the object[0]["back"] contains itself`},
		{"too deep", deep, "nest more than 100 deep"},
		{"a float key", &Dict{Items: []Item{{1.5, nil}}}, "a key that is a float64"},
		{"a key twice", &Dict{Items: []Item{{"a", nil}, {"a", nil}}}, "key a appears twice"},
		{"invalid UTF-8", &List{Items: []any{"\xff"}}, "the object[0]: string"},
		{"short data", &Tensor{dtype.Float32, []int{2}, make([]byte, 4)}, "shape [2] of float32 needs 8 bytes, Data has 4"},
		{"invalid dtype", &Tensor{dtype.Invalid, nil, nil}, "invalid dtype"},
		{"negative dim", &Tensor{dtype.Uint8, []int{-1}, nil}, "negative dimension"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "x.pt")
			err := WriteFile(path, c.obj)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want one containing %q and the path", err, c.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("files left: %v", ents)
			}
		})
	}
}

// TestTorchLoadsWritten: PyTorch (Debian's python3-torch) loads what
// WriteFile wrote as the same object; a state dict of tensors loads with
// weights_only=True too (PyTorch 1.13's restricted unpickler has no
// floats, so the whole sample cannot).
func TestTorchLoadsWritten(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("needs %s with PyTorch (Debian's python3-torch): %v", python, err)
	}
	model, _ := sample().Get("model")
	dtypes, _ := sample().Get("dtypes")
	objs := []any{sample(), model, dtypes}
	args := []string{"testdata/gen.py", "describe"}
	for i, obj := range objs {
		if i == 1 {
			args = append(args, "--weights-only")
		}
		path := filepath.Join(t.TempDir(), fmt.Sprintf("written%d.pt", i))
		if err := WriteFile(path, obj); err != nil {
			t.Fatal(err)
		}
		args = append(args, path)
	}
	out, err := exec.Command(python, args...).CombinedOutput()
	if bytes.Contains(out, []byte("No module named 'torch'")) {
		t.Skipf("needs %s with PyTorch (Debian's python3-torch): %s", python, out)
	}
	if err != nil {
		t.Fatalf("torch.load: %v\n%s", err, out)
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(lines) != len(objs) {
		t.Fatalf("torch.load printed %d lines for %d files:\n%s", len(lines), len(objs), out)
	}
	for i, obj := range objs {
		sameJSON(t, obj, lines[i])
	}
}

// TestAccepted: pickles torch.save does not write here but PyTorch 2.x,
// older versions or other protocols do, read as torch.load reads them.
func TestAccepted(t *testing.T) {
	hooks := pickle(opGlobal, "collections\nOrderedDict\n", opEmptyTuple, opReduce)
	storage := func(typ string, numel int) []byte { // the type's first letter is the key: 'S' and 'C' below
		key := map[byte]string{'S': "0", 'C': "1"}[typ[0]]
		if key == "" {
			key = "0"
		}
		return pickle(opMark, str("storage"), opGlobal, "torch\n"+typ+"\n", str(key), str("cuda:0"), opBinInt1, numel, opTuple, opBinPersID)
	}
	v2 := func(typ string, numel int, extra ...any) []byte {
		return pickle(opGlobal, "torch._utils\n_rebuild_tensor_v2\n", opMark, storage(typ, numel),
			opBinInt1, 0, opBinInt1, numel, opTuple1, opBinInt1, 1, opTuple1, opNewFalse, hooks, pickle(extra...), opTuple, opReduce)
	}
	f32 := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5)), math.Float32bits(-2))
	cases := []struct {
		name     string
		pkl      []byte
		storages [][]byte
		want     string
	}{
		{"v2 with empty metadata", pickle(opProto, 2, v2("FloatStorage", 2, opEmptyDict), opStop), [][]byte{f32},
			`{"tensor": "float32", "shape": [2], "values": [1.5, -2.0]}`},
		{"v1", pickle(opProto, 2, opGlobal, "torch._utils\n_rebuild_tensor\n", opMark, storage("FloatStorage", 2),
			opBinInt1, 1, opBinInt1, 1, opTuple1, opBinInt1, 1, opTuple1, opTuple, opReduce, opStop), [][]byte{f32},
			`{"tensor": "float32", "shape": [1], "values": [-2.0]}`},
		{"a parameter with state", pickle(opProto, 2, opGlobal, "torch._utils\n_rebuild_parameter_with_state\n", opMark,
			v2("FloatStorage", 2), opNewTrue, hooks, opEmptyDict, opTuple, opReduce, opStop), [][]byte{f32},
			`{"tensor": "float32", "shape": [2], "values": [1.5, -2.0]}`},
		{"bools other than 0 and 1", pickle(opProto, 2, v2("BoolStorage", 3), opStop), [][]byte{{0, 1, 7}},
			`{"tensor": "bool", "shape": [3], "values": [0, 1, 1]}`},
		{"int16 and int8 widened", pickle(opProto, 2, opMark, v2("ShortStorage", 2), v2("CharStorage", 2), opList, opStop),
			[][]byte{{0xff, 0x7f, 0x00, 0x80}, {0x80, 0x7f}},
			`{"list": [{"tensor": "int32", "shape": [2], "values": [32767, -32768]}, {"tensor": "int32", "shape": [2], "values": [-128, 127]}]}`},
		{"protocol 0/1 containers", pickle(opProto, 2, opMark, str("a"), opMark, opNone, opNewTrue, opList, opDict, opStop), nil,
			`{"dict": [["a", {"list": [{"none": null}, {"bool": true}]}]]}`},
		{"Python 2 strings", pickle(opProto, 2, opMark, opShortBinString, 1, "k", opBinString, "\x02\x00\x00\x00é", opDict, opStop), nil,
			`{"dict": [["k", {"str": "é"}]]}`},
		{"protocol 4", pickle(opProto, 4, opFrame, "\x10\x00\x00\x00\x00\x00\x00\x00", opEmptyDict, opMemoize,
			opBinUnicode8, "\x01\x00\x00\x00\x00\x00\x00\x00x", opLong4, "\x02\x00\x00\x00\x00\x80", opSetItem, opStop), nil,
			`{"dict": [["x", {"int": -32768}]]}`},
		{"POP, POP_MARK, DUP", pickle(opProto, 2, opNone, opPop, opMark, opNone, opPopMark, opMark, opPop, opBinInt, "\xfe\xff\xff\xff", opDup, opTuple2, opStop), nil,
			`{"tuple": [{"int": -2}, {"int": -2}]}`},
		{"a key set twice keeps its place", pickle(opProto, 2, opEmptyDict, opMark, str("a"), opBinInt1, 1, str("b"), opBinInt1, 2, str("a"), opBinInt1, 3, opSetItems, opStop), nil,
			`{"dict": [["a", {"int": 3}], ["b", {"int": 2}]]}`},
		{"a state dict's attributes", pickle(opProto, 2, hooks, opEmptyDict, opMark, str("_metadata"), opEmptyDict, opSetItems, opBuild, opStop), nil,
			`{"dict": []}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj, err := Parse(zipWith(t, c.pkl, c.storages...))
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, obj, []byte(c.want))
		})
	}
}
