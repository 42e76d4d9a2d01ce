/* SPDX-License-Identifier: MIT */
/*
 * os_decommit_unit - os_decommit() on runs of units, whatever the page size.
 *
 * The segment purges free units (UNIT_SIZE, 16 KiB) with os_decommit(); a
 * purged unit is later handed out as zeroed. On a kernel whose pages are
 * larger than a unit (arm64 with 64 KiB pages: four units to a page) the
 * range starts and ends inside pages. Each case fills a span, decommits a run
 * of units in it, and checks that the run reads as zero and that not one
 * byte outside it changed. With 4 KiB pages every case is page-aligned; the
 * cases that cross 64 KiB pages catch a decommit that hands madvise a range
 * the kernel refuses (the run keeps its bytes) or rounds up (the units after
 * the run lose theirs).
 */
#define _GNU_SOURCE
#include "test.h"
#include "segment.h"

#define SPAN_UNITS 32   /* 512 KiB: eight 64 KiB pages */

/* A byte from its offset, never zero. */
static unsigned char pattern(size_t off)
{
	return (unsigned char)(0x5a ^ (off >> 7) ^ off) | 1;
}

static void one_case(unsigned char *span, unsigned first, unsigned n)
{
	size_t size = (size_t)SPAN_UNITS << UNIT_SHIFT;
	size_t lo = (size_t)first << UNIT_SHIFT, hi = (size_t)(first + n) << UNIT_SHIFT;
	size_t bad_in = 0, bad_out = 0;

	for (size_t i = 0; i < size; i++)
		span[i] = pattern(i);
	os_decommit(span + lo, hi - lo);
	for (size_t i = 0; i < size; i++) {
		if (i >= lo && i < hi)
			bad_in += span[i] != 0;
		else
			bad_out += span[i] != pattern(i);
	}
	if (bad_in || bad_out)
		fprintf(stderr, "os_decommit(units %u..%u): %zu bytes inside kept their data, "
			"%zu bytes outside changed\n", first, first + n - 1, bad_in, bad_out);
	CHECK_EQ(bad_in, 0);
	CHECK_EQ(bad_out, 0);
}

int main(void)
{
	static const struct { unsigned first, n; } cases[] = {
		{ 0, 1 }, { 1, 1 }, { 3, 1 }, { 4, 1 },   /* one unit at each place in a 64 KiB page */
		{ 1, 2 }, { 3, 2 }, { 2, 4 },             /* inside a page, across a boundary */
		{ 4, 4 }, { 4, 8 }, { 1, 7 }, { 3, 10 },  /* whole pages, with partial ends */
		{ 0, SPAN_UNITS }, { 5, SPAN_UNITS - 6 },
	};
	size_t size = (size_t)SPAN_UNITS << UNIT_SHIFT;
	unsigned char *span = os_map_aligned(size, size);

	CHECK(span != NULL);
	if (!span)
		return test_done("os_decommit_unit");
	printf("  page size %zu, unit %lu\n", os_page_size(), (unsigned long)UNIT_SIZE);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		one_case(span, cases[k].first, cases[k].n);
	os_unmap(span, size);
	return test_done("os_decommit_unit");
}
