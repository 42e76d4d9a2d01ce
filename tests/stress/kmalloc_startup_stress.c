/* SPDX-License-Identifier: MIT */
/*
 * kmalloc_startup_stress - the start-up classes end while threads allocate.
 *
 * A fresh process (nothing allocated through uslab_malloc yet, so every
 * class starts not set up and requests go to their power-of-two start-up
 * classes): 4 threads start together and allocate blocks of random sizes
 * (1 B .. 32 KiB, mostly small), fill each with a pattern from its address
 * and size, and pass half of them to the next thread through a slot array,
 * which checks and frees them (remote frees); the rest they check and free
 * themselves. Some class needs its second slab early on, which ends the
 * start-up classes in the middle of all this: requests then switch to their
 * fine classes while blocks of the start-up ones are still live and being
 * freed by other threads. Every block must come back intact, with a usable
 * size that holds the request, and afterwards every kmalloc cache must
 * validate clean. Under TSan (tools/check) this is also the race check of
 * the switch.
 */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>
#include <stdatomic.h>

#define THREADS 4
#define SLOTS 256

struct block {
	unsigned char *p;
	size_t n;
};

static _Atomic(unsigned char *) slot_p[THREADS][SLOTS];
static size_t slot_n[THREADS][SLOTS];   /* written before slot_p's release */
static pthread_barrier_t start;
static long rounds;

static void check_and_free(struct block b)
{
	REQUIRE(test_intact(b.p, b.n));
	uslab_free(b.p);
}

static size_t random_size(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	unsigned r = *seed >> 8;

	if (r % 16 == 0)
		return 1 + r % (32 << 10);
	return 1 + r % 600;
}

static void *worker(void *arg)
{
	int me = (int)(intptr_t)arg, next = (me + 1) % THREADS;
	unsigned seed = 7919u * (unsigned)me + 17;

	pthread_barrier_wait(&start);
	for (long r = 0; r < rounds; r++) {
		struct block b = { NULL, random_size(&seed) };

		b.p = uslab_malloc(b.n);
		REQUIRE(b.p);
		REQUIRE(uslab_malloc_usable_size(b.p) >= b.n);
		test_fill(b.p, b.n);
		if (r % 2) {
			check_and_free(b);
			continue;
		}
		/* hand it to the next thread (each row has one producer and one
		 * consumer: a slot is filled only when empty, emptied only when
		 * full, its size read before it is emptied) */
		unsigned k = seed % SLOTS;
		if (!atomic_load_explicit(&slot_p[next][k], memory_order_acquire)) {
			slot_n[next][k] = b.n;
			atomic_store_explicit(&slot_p[next][k], b.p, memory_order_release);
		} else {
			check_and_free(b);
		}
		for (unsigned j = 0; j < 4; j++) {   /* my row: blocks the previous thread made */
			unsigned i = (k + j * 61) % SLOTS;
			unsigned char *p = atomic_load_explicit(&slot_p[me][i], memory_order_acquire);

			if (p) {
				size_t n = slot_n[me][i];

				atomic_store_explicit(&slot_p[me][i], NULL, memory_order_release);
				check_and_free((struct block){ p, n });
			}
		}
	}
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];

	CHECK(kmalloc_startup);   /* nothing allocated through uslab_malloc yet */
	rounds = (long)(60000 * test_stress_seconds(1));
	if (rounds < 5000)
		rounds = 5000;
	pthread_barrier_init(&start, NULL, THREADS);
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_join(t[i], NULL) == 0);
	CHECK(!kmalloc_startup);   /* some class needed its second slab */

	/* blocks still parked in the slots: check and free them here */
	for (int i = 0; i < THREADS; i++)
		for (int k = 0; k < SLOTS; k++) {
			unsigned char *p = atomic_load(&slot_p[i][k]);
			if (p)
				check_and_free((struct block){ p, slot_n[i][k] });
		}
	uslab_thread_flush();
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_done("kmalloc_startup_stress");
}
