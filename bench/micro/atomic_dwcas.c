/* SPDX-License-Identifier: MIT */
/*
 * atomic_dwcas.c - what one coupled update of a pair of words costs: the
 * native double-width CAS, its striped-spinlock fallback, a pthread mutex
 * guarding two plain words, and (as the floor) a single-word CAS.
 *
 * Every iteration is one successful "add 1 to both halves" (a CAS retry loop,
 * or the two adds under the mutex). The _uncontended benchmarks run one
 * thread; the _shared ones run 2 threads on one pair, so each CAS may fail and
 * retry ("retries" = failed CASes per successful update; "handoffs", below,
 * says how much the two threads really overlapped).
 *
 * dwcas_set_path() is process-wide: thread 0 picks the path before its first
 * bench_keep_running() (the other threads are held at the start barrier), and
 * the library runs one benchmark at a time, so the two paths never meet.
 */
#include "bench.h"

#include "dwcas.h"

#include <pthread.h>

static struct {
	_Alignas(64) dword_t pair;
} dw;

static struct {
	_Alignas(64) pthread_mutex_t lock;
	uintptr_t lo, hi;
} mx = { .lock = PTHREAD_MUTEX_INITIALIZER };

static struct {
	_Alignas(64) atomic_long_t word;
} w;

/* Thread 0, before the loop: select the path and zero the pair. */
static bool use_path(bench_state *state, enum dwcas_path path)
{
	if (path == DWCAS_NATIVE && !dwcas_native_available()) {
		bench_skip_with_error(state, "no native double-width CAS on this CPU");
		return false;
	}
	if (bench_thread_index(state) == 0) {
		dwcas_set_path(path);
		dw.pair = (dword_t){ 0, 0 };
	}
	return true;
}

/* Thread 0, after the loop (all threads are done): no update was lost. */
static void check_pair(bench_state *state, uintptr_t lo, uintptr_t hi)
{
	if (bench_thread_index(state) != 0)
		return;
	if (lo != hi)
		bench_skip_with_error(state, "pair halves differ: an update was torn");
}

/*
 * "handoffs": the share of updates that found the other thread's update since
 * this thread's last one (the line came from the other core). On a loaded
 * machine the scheduler may run the two threads one after the other; then
 * handoffs is near 0 and the run measured no contention at all.
 */
static void report(bench_state *state, int64_t handoffs, int64_t fails, bool cas)
{
	bench_set_items_processed(state, bench_iterations(state));
	if (bench_threads(state) > 1)
		bench_counter(state, "handoffs", (double)handoffs, BENCH_COUNTER_PER_ITER);
	if (cas)
		bench_counter(state, "retries", (double)fails, BENCH_COUNTER_PER_ITER);
}

static void dwcas_loop(bench_state *state)
{
	dword_t *p = &dw.pair;
	int64_t fails = 0, handoffs = 0;
	uintptr_t mine = 0;

	while (bench_keep_running(state)) {
		dword_t old = dwcas_read(p), nw;

		for (;;) {
			nw.lo = old.lo + 1;
			nw.hi = old.hi + 1;
			if (dwcas_try_cmpxchg(p, &old, nw))
				break;
			fails++;
		}
		handoffs += old.lo != mine;
		mine = nw.lo;
	}
	report(state, handoffs, fails, true);
	check_pair(state, dw.pair.lo, dw.pair.hi);
}

static void mutex_loop(bench_state *state)
{
	int64_t handoffs = 0;
	uintptr_t mine = 0;

	if (bench_thread_index(state) == 0)
		mx.lo = mx.hi = 0;
	while (bench_keep_running(state)) {
		pthread_mutex_lock(&mx.lock);
		handoffs += mx.lo != mine;
		mine = ++mx.lo;
		mx.hi++;
		pthread_mutex_unlock(&mx.lock);
	}
	report(state, handoffs, 0, false);
	check_pair(state, mx.lo, mx.hi);
}

static void cas64_loop(bench_state *state)
{
	int64_t fails = 0, handoffs = 0;
	long mine = -1;

	while (bench_keep_running(state)) {
		long old = atomic_long_read(&w.word);

		while (!atomic_long_try_cmpxchg(&w.word, &old, old + 1))
			fails++;
		handoffs += old != mine;
		mine = old + 1;
	}
	report(state, handoffs, fails, true);
}

/* ---- one thread ------------------------------------------------------------ */

BENCH(BM_dwcas_native_uncontended)
{
	if (use_path(state, DWCAS_NATIVE))
		dwcas_loop(state);
}

BENCH(BM_dwcas_locked_uncontended)
{
	if (use_path(state, DWCAS_LOCKED))
		dwcas_loop(state);
}

BENCH(BM_mutex_pair_uncontended)
{
	mutex_loop(state);
}

BENCH(BM_cas64_uncontended)
{
	cas64_loop(state);
}

/* ---- two threads, one pair ------------------------------------------------- */

BENCH(BM_dwcas_native_shared, BENCH_THREADS(2), .real_time = true)
{
	if (use_path(state, DWCAS_NATIVE))
		dwcas_loop(state);
}

BENCH(BM_dwcas_locked_shared, BENCH_THREADS(2), .real_time = true)
{
	if (use_path(state, DWCAS_LOCKED))
		dwcas_loop(state);
}

BENCH(BM_mutex_pair_shared, BENCH_THREADS(2), .real_time = true)
{
	mutex_loop(state);
}

BENCH(BM_cas64_shared, BENCH_THREADS(2), .real_time = true)
{
	cas64_loop(state);
}
