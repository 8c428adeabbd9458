package zeroeng

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// The hand-written JSON writes what encoding/json writes for the values
// programs pass, and reads the host's results as encoding/json would,
// with handles and the ABI's special numbers. (The test binary runs as a
// program: script's TestGoSDKInTheHost runs it.)

func TestAppendJSONIsEncodingJSON(t *testing.T) {
	type fields struct {
		Step int     `json:"step"`
		Loss float64 `json:"loss"`
	}
	for _, v := range []any{
		nil, true, false, 0, -1, 1 << 40, int32(-7), int64(1) << 53, uint32(4000000000),
		0.0, -0.0, 0.1, 1e-6, 9.99e-7, 1e-7, 123456789.125, 1e20, 1e21, 1.7976931348623157e308, 5e-324, -2.5e-8,
		float32(0.1), float32(1e-7), float32(3e38),
		"", "a\"b\\c\n\r\t\x01<>&\u2028\u2029é☃\xff", "plain",
		[]any{1, "x", []any{}, map[string]any{}}, []int{1, 2, 3}, []int64{-1}, []float64{0.5}, []string{"a"}, []any(nil),
		map[string]any{"b": 1, "a": []any{true, nil}, "lr": 1e-3},
		fields{3, 0.25}, json.RawMessage(`{"k":[1,2]}`),
	} {
		got, err := appendJSON(nil, v)
		if err != nil {
			t.Fatalf("%#v: %v", v, err)
		}
		want, _ := json.Marshal(v)
		if string(got) != string(want) {
			t.Errorf("%#v: %s, encoding/json %s", v, got, want)
		}
	}
	for _, c := range []struct {
		v    any
		want string
	}{
		{math.NaN(), `{"$num":"NaN"}`},
		{math.Inf(-1), `{"$num":"-Infinity"}`},
		{[]any{Tensor{Handle{ID: 7}}, Object{Handle{ID: 9}}, Handle{ID: 3}}, `[{"$":7},{"$":9},{"$":3}]`},
		{[]Tensor{{Handle{ID: 1}}}, `[{"$":1}]`},
		{Fields{"step", 3, "loss", 0.25, "z", Fields{}}, `{"step":3,"loss":0.25,"z":{}}`},
	} {
		if got, _ := appendJSON(nil, c.v); string(got) != c.want {
			t.Errorf("%#v: %s, want %s", c.v, got, c.want)
		}
	}
}

func TestParseJSON(t *testing.T) {
	for _, c := range []struct {
		in   string
		want any
	}{
		{`null`, nil}, {` true `, true}, {`-2.5e3`, -2500.0}, {`"a\"\u00e9\n"`, "a\"é\n"}, {`"plain"`, "plain"},
		{`[1,[2,3],{"a":4}]`, []any{1.0, []any{2.0, 3.0}, map[string]any{"a": 4.0}}},
		{`{"$":12,"type":"tensor"}`, Tensor{Handle{ID: 12, Kind: "tensor"}}},
		{`{"$":4,"type":"function"}`, Object{Handle{ID: 4, Kind: "function"}}},
		{`{"$":99999999999,"type":"tensor"}`, map[string]any{"$": 99999999999.0, "type": "tensor"}},
		{`[{"$":3,"type":"object"},{"$":4,"type":"function"}]`, []any{Object{Handle{ID: 3, Kind: "object"}}, Object{Handle{ID: 4, Kind: "function"}}}},
		{`{"$num":"-Infinity"}`, math.Inf(-1)},
		{`{"$":1.5}`, map[string]any{"$": 1.5}},
		{`[]`, []any{}}, {`{}`, map[string]any{}},
	} {
		got, err := parseJSON([]byte(c.in))
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	if v, err := parseJSON([]byte(`{"$num":"NaN"}`)); err != nil || !math.IsNaN(v.(float64)) {
		t.Errorf("NaN: %v %v", v, err)
	}
	for _, bad := range []string{``, `[1,`, `{"a"}`, `tru`, `[1 2]`, `"open`, `1 2`, `{"$num":"x"}`} {
		if v, err := parseJSON([]byte(bad)); err == nil {
			t.Errorf("%q: %#v, want an error", bad, v)
		}
	}
}
