/* arena_stress - the start-up arena across the start of threads. The main
 * thread, alone, allocates tagged blocks from the arena; then threads start,
 * and the arena ends at the first request after that (blocks of two threads
 * packed side by side would share cache lines). The threads free the main
 * thread's arena blocks at once (each block exactly once, under the arena's
 * lock now), allocate from slabs, and free each other's blocks. Every block
 * is checked against its tag before it is freed; no block a thread gets may
 * come from the arena; at the end every cache and descriptor is validated. */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>

enum { THREADS = 4, ROUNDS = 3000, SLOTS = 64, EARLY = 256 };

struct slot {
	unsigned char *p;
	size_t n;
	unsigned tag;
};

/* early[t]: arena blocks the main thread made before the threads, for t */
static struct slot early[THREADS][EARLY];
/* handoff[t]: blocks thread t left for thread (t + 1) % THREADS to free */
static struct slot handoff[THREADS][SLOTS];
static pthread_mutex_t handoff_lock[THREADS];
static pthread_barrier_t start;
static long arena_blocks_seen;

static bool check_block(const struct slot *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->p[i] != (unsigned char)s->tag)
			return false;
	return true;
}

static void *worker(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg, seed = t * 2654435761u + 1;
	struct slot mine[SLOTS] = { { 0 } };
	long in_arena = 0;

	pthread_barrier_wait(&start);
	for (unsigned r = 0; r < ROUNDS; r++) {
		seed = seed * 1103515245u + 12345u;
		if (r < EARLY) {   /* the main thread's arena blocks, interleaved */
			REQUIRE(check_block(&early[t][r]));
			uslab_free(early[t][r].p);
		}
		unsigned k = (seed >> 8) % SLOTS;
		if (mine[k].p) {
			REQUIRE(check_block(&mine[k]));
			if (r & 1) {   /* hand it to the next thread */
				unsigned to = (t + 1) % THREADS;
				pthread_mutex_lock(&handoff_lock[to]);
				struct slot old = handoff[to][k];
				handoff[to][k] = mine[k];
				pthread_mutex_unlock(&handoff_lock[to]);
				if (old.p) {
					REQUIRE(check_block(&old));
					uslab_free(old.p);
				}
			} else {
				uslab_free(mine[k].p);
			}
			mine[k].p = NULL;
		}
		size_t n = 1 + (seed >> 16) % ((seed & 7) ? 512 : 20000);
		mine[k].p = uslab_malloc(n);
		REQUIRE(mine[k].p != NULL);
		REQUIRE(uslab_malloc_usable_size(mine[k].p) >= n);
		in_arena += arena_owns(mine[k].p);
		mine[k].n = n;
		mine[k].tag = (t << 6) ^ r;
		memset(mine[k].p, (unsigned char)mine[k].tag, n);
	}
	/* blocks others left for this thread */
	pthread_mutex_lock(&handoff_lock[t]);
	for (unsigned k = 0; k < SLOTS; k++)
		if (handoff[t][k].p) {
			REQUIRE(check_block(&handoff[t][k]));
			uslab_free(handoff[t][k].p);
			handoff[t][k].p = NULL;
		}
	pthread_mutex_unlock(&handoff_lock[t]);
	for (unsigned k = 0; k < SLOTS; k++)
		if (mine[k].p) {
			REQUIRE(check_block(&mine[k]));
			uslab_free(mine[k].p);
		}
	__atomic_add_fetch(&arena_blocks_seen, in_arena, __ATOMIC_RELAXED);
	return NULL;
}

int main(void)
{
	pthread_t th[THREADS];
	unsigned seed = 7;

	CHECK(kmalloc_arena_on);
	for (unsigned t = 0; t < THREADS; t++)
		for (unsigned i = 0; i < EARLY; i++) {
			struct slot *s = &early[t][i];

			seed = seed * 1103515245u + 12345u;
			s->n = 1 + (seed >> 16) % ((seed & 15) ? 160 : 3000);
			s->p = uslab_malloc(s->n);
			REQUIRE(s->p != NULL);
			CHECK(arena_owns(s->p));
			s->tag = t * EARLY + i;
			memset(s->p, (unsigned char)s->tag, s->n);
		}
	size_t early_live = arena_live_bytes();
	CHECK(early_live > 0);
	CHECK(kmalloc_arena_on);   /* one thread so far: still serving */

	pthread_barrier_init(&start, NULL, THREADS);
	for (unsigned t = 0; t < THREADS; t++)
		pthread_mutex_init(&handoff_lock[t], NULL);
	for (unsigned t = 0; t < THREADS; t++)
		REQUIRE(pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t) == 0);
	for (unsigned t = 0; t < THREADS; t++)
		REQUIRE(pthread_join(th[t], NULL) == 0);
	/* blocks still handed off (their receiver had finished) */
	for (unsigned t = 0; t < THREADS; t++)
		for (unsigned k = 0; k < SLOTS; k++)
			if (handoff[t][k].p) {
				CHECK(check_block(&handoff[t][k]));
				uslab_free(handoff[t][k].p);
			}
	printf("%zu bytes in %d arena blocks before the threads; %ld blocks from the arena "
	       "after\n", early_live, THREADS * EARLY, arena_blocks_seen);
	CHECK_EQ(arena_blocks_seen, 0);   /* ended at the threads' first request */
	CHECK(!kmalloc_arena_on);
	CHECK_EQ(arena_live_bytes(), 0);   /* every early block freed, once */
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_done("arena_stress");
}
