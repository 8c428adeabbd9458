// Package wasm runs gradient-communication hooks compiled to WebAssembly
// (docs/wasm-hook-abi.md): it checks a module against the ABI, compiles it
// once per process with wazero (cached on disk), gives every rank its own
// sandboxed instance, provides the host functions through which the guest
// drives collectives and engine primitives on opaque tensor handles, and
// turns a trap, an ABI violation, the memory limit or the time limit into
// an error naming the module, the export, the rank and the step, or, by
// policy, into a fallback to the built-in all-reduce. ZeRO step schedules
// (docs/wasm-schedule-abi.md, schedule.go) and training programs
// (program.go) run in the same sandbox.
//
// A Hook is used by one rank's goroutine only, as DDP calls its hooks.
package wasm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Policy is what a failed hook does to the run.
type Policy uint8

const (
	// Abort ends the run with the hook's error (the default).
	Abort Policy = iota
	// Fallback reduces the failed bucket, and every later one, with the
	// built-in averaging all-reduce from the gradients as they were
	// before the hook touched them, after a warning.
	Fallback
)

func (p Policy) String() string {
	if p == Fallback {
		return "fallback"
	}
	return "abort"
}

// ParsePolicy reads "abort" or "fallback".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "abort", "":
		return Abort, nil
	case "fallback":
		return Fallback, nil
	}
	return Abort, fmt.Errorf("wasm hook: unknown failure policy %q (abort or fallback)", s)
}

// Options configure one rank's instance of a hook.
type Options struct {
	// OnError is the failure policy.
	OnError Policy
	// Configuration, when not nil, is handed to the guest's configure
	// export before init (the samples take JSON).
	Configuration []byte
	// Stdout and Stderr are the rank's log: the guest's output and its
	// log calls land there line by line, after Prefix and the module's
	// name. os.Stdout and os.Stderr when nil.
	Stdout, Stderr io.Writer
	Prefix         string
	// Warn receives the fallback warning; nil writes it to Stderr.
	Warn func(msg string)
}

// Error is the failure of a hook.
type Error struct {
	Module string
	Export string // the export being called ("on_bucket")
	Rank   int
	// Step counts the synchronised iterations before the failure; -1
	// while the instance was being set up.
	Step int64
	// Bucket is the bucket's index, -1 outside a bucket.
	Bucket int
	Err    error
}

func (e *Error) Error() string {
	var where []string
	where = append(where, fmt.Sprintf("rank %d", e.Rank))
	if e.Step >= 0 {
		where = append(where, fmt.Sprintf("step %d", e.Step))
	}
	if e.Bucket >= 0 {
		where = append(where, fmt.Sprintf("bucket %d", e.Bucket))
	}
	return fmt.Sprintf("wasm hook %s: %s (%s): %v", e.Module, e.Export, strings.Join(where, ", "), e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// instance is what a Hook and a Schedule share: one rank's sandboxed
// instance of a module, the exports it has, its log, and the calls into
// it under the module's limits.
type instance struct {
	m   *Module
	mod api.Module
	// ctx carries the Hook or the Schedule to the host functions. It has
	// no Done channel: wazero would watch one with a goroutine per call
	// (Interrupt closes the module instead).
	ctx context.Context
	fns map[string]api.Function

	stack [8]uint64

	// callErr is the first host-call failure of the export call in
	// progress.
	callErr error

	stdout, stderr *lineWriter
}

// instantiate makes the instance of m whose host functions find their
// caller in ctx, its output going to the writers after prefix and the
// module's name. It fails with the reason alone.
func (in *instance) instantiate(ctx context.Context, m *Module, prefix string, stdout, stderr io.Writer) error {
	in.m, in.ctx = m, ctx
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	in.stdout = &lineWriter{w: stdout, prefix: prefix + m.name + ": "}
	in.stderr = &lineWriter{w: stderr, prefix: prefix + m.name + ": "}
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().
		WithStdout(in.stdout).WithStderr(in.stderr)
	// Instantiation runs the module's start function, if it has one:
	// under the time limit too, and watched like any call.
	ictx := withGuestMemory(ctx)
	if t := m.cfg.Timeout; t > 0 {
		var cancel context.CancelFunc
		ictx, cancel = context.WithTimeout(ictx, t)
		defer cancel()
	}
	mod, err := m.rt.rt.InstantiateModule(ictx, m.cm, cfg)
	if err != nil {
		if errors.Is(ictx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("its start function ran past the time limit of %v", m.cfg.Timeout)
		}
		return fmt.Errorf("%v", err)
	}
	in.mod = mod
	in.fns = map[string]api.Function{}
	for _, e := range m.kind.exports {
		if f := mod.ExportedFunction(e.name); f != nil {
			in.fns[e.name] = f
		}
	}
	return nil
}

// setup runs what comes before the first event: _initialize, the
// configuration (alloc, then configure) and init(rank, world). call calls
// an export and returns its failure wrapped, wrap wraps the others.
func (in *instance) setup(config []byte, rank, world int, call func(export string, args ...uint64) error, wrap func(export string, err error) error) error {
	if _, ok := in.fns["_initialize"]; ok {
		if err := call("_initialize"); err != nil {
			return err
		}
	}
	if config != nil {
		if _, ok := in.fns["configure"]; !ok {
			return wrap("configure", fmt.Errorf("the %s was given a configuration, but the module exports no configure", in.m.kind.name))
		}
		if err := call("alloc", uint64(len(config))); err != nil {
			return err
		}
		ptr := uint32(in.stack[0])
		if !in.mod.Memory().Write(ptr, config) {
			return wrap("alloc", fmt.Errorf("alloc(%d) returned %d, outside the %d bytes of memory", len(config), ptr, in.mod.Memory().Size()))
		}
		if err := call("configure", uint64(ptr), uint64(len(config))); err != nil {
			return err
		}
	}
	if _, ok := in.fns["init"]; ok {
		return call("init", uint64(rank), uint64(world))
	}
	return nil
}

// invoke calls an export with args under the time limit and turns every
// way it can fail into the reason (the caller says where); the results
// are left in in.stack.
func (in *instance) invoke(export string, args ...uint64) error {
	fn := in.fns[export]
	in.callErr = nil
	copy(in.stack[:], args)
	ctx := in.ctx
	if t := in.m.cfg.Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	err := fn.CallWithStack(ctx, in.stack[:])
	switch {
	case in.callErr != nil && err != nil:
		return fmt.Errorf("%w (the module then stopped: %v)", in.callErr, in.trap(err))
	case in.callErr != nil:
		return in.callErr
	case err != nil:
		return in.trap(err)
	case export != "alloc" && len(fn.Definition().ResultTypes()) == 1 && uint32(in.stack[0]) != 0:
		return fmt.Errorf("returned status %d", int32(in.stack[0]))
	}
	return nil
}

// close flushes the instance's log and closes the module.
func (in *instance) close() error {
	if in.stdout != nil {
		in.stdout.flush()
		in.stderr.flush()
	}
	if in.mod != nil {
		return in.mod.Close(context.Background())
	}
	return nil
}

// interrupt stops the call into the guest in progress, and every later
// one (see Hook.Interrupt).
func (in *instance) interrupt() {
	if in.mod != nil {
		// Safe while the guest runs: its loop checks see the module
		// closed and exit with this code.
		in.mod.CloseWithExitCode(context.Background(), sys.ExitCodeContextCanceled)
	}
}

// Hook is one rank's instance of a module: its CommHook goes to
// ddp.RegisterCommHook.
type Hook struct {
	instance
	pg   dist.ProcessGroup
	rt   *tensor.Runtime
	opts Options

	handles    map[uint32]*handle
	nextHandle uint32
	ownedBytes int
	step       int64

	// The collectives the export call in progress issued.
	works []issued

	dead    error        // the failure that ended the instance
	fallen  bool         // every bucket goes to the built-in all-reduce
	builtin ddp.CommHook // the built-in hook the fallback uses
}

// handle is a tensor the guest names by number: a bucket in flight or a
// tensor it made.
type handle struct {
	t       *tensor.Tensor
	pending []*dist.Work // collectives that use t and may not have completed
	bucket  *bucketCall  // set for a bucket's handle
	bytes   int          // counted against the memory limit (tensors the guest made)
}

// settle waits for the collectives pending on the handle.
func (hd *handle) settle() error {
	var first error
	for _, w := range hd.pending {
		if err := w.Wait(); err != nil && first == nil {
			first = err
		}
	}
	hd.pending = hd.pending[:0]
	return first
}

type issued struct {
	name string
	w    *dist.Work
}

// bucketCall is one bucket's passage through the hook.
type bucketCall struct {
	b        *ddp.Bucket
	handle   uint32
	works    []issued
	count    int   // collectives issued for the bucket
	err      error // the hook's failure on this bucket
	snapshot *tensor.Tensor
	step     int64 // the iteration the bucket belongs to
}

// NewHook instantiates the module for one rank of pg, whose tensors live
// on rt: it runs _initialize, configure and init.
func (m *Module) NewHook(pg dist.ProcessGroup, rt *tensor.Runtime, o Options) (*Hook, error) {
	if m.kind != hookKind {
		return nil, fmt.Errorf("wasm hook %s: the module was compiled as a %s, not a hook", m.name, m.kind.name)
	}
	h := &Hook{pg: pg, rt: rt, opts: o, handles: map[uint32]*handle{}, step: -1, builtin: ddp.AllReduceHook(pg)}
	if err := h.instantiate(context.WithValue(context.Background(), hookKey{}, h), m, o.Prefix, o.Stdout, o.Stderr); err != nil {
		return nil, h.wrap("instantiate", -1, err)
	}
	call := func(export string, args ...uint64) error {
		_, err := h.run(export, -1, args...)
		return err
	}
	wrap := func(export string, err error) error { return h.wrap(export, -1, err) }
	if err := h.setup(o.Configuration, pg.Rank(), pg.Size(), call, wrap); err != nil {
		h.Close()
		return nil, err
	}
	h.step = 0
	return h, nil
}

// Close ends the instance and frees the tensors the guest made.
func (h *Hook) Close() error {
	for id, hd := range h.handles {
		if hd.bucket == nil {
			h.free(id, hd)
		}
	}
	return h.close()
}

// Interrupt stops the call into the guest in progress, and every later
// one, with an error: at the guest's next loop iteration or call, unless
// the module is trusted (Config.Trusted), whose call runs on until it
// returns by itself.
func (h *Hook) Interrupt() { h.interrupt() }

// Err is the failure that ended the instance, if any.
func (h *Hook) Err() error { return h.dead }

// FellBack reports whether the hook has handed its buckets to the
// built-in all-reduce after a failure.
func (h *Hook) FellBack() bool { return h.fallen }

// CommHook is the hook for ddp.DDP.RegisterCommHook.
func (h *Hook) CommHook() ddp.CommHook { return h.launch }

func (h *Hook) add(hd *handle) uint32 {
	for {
		h.nextHandle++
		if h.nextHandle > 1<<31-1 {
			h.nextHandle = 1
		}
		if _, taken := h.handles[h.nextHandle]; !taken {
			h.handles[h.nextHandle] = hd
			return h.nextHandle
		}
	}
}

func (h *Hook) free(id uint32, hd *handle) {
	delete(h.handles, id)
	h.ownedBytes -= hd.bytes
	// A collective still using the tensor keeps its memory alive.
	hd.t.Release()
}

// launch is the comm hook: the guest's on_bucket, as soon as the bucket's
// gradients are in.
func (h *Hook) launch(b *ddp.Bucket) func() (*tensor.Tensor, error) {
	if h.fallen {
		return h.builtin(b)
	}
	bc := &bucketCall{b: b, step: h.step}
	if h.opts.OnError == Fallback && h.dead == nil {
		bc.snapshot = b.Buffer.Clone().Persist()
	}
	if h.dead != nil {
		bc.err = h.dead
	} else {
		bc.handle = h.add(&handle{t: b.Buffer, bucket: bc})
		bc.err = h.call("on_bucket", b.Index, uint64(bc.handle))
		bc.works, h.works = h.works, nil
		bc.count = len(bc.works)
	}
	return func() (*tensor.Tensor, error) { return h.finish(bc) }
}

// finish completes a bucket: its collectives, on_bucket_done and, after
// the last bucket, on_step_end; then the failure policy.
func (h *Hook) finish(bc *bucketCall) (*tensor.Tensor, error) {
	b := bc.b
	// The collectives on_bucket issued complete even when it failed, so
	// that nothing writes the bucket after this.
	err := h.waitIssued("on_bucket", b.Index, bc.works)
	if bc.err != nil {
		err = bc.err
	}
	if _, ok := h.fns["on_bucket_done"]; ok && err == nil {
		var n int
		n, err = h.run("on_bucket_done", b.Index, uint64(bc.handle))
		bc.count += n
	}
	if bc.handle != 0 {
		if hd := h.handles[bc.handle]; hd != nil && hd.bucket == bc {
			delete(h.handles, bc.handle)
		}
	}
	if _, ok := h.fns["on_step_end"]; ok && b.IsLast && err == nil {
		var n int
		n, err = h.run("on_step_end", b.Index, uint64(h.step))
		bc.count += n
	}
	if b.IsLast {
		h.step++
	}
	if err != nil && h.dead == nil {
		h.kill(err)
	}
	if h.opts.OnError == Abort {
		if err != nil {
			return nil, err
		}
		return b.Buffer, nil
	}
	return h.agree(bc, err)
}

// agree settles the fallback policy for one bucket: the ranks learn
// whether the hook failed anywhere, and if so all reduce the bucket from
// its snapshot with the built-in all-reduce.
func (h *Hook) agree(bc *bucketCall, err error) (*tensor.Tensor, error) {
	b := bc.b
	if bc.snapshot != nil {
		defer bc.snapshot.Release()
	}
	sc := h.rt.OpenScope()
	defer sc.Close()
	failed := int64(0)
	if err != nil {
		failed = 1
	}
	n := int64(bc.count)
	votes := h.rt.FromInt64s([]int64{failed, n, -n}, 3)
	if cerr := h.pg.AllReduce(votes, dist.Max).Wait(); cerr != nil {
		if err != nil {
			// This rank's failure is what happened; the vote failed
			// because of it (the others were still in the collectives
			// the hook issued before it failed here).
			return nil, fmt.Errorf("%w; the ranks could not then agree to fall back to the all-reduce: %v", err, cerr)
		}
		e := h.wrap("fallback", b.Index, fmt.Errorf("the ranks could not agree on the hook's outcome (has it failed on another rank?): %w", cerr))
		e.(*Error).Step = bc.step
		return nil, e
	}
	v, cerr := votes.Int64s()
	if cerr != nil {
		return nil, cerr
	}
	if v[0] == 0 {
		return b.Buffer, nil
	}
	why := "it failed on another rank"
	if err != nil {
		why = err.Error()
	}
	if v[1] != -v[2] {
		e := h.wrap("fallback", b.Index, fmt.Errorf("cannot fall back to the all-reduce: the ranks issued different collectives for this bucket (%d to %d) before the hook failed (%s)", -v[2], v[1], why))
		e.(*Error).Step = bc.step
		return nil, e
	}
	if !h.fallen {
		h.fallen = true
		msg := fmt.Sprintf("%swarning: wasm hook %s failed (%s); bucket %d and every later bucket are reduced with the built-in all-reduce", h.opts.Prefix, h.m.name, why, b.Index)
		if h.opts.Warn != nil {
			h.opts.Warn(msg)
		} else {
			fmt.Fprintln(h.opts.Stderr, msg)
		}
		if h.dead == nil {
			h.kill(errors.New("another rank's instance failed"))
		}
	}
	if bc.snapshot != nil {
		if cerr := b.Buffer.CopyFrom(bc.snapshot); cerr != nil {
			return nil, cerr
		}
	}
	return h.builtin(b)()
}

// kill ends the instance after a failure: it is never called again.
func (h *Hook) kill(err error) {
	h.dead = err
	h.close()
}

// run calls an export and waits for the collectives it issued, even when
// it failed, so that none is still writing when the caller goes on; it
// returns how many it issued and the first failure.
func (h *Hook) run(export string, bucket int, args ...uint64) (issued int, err error) {
	err = h.call(export, bucket, args...)
	issued = len(h.works)
	if werr := h.waitIssued(export, bucket, h.works); err == nil {
		err = werr
	}
	return issued, err
}

// waitIssued waits for the collectives of an export call (works, taken
// from h.works).
func (h *Hook) waitIssued(export string, bucket int, works []issued) error {
	h.works = nil
	var first error
	for _, is := range works {
		if err := is.w.Wait(); err != nil && first == nil {
			first = h.wrap(export, bucket, fmt.Errorf("%s failed: %w", is.name, err))
		}
	}
	return first
}

// call calls an export with args and turns every way it can fail into an
// *Error; the results are left in h.stack.
func (h *Hook) call(export string, bucket int, args ...uint64) error {
	if err := h.invoke(export, args...); err != nil {
		return h.wrap(export, bucket, err)
	}
	return nil
}

func (h *Hook) wrap(export string, bucket int, err error) error {
	return &Error{Module: h.m.name, Export: export, Rank: h.pg.Rank(), Step: h.step, Bucket: bucket, Err: err}
}

// trap describes why a guest call stopped: a trap, WASI proc_exit or the
// time limit, and whether the memory limit was the likely cause.
func (in *instance) trap(err error) error {
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return fmt.Errorf("ran past its time limit of %v", in.m.cfg.Timeout)
		case sys.ExitCodeContextCanceled:
			return errors.New("cancelled")
		}
		return fmt.Errorf("the module exited with status %d%s", exit.ExitCode(), in.memoryNote())
	}
	msg := err.Error()
	// wazero appends the guest's stack; keep its first frames.
	lines := strings.Split(msg, "\n")
	if len(lines) > 8 {
		lines = append(lines[:8], "\t...")
	}
	return fmt.Errorf("trap: %s%s", strings.Join(lines, "\n"), in.memoryNote())
}

func (in *instance) memoryNote() string {
	if in.mod == nil || in.mod.Memory() == nil {
		return ""
	}
	size := uint64(in.mod.Memory().Size())
	limit := uint64(in.m.cfg.memoryLimitMB()) << 20
	// A failed memory.grow leaves the memory below the limit by less
	// than the request; Go's runtime asks for 4 MiB arenas at a time.
	if size+max(limit/16, 8<<20) >= limit {
		return fmt.Sprintf(" (its memory had reached %d MiB of its %d MiB limit)", size>>20, limit>>20)
	}
	return ""
}

// lineWriter writes the guest's output to the rank's log a line at a
// time, each after the prefix.
type lineWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
	open   bool // a line has begun
}

// maxLine bounds a line held back waiting for its newline.
const maxLine = 4096

func (l *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		l.open = true
		i := slices.Index(p, '\n')
		if i < 0 || len(l.buf)+i > maxLine {
			// No newline within the line's room: take what fits, and
			// end the line there if it is full.
			take := min(len(p), maxLine-len(l.buf))
			l.buf = append(l.buf, p[:take]...)
			p = p[take:]
			if len(l.buf) >= maxLine {
				l.flush()
			}
			continue
		}
		l.buf = append(l.buf, p[:i]...)
		l.flush()
		p = p[i+1:]
	}
	return n, nil
}

// appendPrintable appends b with what a terminal would act on instead of
// showing — control characters (tab aside), C1 controls, bytes that are
// not UTF-8 — written as \xNN, so that a guest cannot move the cursor,
// recolour or clear the user's terminal, or hide its lines.
func appendPrintable(out, b []byte) []byte {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1,
			r < 0x20 && r != '\t', r == 0x7f, r >= 0x80 && r < 0xa0:
			for _, c := range b[:max(size, 1)] {
				out = fmt.Appendf(out, "\\x%02x", c)
			}
		default:
			out = append(out, b[:size]...)
		}
		b = b[max(size, 1):]
	}
	return out
}

// line writes b as a line of its own (several, if it holds newlines).
func (l *lineWriter) line(b []byte) {
	l.flush()
	l.open = true
	l.Write(b)
	l.flush()
}

func (l *lineWriter) flush() {
	if !l.open {
		return
	}
	out := make([]byte, 0, len(l.prefix)+len(l.buf)+1)
	out = append(appendPrintable(append(out, l.prefix...), l.buf), '\n')
	l.w.Write(out)
	l.buf, l.open = l.buf[:0], false
}
