/* SPDX-License-Identifier: MIT */
/*
 * exclusion.h - the critical section of the lock stress tests, which shows
 * whether two threads were ever inside at once.
 *
 * Inside the lock a thread counts itself in (the count must read 1), checks
 * that two plain fields agree (check == counter * K) before and after
 * updating them with a gap between the two stores, and counts itself out: a
 * second thread inside is caught by the count, by the pair, or by TSan.
 * After all threads have left, counter is the number of sections.
 *
 *   static struct exclusion x;
 *   lock(); exclusion_section(&x, "the ticket lock", word); unlock();
 *   exclusion_check(&x, total_sections);
 *   exclusion_rounds(&x, run_round, r);    4 threads, then 8, checked
 *   lock_round(w, n, secs, limit, &stop, fn)  one round of n workers on fn
 */
#ifndef USLAB_TEST_EXCLUSION_H
#define USLAB_TEST_EXCLUSION_H

#include "atomic.h"
#include "test.h"

#include <pthread.h>

#define EXCLUSION_K 0x9E3779B97F4A7C15ul

struct exclusion {
	atomic_t inside;
	unsigned long counter;   /* plain: only under the lock */
	unsigned long check;     /* plain: counter * EXCLUSION_K, only under the lock */
};

/* The caller holds the lock; word is the lock's word as the caller read it,
 * for the message. Ends the test at once if another thread is inside. */
static inline void exclusion_section(struct exclusion *x, const char *lock, unsigned long word)
{
	unsigned long c;

	if (atomic_inc_return(&x->inside) != 1) {
		fprintf(stderr, "two threads inside %s (lock word %#lx)\n", lock, word);
		exit(1);
	}
	c = x->counter;
	if (x->check != c * EXCLUSION_K) {
		fprintf(stderr, "%s: plain pair torn: counter %lu check %#lx\n", lock, c, x->check);
		exit(1);
	}
	x->counter = c + 1;
	for (int i = 0; i < 8; i++)
		cpu_relax();                    /* widen the window */
	x->check = (c + 1) * EXCLUSION_K;
	REQUIRE(x->counter == c + 1);
	atomic_dec(&x->inside);
}

/* No thread inside, and total sections taken in all. */
static inline void exclusion_check(struct exclusion *x, unsigned long total)
{
	CHECK_EQ(x->counter, total);
	CHECK_EQ(x->check, total * EXCLUSION_K);
	CHECK_EQ(atomic_read(&x->inside), 0);
}

/* The lock stress tests' two rounds: run_round(4, ...), then (8, ...), each
 * half of USLAB_STRESS_SECONDS (default 2 s, at most 10), each returning its
 * sections; checked after each. Returns the sections of the two in r. */
static inline void exclusion_rounds(struct exclusion *x, unsigned long (*run_round)(int, double),
				    unsigned long r[2])
{
	double secs = test_stress_seconds(2.0);

	if (secs > 10)
		secs = 10;
	r[0] = run_round(4, secs / 2);
	exclusion_check(x, r[0]);
	r[1] = run_round(8, secs / 2);
	exclusion_check(x, r[0] + r[1]);
}

/* A lock stress test's worker: its loop runs until the round's stop flag,
 * counting its critical sections. */
struct lock_worker {
	pthread_t tid;
	atomic_long_t sections;   /* read by main while the round runs */
	uint64_t seed;
};

/*
 * One round: n workers (w[0..n)) run fn until *stop, for `seconds` and past
 * that until every one has had a section, but no longer than hard_limit
 * seconds; then they are stopped and joined. A worker with no section was
 * starved (or asleep for good): the test fails, naming it. Returns the
 * sections of all.
 */
static inline unsigned long lock_round(struct lock_worker *w, int n, double seconds,
				       double hard_limit, atomic_t *stop, void *(*fn)(void *))
{
	unsigned long total = 0;
	double start, now;
	bool all;

	memset(w, 0, sizeof(*w) * (size_t)n);
	atomic_set(stop, 0);
	for (int i = 0; i < n; i++) {
		w[i].seed = 0x1234567ull * (i + 1) + (unsigned)n;
		REQUIRE(pthread_create(&w[i].tid, NULL, fn, &w[i]) == 0);
	}
	start = test_now();
	do {
		test_sleep_ms(10);
		now = test_now();
		all = true;
		for (int i = 0; i < n; i++)
			all &= atomic_long_read(&w[i].sections) > 0;
	} while (now - start < hard_limit && (now - start < seconds || !all));
	atomic_set(stop, 1);
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].tid, NULL);
		total += atomic_long_read(&w[i].sections);
	}
	for (int i = 0; i < n; i++) {
		if (!atomic_long_read(&w[i].sections)) {
			fprintf(stderr, "worker %d of %d starved: no section in %.1f s while the "
					"others took %lu\n", i, n, now - start, total);
			test_failures++;
		}
	}
	return total;
}

#endif
