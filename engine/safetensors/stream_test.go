package safetensors

import (
	"bytes"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// TestStreamWriterIsWrite: a file written through a StreamWriter, its data
// given in pieces of every size, is byte for byte Write's; ReadHeader reads
// back Parse's tensors at the right offsets.
func TestStreamWriterIsWrite(t *testing.T) {
	tensors := fixtureTensors()
	meta := map[string]string{"format": "pt", "zz": "last"}
	var want bytes.Buffer
	if err := Write(&want, tensors, meta); err != nil {
		t.Fatal(err)
	}
	specs := make([]Spec, len(tensors))
	var data []byte // in data order
	for i, tt := range tensors {
		specs[i] = Spec{Name: tt.Name, DType: tt.DType, Shape: tt.Shape}
	}
	for _, i := range DataOrder(specs) {
		data = append(data, tensors[i].Data...)
	}
	for _, piece := range []int{1, 3, 7, 1000} {
		var got bytes.Buffer
		w, err := NewStreamWriter(&got, specs, meta)
		if err != nil {
			t.Fatal(err)
		}
		for at := 0; at < len(data); at += piece {
			if _, err := w.Write(data[at:min(at+piece, len(data))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("pieces of %d: the stream differs from Write's file", piece)
		}
		if _, err := w.Write([]byte{1}); err == nil || !strings.Contains(err.Error(), "beyond the data of the last tensor") {
			t.Errorf("a byte too many: %v", err)
		}
	}
	f, err := Parse(want.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	h, err := ReadHeader(bytes.NewReader(want.Bytes()), int64(want.Len()), "x.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Tensors) != len(f.Tensors) || h.Metadata["format"] != "pt" || h.Size != int64(want.Len()) {
		t.Fatalf("header: %d tensors, metadata %v", len(h.Tensors), h.Metadata)
	}
	for _, ft := range f.Tensors {
		ti, ok := h.Get(ft.Name)
		if !ok || ti.DType != ft.DType || !bytes.Equal(want.Bytes()[ti.Begin:ti.End], ft.Data) {
			t.Errorf("%s: ReadHeader's offsets do not find Parse's data", ft.Name)
		}
	}
}

func TestStreamWriterErrors(t *testing.T) {
	specs := []Spec{{Name: "a", DType: dtype.Float32, Shape: []int{2}}, {Name: "b", DType: dtype.Float32, Shape: []int{1}}}
	var buf bytes.Buffer
	w, err := NewStreamWriter(&buf, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, 9))
	if i, left := w.Current(); i != 1 || left != 3 {
		t.Errorf("Current = %d, %d; want tensor 1 with 3 bytes left", i, left)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), `tensor "b" is missing 3 bytes`) {
		t.Errorf("Close with data missing: %v", err)
	}
	if _, err := NewStreamWriter(&buf, append(specs, specs[0]), nil); err == nil || !strings.Contains(err.Error(), "duplicate tensor name") {
		t.Errorf("a repeated name: %v", err)
	}
	for _, size := range []int{0, 7} {
		if _, err := ReadHeader(bytes.NewReader(make([]byte, size)), int64(size), "short"); err == nil || !strings.Contains(err.Error(), "shorter than the 8-byte header length") {
			t.Errorf("%d bytes: %v", size, err)
		}
	}
	var good bytes.Buffer
	Write(&good, fixtureTensors(), nil)
	b := good.Bytes()
	if _, err := ReadHeader(bytes.NewReader(b[:len(b)-1]), int64(len(b)-1), "cut"); err == nil || !strings.Contains(err.Error(), "beyond the data section") {
		t.Errorf("a truncated file: %v", err)
	}
}
