package script

import (
	"bufio"
	"encoding/json"
	stdflag "flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/optim"
)

var updateAPIRef = stdflag.Bool("update", false, "rewrite docs/api-reference.md from the API and its descriptions")

const (
	apiRefPath          = "../docs/api-reference.md"
	apiDescriptionsPath = "testdata/apiref/descriptions.txt"
	apiRefRegenerate    = "go test -run TestAPIReferenceUpToDate ./script -update"
)

// apiWalk lists every public name of require("zeroeng"): the members of
// each module and submodule ("tensor.zeros", "nn.functional.relu"), the
// own prototype members and static members of each class
// ("nn.Module#forward", "nn.Linear#extraRepr"), and the members of the
// objects that host functions return ("data.DataLoader#length",
// "optim.Optimizer#step"). Names starting with "_" are private. The
// result is a JSON array of [name, kind] pairs.
const apiWalk = `(() => {
const z = require("zeroeng");
const out = new Map();
const add = (name, kind) => { if (!out.has(name)) out.set(name, kind); };
const isPrivate = k => k.startsWith('_');
const skipStatic = new Set(['length', 'name', 'prototype', 'caller', 'arguments']);
const kindOf = (o, k) => {
  const d = Object.getOwnPropertyDescriptor(o, k);
  if (d && d.get) return 'property';
  return typeof o[k] === 'function' ? 'method' : 'property';
};
// members adds the own members of o (a prototype or an instance) as
// prefix#name, and its iterator.
const members = (prefix, o) => {
  for (const k of Object.getOwnPropertyNames(o)) {
    if (k === 'constructor' || isPrivate(k)) continue;
    add(prefix + '#' + k, kindOf(o, k));
  }
  if (typeof o[Symbol.iterator] === 'function' && Object.getOwnPropertySymbols(o).includes(Symbol.iterator)) {
    add(prefix + '#[Symbol.iterator]', 'method');
  }
};
const isClass = v => v.prototype !== undefined && Object.getOwnPropertyNames(v.prototype).some(k => k !== 'constructor');
// first maps each function and module to the name it was found under
// first; a later name of the same value is an alias of it.
const first = new Map();
const { tensor } = z;
const walk = (prefix, o) => {
  for (const k of Object.getOwnPropertyNames(o)) {
    if (isPrivate(k)) continue;
    const v = o[k], name = prefix + k;
    if ((typeof v === 'function' || typeof v === 'object') && v !== null) {
      if (first.has(v)) { add(name, 'alias of ' + first.get(v)); continue; }
      first.set(v, name);
    }
    if (typeof v === 'function') {
      add(name, isClass(v) ? 'class' : 'function');
      if (isClass(v)) members(name, v.prototype);
      // Statics: the function's own, and those of the class a callable
      // factory wraps (its prototype, of the same name).
      if (!isClass(v) && !/^[A-Z]/.test(k)) continue;
      for (const s of [v, Object.getPrototypeOf(v)]) {
        if (s !== v && (s === Function.prototype || typeof s !== 'function' || s.name !== v.name)) continue;
        for (const st of Object.getOwnPropertyNames(s)) {
          if (!skipStatic.has(st) && !isPrivate(st)) add(name + '.' + st, kindOf(s, st));
        }
      }
    } else if (v !== null && typeof v === 'object' && !Array.isArray(v) &&
               !tensor.isTensor(v) && !('__zeroSchedule' in v) && !Object.hasOwn(v, 'toString')) {
      add(name, 'module');
      walk(name + '.', v);
    } else {
      add(name, 'value');
    }
  }
};
walk('', z);

// Objects that host functions return, named by the call that makes them.
const { nn, optim, data, amp, progress, checkpoint } = z;
const t = tensor.ones([4, 2]);
members('data.DataLoader', data.DataLoader(data.TensorDataset(t), { batchSize: 2 }));
members('data.TensorDataset', data.TensorDataset(t));
members('data.DistributedSampler', data.DistributedSampler(data.TensorDataset(t)));
members('data.TokenLoader', data.TokenLoader(data.fromTensor(tensor.arange(64)), { batchSize: 1, seqLen: 4 }));
const model = nn.Linear(2, 2);
const opt = optim.SGD(model.parameters(), { lr: 0.1 });
members('optim.Optimizer', opt);
members('optim.lrScheduler.LRScheduler', optim.lrScheduler.StepLR(opt, { stepSize: 1 }));
members('amp.GradScaler', amp.GradScaler());
members('progress.bar', progress.bar({ total: 1 }));
members('checkpoint.Manager', checkpoint.Manager(CHECKPOINT_DIR, { state: { model } }));
return JSON.stringify([...out]);
})()`

// apiName is one public name: its kind (module, class, function, method,
// property, value) as the walk found it.
type apiName struct {
	name, kind string
}

// isAlias reports whether the name is a second name of a value found
// first under another; an alias needs no description of its own.
func (n apiName) isAlias() bool { return strings.HasPrefix(n.kind, "alias of ") }

// walkAPI returns the public names of the host API, sorted.
func walkAPI(t *testing.T) []apiName {
	t.Helper()
	r, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dir := t.TempDir()
	src := strings.Replace(apiWalk, "CHECKPOINT_DIR", strconv.Quote(filepath.Join(dir, "ckpt")), 1)
	v, err := r.RunString("apiref.js", src)
	if err != nil {
		t.Fatal(err)
	}
	var pairs [][2]string
	if err := json.Unmarshal([]byte(v.String()), &pairs); err != nil {
		t.Fatal(err)
	}
	var names []apiName
	for _, p := range pairs {
		names = append(names, apiName{p[0], p[1]})
	}
	// A tensor's members live in Go: its methods in tensorMethods, its
	// properties in jsTensor.Get.
	for m := range tensorMethods {
		names = append(names, apiName{"Tensor#" + m, "method"})
	}
	for _, p := range tensorProperties(t) {
		names = append(names, apiName{"Tensor#" + p, "property"})
	}
	sort.Slice(names, func(i, j int) bool { return names[i].name < names[j].name })
	return names
}

// tensorProperties reads the property names of a tensor from the case
// labels of jsTensor.Get in tensor.go.
func tensorProperties(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "tensor.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "Get" || fd.Recv == nil {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if cc, ok := n.(*ast.CaseClause); ok {
				for _, e := range cc.List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil {
							seen[s] = true
						}
					}
				}
			}
			return true
		})
	}
	if len(seen) == 0 {
		t.Fatal("tensor.go: found no properties in jsTensor.Get")
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// apiDescription is one line of the descriptions file: a name, the call as
// a user writes it, and its meaning.
type apiDescription struct {
	name, signature, meaning string
	line                     int
}

// readDescriptions reads the descriptions file: tab-separated lines of
// name, signature and meaning; blank lines and lines starting with # are
// skipped.
func readDescriptions(t *testing.T) map[string]apiDescription {
	t.Helper()
	f, err := os.Open(apiDescriptionsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]apiDescription{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 3 || strings.TrimSpace(fields[1]) == "" || strings.TrimSpace(fields[2]) == "" {
			t.Errorf("script/%s:%d: want name<TAB>signature<TAB>meaning, got %q", apiDescriptionsPath, n, line)
			continue
		}
		d := apiDescription{name: fields[0], signature: fields[1], meaning: fields[2], line: n}
		if prev, dup := out[d.name]; dup {
			t.Errorf("script/%s:%d: %s is described again (first at line %d)", apiDescriptionsPath, n, d.name, prev.line)
		}
		out[d.name] = d
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// The optimizers' constructors are described by engine/optim's
	// registry (Algorithm.Doc), not in the file.
	for _, a := range optim.Algorithms() {
		name := "optim." + a.Name
		if prev, dup := out[name]; dup {
			t.Errorf("script/%s:%d: %s is described by engine/optim's registry", apiDescriptionsPath, prev.line, name)
		}
		sig := name + "(params, opts?)"
		for _, o := range a.Options {
			if o.Required {
				sig = name + "(params, opts)"
			}
		}
		out[name] = apiDescription{name: name, signature: sig, meaning: a.Doc}
	}
	return out
}

// TestAPIReferenceComplete: every public name of the host API has a
// description, and every description names something that exists.
func TestAPIReferenceComplete(t *testing.T) {
	names := walkAPI(t)
	desc := readDescriptions(t)
	if len(names) < 300 {
		t.Fatalf("the walk found only %d names (is it broken?)", len(names))
	}
	exists := map[string]bool{}
	var undocumented []string
	for _, n := range names {
		exists[n.name] = true
		if _, ok := desc[n.name]; !ok && !n.isAlias() {
			undocumented = append(undocumented, n.name+" ("+n.kind+")")
		}
	}
	var stale []string
	for name, d := range desc {
		if !exists[name] {
			stale = append(stale, fmt.Sprintf("%s (line %d)", name, d.line))
		}
	}
	sort.Strings(stale)
	if len(undocumented) > 0 {
		t.Errorf("%d of the %d public names have no line in script/%s (name<TAB>signature<TAB>meaning), then run %s:\n\t%s",
			len(undocumented), len(names), apiDescriptionsPath, apiRefRegenerate, strings.Join(undocumented, "\n\t"))
	}
	if len(stale) > 0 {
		t.Errorf("script/%s describes %d names that no longer exist:\n\t%s", apiDescriptionsPath, len(stale), strings.Join(stale, "\n\t"))
	}
	if !t.Failed() {
		t.Logf("%d public names, all described", len(names))
	}
}

// TestAPIReferenceUpToDate: docs/api-reference.md is what the names and
// descriptions generate; -update rewrites it.
func TestAPIReferenceUpToDate(t *testing.T) {
	want := generateAPIReference(walkAPI(t), readDescriptions(t))
	if *updateAPIRef {
		if err := os.WriteFile(apiRefPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(apiRefPath)
	if err != nil {
		t.Fatalf("%v; run %s", err, apiRefRegenerate)
	}
	if string(got) == want {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(gl), len(wl)); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("docs/api-reference.md is out of date at line %d:\n\thave %q\n\twant %q\nrun %s", i+1, g, w, apiRefRegenerate)
		}
	}
}

// apiGroup is the heading a name is listed under: its module, or for a
// member ("nn.Module#forward", "Tensor#sum") its class.
func apiGroup(name string) string {
	if i := strings.Index(name, "#"); i >= 0 {
		return name[:i]
	}
	if i := strings.LastIndex(name, "."); i >= 0 {
		return name[:i]
	}
	return "zeroeng"
}

// apiAnchor is the GitHub anchor of a docs/api.md heading.
func apiAnchor(heading string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(heading) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteRune(c)
		case c == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// optionsSections reads docs/api.md: the section of each call its tables
// name in backquotes in their first column (`nn.Linear(…)`, `ones`), and
// its headings.
func optionsSections() (calls map[string]string, headings map[string]bool) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		return nil, nil
	}
	out := map[string]string{}
	headings = map[string]bool{}
	section := ""
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "#") {
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
			headings[section] = true
			continue
		}
		if !strings.HasPrefix(line, "| `") || section == "" {
			continue
		}
		cell := strings.SplitN(line[1:], "|", 2)[0]
		// A bare name listed after a call shares its prefix: `ones` in
		// "`tensor.zeros(…)`, `ones`" is tensor.ones.
		parts := strings.Split(cell, "`")
		prefix, calls := "", false
		for i := 1; i < len(parts); i += 2 { // the quoted parts
			call, _, isCall := strings.Cut(parts[i], "(")
			if isCall {
				if !calls {
					if j := strings.LastIndex(call, "."); j >= 0 {
						prefix = call[:j+1]
					}
				}
				calls = true
			} else if !calls || !optionKey.MatchString(call) || strings.TrimSpace(parts[i-1]) != "," {
				continue
			} else {
				call = prefix + call
			}
			if _, seen := out[call]; !seen && call != "" {
				out[call] = section
			}
		}
	}
	return out, headings
}

// generateAPIReference renders the reference: one table per module or
// class, a row per name with its signature, meaning and, where docs/api.md
// lists its options, a link to them.
func generateAPIReference(names []apiName, desc map[string]apiDescription) string {
	sections, headings := optionsSections()
	groups := map[string][]apiName{}
	var order []string
	for _, n := range names {
		g := apiGroup(n.name)
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], n)
	}
	sort.Strings(order)
	var b strings.Builder
	b.WriteString("# API reference\n\n")
	b.WriteString("Every public name of `require(\"zeroeng\")`, generated from the running API and the descriptions in\n")
	b.WriteString("`script/" + apiDescriptionsPath + "` by `" + apiRefRegenerate + "`; do not edit by hand.\n")
	b.WriteString("`script/apiref_test.go` fails when a name has no description. `Class#member` is a member of an\n")
	b.WriteString("instance; the options of a call are in [api.md](api.md), linked from the options column.\n\n")
	for _, g := range order {
		fmt.Fprintf(&b, "- [%s](#%s)\n", g, apiAnchor(g))
	}
	for _, g := range order {
		fmt.Fprintf(&b, "\n## %s\n\n| name | kind | call | meaning | options |\n| --- | --- | --- | --- | --- |\n", g)
		for _, n := range groups[g] {
			d := desc[n.name]
			if to, ok := strings.CutPrefix(n.kind, "alias of "); ok && d.meaning == "" {
				fmt.Fprintf(&b, "| `%s` | alias | `%s` | the same object as `%s` | |\n", n.name, n.name, to)
				continue
			}
			opts := ""
			if s, ok := optionsFor(n.name, d.signature, sections, headings); ok {
				opts = fmt.Sprintf("[api.md](api.md#%s)", apiAnchor(s))
			}
			fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s | %s |\n", n.name, n.kind, mdCell(d.signature), mdCell(d.meaning), opts)
		}
	}
	return b.String()
}

// memberPrefixes are the names docs/api.md gives an instance of a class:
// `module.to(…)` is nn.Module#to.
var memberPrefixes = map[string]string{
	"Tensor":                "t.",
	"nn.Module":             "module.",
	"nn.MultiheadAttention": "mha.",
	"optim.Optimizer":       "optimizer.",
	"checkpoint.Manager":    "manager.",
}

// optionsFor finds the docs/api.md section that lists a call's options: by
// its full name or its name as api.md writes it (`F.gelu`, `t.sum`,
// `module.to`, `StepLR`); failing that, for a call that takes an options
// object, the section of its module.
func optionsFor(name, signature string, sections map[string]string, headings map[string]bool) (string, bool) {
	candidates := []string{name}
	if m, ok := strings.CutPrefix(name, "nn.functional."); ok {
		candidates = append(candidates, "F."+m)
	}
	if m, ok := strings.CutPrefix(name, "optim.lrScheduler."); ok {
		candidates = append(candidates, m)
	}
	if class, m, ok := strings.Cut(name, "#"); ok && memberPrefixes[class] != "" {
		candidates = append(candidates, memberPrefixes[class]+m)
	}
	for _, c := range candidates {
		if s, ok := sections[c]; ok {
			return s, true
		}
	}
	// A call whose options api.md lists in a table of keys (optim.SGD,
	// data.DataLoader): the section of its module.
	if strings.Contains(signature, "opts") {
		if g := apiGroup(name); headings[g] {
			return g, true
		}
	}
	return "", false
}

// mdCell escapes a table cell's pipes.
func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
