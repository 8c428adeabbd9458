package npy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// header is a parsed and validated .npy header.
type header struct {
	descr     descr
	fortran   bool
	shape     []int
	nbytes    int64 // data bytes in the file, before any widening
	dataStart int   // offset of the data in the file, set by parsePreamble
}

// descr is a parsed array-protocol type string such as '<f4'.
type descr struct {
	name      string // as written in the file
	kind      byte   // 'f', 'i', 'u' or 'b'
	size      int    // bytes per element in the file
	bigEndian bool
	out       dtype.DType
}

// descrs maps kind and size to the engine dtype they are read as.
var descrs = map[string]dtype.DType{
	"f2": dtype.Float16, "f4": dtype.Float32, "f8": dtype.Float64,
	"i1": dtype.Int32, "i2": dtype.Int32, "i4": dtype.Int32, "i8": dtype.Int64,
	"u1": dtype.Uint8, "u2": dtype.Int32, "u4": dtype.Int64,
	"b1": dtype.Bool,
}

func parseDescr(s string) (descr, error) {
	bad := func(why string) (descr, error) {
		return descr{}, fmt.Errorf("unsupported descr '%s': %s", s, why)
	}
	if len(s) < 3 {
		return bad("not a type string such as '<f4'")
	}
	d := descr{name: s, kind: s[1]}
	order, ts := s[0], s[1:]
	out, ok := descrs[ts]
	if !ok {
		switch {
		case ts == "u8":
			return bad("uint64 does not fit in int64; convert it in NumPy")
		case strings.ContainsAny(ts[:1], "fiub"):
			return bad("no such size (zeroeng reads f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, b1)")
		}
		return bad("zeroeng reads float, int, uint and bool arrays (f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, b1)")
	}
	d.out = out
	d.size = int(ts[1] - '0')
	switch order {
	case '<':
	case '>':
		d.bigEndian = true
	case '|':
		if d.size > 1 {
			return bad("'|' (not applicable) byte order on a multi-byte type")
		}
	case '=':
		return bad("native byte order '=' is ambiguous in a file")
	default:
		return bad(fmt.Sprintf("unknown byte order %q", order))
	}
	return d, nil
}

// parseHeader parses the header dict and validates its keys and values.
func parseHeader(p prefix, b []byte) (*header, error) {
	hp := &hparser{b: b}
	d, err := hp.dict()
	if err != nil {
		return nil, p.errorf("header %s: %v", quoteHeader(b), err)
	}
	h := &header{}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if _, ok := d[k]; !ok {
			return nil, p.errorf("header %s: missing key '%s'", quoteHeader(b), k)
		}
	}
	for k := range d {
		if k != "descr" && k != "fortran_order" && k != "shape" {
			return nil, p.errorf("header %s: unknown key '%s' (want descr, fortran_order, shape)", quoteHeader(b), k)
		}
	}
	switch v := d["descr"].(type) {
	case string:
		if h.descr, err = parseDescr(v); err != nil {
			return nil, p.errorf("%v", err)
		}
	case list:
		return nil, p.errorf("unsupported descr %s: structured dtypes are not supported", v.text)
	default:
		return nil, p.errorf("header %s: descr is %s, not a string", quoteHeader(b), describe(v))
	}
	f, ok := d["fortran_order"].(bool)
	if !ok {
		return nil, p.errorf("header %s: fortran_order is %s, not True or False", quoteHeader(b), describe(d["fortran_order"]))
	}
	h.fortran = f
	t, ok := d["shape"].(tuple)
	if !ok {
		if n, isInt := d["shape"].(int64); isInt {
			return nil, p.errorf("header %s: shape is the integer %d, not a tuple (a 1-tuple needs a trailing comma: (%d,))", quoteHeader(b), n, n)
		}
		return nil, p.errorf("header %s: shape is %s, not a tuple", quoteHeader(b), describe(d["shape"]))
	}
	h.shape = make([]int, len(t))
	for i, v := range t {
		if v < 0 {
			return nil, p.errorf("shape %s: dimension %d is negative (%d)", tupleString(t), i, v)
		}
		if v > maxInt {
			return nil, p.errorf("shape %s: dimension %d (%d) does not fit in int", tupleString(t), i, v)
		}
		h.shape[i] = int(v)
	}
	// The element count must fit, both in the file and once widened. Zero
	// dimensions are skipped, so that every stride fits too.
	n, strided := int64(1), int64(1)
	for _, d := range h.shape {
		if d == 0 {
			n = 0
			continue
		}
		if strided > maxInt/int64(d) {
			return nil, p.errorf("shape %s: the element count overflows int64", h.shapeString())
		}
		strided *= int64(d)
		n *= int64(d)
	}
	if n > 0 && n > maxInt/8 {
		return nil, p.errorf("shape %s of '%s': the byte size overflows int64", h.shapeString(), h.descr.name)
	}
	h.nbytes = n * int64(h.descr.size)
	return h, nil
}

const maxInt = int64(^uint(0) >> 1)

// shapeString formats the shape as Python does: (), (5,), (2, 3).
func (h *header) shapeString() string {
	t := make(tuple, len(h.shape))
	for i, d := range h.shape {
		t[i] = int64(d)
	}
	return tupleString(t)
}

func tupleString(t tuple) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, v := range t {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(v, 10))
	}
	if len(t) == 1 {
		b.WriteByte(',')
	}
	b.WriteByte(')')
	return b.String()
}

// quoteHeader shows the header in an error message, without its padding and
// cut if long.
func quoteHeader(b []byte) string {
	s := strings.TrimRight(string(b), " \n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}

// The values of a header dict.
type (
	tuple []int64 // a tuple of integers
	list  struct{ text string }
)

func describe(v any) string {
	switch v := v.(type) {
	case string:
		return "the string '" + v + "'"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return "the integer " + strconv.FormatInt(v, 10)
	case tuple:
		return "the tuple " + tupleString(v)
	case list:
		return "the list " + v.text
	}
	return fmt.Sprint(v)
}

// hparser is a strict parser for the subset of Python literals that .npy
// headers use: a dict with string keys whose values are strings (single or
// double quotes, no escapes), True, False, integers (with the 'L' suffix of
// Python 2 files) and tuples of integers (with optional trailing commas).
// Lists are recognised only to report structured dtypes.
type hparser struct {
	b []byte
	i int
}

func (hp *hparser) errorf(format string, args ...any) error {
	return fmt.Errorf("at offset %d: "+format, append([]any{hp.i}, args...)...)
}

func (hp *hparser) space() {
	for hp.i < len(hp.b) && strings.IndexByte(" \t\r\n", hp.b[hp.i]) >= 0 {
		hp.i++
	}
}

func (hp *hparser) peek() byte {
	if hp.i < len(hp.b) {
		return hp.b[hp.i]
	}
	return 0
}

func (hp *hparser) found() string {
	if hp.i >= len(hp.b) {
		return "the end of the header"
	}
	return strconv.QuoteRune(rune(hp.b[hp.i]))
}

func (hp *hparser) dict() (map[string]any, error) {
	hp.space()
	if hp.peek() != '{' {
		return nil, hp.errorf("want '{', found %s", hp.found())
	}
	hp.i++
	d := make(map[string]any)
	for {
		hp.space()
		if hp.peek() == '}' {
			hp.i++
			break
		}
		if hp.peek() != '\'' && hp.peek() != '"' {
			return nil, hp.errorf("want a string key or '}', found %s", hp.found())
		}
		k, err := hp.str()
		if err != nil {
			return nil, err
		}
		if _, dup := d[k]; dup {
			return nil, hp.errorf("duplicate key '%s'", k)
		}
		hp.space()
		if hp.peek() != ':' {
			return nil, hp.errorf("want ':' after key '%s', found %s", k, hp.found())
		}
		hp.i++
		hp.space()
		if d[k], err = hp.value(); err != nil {
			return nil, err
		}
		hp.space()
		switch hp.peek() {
		case ',':
			hp.i++
		case '}':
		default:
			return nil, hp.errorf("want ',' or '}', found %s", hp.found())
		}
	}
	hp.space()
	if hp.i != len(hp.b) {
		return nil, hp.errorf("unexpected %s after the dict", hp.found())
	}
	return d, nil
}

func (hp *hparser) value() (any, error) {
	switch c := hp.peek(); {
	case c == '\'' || c == '"':
		return hp.str()
	case c == '(':
		return hp.tuple()
	case c == '[':
		return hp.list()
	case c == '-' || c >= '0' && c <= '9':
		return hp.int()
	}
	for _, w := range []string{"True", "False"} {
		if strings.HasPrefix(string(hp.b[hp.i:min(len(hp.b), hp.i+5)]), w) {
			hp.i += len(w)
			if isIdent(hp.peek()) {
				return nil, hp.errorf("unexpected %s after %s", hp.found(), w)
			}
			return w == "True", nil
		}
	}
	return nil, hp.errorf("want a string, True, False, an integer or a tuple, found %s", hp.found())
}

func (hp *hparser) str() (string, error) {
	q := hp.b[hp.i]
	start := hp.i + 1
	for j := start; j < len(hp.b); j++ {
		switch hp.b[j] {
		case q:
			hp.i = j + 1
			return string(hp.b[start:j]), nil
		case '\\':
			hp.i = j
			return "", hp.errorf("escape sequences in strings are not supported")
		case '\n':
			hp.i = j
			return "", hp.errorf("unterminated string")
		}
	}
	hp.i = len(hp.b)
	return "", hp.errorf("unterminated string")
}

func (hp *hparser) int() (int64, error) {
	start := hp.i
	if hp.peek() == '-' {
		hp.i++
	}
	digits := hp.i
	for hp.i < len(hp.b) && hp.b[hp.i] >= '0' && hp.b[hp.i] <= '9' {
		hp.i++
	}
	text := string(hp.b[start:hp.i])
	if hp.i == digits {
		return 0, hp.errorf("want digits after '-'")
	}
	if hp.b[digits] == '0' && hp.i-digits > 1 {
		return 0, hp.errorf("integer %s has a leading zero", text)
	}
	if c := hp.peek(); c == 'L' || c == 'l' { // Python 2 long
		hp.i++
	}
	if c := hp.peek(); c == '.' || isIdent(c) {
		return 0, hp.errorf("only decimal integers are supported, found %s after %s", hp.found(), text)
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, hp.errorf("integer %s overflows int64", text)
	}
	return v, nil
}

func (hp *hparser) tuple() (tuple, error) {
	hp.i++ // '('
	t := tuple{}
	comma := false // whether a comma follows the last element
	for {
		hp.space()
		if hp.peek() == ')' {
			hp.i++
			if len(t) == 1 && !comma {
				// (5) is the integer 5 in Python, not a tuple.
				return nil, fmt.Errorf("(%d) is not a tuple (a 1-tuple needs a trailing comma: (%d,))", t[0], t[0])
			}
			return t, nil
		}
		if c := hp.peek(); c != '-' && (c < '0' || c > '9') {
			return nil, hp.errorf("want an integer or ')' in a tuple, found %s", hp.found())
		}
		v, err := hp.int()
		if err != nil {
			return nil, err
		}
		t = append(t, v)
		hp.space()
		switch hp.peek() {
		case ',':
			hp.i++
			comma = true
		case ')':
			comma = false
		default:
			return nil, hp.errorf("want ',' or ')' in a tuple, found %s", hp.found())
		}
	}
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// list skips a (possibly nested) list, for the error about structured dtypes.
func (hp *hparser) list() (list, error) {
	start, depth := hp.i, 0
	for ; hp.i < len(hp.b); hp.i++ {
		switch hp.b[hp.i] {
		case '[', '(':
			depth++
		case ']', ')':
			depth--
			if depth == 0 {
				hp.i++
				s := string(hp.b[start:hp.i])
				if len(s) > 100 {
					s = s[:100] + "..."
				}
				return list{s}, nil
			}
		}
	}
	return list{}, hp.errorf("unterminated list")
}
