/*
 * atomic_spinlock_stress - mutual exclusion of the ticket lock under 4, then
 * 8 threads (more threads than CPUs on small machines: waiters must yield).
 *
 * Under the lock every thread requires is_locked and runs exclusion.h's
 * section (a count that must read 1, a plain pair a second thread inside
 * would tear, or TSan would see), and counts its own sections (half of them
 * taken with trylock when that succeeds). At the end the plain counter equals the sum of all sections.
 * Fairness: the ticket lock serves waiters in order, so every worker gets
 * sections; a round goes on past its time until each has had one, and a
 * worker with none by HARD_LIMIT seconds was starved: the test fails.
 * Duration: USLAB_STRESS_SECONDS (default 2 s) split over the two rounds.
 */
#include "test.h"
#include "exclusion.h"
#include "spinlock.h"

#include <pthread.h>
#include <unistd.h>

#define HARD_LIMIT 8.0   /* seconds a round may take for every worker to get in */

static spinlock_t lock = SPINLOCK_INIT;
static struct exclusion excl;
static atomic_t stop;
static atomic_long_t trylocks_ok;

static void critical_section(void)
{
	REQUIRE(spin_is_locked(&lock));
	exclusion_section(&excl, "the ticket lock", READ_ONCE(lock.val));
}

static void *worker_main(void *arg)
{
	struct lock_worker *w = arg;

	while (!atomic_read(&stop)) {
		if ((test_rand(&w->seed) & 1) && spin_trylock(&lock)) {
			atomic_long_inc(&trylocks_ok);
		} else {
			spin_lock(&lock);
		}
		critical_section();
		spin_unlock(&lock);
		atomic_long_inc(&w->sections);
	}
	return NULL;
}

static unsigned long run_round(int nthreads, double seconds)
{
	static struct lock_worker w[8];

	return lock_round(w, nthreads, seconds, HARD_LIMIT, &stop, worker_main);
}

int main(void)
{
	unsigned long r[2], total;

	exclusion_rounds(&excl, run_round, r);
	total = r[0] + r[1];
	CHECK(!spin_is_locked(&lock));
	CHECK_EQ(lock.owner, (uint16_t)total);
	CHECK(r[0] > 0 && r[1] > 0);
	printf("sections: %lu with 4 threads, %lu with 8 (%ld by trylock)\n",
	       r[0], r[1], atomic_long_read(&trylocks_ok));
	return test_done("atomic_spinlock_stress");
}
