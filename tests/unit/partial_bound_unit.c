/*
 * partial_bound_unit - how many slabs a thread keeps frozen on its
 * cpu-partial list of a malloc class (cache/local.h, cpu_partial_bound):
 *
 *   allocates only  a thread that allocates blocks spanning three times its
 *                   list's slabs fills the list with its dry slabs and
 *                   keeps the cache's bound
 *   frees outrun    when it then frees them in random order, a free that
 *                   freezes one more slab while the list is full doubles
 *                   its bound, once: the list grows past the cache's bound
 *                   and never past twice it; the slabs validate after each
 *                   step; every block is checked before its free
 *   new thread      a heap that thread left starts at the cache's bound
 *                   again
 *   only frees      a thread that frees blocks of the class that another
 *                   thread allocated, and allocates none itself, keeps the
 *                   cache's bound however many slabs its frees freeze
 *
 * Blocks of 896 bytes: 18 to a 16 KiB slab, 32 slabs to the cache's bound.
 */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>

#define SIZE 896
#define WARM 64

static void *blocks[4096];
static unsigned nblocks;
static struct uslab_cache *cls;
static struct thread_heap *first_heap;

static bool doubled(void)
{
	return tls_heap->k_partial_doubled[cls->id] != 0;
}

static void *allocate_then_free(void *arg)
{
	(void)arg;
	/* (a thread's first blocks may come from a start-up class of a
	 * bigger size: malloc/classes.c) */
	for (unsigned i = 0; i < WARM; i++)
		REQUIRE((blocks[i] = uslab_malloc(SIZE)) != NULL);
	cls = ptr_to_slab(blocks[WARM - 1])->cache;
	REQUIRE(cls->id < STATIC_IDS && cls->cpu_partial >= 2);
	nblocks = 3 * (cls->cpu_partial + 1) * cls->objects;
	REQUIRE(nblocks <= sizeof(blocks) / sizeof(blocks[0]));
	first_heap = tls_heap;

	/* allocates only */
	struct cpu_slab *c = this_cpu_slab(cls);
	unsigned most = c->nr_partial;

	for (unsigned i = 0; i < nblocks; i++) {
		if (i >= WARM)
			REQUIRE((blocks[i] = uslab_malloc(SIZE)) != NULL);
		memset(blocks[i], (int)(i & 0xff), SIZE);
		most = c->nr_partial > most ? c->nr_partial : most;
	}
	CHECK_EQ(most, cls->cpu_partial);
	CHECK(!doubled());
	CHECK_EQ(uslab_cache_validate(cls), 0);

	/* frees outrun: random order, a fixed shuffle */
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (unsigned i = nblocks - 1; i > 0; i--) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		unsigned j = (unsigned)((x >> 33) % (i + 1));
		void *t = blocks[i];

		blocks[i] = blocks[j];
		blocks[j] = t;
	}
	unsigned at_doubling = 0, problems = 0;

	most = 0;
	for (unsigned i = 0; i < nblocks; i++) {
		unsigned char *b = blocks[i];
		unsigned char want = b[0];

		for (unsigned k = 1; k < SIZE; k++)
			if (b[k] != want) {
				fprintf(stderr, "block %p: byte %u is %u, not %u\n", (void *)b, k,
					b[k], want);
				test_failures++;
				break;
			}
		uslab_free(b);
		if (doubled() && !at_doubling)
			at_doubling = i + 1;
		most = c->nr_partial > most ? c->nr_partial : most;
		if (i % 256 == 0)
			problems += (unsigned)uslab_cache_validate(cls);
	}
	CHECK(doubled());
	CHECK(at_doubling > 0);
	CHECK(most > cls->cpu_partial);
	CHECK(most <= 2 * cls->cpu_partial);
	CHECK_EQ(problems, 0);
	CHECK_EQ(uslab_cache_validate(cls), 0);
	printf("partial_bound: %u blocks, bound %u slabs; doubled at free %u, list at most %u\n",
	       nblocks, cls->cpu_partial, at_doubling, most);
	return NULL;
}

static void *new_thread(void *arg)
{
	(void)arg;
	void *p = uslab_malloc(SIZE);

	REQUIRE(p != NULL);
	CHECK(tls_heap == first_heap);   /* the heap the exited thread left */
	CHECK(!doubled());
	uslab_free(p);
	return NULL;
}

static void *allocate(void *arg)
{
	(void)arg;
	for (unsigned i = 0; i < nblocks; i++)
		REQUIRE((blocks[i] = uslab_malloc(SIZE)) != NULL);
	return NULL;
}

/* Frees what allocate made, in the order the shuffle above left. */
static void *free_only(void *arg)
{
	unsigned most = 0;

	(void)arg;
	for (unsigned i = nblocks; i-- > 0;) {
		uslab_free(blocks[i]);
		/* (its heap is made by its first free) */
		most = this_cpu_slab(cls)->nr_partial > most ? this_cpu_slab(cls)->nr_partial : most;
	}
	CHECK(this_cpu_slab(cls)->slab == NULL);
	CHECK(!doubled());
	CHECK(most <= cls->cpu_partial);
	CHECK(most > 0);   /* its frees froze slabs for it */
	CHECK_EQ(uslab_cache_validate(cls), 0);
	return NULL;
}

static void run(void *(*fn)(void *))
{
	pthread_t t;

	REQUIRE(pthread_create(&t, NULL, fn, NULL) == 0);
	pthread_join(t, NULL);
}

int main(void)
{
	run(allocate_then_free);
	run(new_thread);
	run(allocate);
	run(free_only);
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_done("partial_bound_unit");
}
