package libs

import (
	"fmt"
	"strings"
	"sync"
)

// FromPath is the Source of a library opened by path with OpenPath.
const FromPath Source = "path"

// OpenPath opens the library at path as spec's, without the search and
// without caching: tests load the fake libraries this way.
func OpenPath(spec Spec, path string) (*Library, error) {
	return OpenFrom(spec, []Candidate{{Source: FromPath, Path: path}})
}

// Loaders returns a binding's Load and LoadFrom: load binds the library
// Open finds, once per process (later calls return the same value or the
// same error); loadFrom binds the library at path, each time.
func Loaders[T any](spec Spec, bind func(*Library) (T, error)) (load func() (T, error), loadFrom func(path string) (T, error)) {
	bindOpened := func(l *Library, err error) (T, error) {
		if err != nil {
			var zero T
			return zero, err
		}
		return bind(l)
	}
	load = sync.OnceValues(func() (T, error) { return bindOpened(Open(spec)) })
	loadFrom = func(path string) (T, error) { return bindOpened(OpenPath(spec, path)) }
	return load, loadFrom
}

// Symbols resolves a binding's functions, collecting the required ones
// that are missing so that one error names them all.
type Symbols struct {
	lib     *Library
	missing []string
}

// Symbols starts resolving l's functions.
func (l *Library) Symbols() *Symbols { return &Symbols{lib: l} }

// Need sets *p to the first of names the library exports (a current name,
// then older ones); when it exports none, Err names the first.
func (s *Symbols) Need(p *uintptr, names ...string) {
	if *p = s.Optional(names...); *p == 0 {
		s.missing = append(s.missing, names[0])
	}
}

// Optional returns the address of the first of names the library exports,
// or 0.
func (s *Symbols) Optional(names ...string) uintptr {
	for _, n := range names {
		if p, err := dlsym(s.lib.handle, n); err == nil && p != 0 {
			return p
		}
	}
	return 0
}

// Err names every required function that is missing, or is nil.
func (s *Symbols) Err() error {
	if len(s.missing) == 0 {
		return nil
	}
	return fmt.Errorf("%s (%s) does not export %s", s.lib.Spec.Name, s.lib.Path, strings.Join(s.missing, ", "))
}
