//go:build !(darwin || freebsd || linux || netbsd)

package nccl

import "errors"

// Without dlopen (gpu/libs) no library loads, so these are never reached.

func call(fn uintptr, args ...uintptr) int32      { panic("nccl: no C calls on this platform") }
func callPtr(fn uintptr, args ...uintptr) uintptr { panic("nccl: no C calls on this platform") }
func registerFunc(fptr any, fn uintptr)           { panic(errors.New("nccl: no C calls on this platform")) }
