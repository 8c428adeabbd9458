package plot

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		loss    []string
		rate    string
		lossPts int
		wantErr string
	}{
		{"training and validation", `{"step":1,"loss":5.5,"tokens_per_s":900}
{"step":2,"loss":5.1,"tokens_per_s":1000,"val_loss":5.3}
{"epoch":1,"test_acc":0.8}
`, []string{"loss", "val_loss"}, "tokens_per_s", 2, ""},
		{"samples per second", `{"step":1,"loss":1,"samples_per_s":50}`, []string{"loss"}, "samples_per_s", 1, ""},
		{"not JSON", "{\"step\":1,\"loss\":1}\nloss=2\n", nil, "", 0, "m.jsonl:2: not a JSON object"},
		{"nothing to draw", `{"epoch":1}`, nil, "", 0, "no lines with a step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loss, rate, err := Read(strings.NewReader(tc.in), "m.jsonl")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range loss {
				names = append(names, s.Name)
			}
			if !slices.Equal(names, tc.loss) || len(rate) != 1 || rate[0].Name != tc.rate || len(loss[0].X) != tc.lossPts {
				t.Fatalf("loss %v (%d points), rate %v", names, len(loss[0].X), rate)
			}
		})
	}
}

// TestSVG draws two runs and checks that the result is well-formed XML
// with one line per series and the series named in the legend.
func TestSVG(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	os.WriteFile(a, []byte(`{"step":1,"loss":5,"tokens_per_s":100}`+"\n"+`{"step":2,"loss":4,"tokens_per_s":120}`+"\n"), 0o644)
	os.WriteFile(b, []byte(`{"step":1,"loss":6,"tokens_per_s":90}`+"\n"+`{"step":2,"loss":3,"tokens_per_s":95,"val_loss":3.5}`+"\n"), 0o644)
	panels, err := Files([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := SVG(&buf, "two <runs>", panels); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	lines := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not well-formed XML: %v\n%s", err, buf.String())
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 5 { // a loss, b loss, b val_loss; a and b throughput
		t.Errorf("%d lines drawn, want 5", lines)
	}
	for _, want := range []string{"a.jsonl loss", "b.jsonl val_loss", "tokens/s", "two &lt;runs&gt;"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the SVG does not show %q", want)
		}
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 10, []float64{0, 2, 4, 6, 8, 10}},
		{2.8, 5.5, []float64{2, 3, 4, 5, 6}},
		{0.1, 0.7, []float64{0, 0.2, 0.4, 0.6, 0.8}},
		{3, 3, []float64{2, 2.5, 3, 3.5, 4}},
	} {
		if got := ticks(tc.lo, tc.hi); !slices.Equal(got, tc.want) {
			t.Errorf("ticks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
		}
	}
}
