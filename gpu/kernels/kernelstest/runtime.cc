//go:build ignore

// (The constraint keeps the Go tool from treating this C++ file as part of
// the package; kernelstest compiles it with the host C++ compiler.)

// runtime.cc: the fiber scheduler of the host emulation (see prelude.h),
// linked into each family's host library. Not thread-safe: one launch at a
// time.
#include <ucontext.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct ze_emu_dim3 { unsigned x, y, z; };
struct ze_emu_fiber {
    ucontext_t ctx;
    ze_emu_dim3 tid;
    int done;
    char *stack;
};

extern "C" {
ze_emu_dim3 ze_emu_block, ze_emu_bdim, ze_emu_gdim;
ze_emu_fiber *ze_emu_cur;
}
unsigned long long ze_emu_slots[1024];

static ze_emu_fiber fibers[1024];
static ucontext_t sched;
static int nthreads;
static void (*kernel)(void **);
static void **kparams;
static const size_t stack_size = 256 << 10;

// Barriers: a generation counter and the number of arrivals.
static unsigned long long block_gen;
static int block_arrived;
static unsigned long long warp_gen[32];
static int warp_arrived[32];

static void yield() { swapcontext(&ze_emu_cur->ctx, &sched); }

static int alive_in(int lo, int hi) {
    int n = 0;
    for (int i = lo; i < hi; i++) n += !fibers[i].done;
    return n;
}

extern "C" void ze_emu_syncthreads(void) {
    unsigned long long g = block_gen;
    if (++block_arrived == alive_in(0, nthreads)) {
        block_arrived = 0;
        block_gen++;
        return;
    }
    while (block_gen == g) yield();
}

extern "C" void ze_emu_syncwarp(void) {
    int t = (int)(ze_emu_cur - fibers);
    int w = t / 32;
    unsigned long long g = warp_gen[w];
    int hi = (w + 1) * 32 < nthreads ? (w + 1) * 32 : nthreads;
    if (++warp_arrived[w] == alive_in(w * 32, hi)) {
        warp_arrived[w] = 0;
        warp_gen[w]++;
        return;
    }
    while (warp_gen[w] == g) yield();
}

static void entry() {
    kernel(kparams);
    ze_emu_cur->done = 1;
    swapcontext(&ze_emu_cur->ctx, &sched);
}

extern "C" void zeemu_launch(void *k, const unsigned *d, void **params) {
    kernel = (void (*)(void **))k;
    kparams = params;
    ze_emu_gdim = {d[0], d[1], d[2]};
    ze_emu_bdim = {d[3], d[4], d[5]};
    nthreads = (int)(d[3] * d[4] * d[5]);
    if (nthreads > 1024) abort();
    for (unsigned bz = 0; bz < d[2]; bz++)
        for (unsigned by = 0; by < d[1]; by++)
            for (unsigned bx = 0; bx < d[0]; bx++) {
                ze_emu_block = {bx, by, bz};
                block_gen = 0;
                block_arrived = 0;
                memset(warp_gen, 0, sizeof warp_gen);
                memset(warp_arrived, 0, sizeof warp_arrived);
                for (int t = 0; t < nthreads; t++) {
                    ze_emu_fiber *f = &fibers[t];
                    if (!f->stack) f->stack = (char *)malloc(stack_size);
                    f->done = 0;
                    f->tid = {(unsigned)t % d[3], ((unsigned)t / d[3]) % d[4], (unsigned)t / (d[3] * d[4])};
                    getcontext(&f->ctx);
                    f->ctx.uc_stack.ss_sp = f->stack;
                    f->ctx.uc_stack.ss_size = stack_size;
                    f->ctx.uc_link = &sched;
                    makecontext(&f->ctx, entry, 0);
                }
                long spins = 0;
                for (;;) {
                    int left = 0;
                    for (int t = 0; t < nthreads; t++) {
                        if (fibers[t].done) continue;
                        left++;
                        ze_emu_cur = &fibers[t];
                        swapcontext(&sched, &fibers[t].ctx);
                    }
                    if (!left) break;
                    if (++spins > 100000000L) {
                        fprintf(stderr, "EMU: deadlock\n");
                        abort();
                    }
                }
            }
}
