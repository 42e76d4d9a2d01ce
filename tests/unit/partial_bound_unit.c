/*
 * partial_bound_unit - how many slabs a thread keeps frozen on its
 * cpu-partial list of a cache (cache/local.h, cpu_partial_bound), for a
 * malloc class and for a uslab_cache_create cache alike:
 *
 *   allocates only  a thread that allocates blocks spanning three times its
 *                   list's slabs fills the list with its dry slabs and
 *                   keeps the cache's bound
 *   frees outrun    when it then frees them in random order, a free that
 *                   freezes one more slab while the list is full doubles
 *                   its bound, once: the list grows past the cache's bound
 *                   and never past twice it; the slabs validate as it
 *                   goes; every block is checked before its free
 *   new thread      a heap that thread left starts at the cache's bound
 *                   again
 *   only frees      a thread that frees blocks of the class that another
 *                   thread allocated, and allocates none itself, keeps the
 *                   cache's bound however many slabs its frees freeze
 *   destroyed       a cache made after one a thread had doubled, with its
 *                   id, starts at its own bound in that thread
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
static struct uslab_cache *cls;       /* the malloc class, or api's cache */
static struct uslab_cache *api;       /* NULL: malloc */
static struct thread_heap *first_heap;

static void *take(void)
{
	void *p = api ? uslab_cache_alloc(api) : uslab_malloc(SIZE);

	REQUIRE(p != NULL);
	return p;
}

static void give(void *p)
{
	if (api)
		uslab_cache_free(api, p);
	else
		uslab_free(p);
}

static bool doubled(void)
{
	return *heap_partial_doubled(tls_heap, cls->id) != 0;
}

static void *allocate_then_free(void *arg)
{
	(void)arg;
	/* (a thread's first malloc blocks may come from a start-up class of
	 * a bigger size: malloc/classes.c) */
	for (unsigned i = 0; i < WARM; i++)
		blocks[i] = take();
	cls = ptr_to_slab(blocks[WARM - 1])->cache;
	REQUIRE(cls->cpu_partial >= 2);
	nblocks = 3 * (cls->cpu_partial + 1) * cls->objects;
	REQUIRE(nblocks <= sizeof(blocks) / sizeof(blocks[0]));
	first_heap = tls_heap;

	/* allocates only */
	struct cpu_slab *c = this_cpu_slab(cls);
	unsigned most = c->nr_partial;

	for (unsigned i = 0; i < nblocks; i++) {
		if (i >= WARM)
			blocks[i] = take();
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

		for (unsigned k = 1; k < SIZE; k++)
			if (b[k] != b[0]) {
				fprintf(stderr, "block %p: byte %u is %u, not %u\n", (void *)b, k,
					b[k], b[0]);
				test_failures++;
				break;
			}
		give(b);
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
	printf("partial_bound: %s, %u blocks, bound %u slabs; doubled at free %u, list at most %u\n",
	       cls->name, nblocks, cls->cpu_partial, at_doubling, most);
	return NULL;
}

static void *new_thread(void *arg)
{
	(void)arg;
	void *p = take();

	CHECK(tls_heap == first_heap);   /* the heap the exited thread left */
	CHECK(!doubled());
	give(p);
	return NULL;
}

static void *allocate(void *arg)
{
	(void)arg;
	for (unsigned i = 0; i < nblocks; i++)
		blocks[i] = take();
	return NULL;
}

/* Frees what allocate made. */
static void *free_only(void *arg)
{
	unsigned most = 0;

	(void)arg;
	for (unsigned i = nblocks; i-- > 0;) {
		give(blocks[i]);
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

static void cases(void)
{
	run(allocate_then_free);
	run(new_thread);
	run(allocate);
	run(free_only);
}

/* This thread doubles a cache's bound, destroys the cache, and makes
 * another, which gets the same id. */
static void destroyed(void)
{
	api = uslab_cache_create("t-partial-bound", SIZE, 0, 0, NULL);
	REQUIRE(api != NULL);
	allocate_then_free(NULL);
	unsigned id = api->id;

	REQUIRE(doubled());
	REQUIRE(uslab_cache_destroy(api) == 0);
	api = uslab_cache_create("t-partial-bound-2", SIZE, 0, 0, NULL);
	REQUIRE(api != NULL);
	if (api->id != id) {
		printf("partial_bound: the new cache got id %u, not %u: not checked\n", api->id, id);
	} else {
		cls = api;
		CHECK(!doubled());
	}
	REQUIRE(uslab_cache_destroy(api) == 0);
	api = NULL;
}

int main(void)
{
	cases();                       /* malloc's 896-byte class */
	CHECK_EQ(kmalloc_validate_all(), 0);
	api = uslab_cache_create("t-partial-bound", SIZE, 0, 0, NULL);
	REQUIRE(api != NULL);
	cases();                       /* a cache of 896-byte objects */
	REQUIRE(uslab_cache_destroy(api) == 0);
	destroyed();
	return test_done("partial_bound_unit");
}
