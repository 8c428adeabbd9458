package asmcheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// alignedMoves are the moves whose memory operand must be aligned to the
// vector's width (16, 32 or 64 bytes): from or to a misaligned address
// they fault. Go's linker aligns a DATA symbol to at most 32 bytes, and
// slices to their element, so the kernels use the unaligned forms, which
// cost the same on aligned data.
var alignedMoves = map[string]bool{
	"MOVAPS": true, "MOVAPD": true, "MOVDQA": true, "MOVNTPS": true, "MOVNTPD": true, "MOVNTDQ": true, "MOVNTDQA": true,
	"VMOVAPS": true, "VMOVAPD": true, "VMOVDQA": true, "VMOVDQA32": true, "VMOVDQA64": true,
	"VMOVNTPS": true, "VMOVNTPD": true, "VMOVNTDQ": true, "VMOVNTDQA": true,
}

// mnemonic matches an instruction's name, with Go's suffixes (.Z, .BCST)
// and its operands.
var mnemonic = regexp.MustCompile(`^([A-Z][A-Z0-9]*)(\.[A-Z.]+)?\s*(.*)$`)

// misaligned returns the instructions of one line of assembly (a macro's
// line holds several, separated by semicolons) that move to or from memory
// with an aligned move.
func misaligned(line string) []string {
	if i := strings.Index(line, "//"); i >= 0 {
		line = line[:i]
	}
	line = strings.TrimSuffix(strings.TrimSpace(line), `\`)
	if strings.HasPrefix(line, "#define") {
		// The macro's head; its body follows on the next lines.
		return nil
	}
	var bad []string
	for _, ins := range strings.Split(line, ";") {
		m := mnemonic.FindStringSubmatch(strings.TrimSpace(ins))
		if m != nil && alignedMoves[m[1]] && strings.Contains(m[3], "(") {
			bad = append(bad, strings.TrimSpace(ins))
		}
	}
	return bad
}

func TestMisaligned(t *testing.T) {
	for _, c := range []struct {
		line string
		bad  int
	}{
		{"\tVMOVAPS logAdj<>(SB), K2, Z3", 1},
		{"\tVMOVUPS logAdj<>(SB), K2, Z3", 0},
		{"\tVMOVAPS Z9, K2, Z2", 0},
		{"\tVMOVAPS.Z Z14, K2, Z4", 0},
		{"\tVMOVDQA64 Z1, 64(DI)", 1},
		{"\tVMOVUPS x0, 0(DI); \\", 0},
		{"\tVMOVAPS (SI), Y1; VADDPS Y1, Y2, Y2; \\", 1},
		{"\tMOVAPS X0, (DI)(AX*1)", 1},
		{"\t// VMOVAPS (SI), Y1", 0},
		{"#define STEP(ao, bo) \\", 0},
	} {
		if got := len(misaligned(c.line)); got != c.bad {
			t.Errorf("%q: %d aligned moves from memory found, want %d", c.line, got, c.bad)
		}
	}
}

// TestNoAlignedMovesFromMemory reads every .s file of the module.
func TestNoAlignedMovesFromMemory(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "target") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".s") {
			return nil
		}
		files++
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			for _, ins := range misaligned(sc.Text()) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: %s: an aligned move from or to memory faults on a misaligned address; use the unaligned form (VMOVUPS, VMOVDQU32, …)", rel, n, ins)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 5 {
		t.Fatalf("%d assembly files found under %s; the walk missed the kernels", files, root)
	}
}
