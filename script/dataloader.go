package script

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/rand"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Map-style datasets and their loader, as torch.utils.data in PyTorch 1.13:
//
//	data.TensorDataset(...tensors)                 → length, tensors, get(i)
//	data.DataLoader(dataset, { batchSize, shuffle, dropLast, sampler, seed, collateFn,
//	                           numWorkers, prefetchFactor, persistentWorkers })
//	data.DistributedSampler(dataset, { numReplicas, rank, shuffle, seed, dropLast })
//
// A loader is iterable (for (const [x, y] of loader)), each iteration an
// epoch. Its orders are PyTorch's for the same seeds, draw for draw: every
// iteration takes one 64-bit number from the generator for the base seed
// PyTorch's iterator draws for its workers (even with none), and a shuffled
// epoch without the seed option takes another as the seed of its
// permutation (RandomSampler's), so that the default generator advances as
// PyTorch's does and what a script draws afterwards matches too.
//
// Loaders and samplers have stateDict()/loadStateDict(sd) for
// checkpoint.Manager: a loader saves how far the newest iteration got and
// what its order was drawn from (never the order itself), and a fresh
// loader given that state continues with the very next batch. The default
// generator is not theirs to save: checkpoint.Manager restores it, so that
// the epochs after a resume draw what they would have drawn.
//
// With numWorkers > 0 the batches of a TensorDataset are gathered by
// background goroutines ahead of the step (dataloader_workers.go); what
// the loader draws, and when, is the same as without them.

// mapDataset is what a loader or a sampler indexes: a TensorDataset, a
// script array, or a script object with length and get(i).
type mapDataset struct {
	obj *goja.Object
	td  *tensorDataset // a TensorDataset; nil otherwise
	get goja.Callable  // a script dataset's get(i); nil for the others
}

// tensorDataset is data.TensorDataset: rows of tensors that share their
// first dimension.
type tensorDataset struct {
	tensors []*jsTensor
	n       int
}

// dataModuleLoaders adds TensorDataset, DataLoader and DistributedSampler
// to the data module m.
func (r *Runtime) dataModuleLoaders(m *goja.Object) {
	r.fn(m, "TensorDataset", func(call goja.FunctionCall) goja.Value {
		return r.newTensorDataset(call)
	})
	r.fn(m, "DataLoader", func(call goja.FunctionCall) goja.Value {
		return r.newDataLoader(call)
	})
	r.fn(m, "DistributedSampler", func(call goja.FunctionCall) goja.Value {
		return r.newDistributedSampler(call)
	})
}

func (r *Runtime) newTensorDataset(call goja.FunctionCall) goja.Value {
	const fn = "data.TensorDataset"
	if len(call.Arguments) == 0 {
		r.throwf("%s: expects at least one tensor", fn)
	}
	td := &tensorDataset{}
	objs := make([]any, len(call.Arguments))
	for i, v := range call.Arguments {
		t := r.unwrap(fn, fmt.Sprintf("argument %d", i+1), v)
		if t.Dim() == 0 {
			r.throwf("%s: argument %d is a 0-d tensor; its first dimension indexes the samples", fn, i+1)
		}
		if i == 0 {
			td.n = t.Size(0)
		} else if t.Size(0) != td.n {
			r.throwf("%s: size mismatch between tensors: argument %d has %d rows (shape %v), argument 1 has %d", fn, i+1, t.Size(0), t.Shape(), td.n)
		}
		// The dataset holds its tensors as long as the script holds it.
		j := asJSTensor(v)
		r.life.keep(j)
		td.tensors = append(td.tensors, j)
		objs[i] = v
	}
	obj := r.vm.NewObject()
	must(obj.DefineDataProperty("_tensorDataset", r.vm.ToValue(td), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE))
	must(obj.Set("length", td.n))
	must(obj.Set("tensors", r.vm.NewArray(objs...)))
	ds := &mapDataset{obj: obj, td: td}
	r.fn(obj, "get", func(call goja.FunctionCall) goja.Value {
		const fn = "dataset.get"
		return r.datasetItem(fn, ds, r.intValue(fn, "index", call.Argument(0)))
	})
	return obj
}

// wrapIndex maps a Python-style index (negative from the end) into [0, n).
func wrapIndex(i, n int) (int, bool) {
	if i < 0 {
		i += n
	}
	return i, i >= 0 && i < n
}

// mapDatasetArg reads a dataset argument.
func (r *Runtime) mapDatasetArg(fn string, v goja.Value) *mapDataset {
	obj, ok := v.(*goja.Object)
	if ok && !r.isTensor(v) {
		if td, ok := hidden(obj, "_tensorDataset").(*tensorDataset); ok {
			return &mapDataset{obj: obj, td: td}
		}
		if obj.ClassName() == "Array" {
			return &mapDataset{obj: obj}
		}
		if get, ok := goja.AssertFunction(obj.Get("get")); ok && !isMissing(obj.Get("length")) {
			return &mapDataset{obj: obj, get: get}
		}
	}
	r.throwf("%s: expects a map-style dataset (data.TensorDataset, an array, or an object with length and get(i)), got %s", fn, describe(v))
	return nil
}

// datasetLength is len(dataset), read each time: a script's array may grow.
func (r *Runtime) datasetLength(fn string, d *mapDataset) int {
	if d.td != nil {
		return d.td.n
	}
	n := r.intValue(fn, "the dataset's length", d.obj.Get("length"))
	if n < 0 {
		r.throwRangef("%s: the dataset's length is negative (%d)", fn, n)
	}
	return n
}

// datasetItem is dataset[i]; a TensorDataset's item is the array of its
// tensors' rows (views), and a negative i counts from the end as in Python.
func (r *Runtime) datasetItem(fn string, d *mapDataset, i int) goja.Value {
	if d.get != nil {
		v, err := d.get(d.obj, r.vm.ToValue(i))
		if err != nil {
			panic(err)
		}
		return v
	}
	n := r.datasetLength(fn, d)
	k, ok := wrapIndex(i, n)
	if !ok {
		r.throwRangef("%s: index %d is out of range for a dataset of %d samples", fn, i, n)
	}
	if d.td != nil {
		vals := make([]any, len(d.td.tensors))
		for j, jt := range d.td.tensors {
			vals[j] = r.wrap(r.live(fn, jt).Select(0, k))
		}
		return r.vm.NewArray(vals...)
	}
	return d.obj.Get(strconv.Itoa(k))
}

// dataLoader is data.DataLoader on a map-style dataset with automatic
// batching (PyTorch's BatchSampler over a SequentialSampler, a
// RandomSampler or the sampler option).
type dataLoader struct {
	r         *Runtime
	ds        *mapDataset
	batchSize int
	shuffle   bool
	dropLast  bool
	gen       *rand.Generator // the seed option's generator; nil: the runtime's
	sampler   *distSampler    // a DistributedSampler given as sampler
	custom    *goja.Object    // any other sampler: an iterable of indices
	collate   goja.Callable   // collateFn; nil: PyTorch's default_collate
	workers   *loaderWorkers  // numWorkers > 0; nil: next() makes its batch itself

	epochs  int          // iterations that began an epoch
	current *loaderEpoch // the newest iteration: what stateDict saves
	resume  *loaderEpoch // restored by loadStateDict, taken up by the next iteration
}

// loaderEpoch is one iteration of a loader. The sampler is asked for its
// indices one at a time, as PyTorch's generators are, so that what the
// samplers draw is drawn at the moments PyTorch draws it.
type loaderEpoch struct {
	l         *dataLoader
	started   bool          // the sampler was asked for its first index
	ended     bool          // ... and for one past its last
	order     []int64       // a built-in sampler's indices, but the sequential one's
	seqLen    int           // the sequential sampler's: 0, 1, ... seqLen-1, never listed
	seq       bool          // the sampler is the sequential one (no shuffle, no sampler option)
	pos       int           // indices taken from order
	js        *goja.Object  // a custom sampler's iterator
	exhausted bool          // the sampler has no batch left
	batches   int           // batches yielded to the script
	done      bool          // the iteration has reported its end to the script
	seed      *uint64       // shuffled with the default generator: the permutation's seed, once drawn
	gen       []byte        // the seed option's generator just after this epoch's base seed
	dist      *samplerState // the DistributedSampler's seed and epoch when it gave its indices

	// With workers (dataloader_workers.go): the batch next() is handing
	// over, the batches after it whose indices are known, and how far into
	// order a built-in sampler's batches are known.
	head  *batchSlot
	ahead []*batchSlot
	peek  int
	busy  bool // next() is running (a custom sampler may call back into it)
}

func (r *Runtime) newDataLoader(call goja.FunctionCall) goja.Value {
	const fn = "data.DataLoader"
	l := &dataLoader{r: r, ds: r.mapDatasetArg(fn, call.Argument(0))}
	o := r.optionsOf(fn, call, 1, "batchSize", "shuffle", "dropLast", "sampler", "seed", "collateFn",
		"numWorkers", "prefetchFactor", "persistentWorkers")
	l.batchSize = r.optInt(fn, o, "batchSize", 1)
	if l.batchSize <= 0 {
		r.throwRangef("%s: batchSize should be a positive integer value, but got batchSize=%d", fn, l.batchSize)
	}
	l.shuffle = optBool(o, "shuffle", false)
	l.dropLast = optBool(o, "dropLast", false)
	if v := optValue(o, "seed"); v != nil {
		l.gen = rand.New(uint64(r.intValue(fn, "option seed", v)))
	}
	if v := optValue(o, "collateFn"); v != nil {
		f, ok := goja.AssertFunction(v)
		if !ok {
			r.throwf("%s: option collateFn must be a function, got %s", fn, describe(v))
		}
		l.collate = f
	}
	samplerValue := optValue(o, "sampler")
	if samplerValue != nil {
		if l.shuffle {
			r.throwRangef("%s: the sampler option is mutually exclusive with shuffle", fn)
		}
		obj, _ := samplerValue.(*goja.Object)
		if obj != nil {
			l.sampler, _ = hidden(obj, "_distSampler").(*distSampler)
		}
		if l.sampler == nil {
			if obj == nil || r.isTensor(obj) || !isFunction(obj.GetSymbol(goja.SymIterator)) {
				r.throwf("%s: option sampler must be a data.DistributedSampler or an iterable of indices, got %s", fn, describe(samplerValue))
			}
			l.custom = obj
		}
	}
	if l.shuffle {
		n := r.datasetLength(fn, l.ds)
		if n == 0 {
			r.throwRangef("%s: shuffle needs samples: num_samples should be a positive integer value, but got num_samples=0", fn)
		}
		// Refused here, where the script made the loader, rather than at
		// its first epoch.
		r.checkPermutation(fn, n)
	}
	l.workers = r.loaderWorkersOption(fn, l, o)

	obj := r.vm.NewObject()
	must(obj.Set("dataset", call.Argument(0)))
	must(obj.Set("batchSize", l.batchSize))
	must(obj.Set("dropLast", l.dropLast))
	if w := l.workers; w != nil {
		must(obj.Set("numWorkers", w.n))
		must(obj.Set("prefetchFactor", w.prefetch))
		must(obj.Set("persistentWorkers", w.persistent))
	} else {
		must(obj.Set("numWorkers", 0))
		must(obj.Set("prefetchFactor", goja.Null())) // PyTorch's None: no workers to prefetch
		must(obj.Set("persistentWorkers", false))
	}
	if samplerValue != nil {
		must(obj.Set("sampler", samplerValue))
	}
	must(obj.DefineAccessorProperty("length", r.native("length", func(goja.FunctionCall) goja.Value {
		return r.vm.ToValue(l.length("DataLoader.length"))
	}), nil, goja.FLAG_FALSE, goja.FLAG_TRUE))
	must(obj.SetSymbol(goja.SymIterator, r.native("[Symbol.iterator]", func(goja.FunctionCall) goja.Value {
		return r.loaderIterator(l, l.iterate())
	})))
	r.fn(obj, "stateDict", func(goja.FunctionCall) goja.Value {
		return r.jsonToValue("DataLoader.stateDict", l.state())
	})
	r.fn(obj, "loadStateDict", func(call goja.FunctionCall) goja.Value {
		const fn = "DataLoader.loadStateDict"
		var st loaderState
		r.decodeState(fn, call.Argument(0), &st)
		l.load(fn, st)
		return goja.Undefined()
	})
	return obj
}

// length is len(loader): the sampler's length in batches.
func (l *dataLoader) length(fn string) int {
	r := l.r
	var n int
	switch {
	case l.sampler != nil:
		n = l.sampler.numSamples
	case l.custom != nil:
		v := l.custom.Get("length")
		if isMissing(v) {
			r.throwf("%s: the sampler has no length", fn)
		}
		n = r.intValue(fn, "the sampler's length", v)
	default:
		n = r.datasetLength(fn, l.ds)
	}
	if l.dropLast {
		return n / l.batchSize
	}
	return (n + l.batchSize - 1) / l.batchSize
}

func (l *dataLoader) generator() *rand.Generator {
	if l.gen != nil {
		return l.gen
	}
	return l.r.rt.Generator()
}

// iterate begins an iteration: the epoch restored by loadStateDict, or a
// new one, which draws PyTorch's base seed.
func (l *dataLoader) iterate() *loaderEpoch {
	if e := l.resume; e != nil {
		l.resume = nil
		return e
	}
	// _BaseDataLoaderIter draws _base_seed (torch.empty((), dtype=int64)
	// .random_(generator=loader.generator): one 64-bit draw) whether or
	// not there are workers to seed with it.
	l.generator().Uint64()
	e := &loaderEpoch{l: l}
	if l.gen != nil {
		e.gen = l.gen.State()
	}
	l.epochs++
	l.current = e
	return e
}

// loaderIterator is the script's iterator over e: next() → { value, done },
// and itself iterable, as the iterators of JavaScript's built-ins are.
// Its return(), which for ... of calls when the loop is left early
// (break, an exception), stops the workers fetching for the iteration, if
// the loader has workers. It does not end the iteration, whose position
// stateDict saves as before, and a later next() goes on (fetching again).
func (r *Runtime) loaderIterator(l *dataLoader, e *loaderEpoch) goja.Value {
	const fn = "DataLoader"
	it := r.vm.NewObject()
	r.fn(it, "next", func(goja.FunctionCall) goja.Value {
		res := r.vm.NewObject()
		var v goja.Value
		ok := false
		if l.workers != nil {
			v, ok = l.workers.next(fn, e)
		} else {
			var idx []int64
			if idx, ok = e.nextBatch(fn); ok {
				v = l.batch(idx)
			}
		}
		if !ok {
			v = goja.Undefined()
		}
		must(res.Set("value", v))
		must(res.Set("done", !ok))
		return res
	})
	r.fn(it, "return", func(call goja.FunctionCall) goja.Value {
		if l.workers != nil {
			l.workers.release(e)
		}
		res := r.vm.NewObject()
		must(res.Set("value", call.Argument(0)))
		must(res.Set("done", true))
		return res
	})
	must(it.SetSymbol(goja.SymIterator, r.native("[Symbol.iterator]", func(goja.FunctionCall) goja.Value { return it })))
	return it
}

// nextBatch takes the next batch to yield: its indices, drawn now.
func (e *loaderEpoch) nextBatch(fn string) ([]int64, bool) {
	if e.done {
		return nil, false
	}
	idx, ok := e.draw(fn)
	if !ok {
		e.done = true
		return nil, false
	}
	e.batches++
	return idx, true
}

// draw takes the next batch's indices from the sampler as PyTorch's
// BatchSampler does: up to batchSize of them, a shorter last batch kept
// unless dropLast. A full batch is taken without asking the sampler for
// more; the sampler's end is found asking for the index after its last.
func (e *loaderEpoch) draw(fn string) ([]int64, bool) {
	if e.exhausted {
		return nil, false
	}
	l := e.l
	if !e.started && !e.ended {
		e.start(fn) // as pull would: the order's length sizes the batch
	}
	idx := make([]int64, 0, e.batchCap(fn))
	for len(idx) < l.batchSize {
		i, ok := e.pull(fn)
		if !ok {
			break
		}
		idx = append(idx, i)
	}
	if len(idx) == 0 || len(idx) < l.batchSize && l.dropLast {
		e.exhausted = true
		return nil, false
	}
	return idx, true
}

// batchCap is the room to make for the indices of the next batch:
// batchSize, but never more than the built-in sampler has left, since
// PyTorch's BatchSampler yields the whole dataset as one batch when
// batchSize exceeds it, and batchSize: 1e12 must not allocate 8 TB.
// (A custom sampler's indices, each a call into the script, grow the list
// as they come.)
func (e *loaderEpoch) batchCap(fn string) int {
	l := e.l
	if e.js != nil || l.custom != nil {
		return min(l.batchSize, 1024)
	}
	m := min(l.batchSize, max(0, e.orderLen()-e.pos))
	// The batch of a dataset other than a TensorDataset holds, besides its
	// indices, each sample and their list for collateFn.
	perSample := 8
	if l.ds.td == nil {
		perSample += 2 * 16
	}
	l.r.hostAlloc(fn, fmt.Sprintf("a batch of %d samples (batchSize %d)", m, l.batchSize), m, perSample)
	return m
}

// orderLen is the number of indices in a built-in sampler's order.
func (e *loaderEpoch) orderLen() int {
	if e.seq {
		return e.seqLen
	}
	return len(e.order)
}

// orderAt is the index at position i of a built-in sampler's order.
func (e *loaderEpoch) orderAt(i int) int64 {
	if e.seq {
		return int64(i)
	}
	return e.order[i]
}

// checkPermutation refuses to shuffle a dataset of n samples when the
// permutation, n 64-bit indices, cannot be allocated (hostAlloc): a
// length of 1e15 would need 8 PB.
func (r *Runtime) checkPermutation(fn string, n int) {
	r.hostAlloc(fn, fmt.Sprintf("shuffle: the permutation of a dataset of %d samples", n), n, 8)
}

// pull is the sampler's next index.
func (e *loaderEpoch) pull(fn string) (int64, bool) {
	if e.ended {
		return 0, false
	}
	l, r := e.l, e.l.r
	if !e.started {
		e.start(fn)
	}
	if e.js != nil {
		res, ok := r.callMethod(e.js, "next").(*goja.Object)
		if !ok {
			r.throwf("%s: the sampler's iterator returned %s, not { value, done }", fn, describe(res))
		}
		if res.Get("done").ToBoolean() {
			e.ended = true
			return 0, false
		}
		return int64(r.intValue(fn, "the sampler's index", res.Get("value"))), true
	}
	if e.pos < e.orderLen() {
		e.pos++
		return e.orderAt(e.pos - 1), true
	}
	e.ended = true
	if l.shuffle && l.gen != nil {
		// RandomSampler ends with randperm(n, generator)[:0]: with the
		// loader's own generator that permutation is drawn (and dropped)
		// when the index after the last is asked for.
		l.gen.Randperm(len(e.order))
	}
	return 0, false
}

// start makes the sampler's iterator, when PyTorch's BatchSampler asks
// for its first index.
func (e *loaderEpoch) start(fn string) {
	e.started = true
	l, r := e.l, e.l.r
	switch {
	case l.sampler != nil:
		if e.dist == nil {
			st := l.sampler.state
			e.dist = &st
		}
		e.order = l.sampler.indices(fn, *e.dist)
	case l.custom != nil:
		v := r.callSymbol(l.custom, goja.SymIterator)
		it, ok := v.(*goja.Object)
		if !ok || !isFunction(it.Get("next")) {
			r.throwf("%s: the sampler's [Symbol.iterator]() returned %s, not an iterator", fn, describe(v))
		}
		e.js = it
	case l.shuffle:
		n := r.datasetLength(fn, l.ds)
		if n == 0 {
			r.throwRangef("%s: the dataset became empty; a shuffled epoch needs samples", fn)
		}
		r.checkPermutation(fn, n)
		if l.gen != nil {
			e.order = l.gen.Randperm(n)
			break
		}
		// RandomSampler: seed = int(torch.empty((), dtype=torch.int64)
		// .random_().item()), a 64-bit draw reduced to int64's range,
		// then torch.randperm(n, generator=torch.Generator().manual_seed(seed)).
		if e.seed == nil {
			s := r.rt.Generator().Uint64() & (1<<63 - 1)
			e.seed = &s
		}
		e.order = rand.New(*e.seed).Randperm(n)
	default:
		// SequentialSampler: range(n), not listed, so that a dataset of
		// any length is iterated without memory for its indices.
		e.seq, e.seqLen = true, r.datasetLength(fn, l.ds)
	}
}

// batch makes the batch of the samples at idx. A TensorDataset's rows are
// picked with one index_select per tensor: the values, dtype and autograd
// of torch.stack over the rows, which is what default_collate does with
// them, without a tensor per row. Other datasets' items go through
// collateFn or defaultCollate.
func (l *dataLoader) batch(idx []int64) goja.Value {
	const fn = "DataLoader"
	r := l.r
	if td := l.ds.td; td != nil && l.collate == nil {
		for k, i := range idx {
			j, ok := wrapIndex(int(i), td.n)
			if !ok {
				r.throwRangef("%s: the sampler gave index %d, out of range for a dataset of %d samples", fn, i, td.n)
			}
			idx[k] = int64(j)
		}
		out := make([]any, len(td.tensors))
		for j, jt := range td.tensors {
			t := r.live(fn, jt)
			out[j] = r.wrap(t.IndexSelect(0, t.Runtime().FromInt64s(idx, len(idx))))
		}
		return r.vm.NewArray(out...)
	}
	samples := make([]goja.Value, len(idx))
	for k, i := range idx {
		samples[k] = r.datasetItem(fn, l.ds, int(i))
	}
	if l.collate != nil {
		list := make([]any, len(samples))
		for k, v := range samples {
			list[k] = v
		}
		v, err := l.collate(goja.Undefined(), r.vm.NewArray(list...))
		if err != nil {
			panic(err)
		}
		return v
	}
	return r.defaultCollate(fn, samples)
}

// defaultCollate is PyTorch's default_collate for what a script's dataset
// returns: tensors are stacked along a new first dimension; numbers become
// a float64 tensor (a JavaScript number is a double, Python's float),
// BigInts an int64 tensor (Python's int) and booleans a bool tensor;
// strings stay an array; arrays and objects are collated position by
// position and key by key. Every sample must be of the first one's kind.
func (r *Runtime) defaultCollate(fn string, batch []goja.Value) goja.Value {
	kind := collateKind(batch[0])
	for i, v := range batch[1:] {
		if k := collateKind(v); k != kind {
			r.throwf("%s: default collate: sample %d is %s where sample 0 is %s", fn, i+1, k, kind)
		}
	}
	switch kind {
	case "a tensor":
		ts := make([]*tensor.Tensor, len(batch))
		for i, v := range batch {
			ts[i] = r.unwrap(fn, "sample", v)
		}
		return r.wrap(tensor.Stack(ts, 0))
	case "a number", "a boolean":
		vals := make([]float64, len(batch))
		for i, v := range batch {
			vals[i] = v.ToFloat()
		}
		if kind == "a boolean" {
			return r.wrap(r.rt.FromValues(dtype.Bool, vals, len(vals)))
		}
		return r.wrap(r.rt.FromFloat64s(vals, len(vals)))
	case "a BigInt":
		vals := make([]int64, len(batch))
		for i, v := range batch {
			b := v.Export().(*big.Int)
			if !b.IsInt64() {
				r.throwRangef("%s: default collate: sample %d (%v) does not fit in int64", fn, i, b)
			}
			vals[i] = b.Int64()
		}
		return r.wrap(r.rt.FromInt64s(vals, len(vals)))
	case "a string":
		list := make([]any, len(batch))
		for i, v := range batch {
			list[i] = v
		}
		return r.vm.NewArray(list...)
	case "an array":
		objs := make([]*goja.Object, len(batch))
		for i, v := range batch {
			objs[i] = v.(*goja.Object)
		}
		n := r.arrayLength(fn, "sample 0", objs[0], 16+16*len(objs))
		for _, o := range objs[1:] {
			if r.arrayLength(fn, "a sample", o, 0) != n {
				r.throwf("%s: default collate: each element in list of batch should be of equal size", fn)
			}
		}
		out := make([]any, n)
		column := make([]goja.Value, len(objs))
		for p := range out {
			for i, o := range objs {
				column[i] = o.Get(strconv.Itoa(p))
			}
			out[p] = r.defaultCollate(fn, column)
		}
		return r.vm.NewArray(out...)
	case "an object":
		first := batch[0].(*goja.Object)
		out := r.vm.NewObject()
		column := make([]goja.Value, len(batch))
		for _, key := range first.Keys() {
			for i, v := range batch {
				if column[i] = v.(*goja.Object).Get(key); column[i] == nil {
					r.throwf("%s: default collate: sample %d has no key %q", fn, i, key)
				}
			}
			must(out.Set(key, r.defaultCollate(fn, column)))
		}
		return out
	}
	r.throwf("%s: default collate: batch must contain tensors, numbers, BigInts, booleans, strings, arrays or objects; found %s", fn, kind)
	return nil
}

// collateKind names the kind of value defaultCollate sees.
func collateKind(v goja.Value) string {
	if asJSTensor(v) != nil {
		return "a tensor"
	}
	if o, ok := v.(*goja.Object); ok {
		switch o.ClassName() {
		case "Array":
			return "an array"
		case "Object":
			return "an object"
		}
		return "a " + o.ClassName()
	}
	if isMissing(v) {
		return describe(v)
	}
	switch v.Export().(type) {
	case int64, float64:
		return "a number"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case *big.Int:
		return "a BigInt"
	}
	return describe(v)
}

// loaderState is a loader's stateDict(). Of the seed option's generator
// it holds the state where the replay of a resumed epoch begins (current
// .generator) or, between epochs, the state now (generator); of a
// shuffled epoch with the default generator the seed of its permutation
// (a string: it has 63 bits); of a DistributedSampler its seed and epoch,
// now (sampler) and when it gave the current epoch's indices.
type loaderState struct {
	Epoch     *int          `json:"epoch"`
	BatchSize *int          `json:"batchSize"`
	Generator string        `json:"generator,omitempty"`
	Sampler   *samplerState `json:"sampler,omitempty"`
	Current   *epochState   `json:"current,omitempty"`
}

// epochState is the iteration in progress: the batches it has yielded and
// what its order was drawn from.
type epochState struct {
	Batches     *int          `json:"batches"`
	SamplerSeed string        `json:"samplerSeed,omitempty"`
	Generator   string        `json:"generator,omitempty"`
	Sampler     *samplerState `json:"sampler,omitempty"`
}

func (l *dataLoader) state() loaderState {
	epochs, bs := l.epochs, l.batchSize
	st := loaderState{Epoch: &epochs, BatchSize: &bs}
	if l.sampler != nil {
		s := l.sampler.state
		st.Sampler = &s
	}
	if e := l.current; e != nil && !e.done {
		batches := e.batches
		c := &epochState{Batches: &batches, Sampler: e.dist}
		if e.seed != nil {
			c.SamplerSeed = strconv.FormatUint(*e.seed, 10)
		}
		if e.gen != nil {
			c.Generator = base64.StdEncoding.EncodeToString(e.gen)
		}
		st.Current = c
	} else if l.gen != nil {
		st.Generator = base64.StdEncoding.EncodeToString(l.gen.State())
	}
	return st
}

// load restores a state: the next iteration continues the saved one from
// its next batch (replaying its sampler's draws, without making batches),
// or begins the epoch after it.
func (l *dataLoader) load(fn string, st loaderState) {
	r := l.r
	if l.workers != nil {
		// The iterations fetched for are replaced; one the script goes on
		// with fetches again.
		l.workers.stopRun()
	}
	if st.Epoch == nil || st.BatchSize == nil || *st.Epoch < 0 {
		r.throwf("%s: expects the object stateDict() returns ({ epoch, batchSize, ... })", fn)
	}
	if *st.BatchSize != l.batchSize {
		r.throwf("%s: the state was saved by a loader with batchSize %d; this one has %d", fn, *st.BatchSize, l.batchSize)
	}
	mismatch := func(what string) {
		r.throwf("%s: the state was saved by a loader %s", fn, what)
	}
	if (st.Sampler != nil) != (l.sampler != nil) {
		mismatch("with another kind of sampler (a DistributedSampler for one of them)")
	}
	if l.gen == nil && (st.Generator != "" || st.Current != nil && st.Current.Generator != "") {
		mismatch("with the seed option (this one has none)")
	}
	genState := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err == nil {
			err = rand.New(0).SetState(b)
		}
		if s == "" || err != nil {
			r.throwf("%s: the state of the seed option's generator is missing or invalid (%v)", fn, err)
		}
		return b
	}
	var e *loaderEpoch
	if c := st.Current; c != nil {
		if c.Batches == nil || *c.Batches < 0 {
			r.throwf("%s: current.batches must be a non-negative integer", fn)
		}
		e = &loaderEpoch{l: l, dist: c.Sampler}
		if c.Sampler != nil && l.sampler == nil {
			mismatch("with a DistributedSampler")
		} else if c.Sampler == nil && l.sampler != nil && *c.Batches > 0 {
			r.throwf("%s: current.sampler is missing: the epoch's indices cannot be replayed without it", fn)
		}
		if c.SamplerSeed != "" {
			if !l.shuffle || l.gen != nil {
				mismatch("that shuffled with the default generator")
			}
			s, err := strconv.ParseUint(c.SamplerSeed, 10, 63)
			if err != nil {
				r.throwf("%s: current.samplerSeed: %v", fn, err)
			}
			e.seed = &s
		} else if l.shuffle && l.gen == nil && *c.Batches > 0 {
			r.throwf("%s: current.samplerSeed is missing: a shuffled epoch's order cannot be replayed without it", fn)
		}
		if l.gen != nil {
			e.gen = genState(c.Generator)
			must(l.gen.SetState(e.gen))
		}
	} else if l.gen != nil {
		must(l.gen.SetState(genState(st.Generator)))
	}
	if l.sampler != nil {
		l.sampler.state = *st.Sampler
	}
	if e != nil {
		for k := 0; k < *st.Current.Batches; k++ {
			if _, ok := e.nextBatch(fn); !ok {
				r.throwf("%s: the state's position (%d batches) is past the end of its epoch (%d batches)", fn, *st.Current.Batches, k)
			}
		}
	}
	l.epochs, l.current, l.resume = *st.Epoch, e, e
}

// jsonToValue hands v to the script as the JSON value it encodes to (its
// fields in their order).
func (r *Runtime) jsonToValue(fn string, v any) goja.Value {
	b, err := json.Marshal(v)
	if err != nil {
		r.throwf("%s: %v", fn, err)
	}
	out, err := r.jsonCall("parse", r.vm.ToValue(string(b)))
	if err != nil {
		r.throwf("%s: %v", fn, err)
	}
	return out
}

// decodeState reads a stateDict() the script hands back into dst; an
// unknown key is an error (a state of something else).
func (r *Runtime) decodeState(fn string, v goja.Value, dst any) {
	obj, ok := v.(*goja.Object)
	if !ok || r.isTensor(v) || obj.ClassName() != "Object" {
		r.throwf("%s: expects the object stateDict() returns, got %s", fn, describe(v))
	}
	s, err := r.jsonCall("stringify", v)
	if err != nil {
		r.throwf("%s: %v", fn, err)
	}
	dec := json.NewDecoder(strings.NewReader(s.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		r.throwf("%s: not a state stateDict() returns: %v", fn, err)
	}
}

// samplerState is a DistributedSampler's stateDict().
type samplerState struct {
	Seed  int `json:"seed"`
	Epoch int `json:"epoch"`
}

// distSampler is data.DistributedSampler: the indices of rank's share of
// the dataset, the same permutation on every rank for the same seed and
// epoch, padded by repeating it (or cut, with dropLast) to a multiple of
// numReplicas.
type distSampler struct {
	r                     *Runtime
	ds                    *mapDataset
	n                     int // the dataset's length when the sampler was made
	numReplicas, rank     int
	shuffle, dropLast     bool
	numSamples, totalSize int
	state                 samplerState
}

func (r *Runtime) newDistributedSampler(call goja.FunctionCall) goja.Value {
	const fn = "data.DistributedSampler"
	s := &distSampler{r: r, ds: r.mapDatasetArg(fn, call.Argument(0))}
	o := r.optionsOf(fn, call, 1, "numReplicas", "rank", "shuffle", "seed", "dropLast")
	// The defaults are the job's: dist.worldSize and dist.rank.
	s.numReplicas = r.optInt(fn, o, "numReplicas", max(1, r.opts.WorldSize))
	s.rank = r.optInt(fn, o, "rank", r.opts.Rank)
	if s.numReplicas <= 0 {
		r.throwRangef("%s: numReplicas must be positive, got %d", fn, s.numReplicas)
	}
	if s.rank < 0 || s.rank >= s.numReplicas {
		r.throwRangef("%s: invalid rank %d, rank should be in the interval [0, %d]", fn, s.rank, s.numReplicas-1)
	}
	s.shuffle = optBool(o, "shuffle", true)
	s.dropLast = optBool(o, "dropLast", false)
	s.state.Seed = r.optInt(fn, o, "seed", 0)
	s.n = r.datasetLength(fn, s.ds)
	if s.dropLast && s.n%s.numReplicas != 0 {
		// ceil((n - numReplicas) / numReplicas), which is 0 for n < numReplicas.
		s.numSamples = max(0, (s.n-1)/s.numReplicas)
	} else {
		s.numSamples = (s.n + s.numReplicas - 1) / s.numReplicas
	}
	s.totalSize = s.numSamples * s.numReplicas

	obj := r.vm.NewObject()
	must(obj.DefineDataProperty("_distSampler", r.vm.ToValue(s), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE))
	must(obj.Set("dataset", call.Argument(0)))
	must(obj.Set("numReplicas", s.numReplicas))
	must(obj.Set("rank", s.rank))
	must(obj.Set("shuffle", s.shuffle))
	must(obj.Set("dropLast", s.dropLast))
	must(obj.Set("numSamples", s.numSamples))
	must(obj.Set("totalSize", s.totalSize))
	must(obj.Set("length", s.numSamples))
	for name, get := range map[string]func() int{"seed": func() int { return s.state.Seed }, "epoch": func() int { return s.state.Epoch }} {
		must(obj.DefineAccessorProperty(name, r.native(name, func(goja.FunctionCall) goja.Value {
			return r.vm.ToValue(get())
		}), nil, goja.FLAG_FALSE, goja.FLAG_TRUE))
	}
	r.fn(obj, "setEpoch", func(call goja.FunctionCall) goja.Value {
		s.state.Epoch = r.intValue("DistributedSampler.setEpoch", "epoch", call.Argument(0))
		return goja.Undefined()
	})
	r.fn(obj, "stateDict", func(goja.FunctionCall) goja.Value {
		return r.jsonToValue("DistributedSampler.stateDict", s.state)
	})
	r.fn(obj, "loadStateDict", func(call goja.FunctionCall) goja.Value {
		const fn = "DistributedSampler.loadStateDict"
		var st struct{ Seed, Epoch *int }
		r.decodeState(fn, call.Argument(0), &st)
		if st.Seed == nil || st.Epoch == nil {
			r.throwf("%s: expects { seed, epoch }", fn)
		}
		s.state = samplerState{Seed: *st.Seed, Epoch: *st.Epoch}
		return goja.Undefined()
	})
	must(obj.SetSymbol(goja.SymIterator, r.native("[Symbol.iterator]", func(goja.FunctionCall) goja.Value {
		idx := s.indices("DistributedSampler", s.state)
		list := make([]any, len(idx))
		for i, v := range idx {
			list[i] = v
		}
		arr := r.vm.NewArray(list...)
		return r.callSymbol(arr, goja.SymIterator)
	})))
	return obj
}

// indices is the sampler's list for the seed and epoch of st.
func (s *distSampler) indices(fn string, st samplerState) []int64 {
	n := s.r.datasetLength(fn, s.ds)
	if n != s.n {
		s.r.throwf("%s: the dataset had %d samples when the DistributedSampler was made and has %d now", fn, s.n, n)
	}
	var base []int64 // nil: 0, 1, ... n-1, not listed
	if s.shuffle {
		s.r.checkPermutation(fn, n)
		base = rand.New(uint64(int64(st.Seed) + int64(st.Epoch))).Randperm(n)
	}
	s.r.hostAlloc(fn, fmt.Sprintf("the indices of rank %d's %d samples", s.rank, s.numSamples), s.numSamples, 8)
	// indices + indices[:pad] (repeated as often as needed) or
	// indices[:totalSize], then indices[rank:totalSize:numReplicas].
	out := make([]int64, 0, s.numSamples)
	for j := s.rank; j < s.totalSize; j += s.numReplicas {
		if base == nil {
			out = append(out, int64(j%n))
		} else {
			out = append(out, base[j%n])
		}
	}
	return out
}

// callSymbol calls o[sym]().
func (r *Runtime) callSymbol(o *goja.Object, sym *goja.Symbol) goja.Value {
	f, ok := goja.AssertFunction(o.GetSymbol(sym))
	if !ok {
		r.throwf("%s is not a function", sym)
	}
	v, err := f(o)
	if err != nil {
		panic(err)
	}
	return v
}
