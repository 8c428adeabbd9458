package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryVariableIsKnown: every ZEROENG_ variable named in the module's
// code and scripts is one the command line accepts, so that none is
// refused as a misspelling.
func TestEveryVariableIsKnown(t *testing.T) {
	known := knownVariables(newApp())
	// Named on purpose as what no variable is (tests of the refusal), or
	// not a variable at all.
	notVariables := []string{"ZEROENG_THREDS", "ZEROENG_NPROCS", "ZEROENG_FOOBAR", "ZEROENG_A", "ZEROENG_H"}
	name := regexp.MustCompile(`ZEROENG_[A-Z0-9_]*[A-Z0-9]`)
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") && n != ".ci" || n == "bin" || n == "node_modules" || n == "target") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".sh", ".js", ".py", ".c", ".rs":
		default:
			if d.Name() != "Makefile" && filepath.Base(filepath.Dir(path)) != ".ci" {
				return nil
			}
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range name.FindAllString(string(src), -1) {
			if !slices.Contains(known, v) && !slices.Contains(notVariables, v) {
				t.Errorf("%s names %s, which the command line refuses: add it to otherVariables (env.go) or to a flag", path, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCheckEnvironment(t *testing.T) {
	known := knownVariables(newApp())
	for _, c := range []struct {
		env  []string
		want string // "" for no error
	}{
		{[]string{"PATH=/bin", "ZEROENG_THREADS=1", "ZEROENG_BLAS=none", "ZEROENG_JOB_TOKEN=x"}, ""},
		{[]string{"ZEROENG_THREDS=1"}, "ZEROENG_THREDS is not one of zeroeng's (did you mean ZEROENG_THREADS?)"},
		{[]string{"ZEROENG_NPROCS=2"}, "did you mean ZEROENG_NPROC?"},
		{[]string{"ZEROENG_FOOBAR=1"}, "ZEROENG_FOOBAR is not one of zeroeng's"},
		{[]string{"zeroeng_threads=1", "XZEROENG_A=1"}, ""}, // other names are not ours to judge
	} {
		err := checkEnvironment(c.env, known)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: error %v, want one containing %q", c.env, err, c.want)
		}
	}
}
