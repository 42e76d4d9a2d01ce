/* SPDX-License-Identifier: MIT */
/*
 * huge_pages_unit - transparent huge pages under huge blocks (kmalloc.c
 * huge_alloc, os.c os_map/os_hugepage; USLAB_HUGE_PAGES).
 *
 *   flagged     a fresh huge block from malloc is one mapping of its own,
 *               marked MADV_HUGEPAGE over the whole of it (one VMA, so that
 *               mremap can still resize it)
 *   ends        its two ends stay in 4 KiB pages: at least 1 MiB before the
 *               first 2 MiB boundary and 1 MiB less a page after the last,
 *               for lengths around every residue of 2 MiB; a block too
 *               short for a whole huge page in between is not marked
 *   touched     after it is written in full, huge pages (if the kernel gave
 *               any) lie only in the interior, and the content is intact
 *   realloc     growing it with mremap keeps content and the flag
 *   calloc      a calloc'ed huge block is not marked (and reads as zero);
 *               nor is one aligned above the page size
 *   off         USLAB_HUGE_PAGES=0: not marked
 *   segments    slabs past the process's first HUGE_SEGMENTS_AFTER segments
 *               go to segments marked MADV_HUGEPAGE; those first ones are
 *               not marked, nor is any segment a large block or an object
 *               of several pages is in; with
 *               USLAB_HUGE_PAGES=0 new segments are not marked (segment.c,
 *               segment_map)
 *
 * A segment for large blocks carved from a cached huge range is checked in
 * segment_decay_unit (marked MADV_NOHUGEPAGE).
 */
#define _GNU_SOURCE
#include "test.h"
#include "kmalloc.h"
#include "kmalloc.h"
#include "options.h"
#include "uslab.h"

#include <unistd.h>

#define MiB (1ul << 20)
#define HP  HUGE_PAGE_SIZE

static size_t page;
static enum test_thp thp;   /* the kernel's mode */

/* The block p of n bytes is marked as want says; marked, it is a mapping of
 * its own (unmarked, the kernel may merge it with a neighbour). Without THP
 * in the kernel nothing can be marked: only the bounds are checked. */
static void check_mapping(const char *what, const void *p, size_t n, int want)
{
	struct test_vma v;
	uintptr_t end = round_up((uintptr_t)p + n, page);
	bool marks = thp != TEST_THP_NONE;

	REQUIRE(test_vma_of(p, &v));
	if (v.start > (uintptr_t)p || v.end < end ||
	    (marks && (v.hg != want || v.nh ||
		       (want && (v.start != (uintptr_t)p || v.end != end))))) {
		fprintf(stderr, "%s (%zu bytes at %p): mapping %#lx-%#lx hg %d nh %d, want "
			"hg %d%s\n", what, n, p, (unsigned long)v.start, (unsigned long)v.end,
			v.hg, v.nh, want, want ? " over exactly the block" : "");
		test_failures++;
	}
}

static void test_flagged_and_ends(void)
{
	/* every residue class of 2 MiB that matters: 0, a page, below and at
	 * 1 MiB, above it, a page short of 2 MiB */
	size_t rs[] = { 0, page, MiB / 2, MiB - page, MiB, MiB + page, HP - 2 * page,
			HP - page };

	for (size_t base = 4 * MiB; base <= 10 * MiB; base += 6 * MiB) {
		for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++) {
			size_t n = base + rs[i];
			char *p = uslab_malloc(n);

			REQUIRE(p != NULL);
			check_mapping("malloc", p, n, 1);
			uintptr_t a = (uintptr_t)p, end = a + round_up(n, page);
			size_t head = round_up(a, HP) - a, tail = end & (HP - 1);
			CHECK(head >= MiB);
			CHECK(tail >= MiB - page);
			CHECK(round_up(a, HP) < (end & ~(HP - 1)));   /* one whole huge page */
			uslab_free(p);
			uslab_trim();   /* the next block is a fresh mapping */
		}
	}
	/* 3 MiB: no whole 2 MiB page with 1 MiB at each end: not marked */
	char *p = uslab_malloc(3 * MiB);
	REQUIRE(p != NULL);
	check_mapping("malloc(3 MiB)", p, 3 * MiB, 0);
	uslab_free(p);
	uslab_trim();
}

static void test_touched_and_realloc(void)
{
	size_t n = 12 * MiB + 12345, m = 40 * MiB + 999;
	unsigned char *p = uslab_malloc(n);

	REQUIRE(p != NULL);
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 7 + (i >> 12));

	struct test_vma v;
	REQUIRE(test_vma_of(p, &v));
	uintptr_t lo = round_up(v.start, HP), hi = v.end & ~(HP - 1);
	CHECK(v.anon_huge_kb >= 0 && (size_t)v.anon_huge_kb * 1024 <= hi - lo);
	if (thp > TEST_THP_NEVER)
		CHECK_EQ(v.thp_eligible, 1);
	printf("12 MiB written: %ld KiB in huge pages (interior %zu KiB)\n", v.anon_huge_kb,
	       (size_t)(hi - lo) / 1024);

	unsigned char *q = uslab_realloc(p, m);
	REQUIRE(q != NULL);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += q[i] != (unsigned char)(i * 7 + (i >> 12));
	CHECK_EQ(bad, 0);
	memset(q + n, 0x5a, m - n);
	REQUIRE(test_vma_of(q, &v));
	if (thp != TEST_THP_NONE)
		CHECK(v.hg);
	CHECK(v.start <= (uintptr_t)q && v.end >= (uintptr_t)q + m);
	uslab_free(q);
	uslab_trim();
}

static void test_calloc_aligned_off(void)
{
	size_t n = 12 * MiB;
	unsigned char *p = uslab_calloc(1, n);

	REQUIRE(p != NULL);
	check_mapping("calloc", p, n, 0);
	CHECK(p[0] == 0 && p[n / 2] == 0 && p[n - 1] == 0);
	uslab_free(p);
	uslab_trim();

	void *a = NULL;
	REQUIRE(uslab_posix_memalign(&a, 4 * MiB, n) == 0);
	struct test_vma v;
	REQUIRE(test_vma_of(a, &v));
	CHECK(!v.hg);
	CHECK_EQ((uintptr_t)a & (4 * MiB - 1), 0);
	uslab_free(a);
	uslab_trim();

	options_parse_entry("USLAB_HUGE_PAGES=0");
	p = uslab_malloc(n);
	REQUIRE(p != NULL);
	check_mapping("malloc, USLAB_HUGE_PAGES=0", p, n, 0);
	uslab_free(p);
	uslab_trim();
	options_parse_entry("USLAB_HUGE_PAGES=1");
}

/* Segments seen so far, and whether each was marked. */
static uintptr_t seen[64];
static int seen_hg[64];
static unsigned nseen;

/* p's segment's mark (-1: the segment is new and not looked at: full;
 * 0 for a block of the start-up arena, which is in no segment). */
static int segment_mark(const void *p, bool *fresh)
{
	uintptr_t seg = (uintptr_t)ptr_segment(p);
	struct test_vma v;

	*fresh = false;
	if (!segment_is_registered(seg))
		return 0;
	for (unsigned i = 0; i < nseen; i++)
		if (seen[i] == seg)
			return seen_hg[i];
	if (nseen == 64)
		return -1;
	REQUIRE(test_vma_of((void *)seg, &v));
	*fresh = true;
	seen[nseen] = seg;
	seen_hg[nseen] = v.hg;
	return seen_hg[nseen++];
}

/* Runs first: the process's first segments are those its first slabs are in
 * (no block has been freed yet, so no segment is carved from a freed one). */
static void test_segments(void)
{
	enum { SMALL = 100000, LARGE = 48 };
	static void *small[2 * SMALL];
	void *large[LARGE];
	bool marks = thp != TEST_THP_NONE, fresh;
	unsigned early_marked = 0, later = 0, later_marked = 0;
	unsigned unmarked_new = 0, marked_new = 0;
	void *p = uslab_malloc(48);

	REQUIRE(p != NULL);
	CHECK_EQ(segment_mark(p, &fresh), 0);   /* the first, or the start-up arena */
	for (unsigned i = 0; i < SMALL; i++) {   /* 24 MiB of slabs */
		small[i] = uslab_malloc(256);
		REQUIRE(small[i] != NULL);
		memset(small[i], 1, 256);
		int hg = segment_mark(small[i], &fresh);
		if (fresh && nseen <= HUGE_SEGMENTS_AFTER) {
			early_marked += hg == 1;
		} else if (fresh) {
			later++;
			later_marked += hg == 1;
		}
	}
	CHECK_EQ(early_marked, 0);
	CHECK(later >= 1);
	if (marks && later_marked != later) {
		fprintf(stderr, "%u of the %u segments past the first %d marked for huge pages\n",
			later_marked, later, HUGE_SEGMENTS_AFTER);
		test_failures++;
	}
	/* large blocks and objects of several pages: never under huge pages */
	for (unsigned i = 0; i < LARGE; i++) {
		size_t n = i % 2 ? 100 << 10 : 12000;

		large[i] = uslab_malloc(n);
		REQUIRE(large[i] != NULL);
		memset(large[i], 2, n);
		CHECK_EQ(segment_mark(large[i], &fresh), 0);
	}
	options_parse_entry("USLAB_HUGE_PAGES=0");
	for (unsigned i = SMALL; i < 2 * SMALL; i++) {   /* new segments: not marked */
		small[i] = uslab_malloc(256);
		REQUIRE(small[i] != NULL);
		int hg = segment_mark(small[i], &fresh);
		unmarked_new += fresh && hg == 0;
		marked_new += fresh && hg == 1;
	}
	options_parse_entry("USLAB_HUGE_PAGES=1");
	CHECK(unmarked_new >= 1);
	CHECK_EQ(marked_new, 0);
	for (unsigned i = 0; i < 2 * SMALL; i++)
		uslab_free(small[i]);
	for (unsigned i = 0; i < LARGE; i++)
		uslab_free(large[i]);
	uslab_free(p);
	uslab_trim();
}

int main(void)
{
	options_init();
	page = (size_t)sysconf(_SC_PAGESIZE);
	thp = test_thp_mode();
	if (thp == TEST_THP_NONE)
		test_skip("no transparent huge pages in this kernel: the MADV_HUGEPAGE marks "
			  "are not checked, only placement and content");
	else if (thp == TEST_THP_NEVER)
		test_skip("transparent huge pages are 'never' in this kernel: a marked block's "
			  "eligibility is not checked");
	test_segments();
	test_flagged_and_ends();
	test_touched_and_realloc();
	test_calloc_aligned_off();
	return test_done("huge_pages_unit");
}
