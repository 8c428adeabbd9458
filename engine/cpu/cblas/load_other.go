//go:build !(darwin || freebsd || linux || netbsd)

package cblas

import (
	"errors"
	"runtime"
)

func open(path string) (*Lib, error) {
	return nil, errors.New("run-time loading is not implemented on " + runtime.GOOS)
}

func (l *Lib) fixOpenBLASCore() *Lib { return nil }

func (l *Lib) optimised() bool { return true }

func (l *Lib) release() {}
