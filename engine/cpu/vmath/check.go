package vmath

// The length checks panic with the caller's name so that a shape bug in the
// tensor layer points at the kernel it reached instead of an index error deep
// inside a loop or, worse, an assembly kernel reading past a slice.

func check2(fn string, a, b []float32) {
	if len(a) != len(b) {
		panic("vmath." + fn + ": slice lengths differ (" + itoa(len(a)) + " and " + itoa(len(b)) + ")")
	}
}

func check3(fn string, a, b, c []float32) {
	if len(a) != len(b) || len(a) != len(c) {
		panic("vmath." + fn + ": slice lengths differ (" + itoa(len(a)) + ", " + itoa(len(b)) + " and " + itoa(len(c)) + ")")
	}
}

// checkOpt checks a slice that may be nil (an optional input or output).
func checkOpt(fn, name string, n int, a []float32) {
	if a != nil && len(a) != n {
		panic("vmath." + fn + ": " + name + " has length " + itoa(len(a)) + ", want " + itoa(n))
	}
}

// itoa avoids strconv so that the panic paths pull in nothing.
func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
