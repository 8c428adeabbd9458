package script

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/hooks/wasm"
)

// TestGoSDKInTheHost runs the Go SDK's own tests (sdk/go/zeroeng: its
// hand-written JSON against encoding/json, its parser) where they can run:
// the test binary, built for wasip1, is a training program (it links the
// SDK, which brings the ABI's marker) and runs in the host.
func TestGoSDKInTheHost(t *testing.T) {
	skipShortPrograms(t)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	bin := filepath.Join(t.TempDir(), "zeroeng.test.wasm")
	cmd := exec.Command(goTool, "test", "-c", "-o", bin, "./zeroeng")
	cmd.Dir = filepath.Join("..", "sdk", "go")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the SDK's tests: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runProgram(t, context.Background(), b, 1, wasm.Config{}, "-test.v", "-test.run", "JSON")
	if err != nil || !strings.Contains(out, "--- PASS: TestAppendJSONIsEncodingJSON") || !strings.Contains(out, "--- PASS: TestParseJSON") || strings.Contains(out, "FAIL") {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
}
