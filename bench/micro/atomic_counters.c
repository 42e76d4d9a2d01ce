/* SPDX-License-Identifier: MIT */
/*
 * atomic_counters.c - the toolkit's counting words, one iteration = one
 * take-and-drop pair on a shared word, in 1 thread and in 2 threads:
 *
 *   BM_atomic_inc_dec           atomic.h   relaxed inc + dec (no ordering)
 *   BM_atomic_fetch_add_sub     atomic.h   fully ordered fetch_add + fetch_sub
 *   BM_atomic_cmpxchg_inc_dec   atomic.h   the same by try_cmpxchg loops
 *   BM_kref_get_put             kref.h     kref_get + kref_put (never last)
 *   BM_kcref_get_put            kcref.h    atomic_inc + atomic_dec_and_lock,
 *                                          fast path (count stays >= 1)
 *   BM_lockref_get_put_lockless lockref.h  lockref_get + lockref_put_return
 *   BM_lockref_get_put_locked   lockref.h  the same two changes, each under
 *                                          the lockref's own spinlock
 *   BM_biased_get_put           biased.h   biased_try_get + biased_dec_return
 *   BM_combined_start_finish    combined.h combined_start + combined_finish
 *   BM_two_counters_start_finish           the same with two separate words
 *                                          (what combined.h replaces)
 *   BM_bits_trylock_bit         bits.h     bits_try_set_unless + bits_fetch_andnot
 *                                          on a try-lock bit
 *
 * Thread 0 sets each word up before the loop (the others wait at the start
 * barrier) and checks it after (every thread is done): a count that did not
 * come back means a lost update. Where an operation can fail and retry, the
 * failures per iteration are reported as "fails" (contention causes them).
 */
#include "bench.h"

#include "atomic.h"
#include "biased.h"
#include "bits.h"
#include "combined.h"
#include "kcref.h"
#include "kref.h"
#include "lockref.h"
#include "spinlock.h"

#define SHARED BENCH_THREADS(1, 2), .real_time = true

static struct { _Alignas(64) atomic_t v; } ctr;
static struct { _Alignas(64) atomic_long_t lo, hi; } two;
static struct { _Alignas(64) struct kref ref; } kr;
static struct { _Alignas(64) atomic_t count; spinlock_t lock; } kc = { .lock = SPINLOCK_INIT };
static struct { _Alignas(64) struct lockref lr; } lk;
static struct { _Alignas(64) struct biased b; } bi;
static struct { _Alignas(64) struct combined c; } cb;
static struct { _Alignas(64) atomic_long_t word; } bw;

#define TRYLOCK_BIT (1UL << 3)

static bool first(bench_state *state)
{
	return bench_thread_index(state) == 0;
}

static void done(bench_state *state, bool ok)
{
	bench_set_items_processed(state, bench_iterations(state));
	if (first(state) && !ok)
		bench_skip_with_error(state, "the word did not come back: lost update");
}

/* Failed CASes (or lockless attempts) per iteration: a sign of contention. */
static void report_fails(bench_state *state, int64_t fails)
{
	bench_counter(state, "fails", (double)fails, BENCH_COUNTER_PER_ITER);
}

static void never_released(struct kref *ref)
{
	(void)ref;
	__builtin_trap();   /* the benchmark's own reference keeps the count >= 1 */
}

/* ---- atomic.h ----------------------------------------------------------- */

BENCH(BM_atomic_inc_dec, SHARED)
{
	if (first(state))
		atomic_set(&ctr.v, 0);
	while (bench_keep_running(state)) {
		atomic_inc(&ctr.v);
		atomic_dec(&ctr.v);
	}
	done(state, atomic_read(&ctr.v) == 0);
}

BENCH(BM_atomic_fetch_add_sub, SHARED)
{
	if (first(state))
		atomic_set(&ctr.v, 0);
	while (bench_keep_running(state)) {
		int a = atomic_fetch_add(1, &ctr.v);
		int b = atomic_fetch_sub(1, &ctr.v);
		BENCH_KEEP(a);
		BENCH_KEEP(b);
	}
	done(state, atomic_read(&ctr.v) == 0);
}

BENCH(BM_atomic_cmpxchg_inc_dec, SHARED)
{
	int64_t fails = 0;

	if (first(state))
		atomic_set(&ctr.v, 0);
	while (bench_keep_running(state)) {
		int c = atomic_read(&ctr.v);

		while (!atomic_try_cmpxchg(&ctr.v, &c, c + 1))
			fails++;
		c++;            /* what we stored: the guess for the decrement */
		while (!atomic_try_cmpxchg(&ctr.v, &c, c - 1))
			fails++;
	}
	report_fails(state, fails);
	done(state, atomic_read(&ctr.v) == 0);
}

/* ---- kref.h, kcref.h ------------------------------------------------------ */

BENCH(BM_kref_get_put, SHARED)
{
	if (first(state))
		kref_init(&kr.ref);     /* the benchmark's reference: count 1 */
	while (bench_keep_running(state)) {
		kref_get(&kr.ref);
		kref_put(&kr.ref, never_released);
	}
	done(state, kref_read(&kr.ref) == 1);
}

BENCH(BM_kcref_get_put, SHARED)
{
	int64_t locked = 0;

	if (first(state))
		atomic_set(&kc.count, 1);
	while (bench_keep_running(state)) {
		atomic_inc(&kc.count);
		if (atomic_dec_and_lock(&kc.count, &kc.lock)) {
			locked++;       /* cannot happen: our count 1 never drops */
			spin_unlock(&kc.lock);
		}
	}
	done(state, atomic_read(&kc.count) == 1 && locked == 0);
}

/* ---- lockref.h ------------------------------------------------------------ */

BENCH(BM_lockref_get_put_lockless, SHARED)
{
	int64_t fails = 0;

	if (first(state))
		lockref_init(&lk.lr, 1);
	while (bench_keep_running(state)) {
		lockref_get(&lk.lr);
		if (lockref_put_return(&lk.lr) < 0) {
			fails++;        /* lock seen held or out of retries: the slow way */
			lockref_lock(&lk.lr);
			__lockref_add(&lk.lr, -1);
			lockref_unlock(&lk.lr);
		}
	}
	report_fails(state, fails);
	done(state, lockref_read_count(&lk.lr) == 1);
}

BENCH(BM_lockref_get_put_locked, SHARED)
{
	if (first(state))
		lockref_init(&lk.lr, 1);
	while (bench_keep_running(state)) {
		lockref_lock(&lk.lr);
		__lockref_add(&lk.lr, 1);
		lockref_unlock(&lk.lr);
		lockref_lock(&lk.lr);
		__lockref_add(&lk.lr, -1);
		lockref_unlock(&lk.lr);
	}
	done(state, lockref_read_count(&lk.lr) == 1);
}

/* ---- biased.h ------------------------------------------------------------- */

BENCH(BM_biased_get_put, SHARED)
{
	int64_t fails = 0;

	if (first(state))
		biased_init(&bi.b);
	while (bench_keep_running(state)) {
		if (!biased_try_get(&bi.b)) {
			fails++;        /* cannot happen: nobody sets the flag */
			continue;
		}
		biased_dec_return(&bi.b);
	}
	report_fails(state, fails);
	done(state, biased_read(&bi.b) == 0 && fails == 0);
}

/* ---- combined.h ----------------------------------------------------------- */

BENCH(BM_combined_start_finish, SHARED)
{
	uint32_t inflight, completed;

	if (first(state))
		combined_init(&cb.c);
	while (bench_keep_running(state)) {
		combined_start(&cb.c);
		combined_finish(&cb.c);
	}
	combined_read(&cb.c, &inflight, &completed);
	done(state, inflight == 0 &&
		    completed == (uint32_t)(bench_iterations(state) * bench_threads(state)));
}

BENCH(BM_two_counters_start_finish, SHARED)
{
	if (first(state)) {
		atomic_long_set(&two.lo, 0);
		atomic_long_set(&two.hi, 0);
	}
	while (bench_keep_running(state)) {
		(void)atomic_long_fetch_add_release(1, &two.lo);
		(void)atomic_long_fetch_sub_release(1, &two.lo);
		(void)atomic_long_fetch_add_release(1, &two.hi);
	}
	done(state, atomic_long_read(&two.lo) == 0 &&
		    atomic_long_read(&two.hi) == bench_iterations(state) * bench_threads(state));
}

/* ---- bits.h --------------------------------------------------------------- */

BENCH(BM_bits_trylock_bit, SHARED)
{
	int64_t fails = 0;

	if (first(state))
		atomic_long_set(&bw.word, 0);
	while (bench_keep_running(state)) {
		while (!bits_try_set_unless(&bw.word, TRYLOCK_BIT, TRYLOCK_BIT))
			fails++;
		bits_fetch_andnot(&bw.word, TRYLOCK_BIT);
	}
	report_fails(state, fails);
	done(state, bits_read(&bw.word) == 0);
}
