// How far apart the two CPUs are: the round trip of one cache line between two threads pinned to
// CPUs 0 and 1 (a flag each writes in turn). On the 2-vCPU development VM it reads 75-130 ns while
// the virtual CPUs share a cache and 360-440 ns for the minutes they do not, which is when
// loops that move data between the cores slow down (RATIONALE.md, "One worker pool for the
// process"). Run it beside a benchmark to say which state the machine was in:
//
//   clang -O2 -pthread -o /tmp/pingpong bench/pingpong/pingpong.c && /tmp/pingpong
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

enum { trips = 200000 };

static _Atomic long flag __attribute__((aligned(64)));

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *pong(void *arg) {
  (void)arg;
  pin(1);
  for (long i = 0; i < trips; i++) {
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) {
    }
    atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
  }
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, NULL, pong, NULL);
  pin(0);
  double start = now();
  for (long i = 0; i < trips; i++) {
    atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {
    }
  }
  double end = now();
  pthread_join(t, NULL);
  printf("round trip %.0f ns\n", (end - start) / trips * 1e9);
  return 0;
}
