package checkpoint

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
	"github.com/zeroeng/zeroeng/internal/fileio"
	"github.com/zeroeng/zeroeng/internal/hostmem"
)

// A module that ZeRO stage 3 shards is saved as one safetensors file per
// rank, <key>.rank-R-of-N.safetensors, holding the rank's slice of each of
// the module's flat buckets (a 1-D tensor "zeroeng.slice.K" of hi-lo
// elements) and the module's other tensors whole under their own names
// (buffers, parameters no unit shards: the rank's own, which a resume on
// the same ranks gives back to it). Its "zeroeng.slices" metadata says how
// to put the parameters back together:
//
//	{"rank": 1, "world_size": 2,
//	 "buckets": [{"tensor": "zeroeng.slice.0", "numel": 56, "lo": 28, "hi": 56,
//	              "params": [{"names": ["2.weight"], "shape": [3, 8], "offset": 0},
//	                         {"names": ["2.bias"], "shape": [3], "offset": 24}]}],
//	 "whole": ["bn.running_mean"]}
//
// Bucket K is the same in every rank's file (its padded length, its
// parameters with their state-dict names, shapes and element offsets in the
// bucket); the ranks' slices [lo, hi) tile [0, numel). The dtype is the
// slice tensor's.

const sliceMetaKey = "zeroeng.slices"

type sliceMeta struct {
	Rank      int           `json:"rank"`
	WorldSize int           `json:"world_size"`
	Buckets   []sliceBucket `json:"buckets"`
	Whole     []string      `json:"whole"`
}

type sliceBucket struct {
	Tensor string       `json:"tensor"`
	Numel  int          `json:"numel"`
	Lo     int          `json:"lo"`
	Hi     int          `json:"hi"`
	Params []sliceParam `json:"params"`
}

type sliceParam struct {
	Names  []string `json:"names"`
	Shape  []int    `json:"shape"`
	Offset int      `json:"offset"`
}

// bucketTensor names the tensor of a slice file that holds the rank's
// slice of the module's k-th bucket.
func bucketTensor(k int) string { return fmt.Sprintf("zeroeng.slice.%d", k) }

// maxElems bounds every element count and offset of the metadata, so that
// byte offsets computed from them cannot overflow.
const maxElems = 1 << 56

// parseSlices checks the slice metadata of a file's header h against its
// tensors.
func parseSlices(h *safetensors.Header, path string) (*sliceMeta, error) {
	text, ok := h.Metadata[sliceMetaKey]
	if !ok {
		return nil, fmt.Errorf("checkpoint: %s is not a file of slices (no %q metadata)", path, sliceMetaKey)
	}
	var meta sliceMeta
	if err := json.Unmarshal([]byte(text), &meta); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: metadata %q: %v", path, sliceMetaKey, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: %s: metadata %q: %s", path, sliceMetaKey, fmt.Sprintf(format, args...))
	}
	if meta.WorldSize < 1 || meta.Rank < 0 || meta.Rank >= meta.WorldSize {
		return nil, bad("rank %d of %d", meta.Rank, meta.WorldSize)
	}
	claimed := map[string]bool{} // the file's tensors the metadata names
	names := map[string]bool{}   // the state dict's names
	name := func(n string) error {
		if n == "" || names[n] {
			return bad("the name %q is empty or given twice", n)
		}
		names[n] = true
		return nil
	}
	for k, b := range meta.Buckets {
		t, ok := h.Get(b.Tensor)
		switch {
		case !ok || claimed[b.Tensor]:
			return nil, bad("bucket %d's slice is in tensor %q, which the file lacks or which holds another part", k, b.Tensor)
		case b.Numel < 1 || b.Numel > maxElems || b.Lo < 0 || b.Lo >= b.Hi || b.Hi > b.Numel:
			return nil, bad("bucket %d: slice [%d, %d) of %d elements", k, b.Lo, b.Hi, b.Numel)
		case len(t.Shape) != 1 || t.Shape[0] != b.Hi-b.Lo:
			return nil, bad("bucket %d: tensor %q has shape %v for a slice of %d elements", k, b.Tensor, t.Shape, b.Hi-b.Lo)
		}
		claimed[b.Tensor] = true
		end := 0
		for i, p := range b.Params {
			n, ok := elems(p.Shape)
			if !ok || p.Offset < end || p.Offset > b.Numel || n > b.Numel-p.Offset || len(p.Names) == 0 {
				return nil, bad("bucket %d, parameter %d: %d elements of shape %v at %d, in a bucket of %d after element %d", k, i, n, p.Shape, p.Offset, b.Numel, end)
			}
			end = p.Offset + n
			for _, nm := range p.Names {
				if err := name(nm); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, w := range meta.Whole {
		if _, ok := h.Get(w); !ok || claimed[w] {
			return nil, bad("the whole tensor %q is not in the file, or is a slice", w)
		}
		claimed[w] = true
		if err := name(w); err != nil {
			return nil, err
		}
	}
	for _, t := range h.Tensors {
		if !claimed[t.Name] {
			return nil, bad("tensor %q is no part of the metadata", t.Name)
		}
	}
	return &meta, nil
}

// elems is the element count of shape, or false when a dimension is
// negative or the count is too large.
func elems(shape []int) (int, bool) {
	n := 1
	for _, d := range shape {
		if d < 0 || (d > 0 && n > maxElems/d) {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// moduleLayout is a sharded module on this rank: the buckets of its
// ShardedParams that hold its parameters, with their names, and the
// module's tensors that no bucket holds.
type moduleLayout struct {
	buckets []layoutBucket
	whole   []nn.NamedTensor
}

type layoutBucket struct {
	index         int // in the ShardedParams
	params        []*tensor.Tensor
	names         [][]string
	offsets       []int
	numel, lo, hi int
}

// layoutOf finds mod's buckets. A bucket holds parameters of one module
// only: a module that names some of a bucket's parameters but not all is
// an error (save the module that holds the whole ZeRO unit).
func layoutOf(mod Module, world int) (*moduleLayout, error) {
	sh := mod.Sharded
	if n := sh.ProcessGroup().Size(); n != world {
		return nil, fmt.Errorf("checkpoint: module %q is sharded over %d of the %d ranks; checkpoints support ZeRO stage 3 over every rank", mod.Key, n, world)
	}
	named := map[*tensor.Tensor][]string{}
	for _, n := range mod.Tensors {
		named[n.Tensor] = append(named[n.Tensor], n.Name)
	}
	lay := &moduleLayout{}
	inBucket := map[*tensor.Tensor]bool{}
	for i := range sh.NumFlatBuckets() {
		params, offsets, numel, lo, hi := sh.FlatBucket(i)
		b := layoutBucket{index: i, params: params, offsets: offsets, numel: numel, lo: lo, hi: hi}
		for _, p := range params {
			if named[p] != nil {
				b.names = append(b.names, named[p])
			}
		}
		switch len(b.names) {
		case 0:
			continue // another module's
		case len(params):
		default:
			return nil, fmt.Errorf("checkpoint: module %q holds %d of the %d parameters that ZeRO stage 3 shards together in bucket %d: save the module that holds the whole unit", mod.Key, len(b.names), len(params), i)
		}
		for _, p := range params {
			inBucket[p] = true
		}
		lay.buckets = append(lay.buckets, b)
	}
	for _, n := range mod.Tensors {
		if !inBucket[n.Tensor] {
			lay.whole = append(lay.whole, n)
		}
	}
	return lay, nil
}

// sliceWriter prepares this rank's slice file of mod (its bytes are read
// here, on the rank's goroutine) and returns what writes it.
func sliceWriter(path string, mod Module, lay *moduleLayout, rank, world int) (func() (FileInfo, error), error) {
	meta := sliceMeta{Rank: rank, WorldSize: world, Buckets: []sliceBucket{}, Whole: []string{}}
	var raw []safetensors.Tensor
	for k, b := range lay.buckets {
		s, err := mod.Sharded.ParamSlice(b.index)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: module %q: %w", mod.Key, err)
		}
		data, err := tensor.SharedBytes(s)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: module %q, bucket %d: %w", mod.Key, b.index, err)
		}
		sb := sliceBucket{Tensor: bucketTensor(k), Numel: b.numel, Lo: b.lo, Hi: b.hi}
		for j, p := range b.params {
			sb.Params = append(sb.Params, sliceParam{Names: b.names[j], Shape: p.Shape(), Offset: b.offsets[j]})
		}
		meta.Buckets = append(meta.Buckets, sb)
		raw = append(raw, safetensors.Tensor{Name: sb.Tensor, DType: s.DType(), Shape: []int{b.hi - b.lo}, Data: data})
	}
	var whole []tensorio.Named
	for _, n := range lay.whole {
		if strings.HasPrefix(n.Name, "zeroeng.slice.") {
			return nil, fmt.Errorf("checkpoint: module %q: the name %q is the checkpoint's own", mod.Key, n.Name)
		}
		whole = append(whole, tensorio.Named{Name: n.Name, Tensor: n.Tensor})
		meta.Whole = append(meta.Whole, n.Name)
	}
	wraw, err := tensorio.Raw(path, whole)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: module %q: %w", mod.Key, err)
	}
	raw = append(raw, wraw...)
	mb, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	return func() (FileInfo, error) {
		return writeFile(path, func(w io.Writer) error {
			return safetensors.Write(w, raw, map[string]string{sliceMetaKey: string(mb)})
		})
	}, nil
}

// gatherWindow bounds the bytes of one parameter that rank 0 holds at once
// while it writes a consolidated file.
const gatherWindow = 64 << 20

// writeConsolidated writes mod's consolidated <key>.safetensors: rank 0
// writes, every rank sends it its part of each parameter, one window of one
// tensor at a time. It is collective, and every rank goes through every
// tensor even after a failure, so that none waits for another; rank 0
// returns the file's FileInfo and the error.
func writeConsolidated(pg dist.ProcessGroup, path string, mod Module, lay *moduleLayout) (FileInfo, error) {
	type item struct {
		param *tensor.Tensor // a sharded parameter, or
		whole *tensor.Tensor // a tensor rank 0 holds whole
	}
	var specs []safetensors.Spec
	var items []item
	for _, b := range lay.buckets {
		for j, p := range b.params {
			for _, name := range b.names[j] {
				specs = append(specs, safetensors.Spec{Name: name, DType: p.DType(), Shape: p.Shape()})
				items = append(items, item{param: p})
			}
		}
	}
	for _, n := range lay.whole {
		specs = append(specs, safetensors.Spec{Name: n.Name, DType: n.Tensor.DType(), Shape: n.Tensor.Shape()})
		items = append(items, item{whole: n.Tensor})
	}
	// send goes through every tensor, on every rank, writing to w on rank
	// 0 (nil: only the collectives).
	send := func(w *safetensors.StreamWriter) error {
		var first error
		fail := func(err error) {
			if first == nil {
				first = err
			}
		}
		for _, i := range safetensors.DataOrder(specs) {
			it := items[i]
			if it.whole != nil {
				if w != nil && first == nil {
					b, err := tensor.SharedBytes(it.whole)
					if err == nil {
						_, err = w.Write(b)
					}
					if err != nil {
						fail(fmt.Errorf("tensor %q: %w", specs[i].Name, err))
					}
				}
				continue
			}
			p := it.param
			step := max(1, gatherWindow/p.DType().Size())
			for lo := 0; lo < p.Numel(); lo += step {
				b, err := mod.Sharded.GatherParam(p, lo, min(lo+step, p.Numel()), 0)
				if err != nil {
					fail(fmt.Errorf("tensor %q: %w", specs[i].Name, err))
					continue
				}
				if w != nil && first == nil {
					if _, err := w.Write(b); err != nil {
						fail(err)
					}
				}
			}
		}
		if first == nil && w != nil {
			first = w.Close()
		}
		return first
	}
	if pg.Rank() != 0 {
		return FileInfo{}, send(nil)
	}
	sent := false
	info, err := writeFile(path, func(out io.Writer) error {
		sent = true
		w, err := safetensors.NewStreamWriter(out, specs, map[string]string{"format": "pt"})
		if err != nil {
			send(nil)
			return err
		}
		return send(w)
	})
	if !sent {
		send(nil)
	}
	if err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: module %q: %w", mod.Key, err)
	}
	return info, nil
}

// srcTensor is where a checkpoint holds one tensor of a module: whole in a
// file at a byte offset, or in a bucket at an element offset.
type srcTensor struct {
	dt     dtype.DType
	shape  []int
	numel  int
	file   *rangeFile
	at     int64
	bucket *srcBucket
	offset int
}

// srcBucket is a bucket of a module saved in slices: the ranks' parts.
type srcBucket struct {
	dt    dtype.DType
	numel int
	parts []srcPart
}

type srcPart struct {
	lo, hi int
	file   *rangeFile
	at     int64 // the byte offset of element lo in the file
}

// read reads elements [a, b) of t into dst, from every file that holds
// some of them.
func (t *srcTensor) read(a, b int, dst []byte) error {
	es := t.dt.Size()
	if t.bucket == nil {
		_, err := t.file.ReadAt(dst, t.at+int64(a)*int64(es))
		return err
	}
	a, b = a+t.offset, b+t.offset
	got := 0
	for _, p := range t.bucket.parts {
		s, e := max(a, p.lo), min(b, p.hi)
		if s >= e {
			continue
		}
		if _, err := p.file.ReadAt(dst[(s-a)*es:(e-a)*es], p.at+int64(s-p.lo)*int64(es)); err != nil {
			return err
		}
		got += e - s
	}
	if got != b-a {
		return damaged(fmt.Errorf("checkpoint: the slice files hold %d of the %d elements [%d, %d) of a bucket", got, b-a, a, b))
	}
	return nil
}

// spans lists the bytes of the files that elements [a, b) of t lie in.
func (t *srcTensor) spans(a, b int, add func(f *rangeFile, s span)) {
	es := int64(t.dt.Size())
	if t.bucket == nil {
		at := t.at + int64(a)*es
		add(t.file, span{at, at + int64(b-a)*es})
		return
	}
	a, b = a+t.offset, b+t.offset
	for _, p := range t.bucket.parts {
		if s, e := max(a, p.lo), min(b, p.hi); s < e {
			at := p.at + int64(s-p.lo)*es
			add(p.file, span{at, at + int64(e-s)*es})
		}
	}
}

// moduleSource is what a checkpoint holds of a module, by state-dict name.
type moduleSource struct {
	what    string // for messages: the file or files
	tensors map[string]*srcTensor
	own     *sliceMeta // the slices of one rank's file, when only that was read
	ownDT   []dtype.DType
}

// fullSource reads the header of a module's consolidated file.
func fullSource(rd *reader, key string) (*moduleSource, error) {
	name := key + ".safetensors"
	f, err := rd.open(name)
	if err != nil {
		return nil, err
	}
	h, err := safetensors.ReadHeader(f, f.Size(), f.path)
	if err != nil {
		return nil, damaged(fmt.Errorf("checkpoint: %w", err))
	}
	src := &moduleSource{what: f.path, tensors: map[string]*srcTensor{}}
	for _, t := range h.Tensors {
		n, _ := elems(t.Shape)
		src.tensors[t.Name] = &srcTensor{dt: t.DType, shape: t.Shape, numel: n, file: f, at: t.Begin}
	}
	return src, nil
}

// slicesSource reads the headers of a module's slice files: only rank
// only's (only >= 0), or every rank's, taking the whole tensors from rank
// wholeFrom's file.
func slicesSource(rd *reader, key string, shards, only, wholeFrom int) (*moduleSource, error) {
	src := &moduleSource{tensors: map[string]*srcTensor{}}
	var first *sliceMeta
	var buckets []*srcBucket
	ranks := []int{only}
	if only < 0 {
		ranks = nil
		for r := range shards {
			ranks = append(ranks, r)
		}
		src.what = filepath.Join(rd.dir, sliceName(key, 0, shards)) + " and the other slice files"
	} else {
		src.what = filepath.Join(rd.dir, sliceName(key, only, shards))
	}
	for _, r := range ranks {
		name := sliceName(key, r, shards)
		f, err := rd.open(name)
		if err != nil {
			return nil, err
		}
		h, err := safetensors.ReadHeader(f, f.Size(), f.path)
		if err != nil {
			return nil, damaged(fmt.Errorf("checkpoint: %w", err))
		}
		meta, err := parseSlices(h, f.path)
		if err != nil {
			return nil, damaged(err)
		}
		if meta.Rank != r || meta.WorldSize != shards {
			return nil, damaged(fmt.Errorf("checkpoint: %s holds the slices of rank %d of %d", f.path, meta.Rank, meta.WorldSize))
		}
		if first == nil {
			first = meta
			for _, b := range meta.Buckets {
				t, _ := h.Get(b.Tensor)
				sb := &srcBucket{dt: t.DType, numel: b.Numel}
				buckets = append(buckets, sb)
				for _, p := range b.Params {
					n, _ := elems(p.Shape)
					for _, nm := range p.Names {
						src.tensors[nm] = &srcTensor{dt: t.DType, shape: p.Shape, numel: n, bucket: sb, offset: p.Offset}
					}
				}
				src.ownDT = append(src.ownDT, t.DType)
			}
		} else if err := sameBuckets(first, meta); err != nil {
			return nil, damaged(fmt.Errorf("checkpoint: %s and %s: %v", filepath.Join(rd.dir, sliceName(key, ranks[0], shards)), f.path, err))
		}
		for k, b := range meta.Buckets {
			t, _ := h.Get(b.Tensor)
			if t.DType != buckets[k].dt {
				return nil, damaged(fmt.Errorf("checkpoint: %s: bucket %d is %v, %v in the other files", f.path, k, t.DType, buckets[k].dt))
			}
			buckets[k].parts = append(buckets[k].parts, srcPart{lo: b.Lo, hi: b.Hi, file: f, at: t.Begin})
		}
		if r == wholeFrom || only >= 0 {
			for _, w := range meta.Whole {
				if src.tensors[w] != nil {
					return nil, damaged(fmt.Errorf("checkpoint: %s: %q is both whole and a parameter of a bucket", f.path, w))
				}
				t, _ := h.Get(w)
				n, _ := elems(t.Shape)
				src.tensors[w] = &srcTensor{dt: t.DType, shape: t.Shape, numel: n, file: f, at: t.Begin}
			}
		}
	}
	if only >= 0 {
		src.own = first
		return src, nil
	}
	for k, b := range buckets {
		slices.SortFunc(b.parts, func(x, y srcPart) int { return x.lo - y.lo })
		at := 0
		for _, p := range b.parts {
			if p.lo != at {
				return nil, damaged(fmt.Errorf("checkpoint: %s: the slices of bucket %d leave or overlap elements at %d", src.what, k, at))
			}
			at = p.hi
		}
		if at != b.numel {
			return nil, damaged(fmt.Errorf("checkpoint: %s: the slices of bucket %d end at element %d of %d", src.what, k, at, b.numel))
		}
	}
	return src, nil
}

// sameBuckets checks that two ranks' files describe the same buckets.
func sameBuckets(a, b *sliceMeta) error {
	if len(a.Buckets) != len(b.Buckets) {
		return fmt.Errorf("%d buckets and %d", len(a.Buckets), len(b.Buckets))
	}
	for k := range a.Buckets {
		x, y := a.Buckets[k], b.Buckets[k]
		if x.Numel != y.Numel || !slices.EqualFunc(x.Params, y.Params, sameParam) {
			return fmt.Errorf("bucket %d differs", k)
		}
	}
	return nil
}

func sameParam(x, y sliceParam) bool {
	return x.Offset == y.Offset && slices.Equal(x.Shape, y.Shape) && slices.Equal(x.Names, y.Names)
}

// sameLayout reports whether this rank's saved slices (own) are exactly
// its slices now: the same buckets, bounds and parameters.
func (src *moduleSource) sameLayout(lay *moduleLayout) bool {
	own := src.own
	if own == nil || len(own.Buckets) != len(lay.buckets) {
		return false
	}
	for k, sb := range own.Buckets {
		b := lay.buckets[k]
		if sb.Numel != b.numel || sb.Lo != b.lo || sb.Hi != b.hi || len(sb.Params) != len(b.params) || src.ownDT[k] != b.params[0].DType() {
			return false
		}
		for j, p := range b.params {
			if !sameParam(sb.Params[j], sliceParam{Names: b.names[j], Shape: p.Shape(), Offset: b.offsets[j]}) {
				return false
			}
		}
	}
	return true
}

// checkNames compares the checkpoint's tensors with the module's as
// load_state_dict(strict=True) does, with its messages.
func (src *moduleSource) checkNames(key string, want []nn.NamedTensor) error {
	var missing, mismatched, unexpected []string
	known := map[string]bool{}
	for _, n := range want {
		known[n.Name] = true
		s := src.tensors[n.Name]
		if s == nil {
			missing = append(missing, n.Name)
			continue
		}
		if !slices.Equal(s.shape, n.Tensor.Shape()) {
			mismatched = append(mismatched, fmt.Sprintf("size mismatch for %s: copying a param with shape %v from checkpoint, the shape in current model is %v", n.Name, s.shape, n.Tensor.Shape()))
		}
	}
	for name := range src.tensors {
		if !known[name] {
			unexpected = append(unexpected, name)
		}
	}
	sort.Strings(unexpected)
	if err := nn.LoadStateDictError(true, missing, unexpected, mismatched); err != nil {
		return fmt.Errorf("checkpoint: %s: error(s) in loading %q:\n\t%w", src.what, key, err)
	}
	return nil
}

// moduleLoad is what read planned for one module: the parts of the
// checkpoint's files that apply reads straight into the module's tensors.
type moduleLoad struct {
	segs    []segment
	written []int // the ShardedParams buckets the segments write
}

// segment is n elements of src from element from on, read into elements
// [at, at+n) of this rank's slice of bucket (bucket >= 0), or into target
// whole (at 0).
type segment struct {
	bucket int
	at, n  int
	target *tensor.Tensor
	src    *srcTensor
	from   int
}

// wholeSegments read the tensors of the source named as tensors' names
// whole into them. A tensor under two names (tied weights) is read once,
// from the last, as load_state_dict's copies leave it.
func wholeSegments(src *moduleSource, tensors []nn.NamedTensor) []segment {
	var segs []segment
	at := map[*tensor.Tensor]int{}
	for _, n := range tensors {
		s := src.tensors[n.Name]
		seg := segment{bucket: -1, n: s.numel, target: n.Tensor, src: s}
		if i, ok := at[n.Tensor]; ok {
			segs[i] = seg
			continue
		}
		at[n.Tensor] = len(segs)
		segs = append(segs, seg)
	}
	return segs
}

// readFromFull plans the load of a module without slices from its
// consolidated file: every tensor read whole, straight into the module's.
func readFromFull(rd *reader, mod Module) (*moduleLoad, error) {
	src, err := fullSource(rd, mod.Key)
	if err != nil {
		return nil, err
	}
	if err := src.checkNames(mod.Key, mod.Tensors); err != nil {
		return nil, err
	}
	return &moduleLoad{segs: wholeSegments(src, mod.Tensors)}, nil
}

// readFromSlices plans the load of a module without slices from a checkpoint
// that has it in slices: every tensor is read whole from the slice files.
func readFromSlices(rd *reader, pg dist.ProcessGroup, m *Manifest, mod Module, info ShardedInfo) (*moduleLoad, error) {
	wholeFrom := 0
	if info.Shards == pg.Size() {
		wholeFrom = pg.Rank()
	}
	src, err := slicesSource(rd, mod.Key, info.Shards, -1, wholeFrom)
	if err != nil {
		return nil, err
	}
	if err := src.checkNames(mod.Key, mod.Tensors); err != nil {
		return nil, err
	}
	return &moduleLoad{segs: wholeSegments(src, mod.Tensors)}, nil
}

// readIntoSlices plans the load of a sharded module: from this rank's own
// file alone when it was saved under this very layout, else from the parts
// of the consolidated file or of the slice files that overlap the rank's
// slices (positioned reads), never a whole module.
func readIntoSlices(rd *reader, pg dist.ProcessGroup, m *Manifest, mod Module) (*moduleLoad, error) {
	lay, err := layoutOf(mod, pg.Size())
	if err != nil {
		return nil, err
	}
	info, sliced := m.sharded(mod.Key)
	full := slices.Contains(m.Modules, mod.Key)
	var src *moduleSource
	if sliced && info.Shards == pg.Size() {
		if src, err = slicesSource(rd, mod.Key, info.Shards, pg.Rank(), pg.Rank()); err != nil {
			return nil, err
		}
		if !src.sameLayout(lay) {
			src = nil
		}
	}
	ml := &moduleLoad{}
	if src != nil {
		// Saved under this layout: each slice as it was.
		if err := src.checkNames(mod.Key, mod.Tensors); err != nil {
			return nil, err
		}
		for k, b := range lay.buckets {
			part := src.tensors[b.names[0][0]].bucket.parts[0]
			n := b.hi - b.lo
			whole := &srcTensor{dt: src.ownDT[k], shape: []int{n}, numel: n, file: part.file, at: part.at}
			ml.segs = append(ml.segs, segment{bucket: b.index, n: n, src: whole})
			ml.written = append(ml.written, b.index)
		}
	} else {
		switch {
		case full:
			src, err = fullSource(rd, mod.Key)
		case sliced:
			wholeFrom := 0
			if info.Shards == pg.Size() {
				wholeFrom = pg.Rank()
			}
			src, err = slicesSource(rd, mod.Key, info.Shards, -1, wholeFrom)
		default:
			return nil, fmt.Errorf("checkpoint: %s has no module %q (it has %s)", rd.dir, mod.Key, keyList(m.moduleKeys()))
		}
		if err != nil {
			return nil, err
		}
		if err := src.checkNames(mod.Key, mod.Tensors); err != nil {
			return nil, err
		}
		for _, b := range lay.buckets {
			for j, p := range b.params {
				s, e := max(b.offsets[j], b.lo), min(b.offsets[j]+p.Numel(), b.hi)
				if s >= e {
					continue
				}
				t := src.tensors[b.names[j][0]]
				ml.segs = append(ml.segs, segment{bucket: b.index, at: s - b.lo, n: e - s, src: t, from: s - b.offsets[j]})
			}
			ml.written = append(ml.written, b.index)
		}
	}
	ml.segs = append(ml.segs, wholeSegments(src, lay.whole)...)
	return ml, nil
}

// alloc makes a buffer for n bytes of a checkpoint, if the host has them.
func alloc(n int) ([]byte, error) {
	if err := hostmem.Check(int64(n)); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return make([]byte, n), nil
}

// apply reads the planned parts straight into the module's tensors.
func (ml *moduleLoad) apply(mod Module) error {
	if len(ml.segs) == 0 {
		return nil
	}
	var rt *tensor.Runtime
	for _, n := range mod.Tensors {
		rt = n.Tensor.Runtime()
		break
	}
	sc := rt.OpenScope()
	defer sc.Close()
	var f fills
	var stage []byte
	var err error
	rt.NoGrad(func() {
		for _, s := range ml.segs {
			dst := s.target
			if s.bucket >= 0 {
				if dst, err = mod.Sharded.ParamSlice(s.bucket); err != nil {
					return
				}
			}
			if err = readInto(&f, dst, s.at, s.src, s.from, s.from+s.n, &stage); err != nil {
				return
			}
		}
	})
	if err == nil {
		err = f.run()
	}
	for _, i := range ml.written {
		if werr := mod.Sharded.SliceWritten(i); err == nil {
			err = werr
		}
	}
	return err
}

// sharded returns the manifest's entry for a module saved in slices.
func (m *Manifest) sharded(key string) (ShardedInfo, bool) {
	for _, s := range m.Sharded {
		if s.Key == key {
			return s, true
		}
	}
	return ShardedInfo{}, false
}

// moduleKeys lists the modules of the checkpoint, each once.
func (m *Manifest) moduleKeys() []string {
	keys := slices.Clone(m.Modules)
	for _, s := range m.Sharded {
		if !slices.Contains(keys, s.Key) {
			keys = append(keys, s.Key)
		}
	}
	return keys
}

// ExportModule writes module key of the checkpoint at path (a step's
// folder) to out as one safetensors file with the module's own names and
// {"format": "pt"}, the file PyTorch loads, atomically: the checkpoint's
// consolidated file when it has one, else the file put together from the
// ranks' slice files, tensor by tensor, each read in parts from the files
// that hold it (every block checked against the manifest). It needs no
// ranks and holds a few megabytes at a time, whatever the model's size;
// the file is byte for byte the one a save without sharding writes. With
// key "" the checkpoint must hold one module.
func ExportModule(path, key, out string) (string, error) {
	m, err := ReadManifest(path)
	if err != nil {
		return "", err
	}
	keys := m.moduleKeys()
	if key == "" {
		if len(keys) != 1 {
			return "", fmt.Errorf("checkpoint: %s holds the modules %s: name one", path, keyList(keys))
		}
		key = keys[0]
	}
	if !slices.Contains(keys, key) {
		return "", fmt.Errorf("checkpoint: %s has no module %q (it has %s)", path, key, keyList(keys))
	}
	rd := newReader(path, m)
	defer rd.close()
	var src *moduleSource
	var meta map[string]string
	if slices.Contains(m.Modules, key) {
		if src, err = fullSource(rd, key); err != nil {
			return "", err
		}
		f, _ := rd.open(key + ".safetensors")
		h, _ := safetensors.ReadHeader(f, f.Size(), f.path)
		meta = h.Metadata
	} else {
		info, _ := m.sharded(key)
		if src, err = slicesSource(rd, key, info.Shards, -1, 0); err != nil {
			return "", err
		}
		meta = map[string]string{"format": "pt"}
	}
	names := make([]string, 0, len(src.tensors))
	for n := range src.tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	specs := make([]safetensors.Spec, len(names))
	for i, n := range names {
		specs[i] = safetensors.Spec{Name: n, DType: src.tensors[n].dt, Shape: src.tensors[n].shape}
	}
	err = fileio.WriteAtomic("checkpoint", out, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		w, err := safetensors.NewStreamWriter(bw, specs, meta)
		if err != nil {
			return err
		}
		buf := make([]byte, 4<<20)
		for _, i := range safetensors.DataOrder(specs) {
			t := src.tensors[names[i]]
			step := max(1, len(buf)/t.dt.Size())
			for lo := 0; lo < t.numel; lo += step {
				hi := min(lo+step, t.numel)
				b := buf[:(hi-lo)*t.dt.Size()]
				if err := t.read(lo, hi, b); err != nil {
					return err
				}
				if _, err := w.Write(b); err != nil {
					return err
				}
			}
		}
		if err := w.Close(); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "checkpoint:") {
			return "", fmt.Errorf("checkpoint: writing %s: %w", out, err)
		}
		return "", err
	}
	return key, nil
}
