/* SPDX-License-Identifier: MIT */
/*
 * region.c - the segment region: address space reserved once, read-only
 * zeros holding no memory, carved into 4 MiB slots that segments occupy.
 *
 * Why: free's inline path must tell whether a pointer is in one of our
 * segments before it reads the segment's descriptors. The registry says so
 * for any address, with a bounds check and a load of its byte; a region
 * whose every byte may be read says so with one subtraction and one
 * compare, and the offset it leaves gives the unit's descriptor with no
 * copy of the pointer (four instructions fewer, and one dependent load
 * less). The registry stays the authority everywhere else.
 *
 * Slots are handed out lowest first: the never-used ones from the top, the
 * ones given back (their bits in region_freed_map) before them. A slot in
 * use is read-write memory (os_commit_fixed), one given back is read-only
 * zeros again (os_release_fixed), so a descriptor read through a stale or
 * wild pointer into it is clear and refuses the free.
 *
 * The reservation is address space, so RLIMIT_AS counts it: it takes at
 * most a quarter of the limit when one is set at the first segment; a limit
 * set later is seen at the next segment, which cuts the reservation to the
 * slots used so far (the kernel would otherwise refuse every other mapping
 * of the process) and leaves new segments to the system, which enforces
 * the limit as it would without the region.
 */
#include "local.h"
#include "options.h"

#include <sys/resource.h>

struct seg_region seg_region = { .base = 1ul << 63, .fast_len = 0 };

static uintptr_t region_len;    /* bytes reserved (0: none) */
static uintptr_t region_top;    /* offset of the first slot never used */
static unsigned region_freed;   /* slots given back below the top */
static bool region_tried;       /* the reservation was attempted */
static bool region_cut;         /* the reservation is what it will stay */
static bool region_diverted;    /* frees are diverted (region_divert) */

#define REGION_MIN (16 * SEG_SIZE)   /* smaller than this: not worth reserving */

static rlim_t as_limit(void)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_AS, &r) != 0)
		return RLIM_INFINITY;
	return r.rlim_cur;
}

/* Release: base before fast_len (see seg_region). */
static void region_publish(void)
{
	smp_store_release(&seg_region.fast_len, region_diverted ? 0 : region_len);
}

/* seg_lock held: reserve, halving the size until the system agrees. */
static void region_reserve(void)
{
	size_t want = (size_t)option(OPT_REGION);
	rlim_t lim = as_limit();

	region_tried = true;
	if (want > REGION_MAX)
		want = REGION_MAX;
	if (lim != RLIM_INFINITY) {
		if (want > lim / 4)
			want = lim / 4;
		region_cut = true;
	}
	want &= ~(SEG_SIZE - 1);
	for (; want >= REGION_MIN; want = (want / 2) & ~(SEG_SIZE - 1)) {
		void *m = os_reserve(want, SEG_SIZE);

		if (!m)
			continue;
		if (((uintptr_t)m + want - 1) >> REG_ADDR_BITS) {   /* beyond the registry */
			os_unmap(m, want);
			return;
		}
		WRITE_ONCE(seg_region.base, (uintptr_t)m);
		WRITE_ONCE(region_len, want);
		region_publish();
		return;
	}
}

/* seg_lock held: a limit on the address space appeared since the
 * reservation: keep only the slots used so far. */
static void region_cut_to_top(void)
{
	uintptr_t tail = region_len - region_top;

	region_cut = true;
	if (!tail)
		return;
	WRITE_ONCE(region_len, region_top);
	region_publish();
	os_unmap((void *)(seg_region.base + region_top), tail);
}

uintptr_t region_slot_take(void)
{
	if (!region_tried)
		region_reserve();
	if (!region_cut && as_limit() != RLIM_INFINITY)
		region_cut_to_top();
	if (region_freed) {
		unsigned w = 0;

		while (!region_freed_map[w])
			w++;
		unsigned i = w * 64 + (unsigned)__builtin_ctzll(region_freed_map[w]);

		region_freed_map[w] &= region_freed_map[w] - 1;   /* its lowest bit */
		region_freed--;
		return seg_region.base + ((uintptr_t)i << SEG_SHIFT);
	}
	if (region_top == region_len)
		return 0;
	region_top += SEG_SIZE;
	return seg_region.base + region_top - SEG_SIZE;
}

/* Without seg_lock: a cut drops only slots never used. */
bool region_slot_holds(uintptr_t seg)
{
	return seg - READ_ONCE(seg_region.base) < READ_ONCE(region_len);
}

void region_slot_give(uintptr_t seg)
{
	unsigned i = (unsigned)((seg - seg_region.base) >> SEG_SHIFT);

	ASSERT(region_slot_holds(seg) && !bit(region_freed_map, i));
	region_freed_map[i / 64] |= 1ull << (i % 64);
	region_freed++;
}

void region_divert(bool on)
{
	region_diverted = on;
	region_publish();
}

size_t region_reserved_bytes(void)
{
	return READ_ONCE(region_len);
}
