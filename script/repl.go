package script

// The REPL core: `zeroeng repl` without the terminal. It owns one runtime
// per rank, each on a goroutine of its own (goja runtimes are not
// goroutine-safe), accumulates typed lines until they form a complete
// entry, makes top-level let, const and class redeclarable across entries,
// runs every entry on every rank at once and prints what each rank's entry
// evaluated to. The terminal front-end (line editing, history, the prompt)
// is cmd/zeroeng/repl.go; everything here works on plain strings so that it
// can be tested without a terminal.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/parser"
	"github.com/dop251/goja/token"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/internal/safefile"
)

// REPLOptions configure a REPL.
type REPLOptions struct {
	// Ranks is the number of in-process ranks (at least 1); every entry
	// runs on every rank.
	Ranks int
	// Rank holds the options every rank shares (Seed, Stdout, Stderr,
	// Interactive, ...); Rank, WorldSize, Prefix, Runtime and AutoRelease
	// are set per rank. Values print to Stdout and errors to Stderr.
	Rank Options
	// Setup, when set, runs on each rank's runtime before the first entry.
	Setup func(r *Runtime) error
	// Dist configures the ranks' process group; its Timeout (DefaultREPLTimeout
	// when zero) bounds how long a collective waits for the ranks that did
	// not call it.
	Dist dist.Options
}

// DefaultREPLTimeout is how long a collective typed at the prompt waits for
// the other ranks: at a prompt, a rank that never arrives is a typo (an
// entry that calls a collective on one rank only), not a slow peer.
const DefaultREPLTimeout = 5 * time.Second

// Output is what one rank printed for an entry.
type Output struct {
	Rank int
	// Value is the entry's value as printed ("" when nothing is printed:
	// declarations, empty entries).
	Value string
	// Err is the entry's failure, an *Error (syntax error, exception,
	// interrupt), or the failure of a REPL command.
	Err error
}

// Result is the outcome of one submitted line.
type Result struct {
	// More says that the entry is incomplete: the front-end shows the
	// continuation prompt and submits the next line.
	More bool
	// Exit says that .exit was typed.
	Exit bool
	// Outputs holds what each rank printed, in rank order, when an entry
	// was evaluated; Submit has already written them out.
	Outputs []Output
}

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("repl: closed")

// REPL evaluates entries on N ranks. Submit, Complete and Close are called
// from one goroutine (the front-end's); Interrupt and Pending may be called
// from any other (a signal handler).
type REPL struct {
	ranks          []*replRank
	world          *dist.World // the ranks' process group, replaced after a failed collective (guarded by mu)
	distOpts       dist.Options
	groups         []*replGroup // each rank's handle, forwarding to world's
	stdout, stderr io.Writer

	mu      sync.Mutex // guards the fields below
	pending []string   // the lines of an incomplete entry
	entries int        // entries evaluated, to name them REPL1, REPL2, ...
	closed  bool
}

// replRank is one rank: its runtime and the goroutine that owns it.
type replRank struct {
	rank int
	rt   *Runtime
	jobs chan func()
	done chan struct{}

	// mu orders Interrupt against the end of an evaluation, so that an
	// interrupt is never left pending on an idle runtime (it would stop
	// the next entry at once).
	mu   sync.Mutex
	busy bool
}

// replGlobals makes require("zeroeng") and its parts globals of the REPL,
// as Node's REPL does for its built-in modules. They are vars: a user's
// own `const { tensor } = require("zeroeng")` redeclares them.
const replGlobals = `var zeroeng = require("zeroeng"), { tensor, nn, optim, zero, hooks, io, data, dist, progress, metrics, checkpoint, trace, device } = zeroeng;`

// NewREPL starts a runtime for every rank.
func NewREPL(opts REPLOptions) (*REPL, error) {
	n := max(1, opts.Ranks)
	if opts.Dist.Timeout <= 0 {
		opts.Dist.Timeout = DefaultREPLTimeout
	}
	r := &REPL{stdout: opts.Rank.Stdout, stderr: opts.Rank.Stderr, distOpts: opts.Dist}
	if r.stdout == nil {
		r.stdout = os.Stdout
	}
	if r.stderr == nil {
		r.stderr = os.Stderr
	}
	world, err := dist.NewWorld(n, opts.Dist)
	if err != nil {
		return nil, err
	}
	r.world = world
	for rank := range n {
		r.groups = append(r.groups, newREPLGroup(world.Group(rank)))
	}
	for rank := range n {
		o := opts.Rank
		o.Rank, o.WorldSize, o.LocalRank = rank, n, rank
		o.Group = r.groups[rank]
		o.Stdout, o.Stderr = r.stdout, r.stderr
		o.Prefix = ""
		if n > 1 {
			o.Prefix = fmt.Sprintf("[%d] ", rank)
		}
		// Tensors typed at the prompt live until the session ends (or
		// t.release()): entries are not training steps.
		o.AutoRelease = false
		o.Runtime = tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), o.Seed)
		k := &replRank{rank: rank, jobs: make(chan func()), done: make(chan struct{})}
		started := make(chan error, 1)
		go k.serve(o, opts.Setup, started)
		if err := <-started; err != nil {
			r.Close()
			return nil, &RankError{Rank: rank, Ranks: n, Err: err}
		}
		r.ranks = append(r.ranks, k)
	}
	return r, nil
}

// serve owns the rank's runtime: it makes it, then runs the jobs sent to
// it until jobs is closed.
func (k *replRank) serve(o Options, setup func(*Runtime) error, started chan<- error) {
	defer close(k.done)
	rt, err := New(o)
	if err == nil && setup != nil {
		err = setup(rt)
	}
	if err == nil {
		_, err = rt.RunString("zeroeng:repl", replGlobals)
	}
	if err != nil {
		if rt != nil {
			rt.Close()
		}
		started <- err
		return
	}
	k.rt = rt
	started <- nil
	for job := range k.jobs {
		job()
	}
	rt.Close()
}

// do runs f on the rank's goroutine and waits for it.
func (k *replRank) do(f func(rt *Runtime)) {
	done := make(chan struct{})
	k.jobs <- func() {
		defer close(done)
		f(k.rt)
	}
	<-done
}

// Ranks is the number of ranks.
func (r *REPL) Ranks() int { return len(r.ranks) }

// Pending reports whether an incomplete entry is being typed (the
// front-end shows the continuation prompt).
func (r *REPL) Pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) > 0
}

// Close stops every rank and releases its tensors.
func (r *REPL) Close() {
	r.mu.Lock()
	closed := r.closed
	r.closed = true
	r.mu.Unlock()
	if closed {
		return
	}
	for _, k := range r.ranks {
		close(k.jobs)
		<-k.done
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.world.Close()
}

// Interrupt is Ctrl-C: it stops the evaluation running on every rank (the
// ranks stay usable) and abandons an incomplete entry. It reports whether
// an evaluation was running.
func (r *REPL) Interrupt() bool {
	r.mu.Lock()
	r.pending = nil
	r.mu.Unlock()
	running := false
	for _, k := range r.ranks {
		k.mu.Lock()
		if k.busy {
			k.rt.Interrupt("interrupted")
			running = true
			if k.rt.inCollective.Load() > 0 {
				// A rank blocked in wait() cannot be reached by a
				// JavaScript interrupt, and its collective may never
				// complete (the other ranks did not call it): abort the
				// process group; the entry's end replaces it.
				r.mu.Lock()
				world := r.world
				r.mu.Unlock()
				world.Abort(errors.New("dist: Ctrl-C stopped a collective that waited for the other ranks"))
			}
		}
		k.mu.Unlock()
	}
	return running
}

// Submit takes one typed line. A REPL command (.help, .load, ...) runs at
// once; otherwise the line joins the entry being typed, and once the entry
// is complete it runs on every rank and what each rank printed is written
// out (values to Stdout, errors to Stderr, with the rank prefix when there
// are several ranks). Script errors are results, not failures: Submit
// fails only after Close.
func (r *REPL) Submit(line string) (Result, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return Result{}, ErrClosed
	}
	if cmd, arg, ok := r.command(line); ok {
		r.mu.Unlock()
		return r.runCommand(cmd, arg), nil
	}
	r.pending = append(r.pending, line)
	name := "REPL" + strconv.Itoa(r.entries+1)
	e := prepareEntry(name, strings.Join(r.pending, "\n"))
	if e.more {
		r.mu.Unlock()
		return Result{More: true}, nil
	}
	r.pending = nil
	if e.empty {
		r.mu.Unlock()
		return Result{}, nil
	}
	r.entries++
	r.mu.Unlock()
	return Result{Outputs: r.evaluate(e)}, nil
}

// replCommands are the REPL's dot commands, with their help.
var replCommands = []struct{ name, help string }{
	{".break", "abandon the multi-line entry being typed"},
	{".clear", "abandon the multi-line entry being typed (as .break)"},
	{".exit", "leave the REPL (also Ctrl-D)"},
	{".help", "print this help"},
	{".load", ".load FILE runs a JavaScript file in this session, as if it were typed"},
}

const replHelp = `
Every entry runs on every rank; with more than one rank, output starts with
the rank ("[1] "). zeroeng and its modules (tensor, nn, optim, zero, dist,
data, io, ...) are predefined; top-level let, const and class may be
declared again. Ctrl-C stops a running entry or clears the line; Tab
completes names.`

// command recognises a dot command as Node's REPL does: a known command
// runs even in the middle of an entry, while an unknown one is JavaScript
// there (a chained ".then(...)" line) and an error on its own. Called
// with r.mu held.
func (r *REPL) command(line string) (cmd, arg string, ok bool) {
	s := strings.TrimSpace(line)
	if len(s) < 2 || s[0] != '.' || s[1] == '.' || (s[1] >= '0' && s[1] <= '9') {
		return "", "", false
	}
	cmd, arg, _ = strings.Cut(s, " ")
	arg = strings.TrimSpace(arg)
	for _, c := range replCommands {
		if c.name == cmd {
			return cmd, arg, true
		}
	}
	if len(r.pending) > 0 {
		return "", "", false
	}
	return cmd, arg, true
}

// runCommand runs a dot command.
func (r *REPL) runCommand(cmd, arg string) Result {
	switch cmd {
	case ".exit":
		return Result{Exit: true}
	case ".break", ".clear":
		r.mu.Lock()
		r.pending = nil
		r.mu.Unlock()
		return Result{}
	case ".help":
		var b strings.Builder
		for _, c := range replCommands {
			fmt.Fprintf(&b, "%-8s %s\n", c.name, c.help)
		}
		b.WriteString(replHelp)
		r.writeOut(r.stdout, "", b.String())
		return Result{}
	case ".load":
		return r.load(arg)
	}
	err := fmt.Errorf("invalid REPL command %s (.help lists them)", cmd)
	r.writeOut(r.stderr, "", err.Error())
	return Result{Outputs: []Output{{Err: err}}}
}

// load runs a file's contents as one entry, named after the file so that
// errors point into it.
func (r *REPL) load(path string) Result {
	fail := func(err error) Result {
		r.writeOut(r.stderr, "", err.Error())
		return Result{Outputs: []Output{{Err: err}}}
	}
	if path == "" {
		return fail(errors.New(".load: name a file (.load FILE)"))
	}
	if r.Pending() {
		return fail(errors.New(".load: finish the entry being typed first, or abandon it with .break"))
	}
	src, err := safefile.ReadFile(path, maxSourceBytes)
	if err != nil {
		return fail(fmt.Errorf(".load: %w", err))
	}
	e := prepareEntry(path, string(src))
	switch {
	case e.empty:
		return Result{}
	case e.more:
		e.err = &Error{Message: "SyntaxError: Unexpected end of input", Position: path}
	}
	return Result{Outputs: r.evaluate(e)}
}

// entry is a complete entry, compiled and ready to run on every rank.
type entry struct {
	prog  *goja.Program // shared by the ranks: a goja Program is not tied to a runtime
	err   error         // the entry's syntax error
	more  bool          // the source is incomplete
	empty bool          // nothing to run (blank lines, comments)
	// quiet: an undefined value prints nothing, because the entry ends
	// with a declaration.
	quiet bool
}

// prepareEntry decides whether src is complete and, when it is, compiles
// it as script name.
//
// Completeness is the parser's: an entry needs more lines exactly when
// goja's parser stops at "Unexpected end of input", which it reports for
// open brackets, braces and parentheses, an unfinished expression or
// statement, an unterminated template literal and an unterminated block
// comment (an unterminated '…' or "…" string is an error, as in Node: those
// cannot span lines).
//
// As in Node's REPL, an entry that starts with "{" and does not end with
// ";" is an object literal when it parses as one, or when it is the start
// of one.
func prepareEntry(name, src string) entry {
	if t := strings.TrimSpace(src); strings.HasPrefix(t, "{") && !strings.HasSuffix(t, ";") {
		if prog, err := parseEntry(name, "("+t+")\n"); err == nil {
			return compileEntry(prog)
		}
		// An object literal whose properties are still being typed
		// ("{", "a: 1,", "b: {") is no valid block: ask for more.
		if _, err := parseEntry(name, "("+t); unexpectedEnd(err) {
			return entry{more: true}
		}
	}
	prog, err := parseEntry(name, src)
	if err != nil {
		if unexpectedEnd(err) {
			return entry{more: true}
		}
		return entry{err: entryError(err)}
	}
	if len(prog.Body) == 0 {
		return entry{empty: true}
	}
	if rewritten := redeclarable(src, prog); rewritten != src {
		if prog, err = parseEntry(name, rewritten); err != nil {
			return entry{err: entryError(err)}
		}
	}
	return compileEntry(prog)
}

func compileEntry(prog *ast.Program) entry {
	p, err := goja.CompileAST(prog, false)
	if err != nil {
		return entry{err: entryError(err)}
	}
	e := entry{prog: p}
	switch prog.Body[len(prog.Body)-1].(type) {
	case *ast.VariableStatement, *ast.LexicalDeclaration, *ast.FunctionDeclaration, *ast.ClassDeclaration, *ast.EmptyStatement:
		e.quiet = true
	}
	return e
}

// entryError makes a parser or compiler error a script error with the
// position in the entry ("REPL3:1:7: SyntaxError: Unexpected token )").
func entryError(err error) error {
	var syn *goja.CompilerSyntaxError
	if errors.As(err, &syn) {
		e := &Error{Message: "SyntaxError: " + syn.Message}
		if syn.File != nil {
			p := syn.File.Position(syn.Offset)
			e.Position = fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, p.Column)
		}
		return e
	}
	return syntaxError(err)
}

func parseEntry(name, src string) (*ast.Program, error) {
	return parser.ParseFile(nil, name, src, 0, parser.WithDisableSourceMaps)
}

// unexpectedEnd reports whether the parser stopped because the input ended.
func unexpectedEnd(err error) bool {
	var list parser.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		return list[0].Message == "Unexpected end of input"
	}
	var one *parser.Error
	return errors.As(err, &one) && one.Message == "Unexpected end of input"
}

// redeclarable rewrites the top-level lexical declarations of an entry so
// that a later entry may declare the same names again, as a REPL user
// expects (`let x = 1` then `let x = 2`; goja, like the language, refuses
// to redeclare a global let, const or class in a later script):
//
//	let a = 1, b     →  var a = 1, b
//	const { c } = o  →  var   { c } = o
//	class D { … }    →  var D = class D { … };
//
// The edits come from the parser's positions of the top-level statements,
// so nested declarations, strings and comments are never touched. let and
// const are overwritten in place (padded) so that the columns of error
// positions stay right; class needs an insertion. The price is that a
// top-level const may be reassigned; inside functions and blocks let and
// const keep their meaning.
func redeclarable(src string, prog *ast.Program) string {
	type edit struct {
		at, end int
		text    string
	}
	var edits []edit
	base := prog.File.Base()
	for _, st := range prog.Body {
		switch d := st.(type) {
		case *ast.LexicalDeclaration:
			kw := d.Token.String()
			at := int(d.Idx) - base
			if (d.Token != token.LET && d.Token != token.CONST) || at < 0 || !strings.HasPrefix(src[at:], kw) {
				continue
			}
			edits = append(edits, edit{at, at + len(kw), "var" + strings.Repeat(" ", len(kw)-len("var"))})
		case *ast.ClassDeclaration:
			c := d.Class
			if c == nil || c.Name == nil {
				continue
			}
			at, end := int(c.Class)-base, int(c.RightBrace)-base+1
			if at < 0 || end > len(src) {
				continue
			}
			// The semicolon ends the class expression: without it a
			// following "(…)" line would call the class.
			edits = append(edits, edit{at, at, "var " + c.Name.Name.String() + " = "}, edit{end, end, ";"})
		}
	}
	if len(edits) == 0 {
		return src
	}
	var b strings.Builder
	last := 0
	for _, e := range edits {
		b.WriteString(src[last:e.at])
		b.WriteString(e.text)
		last = e.end
	}
	b.WriteString(src[last:])
	return b.String()
}

// evaluate runs an entry on every rank at once and writes out what each
// printed, in rank order. A syntax error is the entry's, the same on every
// rank: it is written once.
func (r *REPL) evaluate(e entry) []Output {
	outs := make([]Output, len(r.ranks))
	if e.err != nil {
		for i := range outs {
			outs[i] = Output{Rank: i, Err: e.err}
		}
		r.writeOut(r.stderr, "", e.err.Error())
		return outs
	}
	results := make([]chan Output, len(r.ranks))
	for i, k := range r.ranks {
		results[i] = make(chan Output, 1)
		k.jobs <- func() { results[i] <- k.eval(e) }
	}
	for i := range results {
		outs[i] = <-results[i]
	}
	r.renewWorld()
	for i, o := range outs {
		prefix := r.ranks[i].rt.opts.Prefix
		switch {
		case o.Err != nil:
			r.writeOut(r.stderr, prefix, o.Err.Error())
		case o.Value != "":
			r.writeOut(r.stdout, prefix, o.Value)
		}
	}
	return outs
}

// renewWorld replaces a process group that a failed collective aborted by
// a fresh one, once no rank runs an entry, so that the next entries can
// use collectives again; every rank's variables are kept.
func (r *REPL) renewWorld() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.world.Err() == nil {
		return
	}
	world, err := dist.NewWorld(len(r.ranks), r.distOpts)
	if err != nil {
		r.writeOut(r.stderr, "", fmt.Sprintf("zeroeng: the process group could not be made again: %v", err))
		return
	}
	old := r.world
	r.world = world
	for rank, g := range r.groups {
		g.set(world.Group(rank))
	}
	old.Close()
	r.writeOut(r.stderr, "", "zeroeng: the process group was made again after the failed collective (variables are kept; make subgroups from dist.newGroup again)")
}

// eval runs an entry on the rank's goroutine.
func (k *replRank) eval(e entry) Output {
	k.mu.Lock()
	k.busy = true
	k.rt.ClearInterrupt()
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.busy = false
		k.rt.ClearInterrupt()
		k.mu.Unlock()
	}()
	out := Output{Rank: k.rank}
	v, err := k.rt.run(func() (goja.Value, error) { return k.rt.vm.RunProgram(e.prog) })
	switch {
	case err != nil:
		out.Err = err
	case (v == nil || goja.IsUndefined(v)) && e.quiet:
	default:
		out.Value = k.rt.Inspect(v)
	}
	return out
}

// writeOut writes text with prefix at the start of every line, whole
// against the ranks' console output.
func (r *REPL) writeOut(w io.Writer, prefix, text string) {
	var b strings.Builder
	for line := range strings.SplitSeq(text, "\n") {
		b.WriteString(prefix)
		b.WriteString(line)
		b.WriteByte('\n')
	}
	outputMu.Lock()
	defer outputMu.Unlock()
	writeOutput(w, b.String())
}

// Inspect formats a value as the REPL prints it: Node's util.inspect for
// JavaScript values (strings quoted), PyTorch's printing for tensors. Call
// it on the runtime's goroutine.
func (r *Runtime) Inspect(v goja.Value) (s string) {
	defer func() {
		// A getter that throws while the value is printed.
		if p := recover(); p != nil {
			s = fmt.Sprintf("[value cannot be printed: %v]", p)
		}
	}()
	return r.inspect(v, 2)
}

// Complete completes the expression that ends the text before the cursor
// from the live objects of rank 0: names of globals (and keywords) for a
// bare identifier, properties along the prototype chain for `a.b.c.pre`
// (tensor methods included), members of require("zeroeng") for
// `require("zeroeng").pre`, and REPL commands for ".pre". word is the text
// before the cursor the candidates replace; each candidate is a whole
// replacement for word ("tensor.rand" for "tensor.ra"). Nothing is
// evaluated but property reads.
func (r *REPL) Complete(before string) (word string, candidates []string) {
	if t := strings.TrimLeft(before, " \t"); strings.HasPrefix(t, ".") && !strings.ContainsAny(t, " \t") && !r.Pending() {
		for _, c := range replCommands {
			if strings.HasPrefix(c.name, t) {
				candidates = append(candidates, c.name)
			}
		}
		return t, candidates
	}
	i := len(before)
	for i > 0 && (isIdentByte(before[i-1]) || before[i-1] == '.') {
		i--
	}
	word = before[i:]
	if word == "" || (word[0] >= '0' && word[0] <= '9') {
		return "", nil
	}
	root := ""
	if word[0] == '.' {
		for _, req := range []string{`require("zeroeng")`, `require('zeroeng')`} {
			if strings.HasSuffix(before[:i], req) {
				root = req
			}
		}
		if root == "" {
			return "", nil
		}
		word = root + word
	}
	path := strings.Split(word[len(root):], ".")
	if root != "" {
		path = path[1:]
	}
	prefix := path[len(path)-1]
	head := word[:len(word)-len(prefix)]
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return "", nil
	}
	var names []string
	r.ranks[0].do(func(rt *Runtime) { names = rt.propertyNames(root != "", path[:len(path)-1]) })
	if root == "" && len(path) == 1 {
		names = append(names, jsKeywords...)
	}
	for _, n := range names {
		if strings.HasPrefix(n, prefix) && isIdentifier(n) && (!strings.HasPrefix(n, "__") || strings.HasPrefix(prefix, "_")) {
			candidates = append(candidates, head+n)
		}
	}
	slices.Sort(candidates)
	return word, slices.Compact(candidates)
}

var jsKeywords = []string{
	"async", "await", "break", "case", "catch", "class", "const", "continue", "debugger", "default",
	"delete", "do", "else", "extends", "false", "finally", "for", "function", "if", "in",
	"instanceof", "let", "new", "null", "return", "super", "switch", "this", "throw", "true",
	"try", "typeof", "undefined", "var", "void", "while", "yield",
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

var jsTensorType = reflect.TypeOf((*jsTensor)(nil))

// propertyNames lists the properties of the object at path, from the
// global object or require("zeroeng"), along its prototype chain; nil when
// the path does not lead to a value.
func (r *Runtime) propertyNames(fromModule bool, path []string) (names []string) {
	defer func() {
		if recover() != nil { // a getter threw
			names = nil
		}
	}()
	obj := r.vm.GlobalObject()
	if fromModule {
		obj = r.zeroengModule()
	}
	for _, p := range path {
		v := obj.Get(p)
		if p == "" || isMissing(v) {
			return nil
		}
		obj = v.ToObject(r.vm)
	}
	for o := obj; o != nil; o = o.Prototype() {
		names = append(names, o.GetOwnPropertyNames()...)
		if o.ExportType() == jsTensorType {
			// A tensor's properties and methods are resolved on access
			// (jsTensor.Get); list them here.
			for m := range r.methods {
				names = append(names, m)
			}
			names = append(names, "shape", "dtype", "device", "ndim", "requiresGrad", "grad", "isLeaf", "name", "T", "mT", "isParameter")
		}
	}
	return names
}
