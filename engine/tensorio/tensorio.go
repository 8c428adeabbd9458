// Package tensorio moves tensors between a runtime and the outside file
// formats: safetensors (model weights, checkpoints), NumPy .npy arrays and
// MNIST idx files. The formats themselves are parsed and written by
// engine/safetensors, engine/npy and engine/idx; this package only converts
// between their raw form and tensors.
package tensorio

import (
	"fmt"
	"sort"

	"github.com/zeroeng/zeroeng/engine/idx"
	"github.com/zeroeng/zeroeng/engine/npy"
	"github.com/zeroeng/zeroeng/engine/safetensors"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Named is a tensor with its name, in the order a file or a model lists
// them.
type Named struct {
	Name   string
	Tensor *tensor.Tensor
}

// LoadSafetensors reads every tensor of a safetensors file onto rt. The
// tensors are persistent (outside any scope); the caller releases them.
// The list keeps the file's data order; Metadata is the header's
// __metadata__ map.
func LoadSafetensors(rt *tensor.Runtime, path string) (tensors []Named, metadata map[string]string, err error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return fromSafetensors(rt, f, path)
}

func fromSafetensors(rt *tensor.Runtime, f *safetensors.File, path string) ([]Named, map[string]string, error) {
	out := make([]Named, 0, len(f.Tensors))
	for _, st := range f.Tensors {
		t := rt.FromBytes(st.DType, st.Data, st.Shape...)
		if err := t.Err(); err != nil {
			for _, n := range out {
				n.Tensor.Release()
			}
			return nil, nil, fmt.Errorf("tensorio: %s: tensor %q: %w", path, st.Name, err)
		}
		out = append(out, Named{st.Name, t.Persist()})
	}
	return out, f.Metadata, nil
}

// Map indexes named tensors by name.
func Map(ts []Named) map[string]*tensor.Tensor {
	m := make(map[string]*tensor.Tensor, len(ts))
	for _, n := range ts {
		m[n.Name] = n.Tensor
	}
	return m
}

// SaveSafetensors writes tensors to path atomically (a crash leaves either
// the old file or the new one). Names must be unique.
func SaveSafetensors(path string, tensors []Named, metadata map[string]string) error {
	raw, err := Raw(path, tensors)
	if err != nil {
		return err
	}
	return safetensors.WriteFile(path, raw, metadata)
}

// Raw turns named tensors into the safetensors package's raw form for the
// file at path (named in errors), checking that names are unique. The
// bytes are the tensors' own memory where it is host memory
// (tensor.SharedBytes): write them before the tensors change.
func Raw(path string, tensors []Named) ([]safetensors.Tensor, error) {
	raw := make([]safetensors.Tensor, len(tensors))
	seen := map[string]bool{}
	for i, n := range tensors {
		if seen[n.Name] {
			return nil, fmt.Errorf("tensorio: %s: tensor name %q appears twice", path, n.Name)
		}
		seen[n.Name] = true
		data, err := tensor.SharedBytes(n.Tensor)
		if err != nil {
			return nil, fmt.Errorf("tensorio: %s: tensor %q: %w", path, n.Name, err)
		}
		raw[i] = safetensors.Tensor{Name: n.Name, DType: n.Tensor.DType(), Shape: n.Tensor.Shape(), Data: data}
	}
	return raw, nil
}

// SaveSafetensorsMap writes a map of tensors, sorted by name.
func SaveSafetensorsMap(path string, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	list := make([]Named, len(names))
	for i, n := range names {
		list[i] = Named{n, tensors[n]}
	}
	return SaveSafetensors(path, list, metadata)
}

// LoadNpy reads a .npy array onto rt (persistent).
func LoadNpy(rt *tensor.Runtime, path string) (*tensor.Tensor, error) {
	a, err := npy.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t := rt.FromBytes(a.DType, a.Data, a.Shape...)
	if err := t.Err(); err != nil {
		return nil, fmt.Errorf("tensorio: %s: %w", path, err)
	}
	return t.Persist(), nil
}

// SaveNpy writes t as a .npy array, atomically.
func SaveNpy(path string, t *tensor.Tensor) error {
	data, err := t.Bytes()
	if err != nil {
		return fmt.Errorf("tensorio: %s: %w", path, err)
	}
	return npy.WriteFile(path, &npy.Array{DType: t.DType(), Shape: t.Shape(), Data: data})
}

// LoadIdx reads an MNIST idx file (gzip or raw) onto rt (persistent). The
// ranks of one process decode a file once and share it (idxshare.go).
func LoadIdx(rt *tensor.Runtime, path string) (*tensor.Tensor, error) {
	a, err := readIdxShared(path)
	if err != nil {
		return nil, err
	}
	return fromIdx(rt, a, path)
}

// ParseIdx reads idx data held in memory (a downloaded or embedded file).
func ParseIdx(rt *tensor.Runtime, data []byte, name string) (*tensor.Tensor, error) {
	a, err := idx.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tensorio: %s: %w", name, err)
	}
	return fromIdx(rt, a, name)
}

func fromIdx(rt *tensor.Runtime, a *idx.Array, path string) (*tensor.Tensor, error) {
	t := rt.FromBytes(a.DType, a.Data, a.Shape...)
	if err := t.Err(); err != nil {
		return nil, fmt.Errorf("tensorio: %s: %w", path, err)
	}
	return t.Persist(), nil
}
