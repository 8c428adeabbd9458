package script

import (
	_ "embed"
	"sync"

	"github.com/dop251/goja"
)

//go:embed prelude.js
var preludeSource string

// preludeName marks frames of the prelude in stacks; errors point at the
// first frame of the user's script instead.
const preludeName = "zeroeng:prelude.js"

var (
	preludeOnce sync.Once
	preludeProg *goja.Program
	preludeErr  error
)

// Version is the engine version require("zeroeng").version reports; the
// command sets it at start-up.
var Version = "dev"

// runPrelude evaluates the prelude (compiled once per process) to its
// factory function.
func (r *Runtime) runPrelude() (goja.Value, error) {
	preludeOnce.Do(func() {
		preludeProg, preludeErr = goja.Compile(preludeName, preludeSource, true)
	})
	if preludeErr != nil {
		return nil, preludeErr
	}
	return r.vm.RunProgram(preludeProg)
}
