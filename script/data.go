package script

import (
	"errors"
	"fmt"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tokens"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// errStopped ends a load that the script's interrupt stopped.
var errStopped = errors.New("stopped")

// stopLoad is what a long load asks between pieces of its work: whether
// the script was interrupted (a signal, another rank's failure).
func (r *Runtime) stopLoad() error {
	if r.interrupted.Load() {
		return errStopped
	}
	return nil
}

// dataModule is require("zeroeng").data: token datasets (llm.c shards,
// .npy token arrays, byte-level text) and the distributed loader that
// serves each rank its slice of every batch (engine/tokens); and
// PyTorch's TensorDataset, DataLoader and DistributedSampler (dataloader.go).
func (r *Runtime) dataModule() *goja.Object {
	m := r.vm.NewObject()
	r.fn(m, "loadTokens", func(call goja.FunctionCall) goja.Value {
		const fn = "data.loadTokens"
		var patterns []string
		if list, ok := call.Argument(0).Export().([]any); ok {
			for _, p := range list {
				s, ok := p.(string)
				if !ok || s == "" {
					r.throwf("%s: expects file paths or patterns, got %v", fn, p)
				}
				patterns = append(patterns, s)
			}
		} else {
			patterns = []string{r.pathArg(fn, call.Argument(0))}
		}
		ds, err := tokens.LoadUntil(r.stopLoad, patterns...)
		if errors.Is(err, errStopped) {
			return goja.Undefined() // the interrupt ends the script at its next step
		}
		if err != nil {
			r.throw(err)
		}
		return r.datasetObject(ds)
	})
	r.fn(m, "textTokens", func(call goja.FunctionCall) goja.Value {
		s, ok := call.Argument(0).Export().(string)
		if !ok {
			r.throwf("data.textTokens: expects a string, got %s", describe(call.Argument(0)))
		}
		return r.datasetObject(tokens.FromBytes([]byte(s), "text"))
	})
	r.fn(m, "fromTensor", func(call goja.FunctionCall) goja.Value {
		const fn = "data.fromTensor"
		t := r.unwrap(fn, "tokens", call.Argument(0))
		vals, err := t.Int64s()
		if err == nil && t.Dim() != 1 {
			err = fmt.Errorf("%s: token ids must be a 1-d integer tensor, got shape %v", fn, t.Shape())
		}
		if err != nil {
			r.throw(err)
		}
		ds, err := tokens.FromInt64s(vals, "tensor")
		if err != nil {
			r.throw(err)
		}
		return r.datasetObject(ds)
	})
	r.fn(m, "TokenLoader", func(call goja.FunctionCall) goja.Value {
		const fn = "data.TokenLoader"
		ds := r.datasetArg(fn, call.Argument(0))
		o := r.optionsOf(fn, call, 1, "batchSize", "seqLen", "rank", "worldSize", "shuffle", "seed", "vocabSize", "prefetch")
		opts := tokens.LoaderOptions{
			Batch:    r.optInt(fn, o, "batchSize", 0),
			SeqLen:   r.optInt(fn, o, "seqLen", 0),
			Rank:     r.optInt(fn, o, "rank", r.opts.Rank),
			World:    r.optInt(fn, o, "worldSize", max(1, r.opts.WorldSize)),
			Shuffle:  optBool(o, "shuffle", true),
			Seed:     uint64(r.optInt(fn, o, "seed", int(r.opts.Seed))),
			Vocab:    r.optInt(fn, o, "vocabSize", 0),
			Prefetch: r.optInt(fn, o, "prefetch", 0),
		}
		l, err := tokens.NewLoader(ds, opts)
		if err != nil {
			r.throw(err)
		}
		r.closers = append(r.closers, l.Close) // its goroutine reading ahead
		return r.loaderObject(l)
	})
	r.dataModuleLoaders(m)
	return m
}

// datasetObject shows a dataset to scripts: length, vocabSize (the bound of
// its ids: the format's vocabulary, or one more than the largest id of an
// array), source and slice(lo, hi).
func (r *Runtime) datasetObject(ds *tokens.Dataset) *goja.Object {
	obj := r.vm.NewObject()
	must(obj.DefineDataProperty("_dataset", r.vm.ToValue(ds), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE))
	must(obj.Set("length", ds.Len()))
	must(obj.Set("vocabSize", ds.Vocab))
	must(obj.Set("source", ds.Source))
	r.fn(obj, "slice", func(call goja.FunctionCall) goja.Value {
		const fn = "dataset.slice"
		lo := r.intArg(fn, "start", call, 0, 0)
		hi := r.intArg(fn, "end", call, 1, ds.Len())
		if lo < 0 {
			lo += ds.Len()
		}
		if hi < 0 {
			hi += ds.Len()
		}
		s, err := ds.Slice(lo, hi)
		if err != nil {
			r.throw(err)
		}
		return r.datasetObject(s)
	})
	return obj
}

func (r *Runtime) datasetArg(fn string, v goja.Value) *tokens.Dataset {
	if obj, ok := v.(*goja.Object); ok {
		if ds, ok := hidden(obj, "_dataset").(*tokens.Dataset); ok {
			return ds
		}
	}
	r.throwf("%s: expects a token dataset (data.loadTokens, data.textTokens), got %s", fn, describe(v))
	return nil
}

// loaderObject shows a loader to scripts: next() → [x, y] (which throws
// when the batch cannot be read: a file truncated or rewritten, an id
// beyond the vocabulary), stepsPerEpoch, and position (get and set:
// {epoch, windows}, also as stateDict() and loadStateDict(p)) for
// checkpoints.
func (r *Runtime) loaderObject(l *tokens.Loader) *goja.Object {
	obj := r.vm.NewObject()
	must(obj.Set("stepsPerEpoch", l.StepsPerEpoch()))
	r.fn(obj, "next", func(goja.FunctionCall) goja.Value {
		// On the user lane of --trace: what the step waits for its batch
		// (with prefetch, a hand-over of batches read beside the step).
		start := r.opts.Trace.Now()
		x, y, err := l.Next(r.rt)
		r.traceAdd(trace.User, "token batch", start)
		if err != nil {
			r.throw(err)
		}
		return r.tensorArray([]*tensor.Tensor{x, y})
	})
	position := r.vm.ToValue(func(goja.FunctionCall) goja.Value {
		p := l.Position()
		o := r.vm.NewObject() // keys in a fixed order, as JSON shows them
		must(o.Set("epoch", p.Epoch))
		must(o.Set("windows", p.Windows))
		return o
	})
	setPosition := r.vm.ToValue(func(call goja.FunctionCall) goja.Value {
		const fn = "loader.position"
		o, ok := call.Argument(0).(*goja.Object)
		if !ok {
			r.throwf("%s: expects {epoch, windows}, got %s", fn, describe(call.Argument(0)))
		}
		p := tokens.Position{Epoch: r.intValue(fn, "epoch", o.Get("epoch")), Windows: r.intValue(fn, "windows", o.Get("windows"))}
		if err := l.SetPosition(p); err != nil {
			r.throw(err)
		}
		return goja.Undefined()
	})
	must(obj.DefineAccessorProperty("position", position, setPosition, goja.FLAG_FALSE, goja.FLAG_TRUE))
	// stateDict and loadStateDict are the position, for checkpoints.
	must(obj.Set("stateDict", position))
	must(obj.Set("loadStateDict", setPosition))
	return obj
}
