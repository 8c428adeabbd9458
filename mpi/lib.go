package mpi

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// LibEnv names the library file to load instead of the dynamic loader's
// libmpi.so.40 (then libmpi.so).
const LibEnv = "ZEROENG_MPI_LIB"

// Sonames are the names Load asks the dynamic loader for, in order.
var Sonames = []string{"libmpi.so.40", "libmpi.so"}

// Open MPI's constants (mpi.h; stable across Open MPI 3 to 5).
const (
	success          = 0      // MPI_SUCCESS
	errInStatus      = 18     // MPI_ERR_IN_STATUS
	undefined        = -32766 // MPI_UNDEFINED
	threadFunneled   = 1      // MPI_THREAD_FUNNELED
	maxErrorString   = 256    // MPI_MAX_ERROR_STRING
	maxVersionString = 256    // MPI_MAX_LIBRARY_VERSION_STRING
	inPlace          = 1      // MPI_IN_PLACE: (void *) 1
	statusIgnore     = 0      // MPI_STATUS_IGNORE: (MPI_Status *) 0
	tag              = 0      // the tag of Send and Recv; the engine's own messages use tags above it (see tagOf)
	anySource        = -1     // MPI_ANY_SOURCE
)

// threadLevels names MPI_THREAD_SINGLE to MPI_THREAD_MULTIPLE.
var threadLevels = [...]string{"MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED", "MPI_THREAD_MULTIPLE"}

func threadLevel(l int32) string {
	if l >= 0 && int(l) < len(threadLevels) {
		return threadLevels[l]
	}
	return fmt.Sprintf("thread level %d", l)
}

// status is Open MPI's MPI_Status (struct ompi_status_public_t).
type status struct {
	Source, Tag, Error, cancelled int32
	ucount                        uint64
}

// Lib is a loaded Open MPI: its functions and the addresses of its
// predefined handles. Its calls are made only by a World's communication
// goroutine (see the package documentation).
type Lib struct {
	// Path is the file or soname that was loaded.
	Path string
	// Version is MPI_Get_library_version's first line: "Open MPI v4.1.4,
	// package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022".
	Version string

	h uintptr

	initThread, initialized, finalize, abort                   uintptr
	commRank, commSize, commSplit, commFree, commSetErrhandler uintptr
	commDup                                                    uintptr
	allreduce, ibcast, iallgather, ialltoall, ibarrier         uintptr
	isend, irecv, igatherv, getCount, testsome                 uintptr
	cancel, wait, requestFree                                  uintptr
	errorString, getVersion                                    uintptr

	// The predefined handles: addresses of Open MPI's global objects
	// (MPI_Allreduce, MPI_FLOAT and MPI_SUM are the benchmark's baseline).
	commWorld, errorsReturn, requestNull          uintptr
	opSum                                         uintptr
	typeFloat, typeInt64                          uintptr
	typeUint8, typeUint16, typeUint32, typeUint64 uintptr
}

var (
	loadOnce sync.Once
	loaded   *Lib
	loadErr  error
)

// Load loads Open MPI once per process: the file named by
// $ZEROENG_MPI_LIB when it is set, otherwise libmpi.so.40, then
// libmpi.so, through the dynamic loader's search. Later calls return the
// same Lib or the same error. It does not initialise MPI (NewWorld does).
func Load() (*Lib, error) {
	loadOnce.Do(func() {
		if p := strings.TrimSpace(os.Getenv(LibEnv)); p != "" {
			loaded, loadErr = LoadFrom(p)
			if loadErr != nil {
				loadErr = fmt.Errorf("%w (from %s)", loadErr, LibEnv)
			}
			return
		}
		var errs []string
		for _, name := range Sonames {
			l, err := LoadFrom(name)
			if err == nil {
				loaded = l
				return
			}
			var nf *notFound
			if !errors.As(err, &nf) {
				// Found but unusable (not Open MPI, too old): say so.
				loadErr = err
				return
			}
			errs = append(errs, nf.msg)
		}
		loadErr = fmt.Errorf("mpi: cannot load Open MPI (%s): %s; install Debian's libopenmpi3 (openmpi-bin for mpirun)",
			Sonames[0], strings.Join(errs, "; "))
	})
	return loaded, loadErr
}

// notFound is LoadFrom's error when the dynamic loader cannot open the file.
type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }

// LoadFrom loads and binds the library at path (a file or a soname),
// without caching. Open MPI is loaded with RTLD_GLOBAL: the plugins it
// opens itself (mca_*.so) resolve their symbols against it.
func LoadFrom(path string) (*Lib, error) {
	h, err := dlopen(path)
	if err != nil {
		if path == Sonames[0] || path == Sonames[1] {
			return nil, &notFound{err.Error()}
		}
		return nil, fmt.Errorf("mpi: cannot load Open MPI (%s): %v; install Debian's libopenmpi3 (openmpi-bin for mpirun)", path, err)
	}
	l := &Lib{Path: path, h: h}
	if err := l.bind(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Lib) bind() error {
	// Open MPI's handles are the addresses of global objects; MPICH and
	// its derivatives (Intel MPI, MVAPICH) use integer constants that no
	// symbol holds, so their absence tells the ABIs apart.
	handles := []struct {
		p    *uintptr
		name string
	}{
		{&l.commWorld, "ompi_mpi_comm_world"}, {&l.errorsReturn, "ompi_mpi_errors_return"},
		{&l.requestNull, "ompi_request_null"}, {&l.opSum, "ompi_mpi_op_sum"},
		{&l.typeFloat, "ompi_mpi_float"}, {&l.typeInt64, "ompi_mpi_int64_t"},
		{&l.typeUint8, "ompi_mpi_uint8_t"}, {&l.typeUint16, "ompi_mpi_uint16_t"},
		{&l.typeUint32, "ompi_mpi_uint32_t"}, {&l.typeUint64, "ompi_mpi_uint64_t"},
	}
	var missing []string
	for _, h := range handles {
		p, err := dlsym(l.h, h.name)
		if err != nil || p == 0 {
			missing = append(missing, h.name)
			continue
		}
		*h.p = p
	}
	if len(missing) > 0 {
		return fmt.Errorf("mpi: %s is not Open MPI: it lacks %s; only Open MPI's ABI is supported (MPICH and its derivatives use integer handles)",
			l.Path, strings.Join(missing, ", "))
	}
	funcs := []struct {
		p    *uintptr
		name string
	}{
		{&l.initThread, "MPI_Init_thread"}, {&l.initialized, "MPI_Initialized"},
		{&l.finalize, "MPI_Finalize"}, {&l.abort, "MPI_Abort"},
		{&l.commRank, "MPI_Comm_rank"}, {&l.commSize, "MPI_Comm_size"}, {&l.commSplit, "MPI_Comm_split"},
		{&l.commFree, "MPI_Comm_free"}, {&l.commSetErrhandler, "MPI_Comm_set_errhandler"}, {&l.commDup, "MPI_Comm_dup"},
		{&l.allreduce, "MPI_Allreduce"}, {&l.ibcast, "MPI_Ibcast"}, {&l.iallgather, "MPI_Iallgather"},
		{&l.ialltoall, "MPI_Ialltoall"}, {&l.ibarrier, "MPI_Ibarrier"}, {&l.isend, "MPI_Isend"}, {&l.irecv, "MPI_Irecv"},
		{&l.igatherv, "MPI_Igatherv"}, {&l.getCount, "MPI_Get_count"}, {&l.testsome, "MPI_Testsome"},
		{&l.cancel, "MPI_Cancel"}, {&l.wait, "MPI_Wait"}, {&l.requestFree, "MPI_Request_free"},
		{&l.errorString, "MPI_Error_string"}, {&l.getVersion, "MPI_Get_library_version"},
	}
	for _, f := range funcs {
		p, err := dlsym(l.h, f.name)
		if err != nil || p == 0 {
			missing = append(missing, f.name)
			continue
		}
		*f.p = p
	}
	if len(missing) > 0 {
		return fmt.Errorf("mpi: %s lacks %s: the binding needs MPI 3.0 (Open MPI 1.8 or later)", l.Path, strings.Join(missing, ", "))
	}
	// int MPI_Get_library_version(char *version, int *resultlen), which
	// MPI allows before MPI_Init.
	buf := make([]byte, maxVersionString+1)
	var n int32
	if call(l.getVersion, uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n))) == success && n > 0 && int(n) <= len(buf) {
		v := string(buf[:n])
		if i := strings.IndexAny(v, "\n\x00"); i >= 0 {
			v = v[:i]
		}
		l.Version = strings.TrimSpace(v)
	}
	return nil
}

// Error is a failed MPI call.
type Error struct {
	Call string // "MPI_Iallreduce"
	Code int    // the error code it returned
	Msg  string // MPI_Error_string's text: "MPI_ERR_TRUNCATE: message truncated"
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("%s: error code %d", e.Call, e.Code)
	}
	return e.Call + ": " + e.Msg
}

// err makes the Error of a call that returned code (on the communication
// goroutine, which may call MPI_Error_string).
func (l *Lib) err(fn string, code int32) *Error {
	e := &Error{Call: fn, Code: int(code)}
	buf := make([]byte, maxErrorString+1)
	var n int32
	// int MPI_Error_string(int errorcode, char *string, int *resultlen)
	if call(l.errorString, uintptr(code), uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n))) == success && n > 0 && int(n) <= len(buf) {
		e.Msg = strings.TrimRight(string(buf[:n]), "\x00")
	}
	return e
}

// moveType is the MPI type that moves elements of size bytes unchanged:
// collectives that only copy (broadcast, gathers, all-to-all, messages)
// move every dtype, bfloat16 and float16 included, as unsigned integers
// of its size, so that counts stay in elements.
func (l *Lib) moveType(size int) uintptr {
	switch size {
	case 2:
		return l.typeUint16
	case 4:
		return l.typeUint32
	case 8:
		return l.typeUint64
	}
	return l.typeUint8
}

// jobVariables are set by launchers that start MPI processes: Open MPI's
// mpirun and orted, a PMIx server (srun --mpi=pmix, prun) and PMI-1/PMI-2
// launchers (srun --mpi=pmi2, Hydra).
var jobVariables = []string{
	"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMIX_NAMESPACE", "PMI_SIZE", "PMI_RANK", "PMI_FD",
}

// InJob reports whether this process was started as part of an MPI job
// (mpirun, srun --mpi=pmix or pmi2), whose size MPI_Init learns from the
// launcher. A process started otherwise initialises MPI as a singleton: a
// world of one rank.
func InJob() bool { return inJob(os.Getenv) }

func inJob(getenv func(string) string) bool {
	for _, v := range jobVariables {
		if getenv(v) != "" {
			return true
		}
	}
	return false
}

// localPlace reads the node-local rank and size that mpirun sets
// (OMPI_COMM_WORLD_LOCAL_RANK and _SIZE; MPI_LOCALRANKID and
// MPI_LOCALNRANKS under a PMI launcher); ok is false when neither is set.
func localPlace(getenv func(string) string) (rank, size int, ok bool) {
	for _, p := range [][2]string{
		{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
		{"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
	} {
		r, err1 := strconv.Atoi(strings.TrimSpace(getenv(p[0])))
		s, err2 := strconv.Atoi(strings.TrimSpace(getenv(p[1])))
		if err1 == nil && err2 == nil && r >= 0 && r < s {
			return r, s, true
		}
	}
	return 0, 0, false
}
