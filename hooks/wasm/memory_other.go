//go:build !linux

package wasm

import "context"

// withGuestMemory leaves guests' memories to wazero (Go's heap) where
// there are no anonymous mappings (memory_linux.go).
func withGuestMemory(ctx context.Context) context.Context { return ctx }
