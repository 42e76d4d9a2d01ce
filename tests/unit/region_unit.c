/* SPDX-License-Identifier: MIT */
/*
 * region_unit - the segment region (segment/region.c), each case in a
 * child of its own, as the reservation is made once, at the first segment:
 *
 *   reserve     the first segment is in the region's first part (64 MiB;
 *               read-only, not in core dumps), asked for at a random place
 *               between 32 and 64 TiB, aligned to segments; free's inline
 *               test takes it, and takes nothing while frees are diverted;
 *               past the first part the region grows in place, by 64 MiB
 *   slots       segments fill the slots lowest first; a segment given
 *               back leaves read-only zeros, left out of core dumps (a
 *               segment is dumped), its descriptors clear, and the next
 *               segment takes its slot again; frees of pointers into it,
 *               or into a slot never used, are reported as invalid
 *               pointers
 *   full        past USLAB_REGION (64m: 16 slots) segments are mapped
 *               anywhere, registered, and malloc's blocks in them are
 *               freed and reused through the slow path, intact
 *   none        USLAB_REGION=0: no reservation, segments anywhere, every
 *               free through the slow path, blocks reused as before
 *   huge range  a freed huge block's range, still committed in the cache:
 *               a new segment for slabs takes a slot of the region and 4
 *               MiB of the range's pages moved into it, dirty; one for a
 *               large run is carved from the range where it is (outside
 *               the region: its frees are slow paths anyway), and then
 *               holds large runs only
 *   limit       under RLIMIT_AS the region grows by one slot at a time
 *               (not under the sanitizers, whose shadow takes terabytes of
 *               address space)
 */
#define _GNU_SOURCE
#include "test.h"
#include "kmalloc.h"
#include "options.h"
#include "uslab.h"

#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define WHOLE (SEG_UNITS - SEG_HDR_UNITS)   /* a run that takes a segment */

static uintptr_t seg_of(struct slab *run)
{
	return (uintptr_t)ptr_segment((void *)slab_start(run));
}

/* /proc/self/maps: is addr mapped, and writable? -1: not mapped. */
static int writable_at(uintptr_t addr)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int w = -1;

	REQUIRE(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8];

		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && addr >= lo && addr < hi) {
			w = perms[1] == 'w';
			break;
		}
	}
	fclose(f);
	return w;
}

static bool inline_takes(const void *p)
{
	uintptr_t rel;

	return segment_region_fast((uintptr_t)p, &rel);
}

static void child_done(void)
{
	fflush(stdout);
	_exit(test_failures ? 1 : 0);
}

static void case_start(void *fn)
{
	test_failures = 0;   /* the child's own */
	((void (*)(void *))fn)(NULL);
}

static void run_case(void (*fn)(void *), const char *name)
{
	struct test_child c;
	char how[64];

	test_run_child(case_start, (void *)fn, &c);
	if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
		fprintf(stderr, "case %s: the child %s, stderr:\n%s\n", name,
			test_child_outcome(&c, how, sizeof(how)), c.err);
		test_failures++;
	}
}

static bool sanitized(void)
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
	return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
	return true;
#endif
#endif
	return false;
}

#define CHUNK (16 * SEG_SIZE)   /* region.c's REGION_CHUNK */

/* Does /proc/self/smaps show MADV_DONTDUMP? (qemu-user passes the madvise
 * to nobody: the checks of it are left out there.) */
static bool dontdump_seen(void)
{
	static int seen = -1;

	if (seen < 0) {
		void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct test_vma v;

		REQUIRE(m != MAP_FAILED);
		madvise(m, 4096, MADV_DONTDUMP);
		seen = test_vma_of(m, &v) && v.dd;
		munmap(m, 4096);
		if (!seen)
			printf("not checked: MADV_DONTDUMP (smaps does not show it here)\n");
	}
	return seen;
}

static void case_reserve(void *arg)
{
	(void)arg;
	struct slab *r = segment_alloc_units(1, SLAB_KIND_LARGE, false, NULL);

	REQUIRE(r);
	size_t len = region_reserved_bytes();
	CHECK_EQ(len, CHUNK);
	CHECK_EQ(seg_region.base % SEG_SIZE, 0);
	if (!sanitized())   /* their shadow may be where the base is asked for */
		CHECK(seg_region.base >= (32ul << 40) && seg_region.base < (64ul << 40));
	CHECK_EQ(seg_region.fast_len, len);
	CHECK(region_slot_holds(seg_of(r)));
	CHECK(inline_takes((void *)slab_start(r)));
	CHECK(!inline_takes((void *)(seg_region.base - 1)));
	CHECK(!inline_takes((void *)(seg_region.base + len)));
	CHECK(!inline_takes(NULL));
	struct test_vma v;
	CHECK(test_vma_of((void *)(seg_region.base + len - 1), &v) && !v.hg);
	CHECK(v.dd || !dontdump_seen());
	CHECK_EQ(writable_at(seg_region.base + len - 1), 0);
	segment_divert_frees(true);
	CHECK_EQ(seg_region.fast_len, 0);
	CHECK(!inline_takes((void *)slab_start(r)));
	segment_divert_frees(false);
	CHECK_EQ(seg_region.fast_len, len);
	/* past its first part it grows in place, by at least as much again */
	enum { N = 2 * CHUNK / SEG_SIZE };
	struct slab *run[N];
	for (unsigned i = 0; i < N; i++) {
		run[i] = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);
		REQUIRE(run[i]);
		if (!sanitized())
			CHECK(region_slot_holds(seg_of(run[i])));
	}
	if (!sanitized()) {
		CHECK_EQ(region_reserved_bytes(), 3 * CHUNK);
		CHECK_EQ(seg_region.fast_len, 3 * CHUNK);
		CHECK(inline_takes((void *)slab_start(run[N - 1])));
		CHECK_EQ(seg_of(run[N - 1]), seg_region.base + (N + 1) * SEG_SIZE - SEG_SIZE);
	}
	for (unsigned i = 0; i < N; i++)
		segment_free_units(run[i]);
	segment_free_units(r);
	child_done();
}

static void free_it(void *p)
{
	uslab_free(p);
}

static void expect_invalid(void *p)
{
	char want[160];

	snprintf(want, sizeof(want), "uslab: free(): invalid pointer %p\n", p);
	test_expect_abort(free_it, p, want);
}

static void case_slots(void *arg)
{
	(void)arg;
	struct slab *a = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);
	struct slab *b = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);
	struct slab *c = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);

	REQUIRE(a && b && c);
	uintptr_t sa = seg_of(a), sb = seg_of(b), sc = seg_of(c);
	CHECK(region_slot_holds(sa) && region_slot_holds(sb) && region_slot_holds(sc));
	CHECK(sa != sb && sb != sc && sa != sc);
	uintptr_t lo = sa < sb ? (sa < sc ? sa : sc) : (sb < sc ? sb : sc);
	uintptr_t hi = sa > sb ? (sa > sc ? sa : sc) : (sb > sc ? sb : sc);
	CHECK_EQ(hi - lo, 2 * SEG_SIZE);   /* three slots side by side */
	memset((void *)slab_start(b), 0x5a, 64);
	segment_free_units(b);
	segment_purge_all();   /* an empty segment goes once clean */
	segment_release_empty_over(0);
	CHECK_EQ(writable_at(sb), 0);      /* read-only again */
	struct test_vma v;
	CHECK(test_vma_of((void *)sb, &v) && (v.dd || !dontdump_seen()));   /* not dumped */
	CHECK(test_vma_of((void *)sa, &v) && !v.dd);  /* a segment is */
	CHECK_EQ(writable_at(sb + SEG_SIZE - 1), 0);
	CHECK_EQ(((struct segment *)sb)->magic, 0);
	CHECK(test_all_zero((void *)(sb + SEG_HDR_UNITS * UNIT_SIZE), 64));   /* zeros again */
	CHECK(!segment_is_registered(sb));
	CHECK(inline_takes((void *)(sb + SEG_HDR_UNITS * UNIT_SIZE)));   /* and read through */
	/* frees into it, or into a slot never used, read clear descriptors */
	expect_invalid((void *)(sb + SEG_HDR_UNITS * UNIT_SIZE));
	expect_invalid((void *)(sb + SEG_SIZE / 2 + 48));
	expect_invalid((void *)(seg_region.base + region_reserved_bytes() - SEG_SIZE + 64));
	struct slab *d = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);
	REQUIRE(d);
	CHECK_EQ(seg_of(d), sb);   /* the lowest slot free */
	CHECK_EQ(writable_at(sb), 1);
	CHECK(test_all_zero((void *)slab_start(d), 64));
	/* two slots given back: taken lowest first, each once, then the top */
	uintptr_t sd = seg_of(d);
	segment_free_units(a);
	segment_free_units(d);
	segment_purge_all();
	segment_release_empty_over(0);
	struct slab *e = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);
	struct slab *f = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);
	struct slab *g = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);
	REQUIRE(e && f && g);
	CHECK_EQ(seg_of(e), sa < sd ? sa : sd);
	CHECK_EQ(seg_of(f), sa < sd ? sd : sa);
	CHECK_EQ(seg_of(g), hi + SEG_SIZE);
	segment_free_units(c);
	segment_free_units(e);
	segment_free_units(f);
	segment_free_units(g);
	child_done();
}

static void case_full(void *arg)
{
	(void)arg;
	options_parse_entry("USLAB_REGION=64m");
	enum { SLOTS = 16, BLOCKS = 20000 };
	struct slab *run[SLOTS];

	for (unsigned i = 0; i < SLOTS; i++) {
		run[i] = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);
		REQUIRE(run[i]);
		CHECK(region_slot_holds(seg_of(run[i])));
	}
	CHECK_EQ(region_reserved_bytes(), SLOTS * SEG_SIZE);
	/* every slot taken: malloc's slabs come from segments outside */
	static char *blk[BLOCKS];
	unsigned outside = 0;

	for (unsigned i = 0; i < BLOCKS; i++) {
		blk[i] = uslab_malloc(48 + i % 200);
		REQUIRE(blk[i]);
		test_fill_seed(blk[i], 48 + i % 200, i);
		uintptr_t seg = (uintptr_t)ptr_segment(blk[i]);
		if (segment_is_registered(seg)) {
			outside += !region_slot_holds(seg);
			CHECK(!inline_takes(blk[i]));
		}
	}
	CHECK(outside > BLOCKS / 2);
	for (unsigned i = 0; i < BLOCKS; i += 2)
		uslab_free(blk[i]);
	for (unsigned i = 0; i < BLOCKS; i += 2) {
		blk[i] = uslab_malloc(48 + i % 200);
		REQUIRE(blk[i]);
		test_fill_seed(blk[i], 48 + i % 200, i);
	}
	for (unsigned i = 0; i < BLOCKS; i++) {
		CHECK(test_intact_seed(blk[i], 48 + i % 200, i));
		uslab_free(blk[i]);
	}
	for (unsigned i = 0; i < SLOTS; i++)
		segment_free_units(run[i]);
	child_done();
}

static void case_none(void *arg)
{
	(void)arg;
	options_parse_entry("USLAB_REGION=0");
	options_parse_entry("USLAB_STARTUP_ARENA=0");   /* a slab's block below */
	struct slab *r = segment_alloc_units(1, SLAB_KIND_LARGE, false, NULL);

	REQUIRE(r);
	CHECK_EQ(region_reserved_bytes(), 0);
	CHECK_EQ(seg_region.fast_len, 0);
	CHECK(!region_slot_holds(seg_of(r)));
	CHECK(segment_is_registered(seg_of(r)));
	CHECK(!inline_takes((void *)slab_start(r)));
	char *p = uslab_malloc(100);   /* freed through the slow path */
	REQUIRE(p && segment_is_registered((uintptr_t)p) && !inline_takes(p));
	test_fill_seed(p, 100, 7);
	uslab_free(p);
	char *q = uslab_malloc(100);
	CHECK(q == p);
	uslab_free(q);
	segment_free_units(r);
	child_done();
}

static void case_huge_range(void *arg)
{
	(void)arg;
	char *big = uslab_malloc(12 << 20);

	REQUIRE(big);
	memset(big, 0x77, 12 << 20);
	uslab_free(big);   /* its range stays committed in the cache */
	size_t cached = range_cache_bytes();
	CHECK(cached >= (12u << 20));
	/* slabs: a slot of the region, with 4 MiB of the range's pages moved
	 * into it (its units dirty: never handed out as zeroed) */
	bool zeroed = true;
	struct slab *s1 = segment_alloc_units(SLAB_MAX_UNITS, SLAB_KIND_SLAB, false, &zeroed);
	REQUIRE(s1);
	CHECK(region_slot_holds(seg_of(s1)));
	CHECK(!zeroed);
	CHECK_EQ(*(unsigned char *)slab_start(s1), 0x77);
	CHECK_EQ(writable_at(seg_of(s1)), 1);
	cached -= SEG_SIZE;
	CHECK_EQ(range_cache_bytes(), cached);
	/* a large run: carved from the range, outside the region, its pages
	 * the block's */
	zeroed = true;
	struct slab *l1 = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, &zeroed);
	REQUIRE(l1);
	uintptr_t carved = seg_of(l1);
	CHECK(!region_slot_holds(carved));
	CHECK(segment_is_registered(carved));
	CHECK_EQ(range_cache_bytes(), cached - SEG_SIZE);
	CHECK(!zeroed);
	CHECK_EQ(*(unsigned char *)slab_start(l1), 0x77);
	segment_free_units(l1);
	/* ... which then holds large runs only: slabs go to the region */
	struct slab *s2 = segment_alloc_units(SLAB_MAX_UNITS, SLAB_KIND_SLAB, false, NULL);
	REQUIRE(s2);
	CHECK(region_slot_holds(seg_of(s2)));
	struct slab *l2 = segment_alloc_units(4, SLAB_KIND_LARGE, false, NULL);
	REQUIRE(l2);
	CHECK_EQ(seg_of(l2), carved);   /* its committed units first */
	segment_free_units(s1);
	segment_free_units(s2);
	segment_free_units(l2);
	child_done();
}

static void case_limit(void *arg)
{
	(void)arg;
	struct slab *a = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);

	REQUIRE(a);
	CHECK_EQ(region_reserved_bytes(), CHUNK);
	long vm_kb = test_status_kb("VmSize");
	REQUIRE(vm_kb > 0);
	struct rlimit lim = { .rlim_cur = ((rlim_t)vm_kb << 10) + (1ul << 30),
			      .rlim_max = RLIM_INFINITY };
	REQUIRE(setrlimit(RLIMIT_AS, &lim) == 0);
	struct rlimit now;
	REQUIRE(getrlimit(RLIMIT_AS, &now) == 0);
	if (now.rlim_cur == RLIM_INFINITY) {   /* qemu-user keeps the limit to itself */
		printf("not checked: RLIMIT_AS (setrlimit did not take)\n");
		segment_free_units(a);
		child_done();
	}
	/* past the first part: one slot at a time */
	enum { N = CHUNK / SEG_SIZE + 2 };
	struct slab *run[N];
	for (unsigned i = 0; i < N; i++) {
		run[i] = segment_alloc_units(WHOLE, SLAB_KIND_LARGE, false, NULL);
		REQUIRE(run[i]);
		CHECK(region_slot_holds(seg_of(run[i])));
	}
	CHECK_EQ(region_reserved_bytes(), (N + 1) * SEG_SIZE);
	CHECK_EQ(seg_region.fast_len, (N + 1) * SEG_SIZE);
	for (unsigned i = 0; i < N; i++)
		segment_free_units(run[i]);
	segment_free_units(a);
	child_done();
}

int main(void)
{
	options_init();
	REQUIRE(region_reserved_bytes() == 0);   /* each case reserves its own */
	run_case(case_reserve, "reserve");
	run_case(case_slots, "slots");
	run_case(case_full, "full");
	run_case(case_none, "none");
	run_case(case_huge_range, "huge range");
	if (sanitized())
		printf("not run: the RLIMIT_AS case (the sanitizers' shadow takes the "
		       "address space)\n");
	else
		run_case(case_limit, "limit");
	return test_done("region_unit");
}
