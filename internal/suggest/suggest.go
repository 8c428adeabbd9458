// Package suggest finds the name a mistyped one most likely meant, for
// the "did you mean ...?" of unknown option keys and command-line flags.
package suggest

import (
	"strings"
	"unicode"
)

// Closest is the known name a mistyped one most likely meant: its
// camelCase form (weight_decay → weightDecay), the same letters in another
// case, or the nearest by edit distance when that is small; "" for none.
func Closest(k string, known []string) string {
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

// editDistance is the edit distance between a and b.
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
