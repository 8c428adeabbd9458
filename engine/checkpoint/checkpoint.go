// Package checkpoint saves and restores a training run: model weights in
// safetensors with PyTorch's names (a file PyTorch and Hugging Face load),
// optimizer state (one file, or one shard per rank under ZeRO), and a
// manifest with the step, the world size, every rank's generator state and
// the JSON state of the rest (schedulers, data loaders, the script's own
// values).
//
// A checkpoint directory holds one folder per saved step and a pointer to
// the newest:
//
//	DIR/latest                    "step-00000100"
//	DIR/step-00000100/manifest.json
//	DIR/step-00000100/model.safetensors
//	DIR/step-00000100/model.rank-00001-of-00004.safetensors       ZeRO stage 3: each rank its slices
//	DIR/step-00000100/optimizer.safetensors                 a plain optimizer (rank 0 writes it)
//	DIR/step-00000100/optimizer.rank-00001-of-00004.safetensors   ZeRO: each rank its shard
//
// A module whose parameters ZeRO stage 3 shards (Module.Sharded) is saved
// as each rank's slices of the flat buckets, with what reassembles them in
// the file's "zeroeng.slices" metadata, and never gathered; its
// model.safetensors is written only when asked (SaveOptions.Consolidated,
// one tensor at a time through rank 0) or later by ExportModule.
//
// Saving is collective and atomic: the ranks write into a hidden temporary
// folder, every file is synced, and only when every rank has succeeded does
// rank 0 write the manifest (with each file's size and CRC-32C), rename the
// folder into place and then replace latest. A crash or kill -9 at any
// moment leaves the previous checkpoint as it was and loadable. Loading
// checks every byte it uses against the manifest before anything changes,
// streaming the files, then reads each tensor from its file straight into
// the parameter or optimizer state that keeps it: no file is held in
// memory. It reshards ZeRO's optimizer state when the world size or the
// partition differs: each rank reads only the parts of the files that
// overlap its own slices and state, through positioned reads whose blocks
// are checked against the manifest's CRC-32C of each block.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zeroeng/zeroeng/engine/checkpoint/shard"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/internal/safefile"
)

// Names of the files a checkpoint directory holds.
const (
	ManifestName = "manifest.json"
	LatestName   = "latest"
	// Format and Version identify the manifest.
	Format = "zeroeng-checkpoint"
	// Version is the newest manifest this package reads; it writes
	// version 1 unless a module was saved in slices (version 2), so that
	// what an older zeroeng could read it still can.
	Version = 2
)

// State is what one rank saves, or restores into.
type State struct {
	// Modules are saved by rank 0 as <Key>.safetensors ("model").
	Modules []Module
	// Optimizers are saved as <Key>.safetensors by rank 0, or as one
	// shard per rank for ZeRO.
	Optimizers []Optimizer
	// JSON holds the rest by key: schedulers' and loaders' state dicts, the
	// script's own values. Rank 0's is saved.
	JSON map[string]json.RawMessage
	// RNG is this rank's generator state (rand.Generator.State); on load,
	// SetRNG receives it when the world size is the same.
	RNG    []byte
	SetRNG func([]byte) error
}

// Module is a model's state dict under a key.
type Module struct {
	Key     string
	Tensors []nn.NamedTensor
	// Sharded, when set, holds those of Tensors that ZeRO stage 3 shards
	// (their memory exists only while their unit runs): each rank saves and
	// loads its own slices of them, never the whole tensors.
	Sharded ShardedParams
}

// ShardedParams is what holds parameters in flat buckets, one equal slice
// per rank (a ZeRO stage-3 optimizer, *zero.Optimizer, implements it): the
// checkpoint saves each rank's slices, and loads them back under any world
// size, without gathering.
type ShardedParams interface {
	// ProcessGroup is the group the buckets are sharded over (the
	// checkpoint's, every rank).
	ProcessGroup() dist.ProcessGroup
	// NumFlatBuckets and FlatBucket describe the buckets: bucket i's
	// parameters, the element offset of each in the bucket, the bucket's
	// padded length and this rank's slice [lo, hi) of it.
	NumFlatBuckets() int
	FlatBucket(i int) (params []*tensor.Tensor, offsets []int, numel, lo, hi int)
	// ParamSlice is this rank's slice of bucket i (hi-lo elements); after
	// writing it, a load calls SliceWritten(i).
	ParamSlice(i int) (*tensor.Tensor, error)
	SliceWritten(i int) error
	// GatherParam returns elements [lo, hi) of the flattened parameter p
	// on rank to (collective): how a consolidated file is written, one
	// tensor at a time.
	GatherParam(p *tensor.Tensor, lo, hi, to int) ([]byte, error)
}

// ShardedOptimizer is what a sharded optimizer implements (ZeRO's,
// *zero.Optimizer, does) for checkpoints to save and restore it: each rank
// writes its own chunks of the state to its own file and reads them back
// straight into fresh state tensors. Checkpoints find it by an interface
// assertion, as database/sql finds a driver's optional capabilities, so a
// new sharded optimizer needs no edit here; its methods name only the
// engine's types and package shard's.
//
// An optimizer that also tells its partition is resharded when the world
// size or the partition differs: NumFlatBuckets and FlatBucket (the flat
// partition's buckets and this rank's slice of each, as ShardedParams
// says), or Owner (the greedy partition's owner of each parameter, -1 while
// undecided). Without either, a checkpoint under another layout loads only
// through LoadStateDict (every rank keeping the whole state).
type ShardedOptimizer interface {
	Kind() optim.Kind
	// ParamGroups are the global groups, every parameter in each, in
	// the order of the chunks' indices.
	ParamGroups() []*optim.ParamGroup
	Params() []*tensor.Tensor
	// ProcessGroup is the group the state is sharded over (the
	// checkpoint's, every rank).
	ProcessGroup() dist.ProcessGroup
	ShardLayout() shard.Layout
	// LocalChunks is this rank's state; the data may share the state's
	// memory until the optimizer steps or loads again.
	LocalChunks() ([]shard.Chunk, error)
	// BeginLoadShard checks that chunks (entries described, no data)
	// are exactly this rank's pieces under paramGroups, or answers
	// shard.ErrOtherLayout, and makes the tensors to read them into.
	BeginLoadShard(paramGroups []map[string]any, chunks []shard.Chunk) (shard.Load, error)
	// LoadStateDict and State load and find the whole state, for a
	// partition that has not cut it yet.
	LoadStateDict(*optim.StateDict) error
	State(*tensor.Tensor) *optim.State
}

// Optimizer is an optimizer under a key: an *optim.Optimizer or a
// ShardedOptimizer (a *zero.Optimizer).
type Optimizer struct {
	Key string
	Opt any
}

// Manifest describes one saved step.
type Manifest struct {
	Format    string     `json:"format"`
	Version   int        `json:"version"`
	Step      int64      `json:"step"`
	WorldSize int        `json:"world_size"`
	Time      string     `json:"time"`
	Files     []FileInfo `json:"files"`
	Modules   []string   `json:"modules"`
	// Sharded are the modules saved as one file of slices per rank
	// (version 2); a module may also be in Modules, when its consolidated
	// file was written too.
	Sharded    []ShardedInfo   `json:"sharded_modules,omitempty"`
	Optimizers []OptimizerInfo `json:"optimizers"`
	// RNG holds each rank's generator state.
	RNG   [][]byte                   `json:"rng"`
	State map[string]json.RawMessage `json:"state"`
	// Finite is false when some floating-point value of some module's
	// parameters (every rank's slices included) was NaN or infinite;
	// nil in manifests written before it was recorded, which count as
	// finite. NonFinite names the files that held such values.
	Finite    *bool    `json:"finite,omitempty"`
	NonFinite []string `json:"nonfinite_files,omitempty"`
}

// FileInfo is one file of a checkpoint, for the checks on load.
type FileInfo struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	CRC32C uint32 `json:"crc32c"`
	// BlockBytes and BlockCRC32C are the CRC-32C of each BlockBytes-long
	// block of the file (the last one shorter), as little-endian uint32s
	// one after another: a read of part of the file checks the blocks it
	// touches. Manifests written before them have none.
	BlockBytes  int64  `json:"block_bytes,omitempty"`
	BlockCRC32C []byte `json:"block_crc32c,omitempty"`
}

// ShardedInfo says how a module was saved in slices.
type ShardedInfo struct {
	Key string `json:"key"`
	// Shards is the number of slice files, one per rank.
	Shards int `json:"shards"`
}

// OptimizerInfo says how an optimizer's state was saved.
type OptimizerInfo struct {
	Key  string `json:"key"`
	Kind string `json:"kind"`
	// Shards is the number of files: 1 for a plain optimizer, the world
	// size for ZeRO. Partition and Stage are ZeRO's.
	Shards    int    `json:"shards"`
	Partition string `json:"partition,omitempty"`
	Stage     int    `json:"stage,omitempty"`
}

// StepName is the folder of a step's checkpoint.
func StepName(step int64) string { return fmt.Sprintf("step-%08d", step) }

// shardName is the file of an optimizer's state: one file, or rank's shard.
func shardName(key string, rank, shards int) string {
	if shards == 1 {
		return key + ".safetensors"
	}
	return fmt.Sprintf("%s.rank-%05d-of-%05d.safetensors", key, rank, shards)
}

// sliceName is the file of rank's slices of module key, one of shards
// (named so even when there is one, as a module's consolidated file is
// key.safetensors).
func sliceName(key string, rank, shards int) string {
	return fmt.Sprintf("%s.rank-%05d-of-%05d.safetensors", key, rank, shards)
}

// parseStep reads the step of a folder named by StepName.
func parseStep(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, "step-")
	if !ok || s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}

// checkKeys refuses keys that cannot be file names or that repeat.
func (st *State) checkKeys() error {
	seen := map[string]bool{}
	var keys []string
	for _, m := range st.Modules {
		keys = append(keys, m.Key)
	}
	for _, o := range st.Optimizers {
		keys = append(keys, o.Key)
	}
	for k := range st.JSON {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, `/\`) || k[0] == '.' || k == "manifest" || k == LatestName {
			return fmt.Errorf("checkpoint: %q cannot name a part of a checkpoint", k)
		}
		if seen[k] {
			return fmt.Errorf("checkpoint: the key %q names two parts", k)
		}
		seen[k] = true
	}
	return nil
}

// info describes how opt is saved.
func optimizerInfo(key string, opt any, world int) (OptimizerInfo, error) {
	switch o := opt.(type) {
	case *optim.Optimizer:
		return OptimizerInfo{Key: key, Kind: o.Kind().String(), Shards: 1}, nil
	case ShardedOptimizer:
		if n := o.ProcessGroup().Size(); n != world {
			return OptimizerInfo{}, fmt.Errorf("checkpoint: optimizer %q is sharded over %d of the %d ranks; checkpoints support ZeRO over every rank", key, n, world)
		}
		l := o.ShardLayout()
		return OptimizerInfo{Key: key, Kind: o.Kind().String(), Shards: world, Partition: l.Partition, Stage: l.Stage}, nil
	}
	return OptimizerInfo{}, fmt.Errorf("checkpoint: optimizer %q: %T cannot be saved", key, opt)
}

// Latest finds the newest checkpoint under dir: the folder latest names,
// or dir itself when it holds a manifest. It returns "" without error when
// dir holds no checkpoint (a first run).
func Latest(dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return dir, nil
	}
	latest := filepath.Join(dir, LatestName)
	if fi, err := os.Lstat(latest); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		// Ours is a small file; a link could point anywhere, and what it
		// points at must not reach a message.
		return "", fmt.Errorf("checkpoint: %s is a symbolic link; it must be the file %s writes, naming a step folder", latest, LatestName)
	}
	b, err := safefile.ReadFile(latest, maxLatestBytes)
	if errors.Is(err, os.ErrNotExist) {
		// A crash between the rename of a step's folder and the update of
		// latest, or a directory written by hand: the newest complete step.
		steps, err := listSteps(dir)
		if err != nil || len(steps) == 0 {
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
			return "", err
		}
		return filepath.Join(dir, StepName(steps[len(steps)-1])), nil
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	name := strings.TrimSpace(string(b))
	if _, ok := parseStep(name); !ok {
		// Not quoted back: the file may hold anything.
		return "", fmt.Errorf("checkpoint: %s does not name a step folder (it should hold a name such as %s)", latest, StepName(100))
	}
	path := filepath.Join(dir, name)
	if fi, err := os.Lstat(path); err == nil && !fi.IsDir() {
		return "", fmt.Errorf("checkpoint: %s names %s, which is not a folder in %s (a symbolic link or a file)", latest, name, dir)
	}
	return path, nil
}

// maxLatestBytes bounds the latest file (a step folder's name).
const maxLatestBytes = 4 << 10

// maxManifestBytes bounds a manifest: a few kilobytes of JSON per file
// and rank.
const maxManifestBytes = 64 << 20

// listSteps returns the steps of the complete checkpoints (those with a
// manifest) under dir, ascending.
func listSteps(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var steps []int64
	for _, e := range entries {
		step, ok := parseStep(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), ManifestName)); err == nil {
			steps = append(steps, step)
		}
	}
	slices.Sort(steps)
	return steps, nil
}

// ReadManifest reads and checks the manifest of the checkpoint at path;
// its errors are the checkpoint's damage (ErrDamaged).
func ReadManifest(path string) (*Manifest, error) {
	m, err := readManifest(path)
	return m, damaged(err)
}

func readManifest(path string) (*Manifest, error) {
	file := filepath.Join(path, ManifestName)
	b, err := safefile.ReadFile(file, maxManifestBytes)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("checkpoint: %s is not a checkpoint (no %s)", path, ManifestName)
		}
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return parseManifest(b, file)
}

// parseManifest parses and checks the content of the manifest file.
func parseManifest(b []byte, file string) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %v", file, err)
	}
	switch {
	case m.Format != Format:
		return nil, fmt.Errorf("checkpoint: %s: format %q, want %q", file, m.Format, Format)
	case m.Version < 1 || m.Version > Version:
		return nil, fmt.Errorf("checkpoint: %s: version %d; this zeroeng reads versions 1 to %d", file, m.Version, Version)
	case m.WorldSize < 1 || m.Step < 0:
		return nil, fmt.Errorf("checkpoint: %s: world size %d, step %d", file, m.WorldSize, m.Step)
	case len(m.RNG) != 0 && len(m.RNG) != m.WorldSize:
		return nil, fmt.Errorf("checkpoint: %s: %d generator states for %d ranks", file, len(m.RNG), m.WorldSize)
	}
	for _, f := range m.Files {
		if f.Name == "" || f.Name != filepath.Base(f.Name) || f.Name[0] == '.' || f.Bytes < 0 {
			return nil, fmt.Errorf("checkpoint: %s: bad file entry %q", file, f.Name)
		}
		if err := f.checkBlocks(); err != nil {
			return nil, fmt.Errorf("checkpoint: %s: file %s: %v", file, f.Name, err)
		}
	}
	// The files the parts need, exactly: a load and checkpoint verify
	// then check every one of them.
	need := map[string]string{} // file → the part that needs it
	part := func(what, key string) error {
		if key == "" || key != filepath.Base(key) || key[0] == '.' {
			return fmt.Errorf("checkpoint: %s: bad %s key %q", file, what, key)
		}
		return nil
	}
	for _, k := range m.Modules {
		if err := part("module", k); err != nil {
			return nil, err
		}
		need[k+".safetensors"] = fmt.Sprintf("module %q", k)
	}
	sharded := map[string]bool{}
	for _, sm := range m.Sharded {
		if err := part("module", sm.Key); err != nil {
			return nil, err
		}
		if sharded[sm.Key] || sm.Shards != m.WorldSize {
			return nil, fmt.Errorf("checkpoint: %s: module %q is in %d slice files for %d ranks (listed twice?)", file, sm.Key, sm.Shards, m.WorldSize)
		}
		sharded[sm.Key] = true
		for r := range sm.Shards {
			need[sliceName(sm.Key, r, sm.Shards)] = fmt.Sprintf("module %q", sm.Key)
		}
	}
	for _, o := range m.Optimizers {
		if err := part("optimizer", o.Key); err != nil {
			return nil, err
		}
		if o.Shards < 1 || (o.Shards != 1 && o.Shards != m.WorldSize) || (o.Partition != "" && o.Shards != m.WorldSize) {
			return nil, fmt.Errorf("checkpoint: %s: optimizer %q has %d shards for %d ranks", file, o.Key, o.Shards, m.WorldSize)
		}
		for r := range o.Shards {
			need[shardName(o.Key, r, o.Shards)] = fmt.Sprintf("optimizer %q", o.Key)
		}
	}
	listed := map[string]bool{}
	for _, f := range m.Files {
		if listed[f.Name] {
			return nil, fmt.Errorf("checkpoint: %s: lists %s twice", file, f.Name)
		}
		listed[f.Name] = true
		if _, ok := need[f.Name]; !ok {
			return nil, fmt.Errorf("checkpoint: %s: lists %s, which no module or optimizer of the checkpoint uses", file, f.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(need)) {
		if !listed[name] {
			return nil, fmt.Errorf("checkpoint: %s: lists no file %s, which %s needs", file, name, need[name])
		}
	}
	return &m, nil
}

// maxBlockBytes bounds the block size a manifest may declare: a load
// buffers a block at the edges of what it reads, so a hostile manifest's
// huge blocks would be huge allocations. zeroeng writes 64 KiB blocks.
const maxBlockBytes = 16 << 20

// checkBlocks checks that the block CRCs, when present, cover the file.
func (f FileInfo) checkBlocks() error {
	switch {
	case f.BlockBytes == 0 && len(f.BlockCRC32C) == 0:
		return nil
	case f.BlockBytes < 512 || f.BlockBytes > maxBlockBytes:
		return fmt.Errorf("blocks of %d bytes", f.BlockBytes)
	}
	if want := 4 * ((f.Bytes + f.BlockBytes - 1) / f.BlockBytes); int64(len(f.BlockCRC32C)) != want {
		return fmt.Errorf("%d bytes of block CRCs for %d bytes in blocks of %d (want %d)", len(f.BlockCRC32C), f.Bytes, f.BlockBytes, want)
	}
	return nil
}

// file returns the manifest's entry for name.
func (m *Manifest) file(name string) (FileInfo, bool) {
	for _, f := range m.Files {
		if f.Name == name {
			return f, true
		}
	}
	return FileInfo{}, false
}

// agree makes every rank return the same outcome: each rank's error (nil
// for success) is gathered on rank 0, which broadcasts the first, naming
// its rank. A failed collective is returned as it is.
func agree(pg dist.ProcessGroup, err error) error {
	// A leading byte says whether the error is the checkpoint's damage
	// (ErrDamaged), which every rank's error then matches too.
	var msg []byte
	if err != nil {
		mark := byte('e')
		if errors.Is(err, ErrDamaged) {
			mark = 'd'
		}
		msg = append([]byte{mark}, err.Error()...)
	}
	all, gerr := pg.GatherObject(msg, 0)
	if gerr != nil {
		return gerr
	}
	var first []byte
	if pg.Rank() == 0 {
		for r, m := range all {
			if len(m) > 0 {
				first = m
				if pg.Size() > 1 && r != pg.Rank() {
					first = fmt.Appendf(m[:1:1], "rank %d: %s", r, m[1:])
				}
				break
			}
		}
	}
	out, berr := pg.BroadcastObject(first, 0)
	if berr != nil {
		return berr
	}
	switch {
	case len(out) == 0:
		return nil
	case err != nil && string(out[1:]) == err.Error():
		return err // this rank's own, unwrapped
	case out[0] == 'd':
		return damaged(errors.New(string(out[1:])))
	}
	return errors.New(string(out[1:]))
}

func now() string { return time.Now().UTC().Format(time.RFC3339) }
