package script

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/internal/suggest"
)

// checkKeys fails when the options object o of fn holds a key that is not
// one of known: a misspelled option must never be ignored (the training
// would silently run with the default). The message names the key, and
// for a snake_case or near spelling the key that was meant:
//
//	PowerSGDState: unknown option "start_powerSGD_iter" (did you mean startPowerSGDIter?)
func (r *Runtime) checkKeys(fn string, o *goja.Object, known ...string) {
	if o == nil {
		return
	}
	for _, k := range o.Keys() {
		if slices.Contains(known, k) {
			continue
		}
		msg := fmt.Sprintf("%s: unknown option %q", fn, k)
		if s := suggest.Closest(k, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		r.throwf("%s; its options are %s", msg, strings.Join(known, ", "))
	}
}
