/*
 * zeroeng_reactor.c: the entry point of a C training program built as a WASI reactor
 * (clang -mexec-model=reactor), which zeroeng.h recommends:
 *     clang --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -O2 -I sdk/c \
 *         -o prog.wasm prog.c sdk/c/zeroeng.c sdk/c/zeroeng_reactor.c
 * A WASI command (the default) has wasm-ld wrap every export but _start — zeroeng_callback, which
 * the host calls for the program's functions, included — with the program's constructors and
 * destructors, so that WASI's libc would flush stdio and run the atexit handlers after each call
 * of a function. A reactor's exports are not wrapped: the host calls its _initialize (the
 * constructors) once, then this _start, which runs main with the program's arguments and exits
 * with its status (the atexit handlers, once).
 */
#include <stdlib.h>

/* wasi-libc's: reads the arguments (args_get) and calls main. */
int __main_void(void);

__attribute__((export_name("_start"))) void _start(void) { exit(__main_void()); }
