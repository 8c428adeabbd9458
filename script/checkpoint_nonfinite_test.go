package script

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckpointNonFiniteWarning: saves of NaN parameters through the
// script API keep the last finite checkpoint beyond keep, and the warning
// reaches the script's stderr, once, from rank 0, with its prefix.
func TestCheckpointNonFiniteWarning(t *testing.T) {
	const js = `const { tensor, nn, checkpoint } = require("zeroeng");
const dir = process.argv[2];
const model = nn.Linear(4, 2);
const ckpt = checkpoint.Manager(dir, { state: { model }, every: 1, keep: 1 });
ckpt.save(1);
tensor.noGrad(() => model.weight.fill_(NaN));
ckpt.save(2);
checkpoint.save(dir, 3, { model }, { keep: 1 });
`
	dir := t.TempDir()
	path := filepath.Join(dir, "nan.js")
	if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "ckpt")
	var out, errOut bytes.Buffer
	err := RunJob(context.Background(), path, JobOptions{Ranks: 2, Rank: Options{Stdout: &out, Stderr: &errOut, AutoRelease: true, Args: []string{ckpt}}})
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if got := dirNames(t, ckpt); !slices.Equal(got, []string{"latest", "step-00000001", "step-00000003"}) {
		t.Fatalf("checkpoints kept: %v", got)
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	want := "[0] zeroeng: checkpoint: " + filepath.Join(ckpt, "step-00000003") + " holds NaN or infinite parameters (in model.safetensors); kept step-00000001, the newest checkpoint with finite ones, beyond keep 1."
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "[0] zeroeng: checkpoint: ") || !strings.HasPrefix(lines[1], want) {
		t.Fatalf("stderr:\n%s\nwant two warnings from rank 0, the second starting\n%s", errOut.String(), want)
	}
}
