/* SPDX-License-Identifier: MIT */
/*
 * bench.h - Google Benchmark from C: every uslab microbenchmark is a C file.
 *
 * A benchmark is a function of one bench_state, defined and registered by
 * one macro, with its options on the same line:
 *
 *     #include "bench.h"
 *
 *     BENCH(BM_counter_inc)
 *     {
 *             while (bench_keep_running(state))
 *                     atomic_inc(&counter);
 *             bench_set_items_processed(state, bench_iterations(state));
 *     }
 *
 *     BENCH(BM_malloc_free_pair, BENCH_ARGS(16, 64, 256), BENCH_THREADS(1, 2),
 *           .real_time = true)
 *     {
 *             size_t size = (size_t)bench_range(state, 0);
 *             ...
 *     }
 *
 * Options are designated initialisers of struct bench_opts (below); the list
 * ones go through BENCH_ARGS / BENCH_THREADS, which count their elements.
 * The shim library provides main() (a weak symbol: a file may define its own
 * and call bench_run()), so a benchmark file needs nothing else.
 *
 * The loop: bench_keep_running() is inline, a countdown and a branch per
 * iteration (its cost: below); the shim is entered only at the start and the
 * end of the timed loop. Run the loop to completion (no break): the library
 * requires that every iteration it asked for runs.
 *
 * Threads: with BENCH_THREADS(n) the function runs in n threads at once;
 * bench_thread_index() tells them apart. Work done by thread 0 before its
 * first bench_keep_running() happens before any thread's first timed
 * iteration (every thread waits at a start barrier inside that call), and
 * work after the loop happens after every thread's last one (a stop
 * barrier), so thread 0 may set up and check shared state there.
 *
 * Reported times with n threads (Google Benchmark 1.7): "Time" is the wall
 * clock per iteration of the whole group (mean thread wall time divided by
 * the iterations of all threads: the inverse of the throughput), "CPU" is the
 * CPU time per iteration of one thread (summed thread CPU time divided by the
 * same total). Set .real_time for threaded runs so that the iteration count
 * is chosen by the wall clock. items_processed and counters are summed over
 * the threads.
 *
 * Cost of the loop itself: bench_keep_running()'s countdown lives in memory,
 * so an empty body runs at ~3 ns per iteration (the C++ range-for: ~0.5 ns);
 * once the body holds a locked instruction the difference is below 0.3 ns,
 * hidden behind the body (measured on the 2-core EPYC VM, docs/atomics.md).
 */
#ifndef USLAB_BENCH_H
#define USLAB_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The state of one thread of one run. Only `left` is touched inline. */
typedef struct bench_state {
	uint64_t left;          /* iterations still to run in this loop */
	bool started;           /* the timed loop has begun */
	void *impl;             /* benchmark::State * */
} bench_state;

typedef void (*bench_fn)(bench_state *state);

#define BENCH_MAX_LIST 16

enum bench_unit { BENCH_NS = 0, BENCH_US, BENCH_MS, BENCH_S };

struct bench_opts {
	int reserved_;                   /* always 0: keeps BENCH(fn) valid C11 */
	int64_t args[BENCH_MAX_LIST];    /* one run per value: BENCH_ARGS(...) */
	int nargs;
	int64_t range[2];                /* lo, hi: powers of range_multiplier between */
	int range_multiplier;            /* 0: the library's default (8) */
	int threads[BENCH_MAX_LIST];     /* one run per count: BENCH_THREADS(...) */
	int nthreads;
	const char *arg_name;            /* "size" shows as BM_x/size:64 */
	bool real_time;                  /* time by the wall clock (UseRealTime) */
	bool process_cpu_time;           /* CPU time of all threads (MeasureProcessCPUTime) */
	double min_time;                 /* seconds; 0: the library's default */
	int64_t iterations;              /* fixed count; 0: let the library choose */
	int repetitions;                 /* 0: --benchmark_repetitions decides */
	enum bench_unit unit;
};

#define BENCH_COUNT_(T, ...) ((int)(sizeof((T[]){ __VA_ARGS__ }) / sizeof(T)))
#define BENCH_ARGS(...)    .args = { __VA_ARGS__ }, .nargs = BENCH_COUNT_(int64_t, __VA_ARGS__)
#define BENCH_THREADS(...) .threads = { __VA_ARGS__ }, .nthreads = BENCH_COUNT_(int, __VA_ARGS__)

/* An opaque registered benchmark, for options struct bench_opts lacks. */
typedef struct bench_handle bench_handle;

bench_handle *bench_register(const char *name, bench_fn fn, const struct bench_opts *opts);
bench_handle *bench_handle_args(bench_handle *b, const int64_t *args, int n);  /* one multi-arg run */
bench_handle *bench_handle_arg_names(bench_handle *b, const char *const *names, int n);  /* BM_x/size:64/align:16 */
bench_handle *bench_handle_threads(bench_handle *b, int threads);

/*
 * BENCH(fn, options...): define `static void fn(bench_state *state)` (the
 * body follows the macro) and register it before main() under the name "fn".
 * (The options go last in the initialiser, so BENCH(fn) alone is valid C11.)
 */
#define BENCH(...) BENCH_(__VA_ARGS__, .reserved_ = 0)
#define BENCH_(fn, ...)                                                         \
	static void fn(bench_state *state);                                     \
	__attribute__((constructor)) static void bench_register_##fn(void)      \
	{                                                                       \
		static const struct bench_opts o = { __VA_ARGS__ };             \
		bench_register(#fn, fn, &o);                                    \
	}                                                                       \
	static void fn(bench_state *state)

/* Parse the benchmark flags, run what matches, report. The shim's main(). */
int bench_run(int argc, char **argv);

/* ---- the timed loop ------------------------------------------------------ */

bool __bench_loop_edge(bench_state *s);   /* start or end of the loop */

static inline bool bench_keep_running(bench_state *s)
{
	if (__builtin_expect(s->left != 0, 1)) {
		s->left--;
		return true;
	}
	return __bench_loop_edge(s);
}

void bench_pause_timing(bench_state *s);
void bench_resume_timing(bench_state *s);
/* Mark the run failed: the loop ends at once (or never starts), the report
 * shows msg, and bench_run() (the shim's main) exits with status 1. */
void bench_skip_with_error(bench_state *s, const char *msg);

/* ---- what the run is ------------------------------------------------------ */

int64_t bench_range(const bench_state *s, int i);
int64_t bench_iterations(const bench_state *s);  /* this thread's; after the loop: all it ran */
int bench_thread_index(const bench_state *s);
int bench_threads(const bench_state *s);

/* ---- what it reports (per thread; the library sums the threads) ---------- */

void bench_set_items_processed(bench_state *s, int64_t items);
void bench_set_bytes_processed(bench_state *s, int64_t bytes);
void bench_set_label(bench_state *s, const char *label);

enum bench_counter_flags {
	BENCH_COUNTER_SUM = 0,              /* shown as the sum over threads */
	BENCH_COUNTER_RATE = 1 << 0,        /* divided by the run's seconds */
	BENCH_COUNTER_AVG_THREADS = 1 << 1, /* divided by the thread count */
	BENCH_COUNTER_PER_ITER = 1 << 3,    /* divided by the iterations (of all threads) */
};
void bench_counter(bench_state *s, const char *name, double value, unsigned flags);

/* ---- keeping the compiler honest ------------------------------------------ */

/* The pointed-to memory is read and may be written: its stores must happen. */
static inline void bench_do_not_optimize(const void *p)
{
	__asm__ __volatile__("" : : "r"(p) : "memory");
}

/* All memory may be read and written here: no store is elided or moved. */
static inline void bench_clobber_memory(void)
{
	__asm__ __volatile__("" : : : "memory");
}

/* A scalar lvalue is used and may change: its computation must happen. */
#define BENCH_KEEP(x) __asm__ __volatile__("" : "+m,r"(x) : : "memory")

#ifdef __cplusplus
}
#endif

#endif /* USLAB_BENCH_H */
