package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/tetratelabs/wazero/api"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/zero"
)

// ZeRO step schedules in WebAssembly (docs/wasm-schedule-abi.md): a
// module that zero.HookWithZeroSchedule tells of one iteration's events
// and that decides, through the host functions, when this rank waits for
// each bucket's reduction, steps its share of it and sends the updated
// parameters back. It runs in the hooks' sandbox (the shared runtimes,
// the compilation cache, the memory and time limits, the loop checks that
// let it be interrupted); what it may do is what zero.ScheduleContext
// allows, and the engine keeps it correct as it keeps every schedule.

// ScheduleABIVersion is the major version of docs/wasm-schedule-abi.md
// this host implements.
const ScheduleABIVersion = 1

// scheduleEvents are the event exports, of which a schedule has one at
// least.
var scheduleEvents = []string{"on_iteration_begin", "on_bucket_ready", "on_bucket_reduced", "on_backward_end"}

var scheduleExportSpecs = []exportSpec{
	{"_initialize", sig(nil), false},
	{"alloc", sig([]api.ValueType{i32}, i32), false},
	{"configure", sig([]api.ValueType{i32, i32}, i32), false},
	{"init", sig([]api.ValueType{i32, i32}, i32), false},
	{"on_iteration_begin", sig([]api.ValueType{i64}, i32), false},
	{"on_bucket_ready", sig([]api.ValueType{i32}, i32), false},
	{"on_bucket_reduced", sig([]api.ValueType{i32}, i32), false},
	{"on_backward_end", sig(nil, i32), false},
}

// scheduleFunc is a host function of the schedule ABI, as hostFunc is
// of the hook ABI.
type scheduleFunc struct {
	sig signature
	fn  func(s *Schedule, mem api.Memory, stack []uint64) Status
}

var scheduleFuncs map[string]scheduleFunc

// scheduleSignatures are the types of the schedule's host functions, for
// the checks of abi.go.
var scheduleSignatures = map[string]signature{}

func init() {
	p := func(ts ...api.ValueType) []api.ValueType { return ts }
	scheduleFuncs = map[string]scheduleFunc{
		"sched_info":               {sig(p(i32), i32), (*Schedule).info},
		"sched_bucket":             {sig(p(i32, i32), i32), (*Schedule).bucket},
		"sched_param":              {sig(p(i32, i32, i32, i32, i32), i32), (*Schedule).param},
		"sched_wait":               {sig(p(i32), i32), (*Schedule).wait},
		"sched_step":               {sig(p(i32), i32), (*Schedule).step},
		"sched_broadcast":          {sig(p(i32), i32), (*Schedule).broadcast},
		"sched_all_gather":         {sig(p(i32), i32), (*Schedule).allGather},
		"sched_step_and_broadcast": {sig(p(i32), i32), (*Schedule).stepAndBroadcast},
		"log":                      {sig(p(i32, i32), i32), (*Schedule).log},
	}
	for name, f := range scheduleFuncs {
		scheduleSignatures[name] = f.sig
	}
}

type scheduleKey struct{}

// ScheduleOptions configure one rank's instance of a schedule.
type ScheduleOptions struct {
	// Configuration, when not nil, is handed to the guest's configure
	// export before init.
	Configuration []byte
	// Stdout and Stderr are the rank's log: the guest's output and its
	// log calls land there line by line, after Prefix and the module's
	// name. os.Stdout and os.Stderr when nil.
	Stdout, Stderr io.Writer
	Prefix         string
}

// ScheduleError is the failure of a call into a schedule.
type ScheduleError struct {
	Module string
	Export string // the export being called ("on_bucket_ready")
	Rank   int
	// Iteration is the iteration of the event that failed, from 1; 0
	// while the instance was being set up.
	Iteration int
	Err       error
}

// Error names the module, the export and the rank of a failure while the
// instance was set up. An event's failure is the export and the cause
// only: zero wraps it with the schedule's name (the module's), the event,
// the bucket, the rank and the iteration.
func (e *ScheduleError) Error() string {
	if e.Iteration == 0 {
		return fmt.Sprintf("wasm schedule %s: %s (rank %d): %v", e.Module, e.Export, e.Rank, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Export, e.Err)
}

func (e *ScheduleError) Unwrap() error { return e.Err }

// Schedule is one rank's instance of a schedule module: the zero.Schedule
// to pass to zero.HookWithZeroSchedule (stage 1) or as
// zero.Options.Schedule (stage 2). Its events come from the rank's
// goroutine only, one at a time.
type Schedule struct {
	instance
	rank, world int

	// cur is the event in progress (nil outside one): the host functions
	// act through it.
	cur     *zero.ScheduleContext
	buckets []*zero.BucketInfo // described once an iteration, as asked for

	dead     error // the failure that ended the instance
	deadIter int   // the iteration it failed in
}

var _ zero.Schedule = (*Schedule)(nil)

// NewSchedule instantiates the schedule module for one rank of pg, the
// process group the schedule runs over (the DDP's under stage 1, the
// optimizer's under stage 2; events from another group's rank fail): it
// runs _initialize, configure and init.
func (m *Module) NewSchedule(pg dist.ProcessGroup, o ScheduleOptions) (*Schedule, error) {
	if m.kind != scheduleKind {
		return nil, fmt.Errorf("wasm schedule %s: the module was compiled as a %s, not a schedule (LoadSchedule, CompileSchedule)", m.name, m.kind.name)
	}
	s := &Schedule{rank: pg.Rank(), world: pg.Size()}
	if err := s.instantiate(context.WithValue(context.Background(), scheduleKey{}, s), m, o.Prefix, o.Stdout, o.Stderr); err != nil {
		return nil, s.wrap("instantiate", 0, err)
	}
	call := func(export string, args ...uint64) error {
		if err := s.invoke(export, args...); err != nil {
			return s.wrap(export, 0, err)
		}
		return nil
	}
	wrap := func(export string, err error) error { return s.wrap(export, 0, err) }
	if err := s.setup(o.Configuration, s.rank, s.world, call, wrap); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *Schedule) wrap(export string, iteration int, err error) error {
	return &ScheduleError{Module: s.m.name, Export: export, Rank: s.rank, Iteration: iteration, Err: err}
}

// String is the schedule's name in the engine's errors and traces: the
// module's.
func (s *Schedule) String() string { return s.m.name }

// Close ends the instance.
func (s *Schedule) Close() error { return s.close() }

// Interrupt stops the call into the guest in progress, and every later
// one, with an error, as Hook.Interrupt does.
func (s *Schedule) Interrupt() { s.interrupt() }

// Err is the failure that ended the instance, if any.
func (s *Schedule) Err() error { return s.dead }

// IterationBegin calls on_iteration_begin(iteration).
func (s *Schedule) IterationBegin(c *zero.ScheduleContext) error {
	s.track(c, true)
	return s.event(c, "on_iteration_begin", uint64(c.Iteration()))
}

// BucketReady calls on_bucket_ready(i).
func (s *Schedule) BucketReady(c *zero.ScheduleContext, i int) error {
	s.track(c, false)
	return s.event(c, "on_bucket_ready", uint64(i))
}

// BucketReduced calls on_bucket_reduced(i).
func (s *Schedule) BucketReduced(c *zero.ScheduleContext, i int) error {
	s.track(c, false)
	return s.event(c, "on_bucket_reduced", uint64(i))
}

// BackwardEnd calls on_backward_end().
func (s *Schedule) BackwardEnd(c *zero.ScheduleContext) error {
	s.track(c, false)
	return s.event(c, "on_backward_end")
}

// track sizes the descriptions of c's buckets, and forgets them when an
// iteration begins.
func (s *Schedule) track(c *zero.ScheduleContext, begin bool) {
	n := c.NumBuckets()
	if !begin && len(s.buckets) == n {
		return
	}
	if cap(s.buckets) < n {
		s.buckets = make([]*zero.BucketInfo, n)
	}
	s.buckets = s.buckets[:n]
	clear(s.buckets)
}

// bucketInfo describes bucket i, which exists.
func (s *Schedule) bucketInfo(c *zero.ScheduleContext, i int) *zero.BucketInfo {
	if s.buckets[i] == nil {
		b, _ := c.Bucket(i)
		s.buckets[i] = &b
	}
	return s.buckets[i]
}

// event calls an event export, if the module has it, with the context
// its host functions act through. Any failure ends the instance: a
// schedule has no fallback, since updates cannot be undone. The rest of
// the iteration it failed in goes on without it (the engine does what
// the schedule left, and reports the failure); a later iteration's
// events fail.
func (s *Schedule) event(c *zero.ScheduleContext, export string, args ...uint64) error {
	if _, ok := s.fns[export]; !ok {
		return nil
	}
	if s.dead != nil {
		if c.Iteration() == s.deadIter {
			return nil
		}
		return s.wrap(export, c.Iteration(), fmt.Errorf("not called: the instance failed in iteration %d (%v)", s.deadIter, s.dead))
	}
	if c.Rank() != s.rank || c.WorldSize() != s.world {
		return s.wrap(export, c.Iteration(), fmt.Errorf("the instance was made for rank %d of %d, but schedules rank %d of %d: each rank needs its own, made with the DDP's process group",
			s.rank, s.world, c.Rank(), c.WorldSize()))
	}
	s.cur = c
	err := s.invoke(export, args...)
	s.cur = nil
	if err != nil {
		s.dead, s.deadIter = s.wrap(export, c.Iteration(), err), c.Iteration()
		s.close()
		return s.dead
	}
	return nil
}

// context is the event in progress: the schedule's queries and actions
// are for its events.
func (s *Schedule) context(fn string) (*zero.ScheduleContext, Status) {
	if s.cur == nil {
		return nil, s.fail(fn, ErrOrder, "no event in progress: a schedule queries and acts in its event exports, not in init or configure")
	}
	return s.cur, OK
}

// bucketArg reads a bucket index, which must exist.
func (s *Schedule) bucketArg(fn string, c *zero.ScheduleContext, v uint64) (int, Status) {
	i := int(int32(u32(v)))
	if _, err := c.Bucket(i); err != nil {
		return 0, s.fail(fn, ErrInvalid, "%v", err)
	}
	return i, OK
}

func (s *Schedule) info(mem api.Memory, st []uint64) Status {
	const fn = "sched_info"
	c, status := s.context(fn)
	if status != OK {
		return status
	}
	out, status := s.guest(fn, mem, u32(st[0]), 24)
	if status != OK {
		return status
	}
	le := binary.LittleEndian
	le.PutUint32(out[0:], uint32(c.NumBuckets()))
	le.PutUint32(out[4:], uint32(c.Rank()))
	le.PutUint32(out[8:], uint32(c.WorldSize()))
	le.PutUint32(out[12:], uint32(c.Stage()))
	le.PutUint64(out[16:], uint64(c.Iteration()))
	return OK
}

// The flags of sched_bucket.
const (
	bucketReady   = 1 << 0
	bucketReduced = 1 << 1
	bucketStepped = 1 << 2
	bucketSent    = 1 << 3
)

func (s *Schedule) bucket(mem api.Memory, st []uint64) Status {
	const fn = "sched_bucket"
	c, status := s.context(fn)
	if status != OK {
		return status
	}
	i, status := s.bucketArg(fn, c, st[0])
	if status != OK {
		return status
	}
	out, status := s.guest(fn, mem, u32(st[1]), 40)
	if status != OK {
		return status
	}
	b := s.bucketInfo(c, i)
	state, _ := c.State(i)
	var flags uint32
	for _, f := range []struct {
		on  bool
		bit uint32
	}{{state.Ready, bucketReady}, {state.Reduced, bucketReduced}, {state.Stepped, bucketStepped}, {state.Sent, bucketSent}} {
		if f.on {
			flags |= f.bit
		}
	}
	dt := ^uint32(0)
	if len(b.Params) > 0 {
		// A bucket holds parameters of one dtype.
		dt = dtypeToABI(b.Params[0].DType())
	}
	le := binary.LittleEndian
	le.PutUint64(out[0:], uint64(b.Numel))
	le.PutUint32(out[8:], uint32(len(b.Params)))
	le.PutUint32(out[12:], dt)
	le.PutUint32(out[16:], flags)
	le.PutUint32(out[20:], 0)
	le.PutUint64(out[24:], uint64(b.SliceStart))
	le.PutUint64(out[32:], uint64(b.SliceEnd))
	return OK
}

func (s *Schedule) param(mem api.Memory, st []uint64) Status {
	const fn = "sched_param"
	c, status := s.context(fn)
	if status != OK {
		return status
	}
	i, status := s.bucketArg(fn, c, st[0])
	if status != OK {
		return status
	}
	b := s.bucketInfo(c, i)
	k := int(int32(u32(st[1])))
	if k < 0 || k >= len(b.Params) {
		return s.fail(fn, ErrInvalid, "parameter %d of bucket %d, which has %d", k, i, len(b.Params))
	}
	out, status := s.guest(fn, mem, u32(st[2]), 24)
	if status != OK {
		return status
	}
	name := b.Names[k]
	dst, status := s.guest(fn, mem, u32(st[3]), min(uint32(len(name)), u32(st[4])))
	if status != OK {
		return status
	}
	le := binary.LittleEndian
	le.PutUint64(out[0:], uint64(b.Offsets[k]))
	le.PutUint64(out[8:], uint64(b.Params[k].Numel()))
	le.PutUint32(out[16:], uint32(len(name)))
	le.PutUint32(out[20:], uint32(int32(b.Owners[k])))
	copy(dst, name)
	return OK
}

// act runs one of the engine's actions on the bucket v names. An action
// the engine refuses does nothing: out of order (zero.ErrOutOfOrder) is
// ERR_ORDER, the other stage's send (zero.ErrOtherStage) ERR_INVALID; any
// other error is the failure of the work itself — the bucket's reduction
// (the comm hook), its step or its send — (ERR_COMM). The status carries
// the engine's message.
func (s *Schedule) act(fn string, v uint64, action func(c *zero.ScheduleContext, i int) error) Status {
	c, status := s.context(fn)
	if status != OK {
		return status
	}
	i, status := s.bucketArg(fn, c, v)
	if status != OK {
		return status
	}
	switch err := action(c, i); {
	case err == nil:
		return OK
	case errors.Is(err, zero.ErrOutOfOrder):
		return s.fail(fn, ErrOrder, "%v", err)
	case errors.Is(err, zero.ErrOtherStage):
		return s.fail(fn, ErrInvalid, "%v", err)
	default:
		return s.fail(fn, ErrComm, "%v", err)
	}
}

func (s *Schedule) wait(_ api.Memory, st []uint64) Status {
	return s.act("sched_wait", st[0], (*zero.ScheduleContext).Wait)
}

func (s *Schedule) step(_ api.Memory, st []uint64) Status {
	return s.act("sched_step", st[0], (*zero.ScheduleContext).Step)
}

func (s *Schedule) broadcast(_ api.Memory, st []uint64) Status {
	return s.act("sched_broadcast", st[0], (*zero.ScheduleContext).Broadcast)
}

func (s *Schedule) allGather(_ api.Memory, st []uint64) Status {
	return s.act("sched_all_gather", st[0], (*zero.ScheduleContext).AllGather)
}

func (s *Schedule) stepAndBroadcast(_ api.Memory, st []uint64) Status {
	return s.act("sched_step_and_broadcast", st[0], (*zero.ScheduleContext).StepAndBroadcast)
}
