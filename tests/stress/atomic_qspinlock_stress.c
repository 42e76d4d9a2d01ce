/*
 * atomic_qspinlock_stress - mutual exclusion of the queued lock under 4, then
 * 8 threads, with signal handlers that nest a second lock inside the first
 * one's slow path.
 *
 * Under `lock` every thread runs exclusion.h's section (a count that must
 * read 1, a plain pair a second thread inside would tear, or TSan would
 * see) and counts its own sections (some by trylock). At the end the plain
 * counter equals the sum of all sections, and the word and the slot table
 * are empty.
 *
 * A signaller thread sends SIGUSR1 to random workers; the handler takes
 * `hlock` (used only by handlers) and bumps its own plain counter. A worker
 * interrupted while queued on `lock` queues on `hlock` with its next node
 * (tail idx 1) under the same slot row, so the nesting levels are exercised.
 * The handler counter must equal the handled signals.
 *
 * Each round also requires that the queue (a non-zero tail) was seen from
 * inside the critical section, so the MCS path really ran.
 * Duration: USLAB_STRESS_SECONDS (default 2 s) split over the two rounds.
 */
#include "test.h"
#include "exclusion.h"
#include "qspinlock.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#define MAX_THREADS 8

static qspinlock_t lock = QSPINLOCK_INIT;
static struct exclusion excl;
static atomic_t stop, stop_signals;
static atomic_long_t trylocks_ok, queue_seen, pending_seen;

static qspinlock_t hlock = QSPINLOCK_INIT;
static unsigned long hcounter;          /* plain: only under hlock */
static atomic_long_t handled, nested_while_queued;

struct worker {
	pthread_t tid;
	unsigned long sections;
	uint64_t seed;
};

static void on_sigusr1(int sig)
{
	/* this thread's queue depth in this file's per-thread node storage */
	if (__qspin_tls.count)
		atomic_long_inc(&nested_while_queued);
	qspin_lock(&hlock);
	hcounter++;
	qspin_unlock(&hlock);
	atomic_long_inc(&handled);
}

static void critical_section(void)
{
	uint32_t v = (uint32_t)atomic_read(&lock.val);

	REQUIRE(v & QSPIN_LOCKED_MASK);
	if (v & QSPIN_TAIL_MASK)
		atomic_long_inc(&queue_seen);
	if (v & QSPIN_PENDING_MASK)
		atomic_long_inc(&pending_seen);
	exclusion_section(&excl, "the queued lock", v);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	while (!atomic_read(&stop)) {
		if ((test_rand(&w->seed) & 3) == 0 && qspin_trylock(&lock)) {
			atomic_long_inc(&trylocks_ok);
		} else {
			qspin_lock(&lock);
		}
		critical_section();
		qspin_unlock(&lock);
		w->sections++;
	}
	return NULL;
}

struct signaller {
	pthread_t tid;
	struct worker *w;
	int n;
};

static void *signaller_main(void *arg)
{
	struct signaller *s = arg;
	uint64_t seed = 77;

	while (!atomic_read(&stop_signals)) {
		REQUIRE(pthread_kill(s->w[test_rand(&seed) % s->n].tid, SIGUSR1) == 0);
		usleep(200);
	}
	return NULL;
}

static unsigned long run_round(int nthreads, double seconds)
{
	struct worker w[MAX_THREADS] = { 0 };
	struct signaller s = { .w = w, .n = nthreads };
	unsigned long total = 0;
	long queued_before = atomic_long_read(&queue_seen);

	atomic_set(&stop, 0);
	atomic_set(&stop_signals, 0);
	for (int i = 0; i < nthreads; i++) {
		w[i].seed = 0x1234567ull * (i + 1) + nthreads;
		REQUIRE(pthread_create(&w[i].tid, NULL, worker_main, &w[i]) == 0);
	}
	REQUIRE(pthread_create(&s.tid, NULL, signaller_main, &s) == 0);
	test_sleep_ms((long)(seconds * 1000));
	/* no signal may target a worker that is gone */
	atomic_set(&stop_signals, 1);
	pthread_join(s.tid, NULL);
	atomic_set(&stop, 1);
	for (int i = 0; i < nthreads; i++) {
		pthread_join(w[i].tid, NULL);
		total += w[i].sections;
	}
	if (atomic_long_read(&queue_seen) == queued_before) {
		fprintf(stderr, "%d threads: no section ever saw a queued waiter\n", nthreads);
		exit(1);
	}
	return total;
}

int main(void)
{
	struct sigaction sa = { .sa_handler = on_sigusr1 };
	unsigned long r[2];

	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);

	exclusion_rounds(&excl, run_round, r);
	CHECK_EQ(atomic_read(&lock.val), 0);
	CHECK_EQ(atomic_read(&hlock.val), 0);
	CHECK_EQ(hcounter, atomic_long_read(&handled));
	CHECK(r[0] > 0 && r[1] > 0);
	for (int i = 0; i < QSPIN_SLOTS; i++) {
		if (READ_ONCE(__qspin_slots[i])) {
			fprintf(stderr, "slot row %d still claimed after all threads left\n", i);
			test_failures++;
			break;
		}
	}
	printf("sections: %lu with 4 threads, %lu with 8 (%ld by trylock); "
	       "seen inside: %ld queued, %ld pending; signals %ld, %ld while queued\n",
	       r[0], r[1], atomic_long_read(&trylocks_ok), atomic_long_read(&queue_seen),
	       atomic_long_read(&pending_seen), atomic_long_read(&handled),
	       atomic_long_read(&nested_while_queued));
	return test_done("atomic_qspinlock_stress");
}
