/* slab_reuse_unit - malloc reuses what was freed before it builds (writes)
 * more of a slab: a program cycling one block of a page-sized class writes
 * one page of its slab, not all of them; a cycle of few objects still gets
 * the slab built in bounded time (so it stops taking the slow path on every
 * allocation); and a small class cycled within its first page never grows.
 * A fresh process: these are the program's first blocks of these classes. */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

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

/* One 4 KiB block cycled: the same block comes back, and the slab stays at
 * its first page until REUSE_REFILLS_MAX refills; then it grows a page at a
 * time, and is all built within the bound slab_build_more promises. */
static void check_page_class_cycle(void)
{
	enum { N = 4096 };
	void *p = take(N);
	struct slab *slab = ptr_to_slab(p);
	unsigned objects = slab->cache->objects, cycles = 0;

	REQUIRE(objects >= 2);
	CHECK_EQ(slab->built, 1);
	for (unsigned i = 1; i < REUSE_REFILLS_MAX; i++) {
		give(p, N);
		void *q = take(N);
		CHECK(q == p);                 /* reused, not a new page */
		CHECK_EQ(slab->built, 1);
		CHECK_EQ(slab->reuse_refills, i);
		p = q;
	}
	give(p, N);
	p = take(N);
	CHECK_EQ(slab->built, 2);              /* the REUSE_REFILLS_MAX-th: a page more */
	CHECK_EQ(slab->reuse_refills, 0);
	while (slab->built < objects && cycles < 1000000) {
		give(p, N);
		p = take(N);
		CHECK(ptr_to_slab(p) == slab);
		cycles++;
	}
	CHECK_EQ(slab->built, objects);
	/* a refill serves at most `built` cycles, built < objects */
	CHECK(cycles <= objects * objects * REUSE_REFILLS_MAX);
	give(p, N);
}

/* A 64-byte block cycled: its first page's objects come round, a refill
 * every page's worth of cycles, and the slab stays one page until
 * REUSE_REFILLS_MAX of them. */
static void check_small_class_cycle(void)
{
	enum { N = 64 };
	void *p = take(N);
	struct slab *slab = ptr_to_slab(p);
	unsigned page_objs = 4096 / N;

	CHECK_EQ(slab->built, page_objs);
	for (unsigned i = 0; i < page_objs * (REUSE_REFILLS_MAX - 1); i++) {
		give(p, N);
		p = take(N);
		CHECK(ptr_to_slab(p) == slab);
	}
	CHECK_EQ(slab->built, page_objs);
	for (unsigned i = 0; i < page_objs; i++) {
		give(p, N);
		p = take(N);
	}
	CHECK_EQ(slab->built, 2 * page_objs);
	give(p, N);
}

/* Most of the first page live, two blocks cycling: every other cycle is a
 * refill, and the slab grows a page after REUSE_REFILLS_MAX of them. */
static void check_short_refills_grow(void)
{
	enum { N = 128, LIVE = 4096 / N - 2 };
	void *live[LIVE], *a = take(N), *b = take(N);
	struct slab *slab = ptr_to_slab(a);
	unsigned page_objs = 4096 / N, cycles = 0;

	for (int i = 0; i < LIVE; i++)
		live[i] = take(N);
	CHECK_EQ(slab->built, page_objs);
	while (slab->built == page_objs && cycles < 100000) {
		give(a, N);
		give(b, N);
		a = take(N);
		b = take(N);
		cycles++;
	}
	CHECK_EQ(slab->built, 2 * page_objs);
	CHECK(cycles <= REUSE_REFILLS_MAX);
	give(a, N);
	give(b, N);
	for (int i = 0; i < LIVE; i++)
		give(live[i], N);
}

int main(void)
{
	check_page_class_cycle();
	check_small_class_cycle();
	check_short_refills_grow();
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_done("slab_reuse_unit");
}
