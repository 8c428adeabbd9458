package script

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/tokens"
)

// TestTokenLoaderErrorsAreExceptions: data.loadTokens gives an llm.c GPT-2
// shard its tokenizer's vocabulary; a loader's next() that meets an id
// beyond its vocabSize, or a shard truncated under it, throws an exception
// the script can catch, naming the file, the byte offset and the step.
func TestTokenLoaderErrorsAreExceptions(t *testing.T) {
	dir := t.TempDir()
	toks := make([]uint16, 600)
	for i := range toks {
		toks[i] = uint16(i % 300)
	}
	path := filepath.Join(dir, "train_000000.bin")
	if err := tokens.WriteShard(path, toks); err != nil {
		t.Fatal(err)
	}
	src := `const { data } = require("zeroeng");
const d = data.loadTokens(process.argv[2]);
console.log(d.length, d.vocabSize);
const small = data.TokenLoader(d, { batchSize: 2, seqLen: 64, shuffle: false, vocabSize: 256 });
small.next();
try { small.next(); } catch (e) { console.log(e.message); }
const fits = data.TokenLoader(d, { batchSize: 2, seqLen: 64, shuffle: false, vocabSize: 300 });
fits.next();
truncate(process.argv[2]);
try { fits.next(); } catch (e) { console.log(e.message); }
console.log(JSON.stringify(fits.position));
`
	script := filepath.Join(dir, "s.js")
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	r, err := New(Options{AutoRelease: true, Args: []string{path}, Stdout: &buf, Stderr: &buf})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// truncate(path) empties the shard while the loaders read it.
	if err := r.vm.Set("truncate", func(p string) error { return os.Truncate(p, 0) }); err != nil {
		t.Fatal(err)
	}
	if err := r.RunFile(script); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"600 50257",
		"tokens: " + path + ": byte offset 1536: token id 256 is outside the vocabulary [0, 256) (loader: epoch 0, step 1)",
		"tokens: " + path + ": byte offset 1280: the file is 0 bytes now, 2224 when it was opened: truncated or rewritten while in use (loader: epoch 0, step 1)",
		`{"epoch":0,"windows":2}`,
	}
	if len(lines) != len(want) {
		t.Fatalf("printed\n%s\nwant\n%s", out, strings.Join(want, "\n"))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: %s\nwant         %s", i, lines[i], want[i])
		}
	}
}

// TestTokenLoaderPrefetch: a TokenLoader reading ahead ({ prefetch })
// serves the batches of one that does not, over epochs and across a
// position set mid-way, and a prefetch out of range is an error.
func TestTokenLoaderPrefetch(t *testing.T) {
	dir := t.TempDir()
	toks := make([]uint16, 3000)
	for i := range toks {
		toks[i] = uint16((i * 7) % 256)
	}
	path := filepath.Join(dir, "train_000000.bin")
	if err := tokens.WriteShard(path, toks); err != nil {
		t.Fatal(err)
	}
	src := `const { data } = require("zeroeng");
const d = data.loadTokens(process.argv[2]);
const batches = opts => {
  const l = data.TokenLoader(d, { batchSize: 3, seqLen: 32, seed: 5, vocabSize: 256, ...opts });
  const out = [];
  for (let s = 0; s < 3 * l.stepsPerEpoch + 2; s++) {
    if (s === 7) l.position = { epoch: 2, windows: 6 };
    const [x, y] = l.next();
    out.push(JSON.stringify([x.toArray(), y.toArray(), l.position]));
  }
  return out.join("\n");
};
const plain = batches({});
for (const prefetch of [1, 2, 5]) {
  if (batches({ prefetch }) !== plain) throw new Error("prefetch " + prefetch + " serves other batches");
}
try { data.TokenLoader(d, { batchSize: 3, seqLen: 32, prefetch: -1 }); } catch (e) { console.log(e.message); }
console.log("same");
`
	script := filepath.Join(dir, "s.js")
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	r, err := New(Options{AutoRelease: true, Args: []string{path}, Stdout: &buf, Stderr: &buf})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.RunFile(script); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if out := buf.String(); out != "tokens: loader: prefetch -1: batches read ahead, 0 to 1024\nsame\n" {
		t.Errorf("printed %q", out)
	}
}

// TestLoadTokensInterrupted: an interrupt (SIGINT, another rank's
// failure) stops data.loadTokens inside the scan of a large .npy array
// of ids: a sparse file of 4·10⁹ int32 zeros, whose scan takes tens of
// seconds, ends within a second of the interrupt as an interrupted run.
func TestLoadTokensInterrupted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ids.npy")
	const n = 4_000_000_000
	h := fmt.Sprintf("{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }", n)
	h += strings.Repeat(" ", (64-(10+len(h)+1)%64)%64) + "\n"
	head := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	head = append(head, h...)
	if err := os.WriteFile(path, head, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(len(head))+4*n); err != nil {
		t.Skipf("cannot make a sparse file here: %v", err)
	}
	script := filepath.Join(dir, "s.js")
	src := `const { data } = require("zeroeng");
started();
const d = data.loadTokens(process.argv[2]);
console.log("loaded", d.length);
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	r, err := New(Options{AutoRelease: true, Args: []string{path}, Stdout: &buf, Stderr: &buf})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	interrupted := make(chan time.Time, 1)
	if err := r.vm.Set("started", func() {
		go func() {
			time.Sleep(200 * time.Millisecond)
			interrupted <- time.Now()
			r.Interrupt("SIGINT")
		}()
	}); err != nil {
		t.Fatal(err)
	}
	err = r.RunFile(script)
	took := time.Since(<-interrupted)
	var se *Error
	if !errors.As(err, &se) || !se.Interrupted {
		t.Fatalf("got %v (%s), want an interrupted run", err, buf.String())
	}
	if took > time.Second {
		t.Errorf("the load ended %v after the interrupt", took)
	}
	if strings.Contains(buf.String(), "loaded") {
		t.Errorf("the script went on: %s", buf.String())
	}
}
