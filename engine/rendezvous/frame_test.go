package rendezvous

import (
	"bytes"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		op     byte
		fields [][]byte
	}{
		{opNumKeys, nil},
		{opSet, [][]byte{[]byte("key"), []byte("value")}},
		{opSet, [][]byte{{}, {}}},
		{opWait, [][]byte{waitParams(true, 1e9, 2), []byte("a"), []byte("b"), []byte("abort")}},
		{opCompareSet, [][]byte{[]byte("k"), nil, bytes.Repeat([]byte{7}, 1000)}},
		{rTimeout, [][]byte{[]byte("x"), []byte("y")}},
	}
	for _, tt := range tests {
		enc := encodeFrame(tt.op, 42, tt.fields...)
		f, err := readFrame(bytes.NewReader(enc))
		if err != nil {
			t.Fatalf("op %d: %v", tt.op, err)
		}
		if f.op != tt.op || f.id != 42 || len(f.fields) != len(tt.fields) {
			t.Fatalf("op %d: got op %d id %d %d fields", tt.op, f.op, f.id, len(f.fields))
		}
		for i := range f.fields {
			if !bytes.Equal(f.fields[i], tt.fields[i]) || cap(f.fields[i]) != len(f.fields[i]) {
				t.Fatalf("op %d field %d: %q (cap %d), want %q", tt.op, i, f.fields[i], cap(f.fields[i]), tt.fields[i])
			}
		}
	}
}

// FuzzParseFrame throws arbitrary bytes at the frame reader and parser:
// they must not panic, must return fields that lie within the input, and
// must hold requests to the key limit.
func FuzzParseFrame(f *testing.F) {
	hello := encodeFrame(opHello, 0, []byte(protoMagic), []byte{protoVersion})
	f.Add(hello)
	f.Add(encodeFrame(opSet, 1, []byte("k"), []byte("v")))
	f.Add(encodeFrame(opWait, 2, waitParams(true, 5, 1), []byte("k"), []byte("abort")))
	f.Add(encodeFrame(opAdd, 3, []byte("n"), i64(-1)))
	f.Add(encodeFrame(opCompareSet, 4, []byte("k"), nil, []byte("x")))
	f.Add(encodeFrame(opCheck, 5, []byte("a"), []byte("b")))
	f.Add(append(encodeFrame(opDelete, 6, []byte("k")), encodeFrame(opNumKeys, 7)...))
	f.Add(encodeFrame(rOK, 8, []byte("value")))
	f.Add(encodeFrame(opAuth, 9, make([]byte, nonceLen), make([]byte, 32)))
	f.Add(encodeFrame(opAuth, 10, make([]byte, 5), make([]byte, 32)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 9, opSet, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		// The stream reader, frame after frame, as a connection reads.
		r := bytes.NewReader(data)
		total := 0
		for {
			fr, err := readFrame(r)
			if err != nil {
				break
			}
			for _, fl := range fr.fields {
				total += len(fl)
			}
			checkParsed(t, fr)
		}
		if total > len(data) {
			t.Fatalf("fields hold %d bytes of %d in", total, len(data))
		}
		// The body parser alone.
		if fr, err := parseFrame(data); err == nil {
			checkParsed(t, fr)
			if n := frameSize(fr.fields); n != len(data) {
				t.Fatalf("parsed %d bytes of %d", n, len(data))
			}
			// What parses re-encodes to the same bytes.
			if enc := encodeFrame(fr.op, fr.id, fr.fields...); !bytes.Equal(enc[4:], data) {
				t.Fatal("re-encoding differs")
			}
		}
	})
}

func checkParsed(t *testing.T, f frame) {
	if len(f.fields) > maxFields {
		t.Fatalf("%d fields", len(f.fields))
	}
	for _, fl := range f.fields {
		if len(fl) > MaxValue || cap(fl) != len(fl) {
			t.Fatalf("field of %d bytes, cap %d", len(fl), cap(fl))
		}
	}
	if f.op < rOK {
		keys := f.fields
		switch f.op {
		case opHello:
			keys = nil
		case opSet, opAdd, opCompareSet:
			keys = keys[:1]
		case opWait:
			keys = keys[1:]
		}
		for _, k := range keys {
			if len(k) > MaxKey {
				t.Fatalf("op %d with a key of %d bytes", f.op, len(k))
			}
		}
	}
}
