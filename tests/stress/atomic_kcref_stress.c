/*
 * atomic_kcref_stress - atomic_dec_and_lock under the registry pattern.
 *
 * An object is "registered" (a flag under the lock) with a count of REFS.
 * OWNERS threads each put their share of those references; LOOKERS threads
 * find the object under the lock, take a reference there (legal: the count
 * only reaches 0 under the lock), and put it with atomic_dec_and_lock. Per
 * round, checked:
 *   - atomic_dec_and_lock returns true exactly once, with the lock held, the
 *     count 0, and every other put already done (the last put);
 *   - after it, no lookup finds the object;
 *   - at the end the count is 0 and the lock free.
 * The ticket lock's "next" field counts lock acquisitions, so the test also
 * reports how many puts took the fast path (no lock), and requires most did.
 */
#include "test.h"
#include "kcref.h"

#include <pthread.h>

#define OWNERS      2
#define LOOKERS     2
#define NTHREADS    (OWNERS + LOOKERS)
#define REFS        4000
#define MAX_LOOKUPS 1000    /* per looker per round: keeps tickets < 2^16 */

static pthread_barrier_t start_bar, end_bar;
static atomic_t stop;

static spinlock_t lock = SPINLOCK_INIT;
static atomic_t cnt;
/* under lock: */
static int registered, zero_hits;
static long lookups_got;       /* successful lookups this round */

static atomic_long_t puts_started;    /* this round */
static atomic_long_t lookup_locks;    /* this round: lock taken by lookups */

static void put_one(void)
{
	atomic_long_inc_return(&puts_started);         /* fully ordered */
	if (!atomic_dec_and_lock(&cnt, &lock))
		return;
	/* the last put: we hold the lock and the count is 0 */
	REQUIRE(spin_is_locked(&lock));
	REQUIRE(atomic_read(&cnt) == 0);
	REQUIRE(registered == 1);
	REQUIRE(atomic_long_read(&puts_started) == REFS + lookups_got);
	registered = 0;
	zero_hits++;
	spin_unlock(&lock);
}

static void owner(int me)
{
	int share = REFS / OWNERS + (me < REFS % OWNERS);

	for (int i = 0; i < share; i++)
		put_one();
}

static void looker(void)
{
	for (int i = 0; i < MAX_LOOKUPS; i++) {
		spin_lock(&lock);
		atomic_long_inc(&lookup_locks);
		if (!registered) {
			spin_unlock(&lock);
			return;
		}
		REQUIRE(atomic_read(&cnt) >= 1);
		atomic_inc(&cnt);
		lookups_got++;
		spin_unlock(&lock);
		put_one();
	}
}

static void *thread_main(void *arg)
{
	int me = (int)(intptr_t)arg;

	for (;;) {
		pthread_barrier_wait(&start_bar);
		if (atomic_read_acquire(&stop))
			return NULL;
		if (me < OWNERS)
			owner(me);
		else
			looker();
		pthread_barrier_wait(&end_bar);
	}
}

static unsigned int tickets(void)
{
	return (uint16_t)(READ_ONCE(lock.val) >> TICKET_SHIFT);
}

int main(void)
{
	pthread_t th[NTHREADS];
	double end = test_now() + test_stress_seconds(1.5);
	unsigned long rounds = 0;
	long total_puts = 0, slow_puts = 0;

	REQUIRE(pthread_barrier_init(&start_bar, NULL, NTHREADS + 1) == 0);
	REQUIRE(pthread_barrier_init(&end_bar, NULL, NTHREADS + 1) == 0);
	for (int t = 0; t < NTHREADS; t++)
		REQUIRE(pthread_create(&th[t], NULL, thread_main, (void *)(intptr_t)t) == 0);

	do {
		atomic_set(&cnt, REFS);
		registered = 1;
		zero_hits = 0;
		lookups_got = 0;
		atomic_long_set(&puts_started, 0);
		atomic_long_set(&lookup_locks, 0);
		unsigned int t0 = tickets();

		pthread_barrier_wait(&start_bar);
		pthread_barrier_wait(&end_bar);

		CHECK_EQ(zero_hits, 1);
		CHECK_EQ(registered, 0);
		CHECK_EQ(atomic_read(&cnt), 0);
		CHECK(!spin_is_locked(&lock));
		long puts = atomic_long_read(&puts_started);
		CHECK_EQ(puts, REFS + lookups_got);

		/* lock acquisitions by atomic_dec_and_lock = all minus lookups' */
		long taken = (uint16_t)(tickets() - t0);
		long slow = taken - atomic_long_read(&lookup_locks);
		CHECK(slow >= 1);              /* the 1 -> 0 put can only be slow */
		CHECK(slow <= puts);
		total_puts += puts;
		slow_puts += slow;
		rounds++;
	} while (!test_failures && test_now() < end);

	atomic_set_release(&stop, 1);
	pthread_barrier_wait(&start_bar);
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);

	printf("rounds %lu, puts %ld: fast path (no lock) %ld, lock taken %ld\n",
	       rounds, total_puts, total_puts - slow_puts, slow_puts);
	CHECK(rounds > 0);
	CHECK(total_puts - slow_puts > total_puts / 2);   /* the fast path is used */
	return test_done("atomic_kcref_stress");
}
