package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// entry is one tensor of the header.
type entry struct {
	name       string
	dtype      dtype.DType
	shape      []int
	begin, end int64
}

// header is a parsed header. After layout, entries are in data order and
// size is the length of the data section they describe.
type header struct {
	metadata map[string]string
	entries  []entry
	size     int64
}

// parseHeader parses and validates the JSON header on its own: types, keys,
// dtypes, shapes, and offsets against the shapes. The layout of the offsets in
// the data section is checked by layout.
//
// It walks the JSON with the token API rather than unmarshalling into a map,
// because a map silently keeps the last of duplicate keys and the format
// forbids them, and because unknown keys must be reported, not dropped.
func parseHeader(p prefix, b []byte) (*header, error) {
	if !utf8.Valid(b) {
		i := 0
		for i < len(b) {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return nil, p.errorf("header is not valid UTF-8 (byte 0x%02x at offset %d)", b[i], i)
	}
	d := &decoder{p: p, dec: json.NewDecoder(bytes.NewReader(b))}
	d.dec.UseNumber()
	tok, err := d.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errorf("header is not a JSON object: it is empty")
		}
		return nil, p.errorf("header is not valid JSON: %v", err)
	}
	if tok != json.Delim('{') {
		return nil, p.errorf("header is not a JSON object: it starts with %s", describe(tok))
	}
	h := &header{}
	seen := make(map[string]bool)
	for d.dec.More() {
		name, err := d.key()
		if err != nil {
			return nil, err
		}
		if seen[name] {
			if name == "__metadata__" {
				return nil, p.errorf("header has two \"__metadata__\" entries")
			}
			return nil, p.errorf("duplicate tensor name %q", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if h.metadata, err = d.metadata(); err != nil {
				return nil, err
			}
			continue
		}
		e, err := d.tensor(name)
		if err != nil {
			return nil, err
		}
		h.entries = append(h.entries, e)
	}
	if _, err := d.dec.Token(); err != nil { // the closing '}'
		return nil, p.errorf("header is not valid JSON: %v", err)
	}
	// Only whitespace (the padding) may follow the object.
	if tok, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, p.errorf("header is not valid JSON after the object: %v", err)
		}
		return nil, p.errorf("header has %s after the JSON object", describe(tok))
	}
	return h, nil
}

// decoder reads the expected tokens and reports anything else.
type decoder struct {
	p   prefix
	dec *json.Decoder
}

func (d *decoder) next(what string) (json.Token, error) {
	tok, err := d.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, d.p.errorf("header is not valid JSON (reading %s): %v", what, err)
	}
	return tok, nil
}

func (d *decoder) key() (string, error) {
	tok, err := d.next("a key")
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok { // unreachable: the decoder only returns strings as keys
		return "", d.p.errorf("header has key %s", describe(tok))
	}
	return s, nil
}

// metadata reads the "__metadata__" value: an object of strings. A null value
// means no metadata, as in the reference implementation.
func (d *decoder) metadata() (map[string]string, error) {
	tok, err := d.next("__metadata__")
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('{') {
		return nil, d.p.errorf("__metadata__ is %s, not an object of strings", describe(tok))
	}
	m := make(map[string]string)
	for d.dec.More() {
		k, err := d.key()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, d.p.errorf("__metadata__ has duplicate key %q", k)
		}
		tok, err := d.next("__metadata__ value")
		if err != nil {
			return nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, d.p.errorf("__metadata__[%q] is %s, not a string", k, describe(tok))
		}
		m[k] = v
	}
	if _, err := d.next("the end of __metadata__"); err != nil {
		return nil, err
	}
	return m, nil
}

// tensor reads and validates one tensor entry, without looking at the data
// section.
func (d *decoder) tensor(name string) (entry, error) {
	e := entry{name: name}
	p := d.p
	tok, err := d.next("tensor " + strconv.Quote(name))
	if err != nil {
		return e, err
	}
	if tok != json.Delim('{') {
		return e, p.errorf("tensor %q: entry is %s, not an object", name, describe(tok))
	}
	var dtypeName string
	var haveDType, haveShape, haveOffsets bool
	for d.dec.More() {
		k, err := d.key()
		if err != nil {
			return e, err
		}
		switch k {
		case "dtype":
			if haveDType {
				return e, p.errorf("tensor %q: duplicate key \"dtype\"", name)
			}
			haveDType = true
			tok, err := d.next("dtype")
			if err != nil {
				return e, err
			}
			s, ok := tok.(string)
			if !ok {
				return e, p.errorf("tensor %q: dtype is %s, not a string", name, describe(tok))
			}
			dtypeName = s
		case "shape":
			if haveShape {
				return e, p.errorf("tensor %q: duplicate key \"shape\"", name)
			}
			haveShape = true
			dims, err := d.uints(name, "shape")
			if err != nil {
				return e, err
			}
			e.shape = make([]int, len(dims))
			for i, v := range dims {
				e.shape[i] = int(v) // uints checked v <= maxInt
			}
		case "data_offsets":
			if haveOffsets {
				return e, p.errorf("tensor %q: duplicate key \"data_offsets\"", name)
			}
			haveOffsets = true
			offs, err := d.uints(name, "data_offsets")
			if err != nil {
				return e, err
			}
			if len(offs) != 2 {
				return e, p.errorf("tensor %q: data_offsets %s has %d entries, not [begin, end]", name, int64s(offs), len(offs))
			}
			e.begin, e.end = offs[0], offs[1]
			if e.begin > e.end {
				return e, p.errorf("tensor %q: data_offsets [%d, %d]: begin is after end", name, e.begin, e.end)
			}
		default:
			return e, p.errorf("tensor %q: unknown key %q (want dtype, shape, data_offsets)", name, k)
		}
	}
	if _, err := d.next("the end of tensor " + strconv.Quote(name)); err != nil {
		return e, err
	}
	switch {
	case !haveDType:
		return e, p.errorf("tensor %q: missing key \"dtype\"", name)
	case !haveShape:
		return e, p.errorf("tensor %q: missing key \"shape\"", name)
	case !haveOffsets:
		return e, p.errorf("tensor %q: missing key \"data_offsets\"", name)
	}
	dt, ok := dtype.FromSafetensors(dtypeName)
	if !ok {
		return e, p.errorf("tensor %q: unsupported dtype %q (zeroeng reads F32, F64, BF16, F16, I64, I32, U8, BOOL)", name, dtypeName)
	}
	e.dtype = dt
	nbytes, ok := byteSize(e.shape, dt.Size())
	if !ok {
		return e, p.errorf("tensor %q: shape %s of %s: the element count or byte size overflows int64", name, shapeString(e.shape), dtypeName)
	}
	if e.end-e.begin != nbytes {
		return e, p.errorf("tensor %q: data_offsets [%d, %d] hold %d bytes but shape %s of %s needs %d",
			name, e.begin, e.end, e.end-e.begin, shapeString(e.shape), dtypeName, nbytes)
	}
	return e, nil
}

// uints reads an array of non-negative integers that fit in an int.
func (d *decoder) uints(name, what string) ([]int64, error) {
	p := d.p
	tok, err := d.next(what)
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, p.errorf("tensor %q: %s is %s, not an array of integers", name, what, describe(tok))
	}
	vs := []int64{}
	for d.dec.More() {
		tok, err := d.next(what)
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, p.errorf("tensor %q: %s[%d] is %s, not an integer", name, what, len(vs), describe(tok))
		}
		s := string(num)
		if len(s) > 0 && s[0] == '-' {
			return nil, p.errorf("tensor %q: %s[%d] = %s is negative", name, what, len(vs), s)
		}
		for _, c := range []byte(s) {
			if c < '0' || c > '9' {
				return nil, p.errorf("tensor %q: %s[%d] = %s is not an integer", name, what, len(vs), s)
			}
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v > maxInt {
			return nil, p.errorf("tensor %q: %s[%d] = %s overflows int64", name, what, len(vs), s)
		}
		vs = append(vs, v)
	}
	if _, err := d.next("the end of " + what); err != nil {
		return nil, err
	}
	return vs, nil
}

// layout sorts the entries by offset and checks that they tile the data
// section exactly: no overlaps, no holes, no bytes after the last tensor. The
// format requires it, and it guarantees that every byte of the file is
// accounted for. dataLen < 0 means the length is not known yet: then only the
// tiling is checked, and h.size tells how long the data section must be.
func (h *header) layout(p prefix, dataLen int64) error {
	if dataLen >= 0 {
		// Checked in header order, before sorting, so that the error names
		// the tensor that points outside.
		for _, e := range h.entries {
			if e.end > dataLen {
				return p.errorf("tensor %q: data_offsets [%d, %d]: end is beyond the data section of %d bytes",
					e.name, e.begin, e.end, dataLen)
			}
		}
	}
	sortEntries(h.entries)
	var at int64
	for i, e := range h.entries {
		if e.begin < at {
			prev := h.entries[i-1]
			return p.errorf("tensor %q: data_offsets [%d, %d] overlap tensor %q at [%d, %d]",
				e.name, e.begin, e.end, prev.name, prev.begin, prev.end)
		}
		if e.begin > at {
			return p.errorf("data section has a hole at bytes [%d, %d), before tensor %q at [%d, %d]",
				at, e.begin, e.name, e.begin, e.end)
		}
		at = e.end
	}
	h.size = at
	if dataLen >= 0 && at != dataLen {
		return p.errorf("data section has %d trailing bytes after the last tensor (the tensors cover %d of %d bytes)",
			dataLen-at, at, dataLen)
	}
	return nil
}

// describe names a JSON token for an error message.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return "the number " + string(v)
	case string:
		return "the string " + strconv.Quote(v)
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return "'" + v.String() + "'"
	}
	return fmt.Sprint(tok)
}

func int64s(vs []int64) string {
	b := []byte{'['}
	for i, v := range vs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(append(b, ']'))
}
