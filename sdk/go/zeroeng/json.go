package zeroeng

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The ABI's JSON, written and read by hand: encoding/json compiled to
// WebAssembly takes tens of microseconds a value (reflection, and the
// allocations the guest's collector then sweeps), more than the host call
// itself. The common values — numbers, strings, booleans, handles, slices
// and maps of them — go through these; anything else (a struct, a
// json.Marshaler) through encoding/json, as before.

// appendJSON appends v's JSON: what encoding/json writes for it, but NaN
// and the infinities as the ABI's {"$num": ...}.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case uint32:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case float64:
		return appendFloat(b, x, 64), nil
	case float32:
		return appendFloat(b, float64(x), 32), nil
	case string:
		return appendString(b, x), nil
	case Tensor:
		return appendHandle(b, x.ID), nil
	case Object:
		return appendHandle(b, x.ID), nil
	case Handle:
		return appendHandle(b, x.ID), nil
	case json.RawMessage:
		return append(b, x...), nil
	case []any:
		return appendSlice(b, x)
	case []int:
		return appendSlice(b, x)
	case []int64:
		return appendSlice(b, x)
	case []float64:
		return appendSlice(b, x)
	case []Tensor:
		return appendSlice(b, x)
	case []Object:
		return appendSlice(b, x)
	case []string:
		return appendSlice(b, x)
	case Fields:
		if len(x)%2 != 0 {
			return nil, fmt.Errorf("zeroeng: Fields has %d entries, not key-value pairs", len(x))
		}
		b = append(b, '{')
		for i := 0; i < len(x); i += 2 {
			k, ok := x[i].(string)
			if !ok {
				return nil, fmt.Errorf("zeroeng: Fields' key %d is a %T, not a string", i/2, x[i])
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, x[i+1]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys) // encoding/json's order
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, x[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	// A struct (metrics.log's fields in order), a json.Marshaler, or a
	// type not above: encoding/json.
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}

// Fields is an object's members, key and value in turn, in the order
// given (metrics.log's columns, progress.bar's fields):
// ze.Fields{"step", 3, "loss", l}. It is written without reflection; a
// struct with json tags says the same through encoding/json, at tens of
// microseconds a call in WebAssembly.
type Fields []any

func appendSlice[T any](b []byte, xs []T) ([]byte, error) {
	if xs == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendJSON(b, any(x)); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

func appendHandle(b []byte, id int32) []byte {
	b = append(b, `{"$":`...)
	b = strconv.AppendInt(b, int64(id), 10)
	return append(b, '}')
}

// appendFloat writes x as encoding/json does (the shortest form that
// reads back, exponents from 1e21 and below 1e-6), NaN and the infinities
// as {"$num": ...}.
func appendFloat(b []byte, x float64, bits int) []byte {
	switch {
	case math.IsNaN(x):
		return append(b, `{"$num":"NaN"}`...)
	case math.IsInf(x, 1):
		return append(b, `{"$num":"Infinity"}`...)
	case math.IsInf(x, -1):
		return append(b, `{"$num":"-Infinity"}`...)
	}
	abs := math.Abs(x)
	format := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, x, format, -1, bits)
	if format == 'e' {
		// 1e-07 → 1e-7, as encoding/json.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string (invalid UTF-8 as U+FFFD, as
// encoding/json).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// parser reads the host's JSON: numbers as float64, arrays as []any,
// objects as map[string]any, handles as Tensor or Object, {"$num": ...}
// as the float64 it names.
type parser struct {
	b []byte
	i int
}

var errJSON = errors.New("not JSON")

// parseJSON parses the JSON value b holds.
func parseJSON(b []byte) (any, error) {
	if h, ok := parseHandle(b); ok {
		return h, nil
	}
	p := parser{b: b}
	v, err := p.value(0)
	if err == nil {
		p.space()
		if p.i != len(p.b) {
			err = errJSON
		}
	}
	if err != nil {
		return nil, fmt.Errorf("zeroeng: the host's result %q: %w at byte %d", b, err, p.i)
	}
	return v, nil
}

func (p *parser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\n' || p.b[p.i] == '\t' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) literal(s string, v any) (any, error) {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return nil, errJSON
	}
	p.i += len(s)
	return v, nil
}

func (p *parser) value(depth int) (any, error) {
	if depth > 100 {
		return nil, errors.New("nested too deep")
	}
	p.space()
	if p.i >= len(p.b) {
		return nil, errJSON
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		p.i++
		out := []any{}
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return out, nil
		}
		for {
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			p.space()
			if p.i >= len(p.b) {
				return nil, errJSON
			}
			p.i++
			switch p.b[p.i-1] {
			case ']':
				return out, nil
			case ',':
			default:
				return nil, errJSON
			}
		}
	case c == '"':
		return p.str()
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		return p.literal("null", nil)
	case c == '-' || c >= '0' && c <= '9':
		j := p.i
		for j < len(p.b) && (p.b[j] >= '0' && p.b[j] <= '9' || p.b[j] == '-' || p.b[j] == '+' || p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
			j++
		}
		x, err := strconv.ParseFloat(string(p.b[p.i:j]), 64)
		if err != nil {
			return nil, errJSON
		}
		p.i = j
		return x, nil
	}
	return nil, errJSON
}

func (p *parser) object(depth int) (any, error) {
	p.i++
	m := map[string]any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return m, nil
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, errJSON
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, errJSON
		}
		p.i++
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[k] = v
		p.space()
		if p.i >= len(p.b) {
			return nil, errJSON
		}
		p.i++
		if p.b[p.i-1] == '}' {
			break
		}
		if p.b[p.i-1] != ',' {
			return nil, errJSON
		}
	}
	if id, ok := m["$"].(float64); ok && len(m) == 2 && id == math.Trunc(id) && id >= 0 && id <= math.MaxInt32 {
		kind, _ := m["type"].(string)
		h := Handle{ID: int32(id), Kind: kind}
		if kind == "tensor" {
			return Tensor{h}, nil
		}
		return Object{h}, nil
	}
	if s, ok := m["$num"].(string); ok && len(m) == 1 {
		f, err := strconv.ParseFloat(s, 64) // "NaN", "Infinity", "-Infinity"
		if err != nil {
			return nil, errJSON
		}
		return f, nil
	}
	return m, nil
}

// str reads a JSON string.
func (p *parser) str() (string, error) {
	p.i++ // the quote
	start := p.i
	for p.i < len(p.b) && p.b[p.i] != '"' && p.b[p.i] != '\\' {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == '"' {
		s := string(p.b[start:p.i])
		p.i++
		return s, nil
	}
	// Escapes: encoding/json decodes the whole string.
	p.i = start - 1
	j := p.i + 1
	for j < len(p.b) && p.b[j] != '"' {
		if p.b[j] == '\\' {
			j++
		}
		j++
	}
	if j >= len(p.b) {
		return "", errJSON
	}
	var s string
	if err := json.Unmarshal(p.b[p.i:j+1], &s); err != nil {
		return "", errJSON
	}
	p.i = j + 1
	return s, nil
}

// parseHandle reads the most common result, a handle exactly as the host
// writes it ({"$":12,"type":"tensor"}), without building a map.
func parseHandle(b []byte) (any, bool) {
	const head, mid = `{"$":`, `,"type":"`
	if len(b) < len(head)+len(mid)+3 || string(b[:len(head)]) != head || b[len(b)-1] != '}' || b[len(b)-2] != '"' {
		return nil, false
	}
	i := len(head)
	id := int64(0)
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		id = 10*id + int64(b[i]-'0')
		if id > math.MaxInt32 {
			return nil, false
		}
	}
	if i == len(head) || len(b)-i < len(mid)+2 || string(b[i:i+len(mid)]) != mid {
		return nil, false
	}
	var kind string
	switch string(b[i+len(mid) : len(b)-2]) {
	case "tensor":
		return Tensor{Handle{ID: int32(id), Kind: "tensor"}}, true
	case "object":
		kind = "object"
	case "function":
		kind = "function"
	default:
		return nil, false
	}
	return Object{Handle{ID: int32(id), Kind: kind}}, true
}
