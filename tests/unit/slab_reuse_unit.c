/* slab_reuse_unit - malloc reuses what was freed before it builds (writes)
 * more of a slab: a program cycling blocks gets the same blocks back at
 * once (the free puts them on the cpu freelist), so its slab stays at its
 * first page; and frees that reach the slab by refill (another thread's)
 * still get the slab built in bounded time, so the thread stops taking the
 * slow path for every other allocation.
 * A fresh process: these are the program's first blocks of these classes. */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>

/* Blocks carry their own address, written at allocation and checked before
 * the free: two live blocks that overlapped would break it. */
static void *take(size_t n)
{
	uintptr_t *p = uslab_malloc(n);

	REQUIRE(p != NULL);
	for (size_t i = 0; i < n / sizeof(*p); i++)
		p[i] = (uintptr_t)p ^ i;
	return p;
}

static void give(void *q, size_t n)
{
	uintptr_t *p = q;

	for (size_t i = 0; i < n / sizeof(*p); i++)
		if (p[i] != ((uintptr_t)p ^ i)) {
			fprintf(stderr, "block %p: word %zu overwritten\n", q, i);
			test_failures++;
			break;
		}
	uslab_free(q);
}

/* One 4 KiB block cycled: malloc's free puts it on the thread's cpu
 * freelist, so the next malloc takes the same block back, with no refill:
 * the slab stays at its first page however long the cycle goes on. */
static void check_page_class_cycle(void)
{
	enum { N = 4096 };
	void *p = take(N);
	struct slab *slab = ptr_to_slab(p);

	REQUIRE(slab->cache->objects >= 2);
	CHECK_EQ(slab->built, 1);
	for (unsigned i = 1; i < 10 * REUSE_REFILLS_MAX; i++) {
		give(p, N);
		void *q = take(N);
		CHECK(q == p);                 /* reused, not a new page */
		CHECK_EQ(slab->built, 1);
		CHECK_EQ(slab->reuse_refills, 0);
		p = q;
	}
	give(p, N);
}

/* A 64-byte block cycled, and two with most of a page live: each comes
 * back at once, and the slab keeps its first page. */
static void check_small_class_cycle(void)
{
	enum { N = 64, M = 128, LIVE = 4096 / M - 2 };
	void *p = take(N);
	struct slab *slab = ptr_to_slab(p);

	CHECK_EQ(slab->built, 4096 / N);
	for (unsigned i = 0; i < 4096 / N * REUSE_REFILLS_MAX; i++) {
		give(p, N);
		void *q = take(N);
		CHECK(q == p);
		p = q;
	}
	CHECK_EQ(slab->built, 4096 / N);
	give(p, N);

	void *live[LIVE], *a = take(M), *b = take(M);
	slab = ptr_to_slab(a);
	for (int i = 0; i < LIVE; i++)
		live[i] = take(M);
	CHECK_EQ(slab->built, 4096 / M);
	for (unsigned i = 0; i < 10 * REUSE_REFILLS_MAX; i++) {
		void *a0 = a, *b0 = b;

		give(a, M);
		give(b, M);
		b = take(M);
		a = take(M);
		CHECK(a == a0 && b == b0);     /* last freed, first taken */
	}
	CHECK_EQ(slab->built, 4096 / M);
	give(a, M);
	give(b, M);
	for (int i = 0; i < LIVE; i++)
		give(live[i], M);
}

/* Frees that come back through the refill rather than the cpu freelist -
 * another thread's, delivered by message - with most of the first page
 * live: every cycle is a refill that finds two blocks, and the slab grows
 * a page after REUSE_REFILLS_MAX of them, so a thread fed by others does
 * not take the slow path for every other allocation for ever. */
struct pair { void *a, *b; };

static void *free_pair(void *arg)
{
	struct pair *pr = arg;

	give(pr->a, 256);
	give(pr->b, 256);
	return NULL;   /* its exit sends the message */
}

static void check_remote_refills_grow(void)
{
	enum { N = 256, LIVE = 4096 / N - 2 };
	void *live[LIVE];
	struct pair pr = { take(N), take(N) };
	struct slab *slab = ptr_to_slab(pr.a);
	unsigned page_objs = 4096 / N, cycles = 0;

	for (int i = 0; i < LIVE; i++)
		live[i] = take(N);
	CHECK_EQ(slab->built, page_objs);
	while (slab->built == page_objs && cycles < 4 * REUSE_REFILLS_MAX) {
		pthread_t t;

		REQUIRE(pthread_create(&t, NULL, free_pair, &pr) == 0);
		REQUIRE(pthread_join(t, NULL) == 0);
		pr.a = take(N);
		pr.b = take(N);
		cycles++;
	}
	CHECK_EQ(slab->built, 2 * page_objs);
	CHECK(cycles <= REUSE_REFILLS_MAX);
	give(pr.a, N);
	give(pr.b, N);
	for (int i = 0; i < LIVE; i++)
		give(live[i], N);
}

/* A structure torn down in random order, then other sizes allocated: the
 * teardown's last foreign budget of 64-byte blocks lies one per slab on
 * the thread's freelist, each keeping its slab from emptying. Once the
 * thread has taken a few new slabs for the other sizes, those blocks go
 * back to their slabs, which empty and give their units back; before,
 * hundreds of 64-byte slabs stayed until the class was allocated again. */
static void check_teardown_releases_slabs(void)
{
	enum { N = 64 * 1024, BIG = 224, NBIG = 8192 };
	static void *v[N], *big[NBIG];
	static unsigned order[N];
	struct uslab_cache_info before, after;

	for (unsigned i = 0; i < N; i++) {
		v[i] = take(64);
		order[i] = i;
	}
	/* (the first blocks may be the start-up arena's, not a slab's) */
	struct slab *last = ptr_to_slab(v[N - 1]);

	REQUIRE(last != NULL);
	struct uslab_cache *k64 = last->cache;
	uint64_t x = 0x9e3779b97f4a7c15ull;   /* a fixed shuffle */

	for (unsigned i = N - 1; i > 0; i--) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		unsigned j = (unsigned)((x >> 33) % (i + 1)), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (unsigned i = 0; i < N; i++)
		give(v[order[i]], 64);
	REQUIRE(uslab_cache_info(k64, &before) == 0);
	CHECK_EQ(before.live_objects, 0);
	/* the case this is about: far more slabs than the thread owns */
	CHECK(before.slabs > 4 * (size_t)k64->cpu_partial);
	for (unsigned i = 0; i < NBIG; i++)   /* 1.8 MiB, over 100 new slabs */
		big[i] = take(BIG);
	REQUIRE(uslab_cache_info(k64, &after) == 0);
	/* left: the slabs the thread holds (its active one and cpu-partial
	 * list) and the empty ones the cache keeps on its partial list */
	size_t kept = 1 + (size_t)k64->cpu_partial + (size_t)k64->min_partial;

	if (after.slabs > kept)
		fprintf(stderr, "64-byte slabs: %zu after the teardown, %zu after other sizes\n",
			before.slabs, after.slabs);
	CHECK(after.slabs <= kept);
	for (unsigned i = 0; i < NBIG; i++)
		give(big[i], BIG);
}

int main(void)
{
	check_page_class_cycle();
	check_small_class_cycle();
	check_remote_refills_grow();
	check_teardown_releases_slabs();
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_done("slab_reuse_unit");
}
