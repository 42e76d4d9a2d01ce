/* arena_stress - threads allocate from the start-up arena at once, free each
 * other's blocks, and carry on across its end (slabs from then on) with
 * arena blocks still live. Every block carries its owner's tag and is checked
 * before it is freed; at the end every cache and descriptor is validated. */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>

enum { THREADS = 4, ROUNDS = 3000, SLOTS = 64 };

struct slot {
	unsigned char *p;
	size_t n;
	unsigned tag;
};

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

	CHECK(kmalloc_arena_on);
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
	printf("%ld blocks came from the arena; it has %s\n", arena_blocks_seen,
	       kmalloc_arena_on ? "not ended" : "ended");
	CHECK(arena_blocks_seen > 100);
	CHECK(!kmalloc_arena_on);   /* the 20 KB blocks use it up */
	CHECK_EQ(arena_live_bytes(), 0);
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_done("arena_stress");
}
