/* segment_desc_unit - unit descriptors are valid when zero. A new segment
 * writes no descriptor beyond those of the units it hands out, so a short
 * program touches one or two pages of the descriptor array, not all nine;
 * a run's descriptors are written when it is claimed (a kmalloc slab's
 * free-check fields in every unit) and cleared when its units go back, and
 * malloc's free takes an object in any unit of its slab. A slab goes to a
 * segment that holds slabs, a large run to one that holds none, where
 * both have room. In a heap of hundreds of segments the search index
 * (its bounds per segment and per group of segments) hides no free run.
 * A fresh process: the first test sees the program's first segment. */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <sys/mman.h>
#include <unistd.h>

#define KiB 1024ul

/* The first block of a fresh process: of the descriptor array's pages only
 * the header's first (its fields and the first descriptors) and pages that
 * hold a descriptor of a unit in use may be resident. */
static void check_fresh_segment_pages(void)
{
	void *p = uslab_malloc(64);
	uintptr_t seg = (uintptr_t)p & ~(SEG_SIZE - 1);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t npages = (sizeof(struct segment) + page - 1) / page;
	unsigned char vec[64];
	unsigned resident = 0, used_units = 0;

	REQUIRE(p != NULL && npages <= sizeof(vec));
	if (test_thp_mode() == TEST_THP_ALWAYS) {
		test_skip("transparent huge pages are 'always' in this kernel: a huge page may "
			  "back the descriptor array, its pages' residency is not checked");
		uslab_free(p);
		return;
	}
	REQUIRE(mincore((void *)seg, npages * page, vec) == 0);
	for (unsigned u = SEG_HDR_UNITS; u < SEG_UNITS; u++)
		used_units += segment_unit_state((void *)(seg + ((uintptr_t)u << UNIT_SHIFT))) == 0;
	CHECK(used_units >= 1);
	for (size_t k = 0; k < npages; k++) {
		if (!(vec[k] & 1))
			continue;
		resident++;
		if (k == 0)
			continue;
		/* the units whose descriptors lie (partly) in page k */
		size_t lo = k * page, hi = lo + page;
		bool holds_used = false;
		for (unsigned u = SEG_HDR_UNITS; u < SEG_UNITS; u++) {
			size_t d0 = offsetof(struct segment, desc) + u * sizeof(struct slab);
			if (d0 + sizeof(struct slab) > lo && d0 < hi &&
			    segment_unit_state((void *)(seg + ((uintptr_t)u << UNIT_SHIFT))) == 0)
				holds_used = true;
		}
		if (!holds_used) {
			fprintf(stderr, "descriptor page %zu resident, no unit in use there\n", k);
			test_failures++;
		}
	}
	printf("fresh segment: %u of %zu header pages resident, %u units in use\n", resident,
	       npages, used_units);
	CHECK(resident >= 1);
	CHECK(resident < npages);
	CHECK_EQ(kmalloc_validate_all(), 0);
	uslab_free(p);
}

/* A small class whose slab spans several units: an object in a later unit is
 * freed by malloc's fast path from that unit's own descriptor, which carries
 * the head's free-check and owner fields. */
static void check_tail_unit_objects(void)
{
	enum { MAX = 4096 };
	static void *blocks[MAX];
	struct slab *slab = NULL;
	size_t size = 0;
	unsigned n = 0, tail_at = MAX;

	for (size_t sz = 64; sz <= SMALL_MAX && !slab; sz += sz / 4) {
		void *p = uslab_malloc(sz);
		REQUIRE(p != NULL);
		struct slab *s = ptr_to_slab(p);
		uslab_free(p);
		if (s->nunits > 1) {
			slab = s;
			size = sz;
		}
	}
	REQUIRE(slab != NULL);
	/* fill until a block lands past the first unit of its slab */
	while (n < MAX && tail_at == MAX) {
		char *p = uslab_malloc(size);
		REQUIRE(p != NULL);
		memset(p, (int)(n & 0xff), size);
		blocks[n] = p;
		struct slab *s = ptr_to_slab(p);
		if ((uintptr_t)p - slab_start(s) >= UNIT_SIZE) {
			uintptr_t seg = (uintptr_t)p & ~(SEG_SIZE - 1);
			const struct slab *d = desc_at(seg, unit_desc_off(p));
			CHECK(d != s);
			CHECK(d->head == s);
			CHECK_EQ(d->kind, SLAB_KIND_TAIL);
			CHECK(d->base == s->base);
			CHECK(d->kfree_magic == s->kfree_magic && d->kfree_limit == s->kfree_limit);
			/* our active slab: its owner fields too, which free's
			 * owner test reads there */
			CHECK(s->owner_tp == thread_self());
			CHECK(d->owner_tp == s->owner_tp && d->owner_cpu == s->owner_cpu);
			tail_at = n;
		}
		n++;
	}
	REQUIRE(tail_at < MAX);
	printf("class of %zu bytes: %u units per slab; block %u is in a later unit\n", size,
	       (unsigned)ptr_to_slab(blocks[tail_at])->nunits, tail_at);
	CHECK_EQ(kmalloc_validate_all(), 0);
	struct slab *s = ptr_to_slab(blocks[tail_at]);
	bool own = s->owner_tp == thread_self();
	uslab_free(blocks[tail_at]);   /* our own slab: onto our cpu freelist */
	void *again = uslab_malloc(size);
	CHECK(again == blocks[tail_at] || !own);   /* and the next malloc's */
	blocks[tail_at] = again;
	memset(again, tail_at & 0xff, size);
	for (unsigned i = 0; i < n; i++) {
		const unsigned char *b = blocks[i];
		for (size_t k = 0; k < size; k++)
			if (b[k] != (i & 0xff)) {
				fprintf(stderr, "block %u byte %zu overwritten\n", i, k);
				test_failures++;
				break;
			}
		uslab_free(blocks[i]);
	}
	CHECK_EQ(kmalloc_validate_all(), 0);
}

/* Units leave a run (free, trim, shrink in place) with their descriptors
 * cleared, and join one (grow in place) as its tails. */
static void check_run_descriptors(void)
{
	char *p = uslab_malloc(400 * KiB);
	REQUIRE(p != NULL);
	struct slab *head = ptr_to_slab(p);
	unsigned units = head->nunits;

	CHECK(units >= 25);
	CHECK_EQ(kmalloc_validate_all(), 0);
	/* shrink in place (to a size above the classes): the last units are
	 * free and clear */
	char *q = uslab_realloc(p, 140 * KiB);
	REQUIRE(q == p);
	CHECK_EQ(head->nunits, 9);
	CHECK(ptr_to_slab(p + 300 * KiB) == NULL);
	CHECK(ptr_to_slab(p + 130 * KiB) == head);
	CHECK_EQ(kmalloc_validate_all(), 0);
	/* grow back into them */
	q = uslab_realloc(p, 380 * KiB);
	if (q == p) {
		CHECK(ptr_to_slab(p + 370 * KiB) == head);
		CHECK_EQ(kmalloc_validate_all(), 0);
	}
	uslab_free(q);
	uslab_trim();   /* the thread's kept runs go back to their segments */
	CHECK(ptr_to_slab(q) == NULL);
	CHECK_EQ(kmalloc_validate_all(), 0);
	/* the units are reused by a new run (stale fields would fail the walker) */
	void *big[8];
	for (unsigned i = 0; i < 8; i++) {
		big[i] = uslab_malloc(200 * KiB + i * 16 * KiB);
		REQUIRE(big[i] != NULL);
	}
	CHECK_EQ(kmalloc_validate_all(), 0);
	for (unsigned i = 0; i < 8; i++)
		uslab_free(big[i]);
	uslab_trim();
	CHECK_EQ(kmalloc_validate_all(), 0);
}

static uintptr_t seg_of(const struct slab *run)
{
	return (uintptr_t)ptr_segment((void *)slab_start(run));
}

/* Slabs and large runs apart: with committed free units in two segments,
 * one holding a slab and one holding none, a new slab goes to the first and
 * a large run to the second, whichever the list has first. */
static void check_slabs_apart(void)
{
	enum { BIG = 200, REST = 100 };
	struct slab *slab = segment_alloc_units(1, SLAB_KIND_SLAB, false, NULL);
	struct slab *big = segment_alloc_units(BIG, SLAB_KIND_LARGE, false, NULL);
	struct slab *other = segment_alloc_units(REST, SLAB_KIND_LARGE, false, NULL);

	REQUIRE(slab && big && other);
	if (seg_of(big) != seg_of(slab) || seg_of(other) == seg_of(slab)) {
		test_skip("the runs did not land as this test arranges them");
		segment_free_units(other);
		segment_free_units(big);
		segment_free_units(slab);
		return;
	}
	uintptr_t with_slabs = seg_of(slab), without = seg_of(other);

	segment_free_units(other);   /* committed free units in both */
	segment_free_units(big);
	CHECK_EQ(segment_unit_state((void *)slab_start(big)), 1);
	CHECK_EQ(segment_unit_state((void *)slab_start(other)), 1);
	struct slab *slab2 = segment_alloc_units(1, SLAB_KIND_SLAB, false, NULL);
	struct slab *run = segment_alloc_units(REST / 2, SLAB_KIND_LARGE, false, NULL);

	REQUIRE(slab2 && run);
	CHECK(seg_of(slab2) == with_slabs);
	CHECK(seg_of(run) == without);
	CHECK_EQ(kmalloc_validate_all(), 0);
	segment_free_units(run);
	segment_free_units(slab2);
	segment_free_units(slab);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

/* A heap of more segments than three groups of the search index: runs of
 * more than half a segment, one per segment. Every other one freed, the
 * same number asked for again are all served by the dirty runs they left,
 * wherever the search's groups put them (a bound set too low would hide
 * one, and a segment would be mapped for it); every other one of those
 * freed, then the rest: the index stays right through the compaction of
 * all of them leaving. */
static void check_many_segments(void)
{
	enum { SEGS = 200, UNITS = 200 };
	static struct slab *run[SEGS];

	for (unsigned i = 0; i < SEGS; i++)
		REQUIRE((run[i] = segment_alloc_units(UNITS, SLAB_KIND_LARGE, false, NULL)));
	CHECK_EQ(kmalloc_validate_all(), 0);
	size_t mapped = segment_mapped_bytes();

	for (unsigned i = 0; i < SEGS; i += 2)
		segment_free_units(run[i]);
	CHECK_EQ(kmalloc_validate_all(), 0);
	for (unsigned i = 0; i < SEGS; i += 2) {
		bool zeroed = true;

		REQUIRE((run[i] = segment_alloc_units(UNITS, SLAB_KIND_LARGE, false, &zeroed)));
		CHECK(!zeroed);   /* a freed run's committed units */
	}
	CHECK_EQ(segment_mapped_bytes(), mapped);
	CHECK_EQ(kmalloc_validate_all(), 0);
	for (unsigned i = 1; i < SEGS; i += 2)
		segment_free_units(run[i]);
	CHECK_EQ(kmalloc_validate_all(), 0);
	for (unsigned i = 0; i < SEGS; i += 2)
		segment_free_units(run[i]);
	uslab_trim();
	CHECK(segment_mapped_bytes() + (size_t)SEGS / 2 * SEG_SIZE <= mapped);
	CHECK_EQ(kmalloc_validate_all(), 0);
	/* the compacted index serves as before */
	struct slab *again = segment_alloc_units(UNITS, SLAB_KIND_LARGE, false, NULL);

	REQUIRE(again);
	CHECK_EQ(kmalloc_validate_all(), 0);
	segment_free_units(again);
}

int main(void)
{
	check_fresh_segment_pages();
	check_tail_unit_objects();
	check_run_descriptors();
	check_slabs_apart();
	check_many_segments();
	return test_done("segment_desc_unit");
}
