/*
 * atomic_lockref_stress - a get/put storm on one lockref while some of the
 * same threads take its lock and change the count (and a plain counter)
 * under it.
 *
 * The count starts at 0; every reference is taken by one of the verbs and
 * put back by one of them, so at any instant count == the references held.
 * Each thread tracks its own references. Checked:
 *   - a snapshot of the count is never below the references the reader
 *     itself holds, and never negative (no lost or duplicated update);
 *   - put_or_lock fails (lock held) only when the count is <= 1, and then the
 *     caller is holding the only reference;
 *   - the plain counter updated under the lock matches the number of locked
 *     sections (mutual exclusion between the lock and itself);
 *   - at the end every thread keeps me + 1 references: the count is exactly
 *     the sum, and the lock is free.
 *
 * Threads: min(MAX_THREADS, online CPUs), at least 2. The ticket lock is FIFO
 * and its waiters only spin, so with more spinning threads than CPUs a
 * preempted waiter stalls every handoff behind it and the storm crawls.
 */
#include "test.h"
#include "lockref.h"

#include <pthread.h>
#include <unistd.h>

#define MAX_THREADS 4
#define MAX_HELD 3
#define LOCKED_EVERY 32

static struct lockref lr = LOCKREF_INIT(0);
static long locked_counter;          /* plain, only under lr's lock */
static atomic_long_t locked_sections, lockless_puts, fallback_puts, put_or_lock_held;
static atomic_t stop;

/* Take the lock for a locked update: +k references and the plain counter. */
static void locked_take(int k)
{
	lockref_lock(&lr);
	REQUIRE(spin_is_locked(&lr.lock));
	REQUIRE(lockref_read_count(&lr) >= 0);
	__lockref_add(&lr, k);
	locked_counter++;
	lockref_unlock(&lr);
	atomic_long_inc(&locked_sections);
}

static void put_one(uint64_t *seed, int held_before)
{
	int32_t n;

	switch (test_rand(seed) % 3) {
	case 0:
		n = lockref_put_return(&lr);
		if (n >= 0) {
			REQUIRE(n >= held_before - 1);
			atomic_long_inc(&lockless_puts);
			return;
		}
		/* -1: locked or contended; do it under the lock ourselves */
		lockref_lock(&lr);
		REQUIRE(lockref_read_count(&lr) >= held_before);
		__lockref_add(&lr, -1);
		locked_counter++;
		lockref_unlock(&lr);
		atomic_long_inc(&locked_sections);
		atomic_long_inc(&fallback_puts);
		return;
	default:
		if (lockref_put_or_lock(&lr))
			return;
		/* lock held: the count was <= 1, so ours is the only reference */
		REQUIRE(held_before == 1);
		REQUIRE(lockref_read_count(&lr) == 1);
		__lockref_add(&lr, -1);
		locked_counter++;
		lockref_unlock(&lr);
		atomic_long_inc(&locked_sections);
		atomic_long_inc(&put_or_lock_held);
		return;
	}
}

static void *worker(void *arg)
{
	int me = (int)(intptr_t)arg;
	uint64_t seed = 0xabcdefull * (me + 1);
	int held = 0;

	while (!atomic_read(&stop) || held != me + 1) {
		uint64_t r = test_rand(&seed);
		bool want_get = atomic_read(&stop) ? held < me + 1
				: held == 0 || (held < MAX_HELD && (r & 1));

		if (want_get) {
			/* one get in LOCKED_EVERY is a locked update */
			switch ((r >> 1) % LOCKED_EVERY == 0 ? 4 : (r >> 8) % 4) {
			case 0:
				lockref_get(&lr);
				break;
			case 1:
				if (held == 0)
					continue;
				REQUIRE(lockref_get_not_zero(&lr));   /* we hold one */
				break;
			case 2:
				if (!lockref_get_not_zero(&lr))
					continue;                     /* it was 0 */
				break;
			case 3:
				REQUIRE(lockref_get_not_dead(&lr));   /* never dead here */
				break;
			default:
				locked_take(1);
				break;
			}
			held++;
		} else {
			put_one(&seed, held);
			held--;
		}
		int32_t c = lockref_read_count(&lr);
		REQUIRE(c >= held);
	}
	return NULL;
}

int main(void)
{
	pthread_t th[MAX_THREADS];
	double secs = test_stress_seconds(1.5);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int nthreads = cpus < 2 ? 2 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;

	for (int t = 0; t < nthreads; t++)
		REQUIRE(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0);
	test_sleep_ms((long)(secs * 1000));
	atomic_set(&stop, 1);
	for (int t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);

	int32_t want = nthreads * (nthreads + 1) / 2;
	CHECK_EQ(lr.count, want);
	CHECK(!spin_is_locked(&lr.lock));
	CHECK_EQ(lr.lock.owner, lr.lock.next);
	CHECK_EQ(locked_counter, atomic_long_read(&locked_sections));
	printf("threads %d, lockless puts %ld, put_return fallbacks %ld, put_or_lock held %ld, "
	       "locked sections %ld\n", nthreads, atomic_long_read(&lockless_puts),
	       atomic_long_read(&fallback_puts), atomic_long_read(&put_or_lock_held),
	       atomic_long_read(&locked_sections));
	CHECK(atomic_long_read(&lockless_puts) > 0);
	return test_done("atomic_lockref_stress");
}
