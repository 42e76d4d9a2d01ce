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

struct worker {
	pthread_t tid;
	atomic_long_t sections;   /* read by main while the round runs */
	uint64_t seed;
};

static void critical_section(void)
{
	REQUIRE(spin_is_locked(&lock));
	exclusion_section(&excl, "the ticket lock", READ_ONCE(lock.val));
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

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

static bool all_got_in(struct worker *w, int n)
{
	for (int i = 0; i < n; i++)
		if (!atomic_long_read(&w[i].sections))
			return false;
	return true;
}

static unsigned long run_round(int nthreads, double seconds)
{
	struct worker w[8] = { 0 };
	unsigned long total = 0;
	double start, now;

	atomic_set(&stop, 0);
	for (int i = 0; i < nthreads; i++) {
		w[i].seed = 0x1234567ull * (i + 1) + nthreads;
		REQUIRE(pthread_create(&w[i].tid, NULL, worker_main, &w[i]) == 0);
	}
	start = test_now();
	do {
		usleep(10000);
		now = test_now();
	} while (now - start < HARD_LIMIT && (now - start < seconds || !all_got_in(w, nthreads)));
	atomic_set(&stop, 1);
	for (int i = 0; i < nthreads; i++) {
		pthread_join(w[i].tid, NULL);
		total += atomic_long_read(&w[i].sections);
	}
	for (int i = 0; i < nthreads; i++) {
		if (!atomic_long_read(&w[i].sections)) {
			fprintf(stderr, "worker %d of %d starved: no section in %.1f s while the "
					"others took %lu\n", i, nthreads, now - start, total);
			test_failures++;
		}
	}
	return total;
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
