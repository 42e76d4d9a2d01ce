/* SPDX-License-Identifier: MIT */
/*
 * atomic_locks.c - the toolkit's locks against glibc's, with a tiny critical
 * section (add 1 to a counter that shares the lock's cache line):
 *
 *   BM_spin_ticket      spinlock.h   ticket lock, one 32-bit word
 *   BM_spin_queued      qspinlock.h  queued (MCS) lock, one 32-bit word
 *   BM_mutex_futex      mutex.h      the allocator's lock: not FIFO, waiters sleep
 *   BM_pthread_mutex                 glibc's default mutex
 *
 * and the reader-writer locks on a read-mostly load (one write per
 * RW_WRITE_EVERY operations; the rest read the counter) and a read-only one:
 *
 *   BM_qrwlock_*        qrwlock.h    queued rwlock
 *   BM_pthread_rwlock_*              glibc's default rwlock
 *
 * Each runs in 1 thread (uncontended: the cost of lock + unlock) and in 2
 * threads on one lock. After the loop thread 0 checks that no increment was
 * lost, which also checks mutual exclusion.
 */
#include "bench.h"

#include "atomic.h"
#include "mutex.h"
#include "qrwlock.h"
#include "qspinlock.h"
#include "spinlock.h"

#include <pthread.h>

#define RW_WRITE_EVERY 100     /* read-mostly: 1 write, 99 reads */

static struct {
	_Alignas(64) spinlock_t lock;
	long count;
} ticket = { .lock = SPINLOCK_INIT };

static struct {
	_Alignas(64) qspinlock_t lock;
	long count;
} queued = { .lock = QSPINLOCK_INIT };

static struct {
	_Alignas(64) mutex_t lock;
	long count;
} sleeping = { .lock = MUTEX_INIT };

static struct {
	_Alignas(64) pthread_mutex_t lock;
	long count;
} mutex = { .lock = PTHREAD_MUTEX_INITIALIZER };

static struct {
	_Alignas(64) qrwlock_t lock;
	long count;
} qrw = { .lock = QRWLOCK_INIT };

static struct {
	_Alignas(64) pthread_rwlock_t lock;
	long count;
} prw = { .lock = PTHREAD_RWLOCK_INITIALIZER };

/* Thread 0 resets before the loop (the others wait at the start barrier). */
static void reset(bench_state *state, long *count)
{
	if (bench_thread_index(state) == 0)
		*count = 0;
}

/*
 * Thread 0 after the loop (every thread is done): expect `per_thread` each.
 * "handoffs" (exclusive locks, 2 threads): the share of critical sections
 * that found the other thread's increment since this thread's last one, i.e.
 * the lock changed hands. On a loaded machine the scheduler may run the two
 * threads one after the other: handoffs near 0 means no contention was
 * measured.
 */
static void finish(bench_state *state, long count, long per_thread, int64_t handoffs)
{
	bench_set_items_processed(state, bench_iterations(state));
	if (handoffs >= 0 && bench_threads(state) > 1)
		bench_counter(state, "handoffs", (double)handoffs, BENCH_COUNTER_PER_ITER);
	if (bench_thread_index(state) == 0 && count != per_thread * bench_threads(state))
		bench_skip_with_error(state, "lost update: the lock let two holders in");
}

/* ---- exclusive locks --------------------------------------------------------- */

BENCH(BM_spin_ticket, BENCH_THREADS(1, 2), .real_time = true)
{
	int64_t handoffs = 0;
	long mine = 0;

	reset(state, &ticket.count);
	while (bench_keep_running(state)) {
		spin_lock(&ticket.lock);
		handoffs += ticket.count != mine;
		mine = ++ticket.count;
		spin_unlock(&ticket.lock);
	}
	finish(state, ticket.count, bench_iterations(state), handoffs);
}

BENCH(BM_spin_queued, BENCH_THREADS(1, 2), .real_time = true)
{
	int64_t handoffs = 0;
	long mine = 0;

	reset(state, &queued.count);
	while (bench_keep_running(state)) {
		qspin_lock(&queued.lock);
		handoffs += queued.count != mine;
		mine = ++queued.count;
		qspin_unlock(&queued.lock);
	}
	finish(state, queued.count, bench_iterations(state), handoffs);
}

BENCH(BM_mutex_futex, BENCH_THREADS(1, 2), .real_time = true)
{
	int64_t handoffs = 0;
	long mine = 0;

	reset(state, &sleeping.count);
	while (bench_keep_running(state)) {
		mutex_lock(&sleeping.lock);
		handoffs += sleeping.count != mine;
		mine = ++sleeping.count;
		mutex_unlock(&sleeping.lock);
	}
	finish(state, sleeping.count, bench_iterations(state), handoffs);
}

BENCH(BM_pthread_mutex, BENCH_THREADS(1, 2), .real_time = true)
{
	int64_t handoffs = 0;
	long mine = 0;

	reset(state, &mutex.count);
	while (bench_keep_running(state)) {
		pthread_mutex_lock(&mutex.lock);
		handoffs += mutex.count != mine;
		mine = ++mutex.count;
		pthread_mutex_unlock(&mutex.lock);
	}
	finish(state, mutex.count, bench_iterations(state), handoffs);
}

/* ---- reader-writer locks ---------------------------------------------------- */

static long writes_in(int64_t iterations)
{
	return (long)(iterations / RW_WRITE_EVERY);
}

BENCH(BM_qrwlock_read_mostly, BENCH_THREADS(1, 2), .real_time = true)
{
	unsigned int n = 0;

	reset(state, &qrw.count);
	while (bench_keep_running(state)) {
		if (++n == RW_WRITE_EVERY) {
			n = 0;
			qrw_write_lock(&qrw.lock);
			qrw.count++;
			qrw_write_unlock(&qrw.lock);
		} else {
			qrw_read_lock(&qrw.lock);
			long v = qrw.count;
			BENCH_KEEP(v);
			qrw_read_unlock(&qrw.lock);
		}
	}
	finish(state, qrw.count, writes_in(bench_iterations(state)), -1);
}

BENCH(BM_pthread_rwlock_read_mostly, BENCH_THREADS(1, 2), .real_time = true)
{
	unsigned int n = 0;

	reset(state, &prw.count);
	while (bench_keep_running(state)) {
		if (++n == RW_WRITE_EVERY) {
			n = 0;
			pthread_rwlock_wrlock(&prw.lock);
			prw.count++;
			pthread_rwlock_unlock(&prw.lock);
		} else {
			pthread_rwlock_rdlock(&prw.lock);
			long v = prw.count;
			BENCH_KEEP(v);
			pthread_rwlock_unlock(&prw.lock);
		}
	}
	finish(state, prw.count, writes_in(bench_iterations(state)), -1);
}

BENCH(BM_qrwlock_read_only, BENCH_THREADS(1, 2), .real_time = true)
{
	while (bench_keep_running(state)) {
		qrw_read_lock(&qrw.lock);
		long v = qrw.count;
		BENCH_KEEP(v);
		qrw_read_unlock(&qrw.lock);
	}
	bench_set_items_processed(state, bench_iterations(state));
}

BENCH(BM_pthread_rwlock_read_only, BENCH_THREADS(1, 2), .real_time = true)
{
	while (bench_keep_running(state)) {
		pthread_rwlock_rdlock(&prw.lock);
		long v = prw.count;
		BENCH_KEEP(v);
		pthread_rwlock_unlock(&prw.lock);
	}
	bench_set_items_processed(state, bench_iterations(state));
}
