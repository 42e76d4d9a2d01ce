/* SPDX-License-Identifier: MIT */
/*
 * segment_decay_unit - how free committed memory ages (segment.c, kmalloc.c).
 *
 *   generations  a segment that keeps freeing and reusing units purges the
 *                units that have been free since before its last tick, and
 *                never the unit it freed a moment ago (aging a segment from
 *                its oldest free unit purged both)
 *   huge         a freed huge mapping kept in the huge cache is unmapped by
 *                the decay tick of any slow path once it is older than
 *                USLAB_DECAY_MS, not only by the next huge request
 *   placement    a run goes where its units are still committed: onto a
 *                freed run of dirty units of its length, else the window
 *                with the fewest clean units, not the first free one
 *   carve        a new segment for large runs is carved from a cached
 *                huge range before anything is mapped; its units count
 *                as dirty (never handed out as zeroed), the range's rest
 *                stays cached, and the
 *                segment is marked MADV_NOHUGEPAGE (the block was marked
 *                MADV_HUGEPAGE)
 *
 * A unit's state comes from the segment's maps (segment_unit_state), not
 * from mincore(): the host may page memory out behind our back.
 */
#define _GNU_SOURCE
#include "test.h"
#include "kmalloc.h"
#include "kmalloc.h"
#include "options.h"

#include <unistd.h>

#define DECAY 100   /* ms */
#define OLD   24    /* units freed at the start and left alone */

enum { USED, DIRTY, CLEAN };

static struct slab *unit_new(void)
{
	struct slab *u = segment_alloc_units(1, SLAB_KIND_LARGE, false, NULL);

	if (u)
		memset((void *)slab_start(u), 0x5a, UNIT_SIZE);   /* commit every page */
	return u;
}

static void test_generations(void)
{
	struct slab *old[OLD], *churn;
	char *old_mem[OLD], *last;


	for (int i = 0; i < OLD; i++) {
		old[i] = unit_new();
		CHECK(old[i] != NULL);
		old_mem[i] = (char *)slab_start(old[i]);
	}
	churn = unit_new();
	CHECK(churn != NULL);
	for (int i = 0; i < OLD; i++)
		segment_free_units(old[i]);
	for (int i = 0; i < OLD; i++)
		CHECK_EQ(segment_unit_state(old_mem[i]), DIRTY);

	/* Keep the segment busy for four decay periods: free a unit and take
	 * one back every few ms (the slow paths run the decay tick). */
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		segment_free_units(churn);
		churn = unit_new();
		CHECK(churn != NULL);
		test_sleep_ms(5);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 4 * DECAY);

	/* the old units have gone back, apart from the ones churn reused */
	for (int i = 0; i < OLD; i++)
		CHECK(segment_unit_state(old_mem[i]) != DIRTY);

	/* A unit freed now, with older dirt in the segment and its tick due:
	 * it stays committed (the older one only turns aged). */
	struct slab *a = unit_new(), *b = unit_new();
	CHECK(a != NULL && b != NULL);
	segment_free_units(churn);
	segment_free_units(a);
	test_sleep_ms(DECAY + 10);   /* the segment's tick is due */
	last = (char *)slab_start(b);
	segment_free_units(b);   /* runs segment_decay(): the tick */
	CHECK_EQ(segment_unit_state(last), DIRTY);
	CHECK_EQ(segment_unit_state((void *)slab_start(a)), DIRTY);

	/* and it goes too once it has been free for two periods */
	for (int i = 0; i < 3; i++) {
		test_sleep_ms(DECAY);
		segment_decay();
	}
	CHECK_EQ(segment_unit_state(last), CLEAN);
}

/* A huge block of len bytes, filled with byte, freed into the huge cache:
 * where it was, or NULL. */
static char *free_huge_block(size_t len, int byte)
{
	char *p = uslab_malloc(len);

	CHECK(p != NULL);
	if (!p)
		return NULL;
	memset(p, byte, len);
	uslab_free(p);
	CHECK(range_cache_bytes() >= len);
	return p;
}

static void test_huge(void)
{
	if (!free_huge_block(LARGE_MAX + (1u << 20), 1))
		return;
	test_sleep_ms(2 * DECAY);
	/* no huge request from here on: an ordinary slow path must do it */
	struct slab *u = unit_new();
	CHECK(u != NULL);
	segment_free_units(u);
	CHECK_EQ(range_cache_bytes(), 0);
}

static void test_placement(void)
{
	enum { N = 12 };
	struct slab *u[N];

	for (int i = 0; i < N; i++) {
		u[i] = unit_new();
		CHECK(u[i] != NULL);
		if (!u[i])
			return;
	}
	/* consecutive units? (a fresh segment hands them out in order) */
	for (int i = 1; i < N; i++)
		if (slab_start(u[i]) != slab_start(u[i - 1]) + UNIT_SIZE)
			return;   /* not laid out as expected: nothing to check */
	/* 1..5 and 10 free and clean, 6..9 free and dirty, 0 and 11 in use */
	for (int i = 1; i <= 5; i++)
		segment_free_units(u[i]);
	segment_free_units(u[10]);
	segment_purge_all();
	for (int i = 6; i <= 9; i++)
		segment_free_units(u[i]);
	/* four units: the dirty run 6..9, not the first fit 1..4 */
	struct slab *r = segment_alloc_units(4, SLAB_KIND_LARGE, false, NULL);
	CHECK(r != NULL && slab_start(r) == slab_start(u[6]));
	if (r)
		segment_free_units(r);
	/* five: no dirty run that long; 5..9 and 6..10 have one clean unit
	 * each (the first wins), 1..5 five */
	r = segment_alloc_units(5, SLAB_KIND_LARGE, false, NULL);
	CHECK(r != NULL && slab_start(r) == slab_start(u[5]));
	if (r)
		segment_free_units(r);
	segment_free_units(u[0]);
	segment_free_units(u[11]);
}

static void test_carve(void)
{
	size_t len = 3 * SEG_SIZE;
	char *p = free_huge_block(len, 0x77);

	if (!p)
		return;
	size_t cached = range_cache_bytes();

	/* take 1 MiB runs until one comes from the freed block */
	enum { MAX_RUNS = 64 };
	struct slab *runs[MAX_RUNS];
	unsigned nr = 0, found = 0;
	while (nr < MAX_RUNS && !found) {
		bool zeroed = true;
		struct slab *r = segment_alloc_units(SEG_UNITS / 4, SLAB_KIND_LARGE, false, &zeroed);

		CHECK(r != NULL);
		if (!r)
			break;
		runs[nr++] = r;
		char *m = (char *)slab_start(r);
		if (m >= p && m < p + len) {
			found = nr;
			CHECK(!zeroed);   /* it still holds the block's bytes */
			CHECK_EQ((unsigned char)m[0], 0x77);
			CHECK_EQ(segment_unit_state(m + UNIT_SIZE * (SEG_UNITS / 4)), DIRTY);
			/* the block asked for huge pages; slabs are purged unit by
			 * unit, so the segment asks against them */
			struct test_vma v;
			CHECK(test_vma_of(m, &v) && !v.hg);
			if (test_thp_mode() == TEST_THP_NONE)
				test_skip("no transparent huge pages in this kernel: the carved "
					  "segment's MADV_NOHUGEPAGE mark is not checked");
			else
				CHECK_EQ(v.nh, option(OPT_HUGE_PAGES) != 0);
		}
	}
	CHECK(found);
	CHECK_EQ(range_cache_bytes(), cached - SEG_SIZE);
	for (unsigned i = 0; i < nr; i++)
		segment_free_units(runs[i]);
}

int main(void)
{
	options_init();
	options_parse_entry("USLAB_DECAY_MS=100");
	test_generations();
	test_huge();
	test_placement();
	test_carve();
	return test_done("segment_decay_unit");
}
