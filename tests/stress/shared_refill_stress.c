/*
 * shared_refill_stress - malloc's shared refills (cache/cpu.c, "Shared
 * refills") under threads: shared_threads_over = 0 makes every thread's
 * first refills of each class take a few objects of slabs other threads
 * take from at the same time (partial_take_shared under list_lock, a new
 * slab's rest listed by slab_new_shared), while frees push into them
 * without the lock, empty them (discard) and fill them (FULL, listed again
 * by a free that may not freeze them).
 *
 * GENERATIONS rounds of THREADS threads, each allocating blocks of random
 * sizes (1 B .. 2 KiB, some up to 32 KiB), filling them with a pattern from
 * address and size, freeing half itself and leaving the rest in a slot
 * array for the next thread, or for the next generation, which checks and
 * frees them: so blocks of exited threads' shared slabs are freed by
 * threads that never allocated them, and heaps are recycled with their
 * counts reset. Every block must come back intact, and afterwards every
 * kmalloc cache must validate clean. TSan (tools/check) runs it too, and
 * the lock path (<name>.lockpath).
 */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>
#include <stdatomic.h>

#define THREADS     6
#define GENERATIONS 6
#define SLOTS       512

static _Atomic(unsigned char *) slot_p[THREADS][SLOTS];
static size_t slot_n[THREADS][SLOTS];   /* written before slot_p's release */
static long rounds;

static void check_and_free(unsigned char *p, size_t n)
{
	REQUIRE(test_intact(p, n));
	uslab_free(p);
}

static size_t random_size(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	unsigned r = *seed >> 8;

	if (r % 32 == 0)
		return 1 + r % (32 << 10);
	return 1 + r % 2048;
}

struct worker {
	int me, gen;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	int next = (w->me + 1) % THREADS;
	unsigned seed = 7919u * (unsigned)w->me + 104729u * (unsigned)w->gen + 17;

	for (long r = 0; r < rounds; r++) {
		size_t n = random_size(&seed);
		unsigned char *p = uslab_malloc(n);

		REQUIRE(p);
		test_fill(p, n);
		unsigned k = seed % SLOTS;

		if (r % 2 || atomic_load_explicit(&slot_p[next][k], memory_order_acquire)) {
			check_and_free(p, n);
		} else {   /* one producer and one consumer per row */
			slot_n[next][k] = n;
			atomic_store_explicit(&slot_p[next][k], p, memory_order_release);
		}
		for (unsigned j = 0; j < 3; j++) {   /* my row */
			unsigned i = (k + j * 97) % SLOTS;
			unsigned char *q = atomic_load_explicit(&slot_p[w->me][i], memory_order_acquire);

			if (q) {
				size_t m = slot_n[w->me][i];

				atomic_store_explicit(&slot_p[w->me][i], NULL, memory_order_release);
				check_and_free(q, m);
			}
		}
	}
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];
	struct worker w[THREADS];

	shared_threads_over = 0;
	rounds = (long)(30000 * test_stress_seconds(1));
	if (rounds < 2000)
		rounds = 2000;
	for (int g = 0; g < GENERATIONS; g++) {
		for (int i = 0; i < THREADS; i++) {
			w[i] = (struct worker){ i, g };
			REQUIRE(pthread_create(&t[i], NULL, worker, &w[i]) == 0);
		}
		for (int i = 0; i < THREADS; i++)
			REQUIRE(pthread_join(t[i], NULL) == 0);
		CHECK_EQ(kmalloc_validate_all(), 0);
	}
	for (int i = 0; i < THREADS; i++)
		for (int k = 0; k < SLOTS; k++) {
			unsigned char *p = atomic_load(&slot_p[i][k]);

			if (p)
				check_and_free(p, slot_n[i][k]);
		}
	uslab_thread_flush();
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_done("shared_refill_stress");
}
