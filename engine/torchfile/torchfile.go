// Package torchfile reads and writes PyTorch's own files, those of
// torch.save and torch.load (.pt, .pth, pytorch_model.bin), without running
// any code a file names.
//
// A file is a pickle of the saved object (a state dict, a checkpoint)
// whose tensors refer, by persistent ids, to storages kept beside it. It
// comes in two layouts:
//
//   - The zip format, torch.save's default since PyTorch 1.6: a zip archive
//     of uncompressed records under one folder: <folder>/data.pkl (the
//     pickle), <folder>/data/<key> (the raw elements of storage <key>),
//     <folder>/version and, written by PyTorch 2.x, <folder>/byteorder
//     ("little" or "big": the storages' byte order; little endian when
//     absent).
//   - The legacy format (_use_new_zipfile_serialization=False, and every
//     file before 1.6): pickles of a magic number, the protocol version
//     1001 and a dict of system information; the object's pickle; a
//     pickle of the list of storage keys; then, in that order, each
//     storage as a little-endian int64 element count and its elements,
//     little endian.
//
// A pickle is a program for a stack machine that can import and call any
// Python function; torch.load runs it. This package runs a restricted
// unpickler instead (pickle.go): the binary opcodes that build plain data
// (protocols 1 to 5; protocol 0's text opcodes are refused), and calls of
// an allowlist of globals, the ones torch.save writes for a state dict:
// collections.OrderedDict, the tensor rebuilders
// torch._utils._rebuild_tensor_v2, _rebuild_tensor, _rebuild_parameter and
// _rebuild_parameter_with_state, and the storage types
// (torch.FloatStorage, ...). Any other global (posix.system,
// builtins.eval, a model's class) is an error that names it, and so is
// every opcode that makes an arbitrary object (INST, OBJ, NEWOBJ, EXT*) or
// sets attributes on one (BUILD, except the attributes torch puts on a
// state dict, which are dropped).
//
// What a file holds comes back as a tree of nil (None), bool, int64,
// float64, string, *Tensor, *Dict (dict and OrderedDict, keys strings or
// integers) and *List (list and tuple). Anything else — bytes, sets,
// integers wider than 64 bits, a bare storage — is an error naming it.
//
// Each tensor comes back contiguous and little endian. A tensor that is a
// view of its storage (an offset, strides, a transpose, an expansion) is
// materialised as a tensor of its own; a tensor that covers a contiguous
// run of its storage shares that memory with the other tensors of the
// storage (Data is read-only); a tensor that appears twice in the object
// (tied weights) is one *Tensor. int8 and int16 tensors are widened to
// int32 exactly, as engine/npy widens them, since the engine has no
// kernels for them; complex, quantized, unsigned 16-to-64-bit and float8
// tensors are refused.
//
// Nothing a file says makes the reader allocate much more than the file:
// every record and storage is checked against the file's size before it
// is read, and the tensors made by copying views or widening integers may
// take at most 4 times the file's size (and 64 KiB) in all: a file of many
// overlapping views of one storage is refused. Objects nest at most
// MaxDepth deep, and an object that contains itself is refused.
//
// Write produces the zip format, which torch.load reads (PyTorch 1.6 and
// later; with weights_only=True too, for what that unpickler knows):
// every dict as an OrderedDict, every tensor in a storage of its own.
package torchfile

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"strings"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/internal/fileio"
	"github.com/zeroeng/zeroeng/internal/safefile"
)

// MaxDepth is how deep readers and writers let dicts and lists nest: far
// more than any state dict or checkpoint (3 or 4), and little enough that
// walking a hostile file's objects cannot exhaust the stack.
const MaxDepth = 100

// Tensor is a tensor of a file: element type, shape and contiguous,
// little-endian, row-major data of exactly numel·DType.Size() bytes. A 0-d
// tensor has an empty Shape and one element.
type Tensor struct {
	DType dtype.DType
	Shape []int
	Data  []byte
}

// Dict is a Python dict or OrderedDict: its items in insertion order. A
// key is a string or an int64 (an optimizer's state is keyed by parameter
// index); keys are unique.
type Dict struct {
	Items []Item

	index map[any]int // key → position in Items, while unpickling
}

// Item is one key and value of a Dict.
type Item struct {
	Key   any
	Value any
}

// Get returns the value of key.
func (d *Dict) Get(key any) (any, bool) {
	if d.index != nil {
		i, ok := d.index[key]
		if !ok {
			return nil, false
		}
		return d.Items[i].Value, true
	}
	for _, it := range d.Items { // a Dict built by hand
		if it.Key == key {
			return it.Value, true
		}
	}
	return nil, false
}

// set sets key to v, keeping the position of a key already there, as a
// Python dict does.
func (d *Dict) set(key, v any) {
	if d.index == nil {
		d.index = map[any]int{}
	}
	if i, ok := d.index[key]; ok {
		d.Items[i].Value = v
		return
	}
	d.index[key] = len(d.Items)
	d.Items = append(d.Items, Item{key, v})
}

// List is a Python list, or a tuple when Tuple is set.
type List struct {
	Items []any
	Tuple bool
}

// zipMagic starts every zip archive: a local file header.
const zipMagic = "PK\x03\x04"

// Parse parses a whole PyTorch file held in memory.
func Parse(data []byte) (any, error) {
	return read(bytes.NewReader(data), int64(len(data)), "")
}

// ReadFile reads the PyTorch file at path. Only the storages of the
// tensors the object holds are read.
func ReadFile(path string) (any, error) {
	f, fi, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("torchfile: %w", err)
	}
	defer f.Close()
	return read(f, fi.Size(), path)
}

// read reads the file of size bytes in r, named path in errors.
func read(r io.ReaderAt, size int64, path string) (any, error) {
	p := prefix(path)
	var head [512]byte
	n, err := r.ReadAt(head[:min(size, int64(len(head)))], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, p.errorf("%w", err)
	}
	f := &file{p: p, r: r, size: size, budget: 4*size + 64<<10,
		tensors: map[*Tensor]*view{}, storages: map[string]*storage{}}
	switch h := head[:n]; {
	case bytes.HasPrefix(h, []byte(zipMagic)):
		return f.readZip()
	case len(h) > 0 && h[0] == opProto:
		return f.readLegacy()
	default:
		return nil, p.errorf("not a PyTorch file (%s)", whatIs(h))
	}
}

// whatIs names what a file that is neither a zip archive nor a pickle
// probably is, from its first bytes.
func whatIs(h []byte) string {
	switch {
	case len(h) == 0:
		return "it is empty"
	case bytes.HasPrefix(h, []byte("\x93NUMPY")):
		return "it is a NumPy .npy file: use io.loadNpy"
	case len(h) >= 9 && binary.LittleEndian.Uint64(h) < 1<<27 && h[8] == '{':
		return "it looks like a safetensors file: use io.loadSafetensors"
	case len(h) >= 262 && string(h[257:262]) == "ustar":
		return "it is a tar archive, the format of PyTorch before 0.1.10, which is not supported"
	}
	return fmt.Sprintf("neither a zip archive nor a pickle: it starts with %q", h[:min(len(h), 8)])
}

// file is a file being read.
type file struct {
	p    prefix
	r    io.ReaderAt
	size int64

	bigEndian bool  // the storages' elements are big endian (zip byteorder record)
	read      int64 // storage bytes read so far
	// budget is what the tensors that cannot share their storage's memory
	// (views copied, integers widened) may still allocate.
	budget int64
	// tensors are the tensors the pickle made, until they are
	// materialised from their storage.
	tensors map[*Tensor]*view

	storages map[string]*storage // by key

	records map[string]*zip.File // zip: the archive's records, by name
	dir     string               // zip: the folder of the records
}

// storage is a storage a file holds: its key, element type and size, and
// where its elements are.
type storage struct {
	key   string
	typ   *storageType
	numel int64
	at    int64 // offset of the elements in the file; -1 until known
	crc   uint32
	check bool // crc is the record's checksum
	data  []byte
}

// storageRef is what a persistent id refers to: elements [offset,
// offset+numel) of a storage (a legacy file's storage views; all of it
// otherwise).
type storageRef struct {
	s             *storage
	offset, numel int64
}

// view is a tensor the pickle made, before it is read: shape and strides
// over elements of a storage from offset on.
type view struct {
	ref    storageRef
	offset int64
	shape  []int64
	stride []int64
	numel  int64
}

// readZip reads the zip format.
func (f *file) readZip() (any, error) {
	zr, err := zip.NewReader(f.r, f.size)
	if err != nil {
		return nil, f.p.errorf("not a valid zip archive: %v", err)
	}
	if len(zr.File) == 0 {
		return nil, f.p.errorf("the zip archive holds no records")
	}
	first := zr.File[0].Name
	i := strings.IndexByte(first, '/')
	if i < 0 {
		return nil, f.p.errorf("not a PyTorch zip file: its first record %q is not in a folder", first)
	}
	f.dir = first[:i+1]
	f.records = make(map[string]*zip.File, len(zr.File))
	for _, r := range zr.File {
		if _, dup := f.records[r.Name]; dup {
			return nil, f.p.errorf("record %q appears twice in the zip archive", r.Name)
		}
		f.records[r.Name] = r
	}
	pkl, ok := f.records[f.dir+"data.pkl"]
	if !ok {
		return nil, f.p.errorf("not a PyTorch zip file: no record %sdata.pkl", f.dir)
	}
	if _, ok := f.records[f.dir+"constants.pkl"]; ok {
		return nil, f.p.errorf("a TorchScript archive (torch.jit.save), which holds code: save the model's state_dict() with torch.save instead")
	}
	if bo, ok := f.records[f.dir+"byteorder"]; ok {
		b, err := f.record(bo, 16)
		if err != nil {
			return nil, err
		}
		switch string(b) {
		case "little":
		case "big":
			f.bigEndian = true
		default:
			return nil, f.p.errorf("record %s is %q, want \"little\" or \"big\"", bo.Name, b)
		}
	}
	data, err := f.record(pkl, f.size)
	if err != nil {
		return nil, err
	}
	u := f.newUnpickler(newInput(bytes.NewReader(data), 0, int64(len(data))))
	u.persistentLoad = f.zipStorage
	obj, err := u.load()
	if err != nil {
		return nil, err
	}
	if extra := u.in.size - u.in.pos; extra > 0 {
		return nil, f.p.errorf("%d bytes after the end of %s's pickle", extra, pkl.Name)
	}
	return f.finish(obj)
}

// record reads a whole record of at most limit bytes.
func (f *file) record(r *zip.File, limit int64) ([]byte, error) {
	at, n, err := f.recordSpan(r)
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, f.p.errorf("record %s is %d bytes, more than the %d it may have", r.Name, n, limit)
	}
	return f.readAt(r.Name, at, n, r.CRC32, true)
}

// recordSpan is where a record's bytes are in the file: only uncompressed
// records, inside the file, are read, as torch.save writes them.
func (f *file) recordSpan(r *zip.File) (at, n int64, err error) {
	if r.Method != zip.Store {
		return 0, 0, f.p.errorf("record %s is compressed (method %d): PyTorch files hold uncompressed records", r.Name, r.Method)
	}
	if r.CompressedSize64 != r.UncompressedSize64 {
		return 0, 0, f.p.errorf("record %s is uncompressed but its sizes differ (%d and %d)", r.Name, r.CompressedSize64, r.UncompressedSize64)
	}
	at, err = r.DataOffset()
	if err != nil {
		return 0, 0, f.p.errorf("record %s: %v", r.Name, err)
	}
	if at < 0 || r.UncompressedSize64 > uint64(f.size) || at > f.size-int64(r.UncompressedSize64) {
		return 0, 0, f.p.errorf("record %s of %d bytes at offset %d is past the end of the %d-byte file", r.Name, r.UncompressedSize64, at, f.size)
	}
	return at, int64(r.UncompressedSize64), nil
}

// readAt reads n bytes at offset at, which the caller checked are inside
// the file, and checks their CRC-32 when check is set.
func (f *file) readAt(what string, at, n int64, crc uint32, check bool) ([]byte, error) {
	b, err := fileio.ReadExact(io.NewSectionReader(f.r, at, n), int(n), true)
	if err != nil {
		return nil, f.p.errorf("%s: reading %d bytes at offset %d: %w", what, n, at, err)
	}
	if check && crc32.ChecksumIEEE(b) != crc {
		return nil, f.p.errorf("%s: checksum mismatch (the file is corrupt)", what)
	}
	return b, nil
}

// zipStorage resolves a zip file's persistent id: ('storage', type, key,
// location, numel).
func (f *file) zipStorage(u *unpickler, pid any) (any, error) {
	args, err := u.pidTuple(pid, 5, 5)
	if err != nil {
		return nil, err
	}
	s, err := u.pidStorage(args)
	if err != nil {
		return nil, err
	}
	if s.at < 0 {
		name := f.dir + "data/" + s.key
		r, ok := f.records[name]
		if !ok {
			return nil, f.p.errorf("storage %q has no record %s", s.key, name)
		}
		at, n, err := f.recordSpan(r)
		if err != nil {
			return nil, err
		}
		if want := s.numel * int64(s.typ.size); n != want {
			return nil, f.p.errorf("record %s is %d bytes, but storage %q of %d elements of torch.%s needs %d", name, n, s.key, s.numel, s.typ.name, want)
		}
		s.at, s.crc, s.check = at, r.CRC32, true
	}
	return storageRef{s, 0, s.numel}, nil
}

// legacyMagic is the legacy format's magic number, 0x1950a86a20f9469cfc6c,
// as the pickle's LONG1 holds it: little endian.
var legacyMagic = string([]byte{0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19})

// legacyProtocol is the legacy format's protocol version.
const legacyProtocol = 1001

// readLegacy reads the legacy format.
func (f *file) readLegacy() (any, error) {
	in := newInput(f.r, 0, f.size)
	next := func(what string) (any, error) {
		v, err := f.newUnpickler(in).load()
		if err != nil {
			return nil, fmt.Errorf("%w (in the %s)", err, what)
		}
		return v, nil
	}
	magic, err := next("magic number")
	if err != nil {
		return nil, err
	}
	if m, ok := magic.(bigInt); !ok || string(m) != legacyMagic {
		return nil, f.p.errorf("not a PyTorch file: a pickle of %s, not the magic number of PyTorch's legacy format", typeName(magic))
	}
	proto, err := next("protocol version")
	if err != nil {
		return nil, err
	}
	if proto != int64(legacyProtocol) {
		return nil, f.p.errorf("legacy format protocol version %v, want %d", proto, legacyProtocol)
	}
	// The system information says the writer's byte order, but PyTorch
	// writes and reads a legacy file's storages little endian whatever it
	// says, and so does this reader.
	if info, err := next("system information"); err != nil {
		return nil, err
	} else if _, ok := info.(*Dict); !ok {
		return nil, f.p.errorf("the legacy format's system information is %s, want a dict", typeName(info))
	}
	u := f.newUnpickler(in)
	views := map[string]storageRef{}
	u.persistentLoad = func(u *unpickler, pid any) (any, error) {
		return f.legacyStorage(u, pid, views)
	}
	obj, err := u.load()
	if err != nil {
		return nil, err
	}
	keysObj, err := next("list of storage keys")
	if err != nil {
		return nil, err
	}
	keys, ok := keysObj.(*List)
	if !ok || keys.Tuple {
		return nil, f.p.errorf("the list of storage keys is %s, want a list", typeName(keysObj))
	}
	at := in.pos
	seen := map[string]bool{}
	for _, k := range keys.Items {
		key, ok := k.(string)
		if !ok {
			return nil, f.p.errorf("a storage key is %s, want a string", typeName(k))
		}
		s, ok := f.storages[key]
		if !ok || seen[key] {
			return nil, f.p.errorf("storage key %q is listed twice, or for no storage of the object", key)
		}
		seen[key] = true
		if at > f.size-8 {
			return nil, f.p.errorf("the file ends at %d bytes, before storage %q", f.size, key)
		}
		var hdr [8]byte
		if _, err := f.r.ReadAt(hdr[:], at); err != nil {
			return nil, f.p.errorf("storage %q: reading its size at offset %d: %w", key, at, err)
		}
		if n := int64(binary.LittleEndian.Uint64(hdr[:])); n != s.numel {
			return nil, f.p.errorf("storage %q holds %d elements, but the object's pickle says %d", key, n, s.numel)
		}
		at += 8
		n := s.numel * int64(s.typ.size)
		if n > f.size-at {
			return nil, f.p.errorf("storage %q of %d elements of torch.%s needs %d bytes, but %d remain in the file", key, s.numel, s.typ.name, n, f.size-at)
		}
		s.at = at
		at += n
	}
	if len(seen) != len(f.storages) {
		for k := range f.storages {
			if !seen[k] {
				return nil, f.p.errorf("storage %q of the object is not in the list of storage keys", k)
			}
		}
	}
	if at != f.size {
		return nil, f.p.errorf("%d bytes after the last storage", f.size-at)
	}
	return f.finish(obj)
}

// legacyStorage resolves a legacy file's persistent id: ('storage', type,
// key, location, numel, view), where view is None or (view key, offset,
// numel), a part of the storage that PyTorch before 1.0 saved.
func (f *file) legacyStorage(u *unpickler, pid any, views map[string]storageRef) (any, error) {
	args, err := u.pidTuple(pid, 6, 6)
	if err != nil {
		return nil, err
	}
	s, err := u.pidStorage(args)
	if err != nil {
		return nil, err
	}
	if args[5] == nil {
		return storageRef{s, 0, s.numel}, nil
	}
	v, ok := args[5].(*List)
	if !ok || len(v.Items) != 3 {
		return nil, f.p.errorf("storage %q: view %s, want None or (key, offset, size)", s.key, typeName(args[5]))
	}
	key, ok1 := v.Items[0].(string)
	off, ok2 := v.Items[1].(int64)
	n, ok3 := v.Items[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return nil, f.p.errorf("storage %q: view (%s, %s, %s), want (key, offset, size)", s.key, typeName(v.Items[0]), typeName(v.Items[1]), typeName(v.Items[2]))
	}
	if r, ok := views[key]; ok { // as torch.load: a view key names one view
		return r, nil
	}
	if off < 0 || n < 0 || off > s.numel || n > s.numel-off {
		return nil, f.p.errorf("storage %q: view %q of elements %d to %d is outside its %d elements", s.key, key, off, off+n, s.numel)
	}
	r := storageRef{s, off, n}
	views[key] = r
	return r, nil
}

// finish checks the object the pickle made, materialises its tensors and
// returns it.
func (f *file) finish(obj any) (any, error) {
	heights := map[any]int{}
	if _, err := f.walk(obj, 0, heights, "the object"); err != nil {
		return nil, err
	}
	return obj, nil
}

// onPath marks a container being walked, in walk's heights.
const onPath = -1

// walk checks v, at depth (where names it in errors), and materialises its
// tensors. It returns the height of v: how deep its containers nest. A
// container shared by several parents is walked once (heights); one met
// again while it is walked contains itself.
func (f *file) walk(v any, depth int, heights map[any]int, where string) (int, error) {
	if depth > MaxDepth {
		return 0, f.p.errorf("%s: objects nest more than %d deep", where, MaxDepth)
	}
	var items []any
	switch x := v.(type) {
	case nil, bool, int64, float64, string:
		return 0, nil
	case *Tensor:
		if vw, ok := f.tensors[x]; ok {
			delete(f.tensors, x)
			if err := f.materialise(x, vw, where); err != nil {
				return 0, err
			}
		}
		return 0, nil
	case *Dict:
		for _, it := range x.Items {
			items = append(items, it.Value)
		}
	case *List:
		items = x.Items
	default:
		return 0, f.p.errorf("%s is %s, which a PyTorch state dict does not hold", where, typeName(v))
	}
	switch h, ok := heights[v]; {
	case ok && h == onPath:
		return 0, f.p.errorf("%s contains itself", where)
	case ok && depth+h > MaxDepth:
		return 0, f.p.errorf("%s: objects nest more than %d deep", where, MaxDepth)
	case ok:
		return h, nil
	}
	heights[v] = onPath
	h := 0
	for i, c := range items {
		ch, err := f.walk(c, depth+1, heights, childName(v, i, where))
		if err != nil {
			return 0, err
		}
		h = max(h, ch+1)
	}
	heights[v] = h
	return h, nil
}

// childName names item i of container v, which where names.
func childName(v any, i int, where string) string {
	if d, ok := v.(*Dict); ok {
		if s, ok := d.Items[i].Key.(string); ok {
			return fmt.Sprintf("%s[%q]", where, s)
		}
		return fmt.Sprintf("%s[%v]", where, d.Items[i].Key)
	}
	return fmt.Sprintf("%s[%d]", where, i)
}

// storageData returns s's elements, read once, little endian, booleans 0
// or 1.
func (f *file) storageData(s *storage) ([]byte, error) {
	if s.data != nil || s.numel == 0 {
		return s.data, nil
	}
	n := s.numel * int64(s.typ.size)
	// Records of a zip archive may overlap: all the storages read take at
	// most the file's size, as they do in a file PyTorch wrote.
	if n > f.size-f.read {
		return nil, f.p.errorf("storage %q: its %d bytes and the %d of the storages read before it are more than the %d-byte file", s.key, n, f.read, f.size)
	}
	f.read += n
	b, err := f.readAt(fmt.Sprintf("storage %q", s.key), s.at, n, s.crc, s.check)
	if err != nil {
		return nil, err
	}
	if f.bigEndian {
		swap(b, s.typ.size)
	}
	if s.typ.dt == dtype.Bool {
		for i, c := range b {
			if c > 1 {
				b[i] = 1
			}
		}
	}
	s.data = b
	return b, nil
}

// swap reverses the bytes of each size-byte element of b.
func swap(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		e := b[i : i+size]
		for j, k := 0, size-1; j < k; j, k = j+1, k-1 {
			e[j], e[k] = e[k], e[j]
		}
	}
}

// materialise reads t's elements through its view of a storage.
func (f *file) materialise(t *Tensor, v *view, where string) error {
	data, err := f.storageData(v.ref.s)
	if err != nil {
		return fmt.Errorf("%w (tensor %s)", err, where)
	}
	typ := v.ref.s.typ
	in, out := int64(typ.size), int64(typ.dt.Size())
	base := v.ref.offset + v.offset
	if in == out && contiguous(v.shape, v.stride) {
		t.Data = data[base*in : (base+v.numel)*in : (base+v.numel)*in]
		return nil
	}
	hi, lo := bits.Mul64(uint64(v.numel), uint64(out))
	if hi != 0 || lo > uint64(f.budget) {
		return f.p.errorf("tensor %s: its %d elements of %v take %d bytes of copies, more than the %d left of 4 times the file's size", where, v.numel, typ.dt, v.numel*out, f.budget)
	}
	f.budget -= int64(lo)
	dst := make([]byte, lo)
	nd := len(v.shape)
	idx := make([]int64, nd)
	src := base
	for i := int64(0); i < v.numel; i++ {
		e := data[src*in : (src+1)*in]
		d := dst[i*out : (i+1)*out]
		switch {
		case in == out:
			copy(d, e)
		case in == 1: // int8 -> int32
			binary.LittleEndian.PutUint32(d, uint32(int32(int8(e[0]))))
		default: // int16 -> int32
			binary.LittleEndian.PutUint32(d, uint32(int32(int16(binary.LittleEndian.Uint16(e)))))
		}
		for k := nd - 1; k >= 0; k-- {
			idx[k]++
			src += v.stride[k]
			if idx[k] < v.shape[k] {
				break
			}
			src -= v.shape[k] * v.stride[k]
			idx[k] = 0
		}
	}
	t.Data = dst
	return nil
}

// contiguous reports whether strides are the row-major strides of shape
// (dimensions of size 1 may have any stride).
func contiguous(shape, stride []int64) bool {
	want := int64(1)
	for k := len(shape) - 1; k >= 0; k-- {
		if shape[k] == 0 {
			return true
		}
		if shape[k] != 1 && stride[k] != want {
			return false
		}
		want *= shape[k]
	}
	return true
}

// typeName names the Python type of an unpickled value in errors.
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "a bool"
	case int64:
		return "an int"
	case bigInt:
		return fmt.Sprintf("an integer of %d bytes, wider than 64 bits", len(x))
	case float64:
		return "a float"
	case string:
		return "a string"
	case *Tensor:
		return "a tensor"
	case *Dict:
		return "a dict"
	case *List:
		if x.Tuple {
			return fmt.Sprintf("a tuple of %d", len(x.Items))
		}
		return "a list"
	case *global:
		return "the global " + x.String()
	case *storageType:
		return "the storage type torch." + x.name
	case storageRef:
		return "a storage outside of any tensor"
	}
	return fmt.Sprintf("%T", v)
}

// prefix is the start of error messages: the file path when known.
type prefix string

func (p prefix) errorf(format string, args ...any) error {
	if p == "" {
		return fmt.Errorf("torchfile: "+format, args...)
	}
	return fmt.Errorf("torchfile: %s: "+format, append([]any{string(p)}, args...)...)
}
