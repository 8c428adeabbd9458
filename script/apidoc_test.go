package script

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// optionKey is what an option key looks like; function names ("tensor.to",
// "nn.Linear") do not.
var optionKey = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]*$`)

// optionCheckers are the Go functions that check an options object's keys:
// their first argument names the function, the string literals after it
// are keys.
var optionCheckers = map[string]bool{"optionsOf": true, "checkKeys": true, "opt": true, "shapeAndOptions": true, "newSched": true}

// optionLists are the package's variables that hold option keys.
var optionLists = map[string]bool{"optimizerOptions": true, "implementationSwitches": true, "zeroOptionKeys": true}

// TestAPIReferenceListsEveryOption: every option key the host API checks
// (in Go and in prelude.js) is listed in docs/api.md as `key`.
func TestAPIReferenceListsEveryOption(t *testing.T) {
	keys := map[string]string{} // key → where it was found
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		goOptionKeys(t, f, keys)
	}
	src, err := os.ReadFile("prelude.js")
	if err != nil {
		t.Fatal(err)
	}
	jsOptionKeys(t, string(src), keys)

	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 60 {
		t.Errorf("found only %d option keys in the code (the extraction is broken?): %v", len(keys), sortedKeys(keys))
	}
	var missing []string
	for _, k := range sortedKeys(keys) {
		if !strings.Contains(string(doc), "`"+k+"`") {
			missing = append(missing, k+" ("+keys[k]+")")
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/api.md does not list these %d of the %d option keys as `key`:\n\t%s", len(missing), len(keys), strings.Join(missing, "\n\t"))
	} else {
		t.Logf("%d option keys, all in docs/api.md", len(keys))
	}
}

// goOptionKeys adds the keys of file's checker calls and option lists. A
// checker given a slice (keys...) contributes the literals assigned to
// that slice in the same declaration.
func goOptionKeys(t *testing.T, file string, keys map[string]string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	add := func(n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && optionKey.MatchString(s) {
					if _, seen := keys[s]; !seen {
						keys[s] = fset.Position(lit.Pos()).String()
					}
				}
			}
			return true
		})
	}
	for _, decl := range f.Decls {
		if d, ok := decl.(*ast.GenDecl); ok {
			for _, spec := range d.Specs {
				if vs, ok := spec.(*ast.ValueSpec); ok {
					for i, name := range vs.Names {
						if optionLists[name.Name] && i < len(vs.Values) {
							add(vs.Values[i])
						}
					}
				}
			}
		}
		// Checker calls anywhere: in functions, and in the function
		// literals of package variables (tensorMethods).
		ast.Inspect(decl, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !optionCheckers[calleeName(call)] || len(call.Args) == 0 {
				return true
			}
			for i, arg := range call.Args[1:] {
				if id, ok := arg.(*ast.Ident); ok && call.Ellipsis.IsValid() && i == len(call.Args)-2 {
					assignedTo(decl, id.Name, add)
					continue
				}
				switch a := arg.(type) {
				case *ast.BasicLit:
					if a.Kind == token.STRING {
						add(a)
					}
				case *ast.CompositeLit: // a list of keys: newSched(name, []string{...}, ...)
					add(a)
				}
			}
			return true
		})
	}
}

func calleeName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// assignedTo calls add on every value assigned to the variable name in
// scope (the declaration around the call that uses it).
func assignedTo(scope ast.Node, name string, add func(ast.Node)) {
	ast.Inspect(scope, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != len(as.Rhs) {
			return true
		}
		for i, lhs := range as.Lhs {
			if id, ok := lhs.(*ast.Ident); ok && id.Name == name {
				add(as.Rhs[i])
			}
		}
		return true
	})
}

// jsCall finds the prelude's options('fn', o, 'key', ...) calls.
var jsCall = regexp.MustCompile(`\boptions\(`)

// jsOptionKeys adds the keys of prelude.js's options(...) calls: the
// string literals among the arguments after the first two (the function's
// name and the object), a call read up to its closing parenthesis.
func jsOptionKeys(t *testing.T, src string, keys map[string]string) {
	calls := 0
	for _, loc := range jsCall.FindAllStringIndex(src, -1) {
		args, ok := jsArgs(src[loc[1]:])
		if !ok {
			t.Fatalf("prelude.js: options( at byte %d has no closing parenthesis", loc[0])
		}
		calls++
		if len(args) < 2 {
			t.Errorf("prelude.js: options( at byte %d has %d arguments, want fn, o, keys...", loc[0], len(args))
			continue
		}
		for _, a := range args[2:] {
			a = strings.TrimSpace(a)
			if len(a) >= 2 && (a[0] == '\'' || a[0] == '"') && a[len(a)-1] == a[0] {
				if s := a[1 : len(a)-1]; optionKey.MatchString(s) {
					if _, seen := keys[s]; !seen {
						keys[s] = fmt.Sprintf("prelude.js:%d", strings.Count(src[:loc[0]], "\n")+1)
					}
				}
			}
		}
	}
	if calls == 0 {
		t.Error("prelude.js: found no options(...) calls")
	}
}

// jsArgs splits the arguments of a call whose text follows its opening
// parenthesis, up to the matching closing one, skipping strings and
// nested brackets.
func jsArgs(s string) ([]string, bool) {
	var args []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '"', '`':
			for i++; i < len(s) && s[i] != c; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			if depth == 0 {
				if c != ')' {
					return nil, false
				}
				if a := strings.TrimSpace(s[start:i]); a != "" || len(args) > 0 {
					args = append(args, a)
				}
				return args, true
			}
			depth--
		case ',':
			if depth == 0 {
				args = append(args, s[start:i])
				start = i + 1
			}
		}
	}
	return nil, false
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
