//go:build ignore

// A fake CUDA driver (libcuda.so.1) for tests on machines without a GPU.
// The build constraint above keeps the Go tool from treating this file as
// part of the package (with CGO_ENABLED=1 a package of C files without cgo
// does not build); fake.CUDA compiles it with internal/clib.
//
// It implements, in C and on host memory, the driver functions that
// gpu/cuda binds, with the C signatures of cuda.h, so that tests check the
// purego binding's marshalling against the real calling convention:
//
//   - "device" memory is host memory (malloc, aligned to 256 bytes), so
//     copies and memsets really move bytes;
//   - devices, their names and attributes come from the environment, read
//     at each cuInit: FAKECUDA_DEVICES (1), FAKECUDA_NAME ("Fake H100"),
//     FAKECUDA_CC ("9.0"), FAKECUDA_MEM (bytes, 80 GiB), FAKECUDA_VERSION
//     (12040) and FAKECUDA_STUB (1: cuInit fails as the toolkit's stub does);
//   - contexts are current per thread, as in the real driver, and every call
//     that needs one fails with CUDA_ERROR_INVALID_CONTEXT without it: this
//     checks that the binding makes its context current around each call;
//   - modules keep a copy of their image; a function exists when its name
//     appears in the image followed by '('; an image containing
//     "FAKE_BAD_IMAGE" fails to load with CUDA_ERROR_INVALID_PTX and a
//     message in the JIT error log;
//   - kernels do not run: cuLaunchKernel records its arguments.
//
// The fakecuda_* functions are for tests: error injection, call counts and
// the last launch's arguments. Enum values are those of cuda.h (CUDA 12).

#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dlfcn.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

// CUresult values (cuda.h, enum cudaError_enum).
enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_STUB_LIBRARY = 34,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_IMAGE = 200,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_PTX = 218,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
};

// CUjit_option values (cuda.h, enum CUjit_option_enum).
enum {
	CU_JIT_INFO_LOG_BUFFER = 3,
	CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
	CU_JIT_ERROR_LOG_BUFFER = 5,
	CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};

#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8

#define EXPORT __attribute__((visibility("default")))

// ---- Calls: counting and error injection -------------------------------

#define CALLS(X)                       \
	X(cuInit)                          \
	X(cuDriverGetVersion)              \
	X(cuGetErrorName)                  \
	X(cuGetErrorString)                \
	X(cuDeviceGetCount)                \
	X(cuDeviceGet)                     \
	X(cuDeviceGetName)                 \
	X(cuDeviceGetAttribute)            \
	X(cuDeviceTotalMem_v2)             \
	X(cuDeviceGetUuid)                 \
	X(cuDeviceGetUuid_v2)              \
	X(cuDevicePrimaryCtxRetain)        \
	X(cuDevicePrimaryCtxRelease_v2)    \
	X(cuCtxSetCurrent)                 \
	X(cuCtxGetCurrent)                 \
	X(cuCtxSynchronize)                \
	X(cuMemAlloc_v2)                   \
	X(cuMemFree_v2)                    \
	X(cuMemGetInfo_v2)                 \
	X(cuMemAllocHost_v2)               \
	X(cuMemFreeHost)                   \
	X(cuMemcpyHtoDAsync_v2)            \
	X(cuMemcpyDtoHAsync_v2)            \
	X(cuMemcpyDtoDAsync_v2)            \
	X(cuMemsetD8Async)                 \
	X(cuMemsetD32Async)                \
	X(cuStreamCreate)                  \
	X(cuStreamDestroy_v2)              \
	X(cuStreamSynchronize)             \
	X(cuStreamQuery)                   \
	X(cuStreamWaitEvent)               \
	X(cuEventCreate)                   \
	X(cuEventDestroy_v2)               \
	X(cuEventRecord)                   \
	X(cuEventSynchronize)              \
	X(cuEventQuery)                    \
	X(cuEventElapsedTime)              \
	X(cuModuleLoadData)                \
	X(cuModuleLoadDataEx)              \
	X(cuModuleUnload)                  \
	X(cuModuleGetFunction)             \
	X(cuFuncSetAttribute)              \
	X(cuLaunchKernel)

#define ID(name) ID_##name,
enum { CALLS(ID) NCALLS };
#undef ID
#define NAME(name) #name,
static const char *call_names[NCALLS] = {CALLS(NAME)};
#undef NAME

static int call_count[NCALLS];
static int call_fail[NCALLS]; // the code the next call returns, 0 for none

static int call_id(const char *name) {
	for (int i = 0; i < NCALLS; i++)
		if (name && strcmp(call_names[i], name) == 0)
			return i;
	return -1;
}

// enter counts a call and returns the error injected for it, if any.
static CUresult enter(int id) {
	__atomic_fetch_add(&call_count[id], 1, __ATOMIC_RELAXED);
	if (__atomic_load_n(&call_fail[id], __ATOMIC_RELAXED) == 0)
		return CUDA_SUCCESS;
	return __atomic_exchange_n(&call_fail[id], 0, __ATOMIC_RELAXED);
}

#define ENTER(name)                         \
	do {                                    \
		CUresult r_ = enter(ID_##name);     \
		if (r_ != CUDA_SUCCESS)             \
			return r_;                      \
	} while (0)

// ---- Global state -------------------------------------------------------

// A spin lock rather than a pthread mutex, so that the library needs no
// -pthread (libpthread is separate from libc before glibc 2.34).
static int mu;
#define LOCK()                                                  \
	do {                                                        \
		while (__atomic_exchange_n(&mu, 1, __ATOMIC_ACQUIRE)) \
			sched_yield();                                  \
	} while (0)
#define UNLOCK() __atomic_store_n(&mu, 0, __ATOMIC_RELEASE)

#define MAXDEV 16

static int initialized;
static int ndev = 1;
static char dev_name[256] = "Fake H100";
static int cc_major = 9, cc_minor = 0;
static unsigned long long total_mem = 80ULL << 30;
static int driver_version = 12040;

enum { MAGIC_CTX = 0x43545831, MAGIC_STREAM = 0x53545231, MAGIC_EVENT = 0x45564e31,
       MAGIC_MODULE = 0x4d4f4431, MAGIC_FUNC = 0x46554e31, MAGIC_DEAD = 0x44454144 };

struct ctx {
	int magic;
	int dev;
	int refs; // primary context retains; 0: inactive
};
static struct ctx primary[MAXDEV];
static __thread struct ctx *current;

static const char *env(const char *k, const char *def) {
	const char *v = getenv(k);
	return v && *v ? v : def;
}

static int need_init(void) { return initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }

// need_ctx is the check of every call that works in the current context.
static CUresult need_ctx(void) {
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (current == NULL || current->magic != MAGIC_CTX || current->refs <= 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	return CUDA_SUCCESS;
}

// ---- Initialization, errors, version ------------------------------------

EXPORT CUresult cuInit(unsigned int flags) {
	ENTER(cuInit);
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (strcmp(env("FAKECUDA_STUB", "0"), "1") == 0)
		return CUDA_ERROR_STUB_LIBRARY;
	LOCK();
	ndev = atoi(env("FAKECUDA_DEVICES", "1"));
	if (ndev > MAXDEV)
		ndev = MAXDEV;
	snprintf(dev_name, sizeof dev_name, "%s", env("FAKECUDA_NAME", "Fake H100"));
	if (sscanf(env("FAKECUDA_CC", "9.0"), "%d.%d", &cc_major, &cc_minor) != 2) {
		cc_major = 9;
		cc_minor = 0;
	}
	total_mem = strtoull(env("FAKECUDA_MEM", "85899345920"), NULL, 10);
	driver_version = atoi(env("FAKECUDA_VERSION", "12040"));
	for (int i = 0; i < MAXDEV; i++) {
		primary[i].magic = MAGIC_CTX;
		primary[i].dev = i;
	}
	initialized = 1;
	UNLOCK();
	return ndev > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
	ENTER(cuDriverGetVersion);
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = driver_version;
	return CUDA_SUCCESS;
}

// The fake knows only some names, so that the binding's own table is
// exercised for the others.
static const struct {
	int code;
	const char *name, *desc;
} errors[] = {
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	{100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	{400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{600, "CUDA_ERROR_NOT_READY", "device not ready"},
};

static CUresult error_text(CUresult code, const char **out, int desc) {
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
		if (errors[i].code == code) {
			*out = desc ? errors[i].desc : errors[i].name;
			return CUDA_SUCCESS;
		}
	}
	*out = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult code, const char **name) {
	ENTER(cuGetErrorName);
	return error_text(code, name, 0);
}

EXPORT CUresult cuGetErrorString(CUresult code, const char **desc) {
	ENTER(cuGetErrorString);
	return error_text(code, desc, 1);
}

// ---- Devices --------------------------------------------------------------

static CUresult check_dev(CUdevice d) {
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	return d >= 0 && d < ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
	ENTER(cuDeviceGetCount);
	CUresult r = need_init();
	if (r)
		return r;
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	*n = ndev;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	ENTER(cuDeviceGet);
	CUresult r = check_dev(ordinal);
	if (r)
		return r;
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
	ENTER(cuDeviceGetName);
	CUresult r = check_dev(d);
	if (r)
		return r;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	LOCK();
	snprintf(name, (size_t)len, "%s", dev_name);
	UNLOCK();
	return CUDA_SUCCESS;
}

// The attributes of an H100 SXM (CUdevice_attribute numbers of cuda.h).
static int attribute(int a, int dev, int *ok) {
	*ok = 1;
	switch (a) {
	case 1: return 1024;       // MAX_THREADS_PER_BLOCK
	case 2: return 1024;       // MAX_BLOCK_DIM_X
	case 3: return 1024;       // MAX_BLOCK_DIM_Y
	case 4: return 64;         // MAX_BLOCK_DIM_Z
	case 5: return 2147483647; // MAX_GRID_DIM_X
	case 6: return 65535;      // MAX_GRID_DIM_Y
	case 7: return 65535;      // MAX_GRID_DIM_Z
	case 8: return 49152;      // MAX_SHARED_MEMORY_PER_BLOCK
	case 10: return 32;        // WARP_SIZE
	case 12: return 65536;     // MAX_REGISTERS_PER_BLOCK
	case 13: return 1980000;   // CLOCK_RATE (kHz)
	case 16: return 132;       // MULTIPROCESSOR_COUNT
	case 18: return 0;         // INTEGRATED
	case 32: return 1;         // ECC_ENABLED
	case 33: return 0x18 + dev; // PCI_BUS_ID
	case 34: return 0;         // PCI_DEVICE_ID
	case 36: return 2619000;   // MEMORY_CLOCK_RATE (kHz)
	case 37: return 5120;      // GLOBAL_MEMORY_BUS_WIDTH
	case 38: return 50331648;  // L2_CACHE_SIZE
	case 39: return 2048;      // MAX_THREADS_PER_MULTIPROCESSOR
	case 40: return 3;         // ASYNC_ENGINE_COUNT
	case 50: return 0;         // PCI_DOMAIN_ID
	case 75: return cc_major;  // COMPUTE_CAPABILITY_MAJOR
	case 76: return cc_minor;  // COMPUTE_CAPABILITY_MINOR
	case 81: return 233472;    // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
	case 82: return 65536;     // MAX_REGISTERS_PER_MULTIPROCESSOR
	case 95: return 1;         // COOPERATIVE_LAUNCH
	case 97: return 232448;    // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	case 106: return 32;       // MAX_BLOCKS_PER_MULTIPROCESSOR
	}
	if (a < 1 || a > 135)
		*ok = 0;
	return 0;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	ENTER(cuDeviceGetAttribute);
	CUresult r = check_dev(d);
	if (r)
		return r;
	int ok;
	int x = attribute(attr, d, &ok);
	if (!v || !ok)
		return CUDA_ERROR_INVALID_VALUE;
	*v = x;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
	ENTER(cuDeviceTotalMem_v2);
	CUresult r = check_dev(d);
	if (r)
		return r;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = total_mem;
	return CUDA_SUCCESS;
}

static CUresult uuid(unsigned char *u, CUdevice d) {
	CUresult r = check_dev(d);
	if (r)
		return r;
	if (!u)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < 16; i++)
		u[i] = (unsigned char)(0xf0 + i);
	u[0] = 'F';
	u[1] = 'A';
	u[2] = 'K';
	u[3] = 'E';
	u[15] = (unsigned char)d;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(unsigned char *u, CUdevice d) {
	ENTER(cuDeviceGetUuid);
	return uuid(u, d);
}

EXPORT CUresult cuDeviceGetUuid_v2(unsigned char *u, CUdevice d) {
	ENTER(cuDeviceGetUuid_v2);
	return uuid(u, d);
}

// ---- Contexts -------------------------------------------------------------

EXPORT CUresult cuDevicePrimaryCtxRetain(struct ctx **pctx, CUdevice d) {
	ENTER(cuDevicePrimaryCtxRetain);
	CUresult r = check_dev(d);
	if (r)
		return r;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	LOCK();
	primary[d].refs++;
	UNLOCK();
	*pctx = &primary[d];
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	ENTER(cuDevicePrimaryCtxRelease_v2);
	CUresult r = check_dev(d);
	if (r)
		return r;
	LOCK();
	if (primary[d].refs <= 0)
		r = CUDA_ERROR_INVALID_CONTEXT;
	else
		primary[d].refs--;
	UNLOCK();
	return r;
}

EXPORT CUresult cuCtxSetCurrent(struct ctx *c) {
	ENTER(cuCtxSetCurrent);
	CUresult r = need_init();
	if (r)
		return r;
	if (c != NULL && (c < primary || c >= primary + MAXDEV || c->refs <= 0))
		return CUDA_ERROR_INVALID_CONTEXT;
	current = c;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(struct ctx **pctx) {
	ENTER(cuCtxGetCurrent);
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
	ENTER(cuCtxSynchronize);
	return need_ctx();
}

// ---- Memory ---------------------------------------------------------------

struct alloc {
	char *p;
	size_t n;
	int host;
	struct alloc *next;
};
static struct alloc *allocs;
static unsigned long long allocated;

// find returns the device allocation holding [p, p+n), or NULL.
static struct alloc *find(CUdeviceptr p, size_t n) {
	for (struct alloc *a = allocs; a; a = a->next) {
		uintptr_t b = (uintptr_t)a->p;
		if (!a->host && p >= b && p - b <= a->n && n <= a->n - (p - b))
			return a;
	}
	return NULL;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) {
	ENTER(cuMemAlloc_v2);
	CUresult r = need_ctx();
	if (r)
		return r;
	if (!dptr || n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	LOCK();
	if (n > total_mem - allocated) {
		UNLOCK();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	size_t rounded = (n + 255) / 256 * 256;
	struct alloc *a = malloc(sizeof *a);
	void *p = aligned_alloc(256, rounded);
	if (!a || !p) {
		free(a);
		free(p);
		UNLOCK();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memset(p, 0xAB, rounded); // not zero, as real memory is not
	a->p = p;
	a->n = n;
	a->host = 0;
	a->next = allocs;
	allocs = a;
	allocated += n;
	UNLOCK();
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

static CUresult release(void *p, int host) {
	LOCK();
	for (struct alloc **pa = &allocs; *pa; pa = &(*pa)->next) {
		struct alloc *a = *pa;
		if (a->p == p && a->host == host) {
			*pa = a->next;
			if (!host)
				allocated -= a->n;
			UNLOCK();
			free(a->p);
			free(a);
			return CUDA_SUCCESS;
		}
	}
	UNLOCK();
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
	ENTER(cuMemFree_v2);
	CUresult r = need_ctx();
	if (r)
		return r;
	if (p == 0)
		return CUDA_SUCCESS;
	return release((void *)(uintptr_t)p, 0);
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
	ENTER(cuMemGetInfo_v2);
	CUresult r = need_ctx();
	if (r)
		return r;
	if (!free_ || !total)
		return CUDA_ERROR_INVALID_VALUE;
	LOCK();
	*free_ = total_mem - allocated;
	*total = total_mem;
	UNLOCK();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t n) {
	ENTER(cuMemAllocHost_v2);
	CUresult r = need_ctx();
	if (r)
		return r;
	if (!pp || n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct alloc *a = malloc(sizeof *a);
	void *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	if (!a || !p) {
		free(a);
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->p = p;
	a->n = n;
	a->host = 1;
	LOCK();
	a->next = allocs;
	allocs = a;
	UNLOCK();
	*pp = p;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p) {
	ENTER(cuMemFreeHost);
	CUresult r = need_ctx();
	if (r)
		return r;
	return release(p, 1);
}

// ---- Streams --------------------------------------------------------------

struct stream {
	int magic;
	struct ctx *ctx;
	unsigned flags;
};

// check_stream accepts the NULL stream and live streams of the current
// context.
static CUresult check_stream(struct stream *s) {
	if (s == NULL)
		return CUDA_SUCCESS;
	if (s->magic != MAGIC_STREAM)
		return CUDA_ERROR_INVALID_HANDLE;
	return s->ctx == current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuStreamCreate(struct stream **ps, unsigned int flags) {
	ENTER(cuStreamCreate);
	CUresult r = need_ctx();
	if (r)
		return r;
	if (!ps || (flags & ~CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	struct stream *s = calloc(1, sizeof *s);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->magic = MAGIC_STREAM;
	s->ctx = current;
	s->flags = flags;
	*ps = s;
	return CUDA_SUCCESS;
}

// Destroyed streams, events and modules stay allocated, marked dead, so
// that a use after destruction fails with CUDA_ERROR_INVALID_HANDLE rather
// than reading freed memory.
EXPORT CUresult cuStreamDestroy_v2(struct stream *s) {
	ENTER(cuStreamDestroy_v2);
	CUresult r = need_ctx();
	if (!r)
		r = check_stream(s);
	if (!r && s == NULL)
		r = CUDA_ERROR_INVALID_HANDLE;
	if (r)
		return r;
	s->magic = MAGIC_DEAD;
	return CUDA_SUCCESS;
}

static CUresult stream_op(struct stream *s) {
	CUresult r = need_ctx();
	return r ? r : check_stream(s);
}

EXPORT CUresult cuStreamSynchronize(struct stream *s) {
	ENTER(cuStreamSynchronize);
	return stream_op(s);
}

EXPORT CUresult cuStreamQuery(struct stream *s) {
	ENTER(cuStreamQuery);
	return stream_op(s);
}

// ---- Copies and memsets -----------------------------------------------------

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, struct stream *s) {
	ENTER(cuMemcpyHtoDAsync_v2);
	CUresult r = stream_op(s);
	if (r)
		return r;
	LOCK();
	int ok = find(dst, n) != NULL;
	UNLOCK();
	if (!ok || (!src && n))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy((void *)(uintptr_t)dst, src, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, struct stream *s) {
	ENTER(cuMemcpyDtoHAsync_v2);
	CUresult r = stream_op(s);
	if (r)
		return r;
	LOCK();
	int ok = find(src, n) != NULL;
	UNLOCK();
	if (!ok || (!dst && n))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(dst, (void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, struct stream *s) {
	ENTER(cuMemcpyDtoDAsync_v2);
	CUresult r = stream_op(s);
	if (r)
		return r;
	LOCK();
	int ok = find(dst, n) != NULL && find(src, n) != NULL;
	UNLOCK();
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, struct stream *s) {
	ENTER(cuMemsetD8Async);
	CUresult r = stream_op(s);
	if (r)
		return r;
	LOCK();
	int ok = find(dst, n) != NULL;
	UNLOCK();
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	memset((void *)(uintptr_t)dst, v, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, struct stream *s) {
	ENTER(cuMemsetD32Async);
	CUresult r = stream_op(s);
	if (r)
		return r;
	if (dst % 4 != 0 || n > SIZE_MAX / 4)
		return CUDA_ERROR_INVALID_VALUE;
	LOCK();
	int ok = find(dst, n * 4) != NULL;
	UNLOCK();
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned int *p = (unsigned int *)(uintptr_t)dst;
	for (size_t i = 0; i < n; i++)
		p[i] = v;
	return CUDA_SUCCESS;
}

// ---- Events -----------------------------------------------------------------

struct event {
	int magic;
	struct ctx *ctx;
	unsigned flags;
	int recorded;
	struct timespec t;
};

static CUresult check_event(struct event *e) {
	if (e == NULL || e->magic != MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(struct event **pe, unsigned int flags) {
	ENTER(cuEventCreate);
	CUresult r = need_ctx();
	if (r)
		return r;
	if (!pe || (flags & ~0x7u))
		return CUDA_ERROR_INVALID_VALUE;
	struct event *e = calloc(1, sizeof *e);
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = MAGIC_EVENT;
	e->ctx = current;
	e->flags = flags;
	*pe = e;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamWaitEvent(struct stream *s, struct event *e, unsigned int flags) {
	ENTER(cuStreamWaitEvent);
	CUresult r = stream_op(s);
	if (!r)
		r = check_event(e);
	if (r)
		return r;
	return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuEventDestroy_v2(struct event *e) {
	ENTER(cuEventDestroy_v2);
	CUresult r = need_ctx();
	if (!r)
		r = check_event(e);
	if (r)
		return r;
	e->magic = MAGIC_DEAD;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(struct event *e, struct stream *s) {
	ENTER(cuEventRecord);
	CUresult r = stream_op(s);
	if (!r)
		r = check_event(e);
	if (r)
		return r;
	LOCK();
	e->recorded = 1;
	clock_gettime(CLOCK_MONOTONIC, &e->t);
	UNLOCK();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventSynchronize(struct event *e) {
	ENTER(cuEventSynchronize);
	CUresult r = need_ctx();
	return r ? r : check_event(e);
}

EXPORT CUresult cuEventQuery(struct event *e) {
	ENTER(cuEventQuery);
	CUresult r = need_ctx();
	return r ? r : check_event(e);
}

EXPORT CUresult cuEventElapsedTime(float *ms, struct event *start, struct event *end) {
	ENTER(cuEventElapsedTime);
	CUresult r = need_ctx();
	if (!r)
		r = check_event(start);
	if (!r)
		r = check_event(end);
	if (r)
		return r;
	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	LOCK();
	int ok = start->recorded && end->recorded &&
		 !(start->flags & CU_EVENT_DISABLE_TIMING) && !(end->flags & CU_EVENT_DISABLE_TIMING);
	double d = (double)(end->t.tv_sec - start->t.tv_sec) * 1e3 +
		   (double)(end->t.tv_nsec - start->t.tv_nsec) / 1e6;
	UNLOCK();
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	*ms = (float)d;
	return CUDA_SUCCESS;
}

// ---- Modules and functions ----------------------------------------------------

struct module {
	int magic;
	struct ctx *ctx;
	char *image;
	void *emu;
};

struct func {
	int magic;
	struct module *mod;
	char name[256];
	int max_dynamic_shared;
	void *emu;
};

static const char bad_image_log[] =
	"ptxas fatal   : fake JIT error: the image contains FAKE_BAD_IMAGE\n"
	"ptxas error   : line 1; second line of the log";

// write_log copies msg into a JIT log buffer of the option list and sets
// the size option to the bytes written, as the driver does.
static void write_log(unsigned n, const int *opts, void **vals, int buf_opt, int size_opt, const char *msg) {
	char *buf = NULL;
	int size_at = -1;
	for (unsigned i = 0; i < n; i++) {
		if (opts[i] == buf_opt)
			buf = vals[i];
		else if (opts[i] == size_opt)
			size_at = (int)i;
	}
	if (!buf || size_at < 0)
		return;
	unsigned cap = (unsigned)(uintptr_t)vals[size_at];
	if (cap == 0)
		return;
	size_t len = strlen(msg);
	if (len > cap - 1)
		len = cap - 1;
	memcpy(buf, msg, len);
	buf[len] = 0;
	vals[size_at] = (void *)(uintptr_t)(len + 1);
}

static CUresult load(struct module **pm, const void *image, unsigned n, const int *opts, void **vals) {
	CUresult r = need_ctx();
	if (r)
		return r;
	if (!pm || !image || (n && (!opts || !vals)))
		return CUDA_ERROR_INVALID_VALUE;
	// Images are taken as NUL-terminated text (PTX); a real driver reads a
	// cubin's length from its ELF header.
	const char *text = image;
	if (text[0] == 0)
		return CUDA_ERROR_INVALID_IMAGE;
	if (strstr(text, "FAKE_BAD_IMAGE")) {
		write_log(n, opts, vals, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, bad_image_log);
		return CUDA_ERROR_INVALID_PTX;
	}
	write_log(n, opts, vals, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, "fake JIT: loaded");
	struct module *m = calloc(1, sizeof *m);
	if (!m || !(m->image = strdup(text))) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->magic = MAGIC_MODULE;
	m->ctx = current;
	{
		// EMU: the family is named by the second #line directive.
		const char *p = strstr(text, "#line 1 \"common.cuh\"");
		p = p ? strstr(p + 10, "#line 1 \"") : NULL;
		const char *dir = getenv("ZEEMU_DIR");
		if (p && dir) {
			p += strlen("#line 1 \"");
			const char *q = strstr(p, ".cu\"");
			char path[1024];
			snprintf(path, sizeof path, "%s/%.*s.so", dir, (int)(q - p), p);
			m->emu = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			if (!m->emu) {
				fprintf(stderr, "EMU: %s\n", dlerror());
				return CUDA_ERROR_INVALID_IMAGE;
			}
		}
	}
	*pm = m;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleLoadData(struct module **pm, const void *image) {
	ENTER(cuModuleLoadData);
	return load(pm, image, 0, NULL, NULL);
}

EXPORT CUresult cuModuleLoadDataEx(struct module **pm, const void *image, unsigned int n, int *opts, void **vals) {
	ENTER(cuModuleLoadDataEx);
	return load(pm, image, n, opts, vals);
}

EXPORT CUresult cuModuleUnload(struct module *m) {
	ENTER(cuModuleUnload);
	CUresult r = need_ctx();
	if (r)
		return r;
	if (!m || m->magic != MAGIC_MODULE)
		return CUDA_ERROR_INVALID_HANDLE;
	m->magic = MAGIC_DEAD;
	return CUDA_SUCCESS;
}

static int ident(char c) {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
}

// declares reports whether text names the function: the name as a whole
// word followed by '(' (PTX ".entry name(" or C "void name (").
static int declares(const char *text, const char *name) {
	size_t n = strlen(name);
	if (n == 0)
		return 0;
	for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
		if (p > text && ident(p[-1]))
			continue;
		const char *q = p + n;
		while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
			q++;
		if (*q == '(')
			return 1;
	}
	return 0;
}

EXPORT CUresult cuModuleGetFunction(struct func **pf, struct module *m, const char *name) {
	ENTER(cuModuleGetFunction);
	CUresult r = need_ctx();
	if (r)
		return r;
	if (!m || m->magic != MAGIC_MODULE)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!pf || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!declares(m->image, name) || strlen(name) >= sizeof((struct func *)0)->name)
		return CUDA_ERROR_NOT_FOUND;
	struct func *f = calloc(1, sizeof *f);
	if (!f)
		return CUDA_ERROR_OUT_OF_MEMORY;
	f->magic = MAGIC_FUNC;
	f->mod = m;
	strcpy(f->name, name);
	f->max_dynamic_shared = 49152;
	if (m->emu) {
		char sym[300];
		snprintf(sym, sizeof sym, "zeemu_%s", name);
		f->emu = dlsym(m->emu, sym);
		if (!f->emu) {
			fprintf(stderr, "EMU: no %s\n", sym);
			free(f);
			return CUDA_ERROR_NOT_FOUND;
		}
	}
	*pf = f;
	return CUDA_SUCCESS;
}

static CUresult check_func(struct func *f) {
	if (!f || f->magic != MAGIC_FUNC || f->mod->magic != MAGIC_MODULE)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncSetAttribute(struct func *f, int attr, int value) {
	ENTER(cuFuncSetAttribute);
	CUresult r = need_ctx();
	if (!r)
		r = check_func(f);
	if (r)
		return r;
	if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
		int ok;
		if (value < 0 || value > attribute(97, 0, &ok))
			return CUDA_ERROR_INVALID_VALUE;
		LOCK();
		f->max_dynamic_shared = value;
		UNLOCK();
		return CUDA_SUCCESS;
	}
	return attr >= 0 && attr <= 16 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- Launches -----------------------------------------------------------------

#define MAXPARAMS 256
#define MAXPARAMBYTES 32768

static int param_sizes[MAXPARAMS];
static int nparam_sizes;

static struct {
	int valid;
	char name[256];
	unsigned dims[7];
	void *stream;
	unsigned char params[MAXPARAMBYTES];
	int nparams;
} last;

EXPORT CUresult cuLaunchKernel(struct func *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shared, struct stream *s, void **params, void **extra) {
	ENTER(cuLaunchKernel);
	CUresult r = stream_op(s);
	if (!r)
		r = check_func(f);
	if (r)
		return r;
	if (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long long)bx * by * bz > 1024 || extra != NULL)
		return CUDA_ERROR_INVALID_VALUE;
	LOCK();
	if ((int)shared > f->max_dynamic_shared || (nparam_sizes > 0 && params == NULL)) {
		UNLOCK();
		return CUDA_ERROR_INVALID_VALUE;
	}
	last.valid = 1;
	snprintf(last.name, sizeof last.name, "%s", f->name);
	unsigned dims[7] = {gx, gy, gz, bx, by, bz, shared};
	memcpy(last.dims, dims, sizeof dims);
	last.stream = s;
	int off = 0;
	for (int i = 0; i < nparam_sizes && off + param_sizes[i] <= MAXPARAMBYTES; i++) {
		memcpy(last.params + off, params[i], (size_t)param_sizes[i]);
		off += param_sizes[i];
	}
	last.nparams = off;
	UNLOCK();
	if (f->emu) {
		void (*launch)(void *, const unsigned *, void **) = (void (*)(void *, const unsigned *, void **))dlsym(f->mod->emu, "zeemu_launch");
		unsigned d[7] = {gx, gy, gz, bx, by, bz, shared};
		launch(f->emu, d, params);
	}
	return CUDA_SUCCESS;
}

// ---- Test-only exports ----------------------------------------------------------

// fakecuda_fail makes the next call of the named function return code.
EXPORT int fakecuda_fail(const char *call, int code) {
	int id = call_id(call);
	if (id < 0)
		return -1;
	__atomic_store_n(&call_fail[id], code, __ATOMIC_RELAXED);
	return 0;
}

// fakecuda_calls returns how many times the named function was called
// since the last fakecuda_reset, or -1 for a name the fake does not know.
EXPORT int fakecuda_calls(const char *call) {
	int id = call_id(call);
	return id < 0 ? -1 : __atomic_load_n(&call_count[id], __ATOMIC_RELAXED);
}

// fakecuda_param_sizes gives the byte sizes of the kernel parameters of
// the next launches, which the fake cannot know from a kernel image.
EXPORT void fakecuda_param_sizes(const int *sizes, int n) {
	LOCK();
	if (n < 0)
		n = 0;
	if (n > MAXPARAMS)
		n = MAXPARAMS;
	for (int i = 0; i < n; i++)
		param_sizes[i] = sizes[i] < 0 ? 0 : sizes[i];
	nparam_sizes = n;
	UNLOCK();
}

// fakecuda_last_launch copies the last launch's function name, dims
// (grid x, y, z, block x, y, z, shared bytes), stream and parameter bytes
// (each parameter's bytes, of the sizes given to fakecuda_param_sizes, one
// after the other); it returns the number of parameter bytes, or -1 when
// nothing was launched.
EXPORT int fakecuda_last_launch(char *name, int name_cap, unsigned *dims, void **stream, unsigned char *params,
				int cap) {
	LOCK();
	if (!last.valid) {
		UNLOCK();
		return -1;
	}
	if (name && name_cap > 0)
		snprintf(name, (size_t)name_cap, "%s", last.name);
	if (dims)
		memcpy(dims, last.dims, sizeof last.dims);
	if (stream)
		*stream = last.stream;
	int n = last.nparams;
	if (params)
		memcpy(params, last.params, (size_t)(n < cap ? n : cap));
	UNLOCK();
	return n;
}

// fakecuda_stream_flags returns a stream's creation flags, or -1.
EXPORT int fakecuda_stream_flags(struct stream *s) {
	return s && s->magic == MAGIC_STREAM ? (int)s->flags : -1;
}

// fakecuda_event_flags returns an event's creation flags, or -1.
EXPORT int fakecuda_event_flags(struct event *e) {
	return e && e->magic == MAGIC_EVENT ? (int)e->flags : -1;
}

// fakecuda_live returns the number of device (host == 0) or page-locked
// host (host == 1) allocations not freed.
EXPORT int fakecuda_live(int host) {
	int n = 0;
	LOCK();
	for (struct alloc *a = allocs; a; a = a->next)
		n += a->host == host;
	UNLOCK();
	return n;
}

// fakecuda_context_refs returns the retain count of a device's primary
// context.
EXPORT int fakecuda_context_refs(int dev) {
	if (dev < 0 || dev >= MAXDEV)
		return -1;
	LOCK();
	int n = primary[dev].refs;
	UNLOCK();
	return n;
}

// fakecuda_reset clears the call counts, injected errors, parameter sizes
// and last launch; allocations, contexts and handles stay.
EXPORT void fakecuda_reset(void) {
	for (int i = 0; i < NCALLS; i++) {
		__atomic_store_n(&call_count[i], 0, __ATOMIC_RELAXED);
		__atomic_store_n(&call_fail[i], 0, __ATOMIC_RELAXED);
	}
	LOCK();
	nparam_sizes = 0;
	last.valid = 0;
	UNLOCK();
}
