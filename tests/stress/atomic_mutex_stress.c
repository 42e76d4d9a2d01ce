/*
 * atomic_mutex_stress - mutual exclusion of the mutex under 4, then 8
 * threads, and then 32 (many more threads than CPUs: waiters sleep, and the
 * lock goes to whoever runs). Under the lock every thread requires
 * is_locked and runs exclusion.h's section, and counts its own sections
 * (half of them taken with trylock when that succeeds); at the end the plain
 * counter equals the sum of all sections and the word is 0 (no sleeper
 * left behind). Liveness: a round goes on past its time until every worker
 * has had a section, and fails if one has none after HARD_LIMIT seconds (a
 * lost wake-up would leave a sleeper there for good).
 * Duration: USLAB_STRESS_SECONDS (default 2 s) split over the rounds.
 */
#include "test.h"
#include "exclusion.h"
#include "mutex.h"

#include <pthread.h>
#include <unistd.h>

#define HARD_LIMIT 10.0
#define MAX_THREADS 32

static mutex_t lock = MUTEX_INIT;
static struct exclusion excl;
static atomic_t stop;
static atomic_long_t trylocks_ok;

static void *worker_main(void *arg)
{
	struct lock_worker *w = arg;

	while (!atomic_read(&stop)) {
		if ((test_rand(&w->seed) & 1) && mutex_trylock(&lock))
			atomic_long_inc(&trylocks_ok);
		else
			mutex_lock(&lock);
		REQUIRE(mutex_is_locked(&lock));
		exclusion_section(&excl, "the mutex", READ_ONCE(lock.val));
		mutex_unlock(&lock);
		atomic_long_inc(&w->sections);
	}
	return NULL;
}

static unsigned long run_round(int nthreads, double seconds)
{
	static struct lock_worker w[MAX_THREADS];

	return lock_round(w, nthreads, seconds, HARD_LIMIT, &stop, worker_main);
}

int main(void)
{
	unsigned long r[2], many, total;

	exclusion_rounds(&excl, run_round, r);   /* 4 threads, then 8 */
	many = run_round(MAX_THREADS, test_stress_seconds(2.0) / 3);
	total = r[0] + r[1] + many;
	exclusion_check(&excl, total);
	CHECK_EQ(lock.val, 0);
	CHECK(r[0] > 0 && r[1] > 0 && many > 0);
	printf("sections: %lu with 4 threads, %lu with 8, %lu with %d (%ld by trylock)\n",
	       r[0], r[1], many, MAX_THREADS, atomic_long_read(&trylocks_ok));
	return test_done("atomic_mutex_stress");
}
