//go:build ignore

// A fake NCCL (libnccl.so.2) for the tests of package nccl; see nvrtc.c for
// why the Go build constraint is there.
//
// It implements the calls the binding makes with the C signatures of
// nccl.h. ncclGetUniqueId writes the pattern byte i = 37·i + 11 (mod 256),
// 128 distinct bytes; ncclCommInitRank records the id it received by value,
// nranks and rank. A collective checks its arguments as NCCL does
// (ncclInvalidArgument, with ncclGetLastError saying why), records them,
// and with one rank copies send to recv (host memory stands for device
// memory). Group depth is per thread, as NCCL's (thread_local in
// src/group.cc), and each call records whether it ran inside a group on
// its own thread. ncclCommGetAsyncError reports what
// fakenccl_set_async_error set.
//
// The fakenccl_* exports are for the tests.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclTimeout = 8
} ncclResult_t;

#define NONE (-0x7fffffff) /* an argument the call does not have */

#define MAGIC 0x6e63636c /* "nccl" */

struct comm {
    int magic;
    int nranks, rank, dev;
    int destroyed, aborted;
};
typedef struct comm *ncclComm_t;

/* The last call's arguments, in 8-byte fields after the name so that Go
   mirrors the layout without padding rules. Fields a call does not have
   are -1. */
struct fakenccl_call {
    char fn[32];
    int64_t calls;
    uint64_t send, recv;
    int64_t count, dtype, op, root, peer;
    uint64_t comm, stream;
    int64_t grouped; /* 1 when called inside a group on the same thread */
};

static struct fakenccl_call last;
static char lastError[1024];
static ncclUniqueId lastId;
static int lastNranks = -1, lastRank = -1;
static int starts, ends, destroyed, aborted;
static ncclResult_t asyncError;
static char failName[32];
static ncclResult_t failResult;
static char failMessage[256];
static __thread int depth;

void fakenccl_reset(void) {
    memset(&last, 0, sizeof last);
    memset(&lastId, 0, sizeof lastId);
    lastError[0] = 0;
    lastNranks = lastRank = -1;
    starts = ends = destroyed = aborted = 0;
    asyncError = ncclSuccess;
    failName[0] = 0;
}
void fakenccl_last(struct fakenccl_call *out) { *out = last; }
void fakenccl_last_init(ncclUniqueId *id, int *nranks, int *rank) {
    *id = lastId;
    *nranks = lastNranks;
    *rank = lastRank;
}
void fakenccl_counts(int *groupStarts, int *groupEnds, int *destroys, int *aborts) {
    *groupStarts = starts;
    *groupEnds = ends;
    *destroys = destroyed;
    *aborts = aborted;
}
void fakenccl_set_async_error(int r) { asyncError = (ncclResult_t)r; }
/* fakenccl_set_last_error sets what ncclGetLastError returns, as a
   warning in NCCL's background threads would. */
void fakenccl_set_last_error(const char *msg) { snprintf(lastError, sizeof lastError, "%s", msg ? msg : ""); }
/* fakenccl_fail makes every later call of fn return result, with message as
   the last error, until fakenccl_reset. */
void fakenccl_fail(const char *fn, int result, const char *message) {
    strncpy(failName, fn, sizeof failName - 1);
    failName[sizeof failName - 1] = 0;
    failResult = (ncclResult_t)result;
    strncpy(failMessage, message ? message : "", sizeof failMessage - 1);
    failMessage[sizeof failMessage - 1] = 0;
}

static ncclResult_t warn(ncclResult_t r, const char *msg) {
    snprintf(lastError, sizeof lastError, "%s", msg);
    return r;
}

#define INJECT()                                                           \
    do {                                                                   \
        if (failName[0] && strcmp(failName, __func__) == 0) return warn(failResult, failMessage); \
    } while (0)

ncclResult_t ncclGetVersion(int *version) {
    if (version == NULL) return ncclInvalidArgument;
    *version = 22105; /* 2.21.5: NCCL_VERSION(2,21,5) = 2*10000 + 21*100 + 5 */
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "NCCL operation timed out";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return lastError;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    INJECT();
    if (id == NULL) return warn(ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) id->internal[i] = (char)(37 * i + 11);
    return ncclSuccess;
}

static struct comm *newComm(int nranks, int rank, int dev) {
    struct comm *c = calloc(1, sizeof *c);
    c->magic = MAGIC;
    c->nranks = nranks;
    c->rank = rank;
    c->dev = dev;
    return c;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    INJECT();
    lastId = id;
    lastNranks = nranks;
    lastRank = rank;
    if (comm == NULL) return warn(ncclInvalidArgument, "CommInitRank : comm argument is NULL");
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        char msg[128];
        snprintf(msg, sizeof msg, "Invalid rank requested : %d/%d", rank, nranks);
        return warn(ncclInvalidArgument, msg);
    }
    *comm = newComm(nranks, rank, 0);
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    INJECT();
    if (comms == NULL) return warn(ncclInvalidArgument, "ncclCommInitAll : comms argument is NULL");
    if (ndev < 1) {
        char msg[128];
        snprintf(msg, sizeof msg, "ncclCommInitAll : invalid ndev %d", ndev);
        return warn(ncclInvalidArgument, msg);
    }
    for (int i = 0; devlist && i < ndev; i++) {
        for (int j = 0; j < i; j++) {
            if (devlist[i] == devlist[j]) {
                char msg[128];
                snprintf(msg, sizeof msg, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %x", j,
                         i, devlist[i]);
                return warn(ncclInvalidUsage, msg);
            }
        }
    }
    for (int i = 0; i < ndev; i++) comms[i] = newComm(ndev, i, devlist ? devlist[i] : i);
    return ncclSuccess;
}

static int usable(ncclComm_t c) { return c != NULL && c->magic == MAGIC && !c->destroyed && !c->aborted; }

static ncclResult_t badComm(ncclComm_t c) {
    if (c == NULL) return warn(ncclInvalidArgument, "comm argument is NULL");
    return warn(ncclInvalidArgument, "comm is not a live communicator");
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    INJECT();
    if (!usable(c)) return badComm(c);
    c->destroyed = 1; /* kept allocated, so that later use is detected */
    destroyed++;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
    INJECT();
    if (!usable(c)) return badComm(c);
    c->aborted = 1;
    aborted++;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
    INJECT();
    if (!usable(c)) return badComm(c);
    if (err == NULL) return warn(ncclInvalidArgument, "asyncError argument is NULL");
    *err = asyncError;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *count) {
    INJECT();
    if (!usable(c)) return badComm(c);
    *count = c->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *device) {
    INJECT();
    if (!usable(c)) return badComm(c);
    *device = c->dev;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank) {
    INJECT();
    if (!usable(c)) return badComm(c);
    *rank = c->rank;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
    INJECT();
    depth++;
    starts++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    INJECT();
    if (depth == 0) return warn(ncclInvalidUsage, "ncclGroupEnd: not in a group call.");
    depth--;
    ends++;
    return ncclSuccess;
}

static size_t typeSize(int dt) {
    switch (dt) {
    case 0: case 1: return 1;           /* ncclInt8, ncclUint8 */
    case 2: case 3: return 4;           /* ncclInt32, ncclUint32 */
    case 4: case 5: return 8;           /* ncclInt64, ncclUint64 */
    case 6: return 2;                   /* ncclFloat16 */
    case 7: return 4;                   /* ncclFloat32 */
    case 8: return 8;                   /* ncclFloat64 */
    case 9: return 2;                   /* ncclBfloat16 */
    }
    return 0;
}

/* record checks and records one call. */
static ncclResult_t record(const char *fn, const void *send, void *recv, size_t count, int dt, int op, int root,
                           int peer, ncclComm_t c, uintptr_t stream) {
    int64_t calls = last.calls + 1;
    memset(&last, 0, sizeof last);
    snprintf(last.fn, sizeof last.fn, "%s", fn);
    last.calls = calls;
    last.send = (uint64_t)(uintptr_t)send;
    last.recv = (uint64_t)(uintptr_t)recv;
    last.count = (int64_t)count;
    last.dtype = dt;
    last.op = op == NONE ? -1 : op;
    last.root = root == NONE ? -1 : root;
    last.peer = peer == NONE ? -1 : peer;
    last.comm = (uint64_t)(uintptr_t)c;
    last.stream = stream;
    last.grouped = depth > 0;
    if (!usable(c)) return badComm(c);
    char msg[128];
    if (typeSize(dt) == 0) {
        snprintf(msg, sizeof msg, "%s : invalid type %d", fn, dt);
        return warn(ncclInvalidArgument, msg);
    }
    if (op != NONE && (op < 0 || op > 4)) {
        snprintf(msg, sizeof msg, "%s : invalid reduction operation %d", fn, op);
        return warn(ncclInvalidArgument, msg);
    }
    if (root != NONE && (root < 0 || root >= c->nranks)) {
        snprintf(msg, sizeof msg, "%s : invalid root %d (root should be in the 0..%d range)", fn, root,
                 c->nranks);
        return warn(ncclInvalidArgument, msg);
    }
    if (peer != NONE && (peer < 0 || peer >= c->nranks)) {
        snprintf(msg, sizeof msg, "%s : invalid peer %d (peer should be in the 0..%d range)", fn, peer, c->nranks);
        return warn(ncclInvalidArgument, msg);
    }
    if (count > 0 && ((send == NULL && strcmp(fn, "ncclRecv") != 0) || (recv == NULL && strcmp(fn, "ncclSend") != 0))) {
        snprintf(msg, sizeof msg, "%s : buffer argument is NULL", fn);
        return warn(ncclInvalidArgument, msg);
    }
    if (c->nranks == 1 && send != NULL && recv != NULL && send != recv) memcpy(recv, send, count * typeSize(dt));
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int dt, int op, ncclComm_t c,
                           uintptr_t stream) {
    INJECT();
    return record(__func__, send, recv, count, dt, op, NONE, NONE, c, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, int dt, int root, ncclComm_t c,
                           uintptr_t stream) {
    INJECT();
    return record(__func__, send, recv, count, dt, NONE, root, NONE, c, stream);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, int dt, int op, ncclComm_t c,
                               uintptr_t stream) {
    INJECT();
    return record(__func__, send, recv, recvcount, dt, op, NONE, NONE, c, stream);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, int dt, ncclComm_t c,
                           uintptr_t stream) {
    INJECT();
    return record(__func__, send, recv, sendcount, dt, NONE, NONE, NONE, c, stream);
}

ncclResult_t ncclSend(const void *send, size_t count, int dt, int peer, ncclComm_t c, uintptr_t stream) {
    INJECT();
    return record(__func__, send, NULL, count, dt, NONE, NONE, peer, c, stream);
}

ncclResult_t ncclRecv(void *recv, size_t count, int dt, int peer, ncclComm_t c, uintptr_t stream) {
    INJECT();
    return record(__func__, NULL, recv, count, dt, NONE, NONE, peer, c, stream);
}
