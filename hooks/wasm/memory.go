package wasm

// heapMemory is a guest memory in Go's heap, reserved at its limit.
type heapMemory struct{ b []byte }

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.b)) {
		return nil
	}
	return m.b[:size]
}

func (m *heapMemory) Free() { m.b = nil }
