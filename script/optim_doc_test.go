package script

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/optim"
)

// The optimizers' part of docs/api.md comes from engine/optim's registry:
// the table of every algorithm's options (between the markers below) and
// ZeRO's row of optimizer names. TestOptimizerDocsUpToDate checks them;
// -update rewrites them.

const (
	optimDocBegin = "<!-- optimizers: generated from engine/optim's registry by go test ./script -run TestOptimizerDocsUpToDate -update -->"
	optimDocEnd   = "<!-- end of the generated optimizers -->"
	zeroRowPrefix = "| `optimizer` | required | "
)

// docDefault writes an option's default as the table does: 1e-3, 0.99,
// [0.9, 0.999], false, "required".
func docDefault(o optim.Option) string {
	if o.Required {
		return "required"
	}
	num := func(f float64) string {
		if f != 0 && math.Abs(f) <= 0.01 {
			s := strconv.FormatFloat(f, 'e', -1, 64)
			m, e, _ := strings.Cut(s, "e")
			n, _ := strconv.Atoi(e)
			return m + "e" + strconv.Itoa(n)
		}
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	switch v := o.Default.(type) {
	case float64:
		return num(v)
	case [2]float64:
		return "[" + num(v[0]) + ", " + num(v[1]) + "]"
	}
	return fmt.Sprint(o.Default)
}

// optimizerDocs is the generated block of docs/api.md's optim section.
func optimizerDocs() string {
	algs := optim.Algorithms()
	var names []string
	for _, a := range algs {
		names = append(names, a.Name)
	}
	var b strings.Builder
	b.WriteString(optimDocBegin + "\n")
	fmt.Fprintf(&b, "`optim.%s(params, opts)`: `params` is an array of tensors or of groups `{ params, ...opts }`.\n", strings.Join(names, "|"))
	b.WriteString("Each optimizer takes exactly its own column (PyTorch 1.13's arguments); a key of another optimizer is\nan error.\n\n")
	b.WriteString("| key | " + strings.Join(names, " | ") + " | meaning |\n")
	b.WriteString("| --- |" + strings.Repeat(" --- |", len(algs)) + " --- |\n")
	var keys []optim.Option
	seen := map[string]bool{}
	for _, a := range algs {
		for _, o := range a.Options {
			if !seen[o.Name] {
				seen[o.Name] = true
				keys = append(keys, o)
			}
		}
	}
	for _, k := range keys {
		row := "| `" + camelCase(k.Name) + "` |"
		for _, a := range algs {
			if o, ok := a.Option(k.Name); ok {
				row += " " + docDefault(o) + " |"
			} else {
				row += " |"
			}
		}
		b.WriteString(row + " " + k.Doc + " |\n")
	}
	var switches []string
	for _, s := range implementationSwitches {
		switches = append(switches, "`"+s+"`")
	}
	b.WriteString("| " + strings.Join(switches, ", ") + " |" + strings.Repeat(" ignored |", len(algs)) +
		" PyTorch's implementation switches: accepted, no effect |\n")
	b.WriteString(optimDocEnd)
	return b.String()
}

// zeroOptimizerRow is ZeRO's row for its optimizer key.
func zeroOptimizerRow() string {
	var names []string
	for _, a := range optim.Algorithms() {
		names = append(names, "`\""+strings.ToLower(a.Name)+"\"`")
	}
	return zeroRowPrefix + strings.Join(names, ", ") + " (any case), or an `optim.Optimizer` subclass (`optimizer_class`) |"
}

func TestOptimizerDocsUpToDate(t *testing.T) {
	const path = "../docs/api.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, optimDocBegin), strings.Index(doc, optimDocEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no block between %q and %q", path, optimDocBegin, optimDocEnd)
	}
	want := doc[:i] + optimizerDocs() + doc[j+len(optimDocEnd):]
	lines := strings.Split(want, "\n")
	found := false
	for n, line := range lines {
		if strings.HasPrefix(line, zeroRowPrefix) {
			lines[n], found = zeroOptimizerRow(), true
		}
	}
	if !found {
		t.Fatalf("%s has no row starting %q (zero's optimizer key)", path, zeroRowPrefix)
	}
	want = strings.Join(lines, "\n")
	if *updateAPIRef {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != doc {
		gl, wl := strings.Split(doc, "\n"), lines
		for n := range min(len(gl), len(wl)) {
			if gl[n] != wl[n] {
				t.Fatalf("%s is out of date at line %d:\n\thave %q\n\twant %q\nrun go test ./script -run TestOptimizerDocsUpToDate -update", path, n+1, gl[n], wl[n])
			}
		}
		t.Fatalf("%s is out of date; run go test ./script -run TestOptimizerDocsUpToDate -update", path)
	}
}
