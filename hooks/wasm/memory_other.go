//go:build !unix

package wasm

import (
	"context"

	"github.com/tetratelabs/wazero/experimental"
)

// withGuestMemory leaves guests' memories to wazero (Go's heap) where
// there are no anonymous mappings (memory_unix.go).
func withGuestMemory(ctx context.Context) context.Context { return ctx }

var _ experimental.LinearMemory = (*heapMemory)(nil)
