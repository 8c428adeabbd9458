package script

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/dop251/goja"
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
		if s := suggestKey(k, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		r.throwf("%s; its options are %s", msg, strings.Join(known, ", "))
	}
}

// suggestKey is the known key a mistyped one most likely meant: its
// camelCase form (weight_decay → weightDecay), the same letters in another
// case, or the nearest by edit distance when that is small; "" for none.
func suggestKey(k string, known []string) string {
	camel := snakeToCamel(k)
	for _, c := range known {
		if c == camel || strings.EqualFold(c, k) || strings.EqualFold(c, camel) {
			return c
		}
	}
	best, bestDist := "", max(1, len(k)/4)+1
	for _, c := range known {
		if d := editDistance(strings.ToLower(k), strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// snakeToCamel turns a_b_c into aBC's camelCase: weight_decay → weightDecay.
func snakeToCamel(s string) string {
	var b strings.Builder
	up := false
	for i, c := range s {
		switch {
		case c == '_' && i > 0:
			up = true
		case up:
			b.WriteRune(unicode.ToUpper(c))
			up = false
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	// The optimal string alignment distance: insertions, deletions,
	// substitutions and swaps of neighbours ("bais" for "bias") cost 1.
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
