package nccl

import (
	"fmt"
	"unsafe"
)

// ncclResult_t values (nccl.h).
const (
	success    = 0 // ncclSuccess
	inProgress = 7 // ncclInProgress
)

var resultNames = [...]string{
	"ncclSuccess",
	"ncclUnhandledCudaError",
	"ncclSystemError",
	"ncclInternalError",
	"ncclInvalidArgument",
	"ncclInvalidUsage",
	"ncclRemoteError",
	"ncclInProgress",
	"ncclTimeout",
}

// Error is a failed NCCL call.
type Error struct {
	Call   string // "ncclAllReduce"
	Result int    // the ncclResult_t
	// Last is ncclGetLastError's message: NCCL's last warning, which is
	// global to the process and not cleared, so it may describe an earlier
	// failure when the call failed without a warning of its own.
	Last string
	desc string // ncclGetErrorString(Result)
}

func (e *Error) Error() string {
	s := e.Call + ": " + e.Name()
	switch {
	case e.Last != "":
		s += ": " + e.Last
	case e.desc != "":
		s += " (" + e.desc + ")"
	}
	return s
}

// Name is the result's name: "ncclInvalidArgument".
func (e *Error) Name() string {
	if e.Result >= 0 && e.Result < len(resultNames) {
		return resultNames[e.Result]
	}
	return fmt.Sprintf("ncclResult_t %d", e.Result)
}

// err makes the Error of a failed call on comm (0 for none).
func (l *Lib) err(fn string, r int32, comm uintptr) *Error {
	e := &Error{Call: fn, Result: int(r)}
	// const char *ncclGetErrorString(ncclResult_t result)
	e.desc = goString(callPtr(l.getErrorString, uintptr(r)))
	if l.getLastError != 0 {
		// const char *ncclGetLastError(ncclComm_t comm)
		e.Last = goString(callPtr(l.getLastError, comm))
	}
	return e
}

// goString copies the NUL-terminated C string at p (0: "").
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	// Through a pointer, so that vet does not take C memory held in a
	// uintptr for a misuse of unsafe.Pointer.
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}
