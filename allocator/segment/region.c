/* SPDX-License-Identifier: MIT */
/*
 * region.c - the segment region: a range of address space, reserved as it
 * fills, read-only zeros holding no memory, carved into 4 MiB slots that
 * segments occupy.
 *
 * Why: free's inline path must tell whether a pointer is in one of our
 * segments before it reads the segment's descriptors. The registry says so
 * for any address, with a bounds check and a load of its byte; a region
 * whose every byte may be read says so with one subtraction and one
 * compare, and the offset it leaves gives the unit's descriptor with no
 * copy of the pointer (four instructions fewer, and one dependent load
 * less). The registry stays the authority everywhere else.
 *
 * Where: the region may grow to USLAB_REGION (1 TiB) from its base, so the
 * base is asked for (MAP_FIXED_NOREPLACE) at a random 4 MiB boundary
 * between 32 and 64 TiB, where the kernel places nothing of its own choice
 * (it maps downwards from below the stack, and programs sit near 85 TiB or
 * under 4 GiB), as mimalloc asks for its segments above 2 TiB; it also
 * makes the heap's place random. Where that is refused (a 39-bit address
 * space), or with a sanitizer's runtime in the process (os_sanitized), the
 * kernel chooses, and the region may then be unable to grow past its
 * first part.
 *
 * How much: the reservation grows by a quarter of itself, at least 64 MiB,
 * each time its slots run out (or by one slot under RLIMIT_AS, which
 * counts address space), so it stays near what the segments use: a
 * reservation costs nothing on Linux, but qemu-user (7.2, Debian 12's)
 * keeps a record per page of every mapping, 22 ms and 6 MB per GiB.
 *
 * Slots are handed out lowest first: the never-used ones from the top, the
 * ones given back (their bits in region_freed_map) before them. A slot in
 * use is read-write memory (os_commit_fixed), one given back is read-only
 * zeros again (os_release_fixed), so a descriptor read through a stale or
 * wild pointer into it is clear and refuses the free.
 */
#include "local.h"
#include "options.h"

#include <sys/resource.h>

struct seg_region seg_region = { .base = 1ul << 63, .fast_len = 0 };

static uintptr_t region_len;    /* bytes reserved (0: none) */
static uintptr_t region_max;    /* bytes it may grow to */
static uintptr_t region_top;    /* offset of the first slot never used */
static unsigned region_freed;   /* slots given back below the top */
static bool region_tried;       /* the reservation was attempted */
static bool region_diverted;    /* frees are diverted (region_divert) */

#define REGION_CHUNK   (16 * SEG_SIZE)     /* the least it grows by */
#define HINT_LO        (32ul << 40)        /* where its base is asked for */
#define HINT_SPAN      (32ul << 40)

static bool as_limited(void)
{
	struct rlimit r;

	return getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
}

/* Release: base before fast_len (see seg_region). */
static void region_publish(void)
{
	smp_store_release(&seg_region.fast_len, region_diverted ? 0 : region_len);
}

/* How much to reserve next (seg_lock held). */
static uintptr_t region_chunk(void)
{
	uintptr_t n = SEG_SIZE;

	if (!as_limited()) {
		n = (region_len / 4) & ~(SEG_SIZE - 1);
		if (n < REGION_CHUNK)
			n = REGION_CHUNK;
	}
	return n < region_max - region_len ? n : region_max - region_len;
}

/* seg_lock held: the first part, at a random place of the hint range if
 * the kernel agrees, else where it chooses. */
static void region_reserve(void)
{
	uintptr_t max = (uintptr_t)option(OPT_REGION) & ~(SEG_SIZE - 1);

	region_tried = true;
	if (max < SEG_SIZE)
		return;
	region_max = max < REGION_MAX ? max : REGION_MAX;
	uintptr_t want = region_chunk();
	void *m = NULL;

	if (!os_sanitized()) {   /* a sanitizer's map of memory may not cover the hint */
		uintptr_t at = HINT_LO +
			       (os_random64() % ((HINT_SPAN - region_max) >> SEG_SHIFT) << SEG_SHIFT);

		if (os_reserve_at((void *)at, want))
			m = (void *)at;
	}
	if (!m)
		m = os_reserve(want, SEG_SIZE);
	if (m && ((uintptr_t)m + want - 1) >> REG_ADDR_BITS) {   /* past the registry */
		os_unmap(m, want);
		m = NULL;
	}
	if (!m) {
		region_max = 0;
		return;
	}
	if (((uintptr_t)m + region_max - 1) >> REG_ADDR_BITS)
		region_max = ((1ul << REG_ADDR_BITS) - (uintptr_t)m) & ~(SEG_SIZE - 1);
	WRITE_ONCE(seg_region.base, (uintptr_t)m);
	WRITE_ONCE(region_len, want);
	region_publish();
}

/* seg_lock held: reserve the next part right after the last; when the
 * addresses there are taken, the region stays as it is. */
static bool region_grow(void)
{
	uintptr_t more = region_len < region_max ? region_chunk() : 0;

	if (!more || !os_reserve_at((void *)(seg_region.base + region_len), more)) {
		region_max = region_len;
		return false;
	}
	WRITE_ONCE(region_len, region_len + more);
	region_publish();
	return true;
}

/* seg_lock held */
static uintptr_t region_slot_take_locked(void)
{
	if (!region_tried)
		region_reserve();
	if (region_freed) {
		unsigned w = 0;

		while (!region_freed_map[w])
			w++;
		unsigned i = w * 64 + (unsigned)__builtin_ctzll(region_freed_map[w]);

		region_freed_map[w] &= region_freed_map[w] - 1;   /* its lowest bit */
		region_freed--;
		return seg_region.base + ((uintptr_t)i << SEG_SHIFT);
	}
	if (region_top == region_len && !region_grow())
		return 0;
	region_top += SEG_SIZE;
	return seg_region.base + region_top - SEG_SIZE;
}

uintptr_t region_slot_take(void)
{
	seg_lock_take();
	uintptr_t slot = region_slot_take_locked();
	seg_unlock();
	return slot;
}

/* Without seg_lock: the region only grows. */
bool region_slot_holds(uintptr_t seg)
{
	return seg - READ_ONCE(seg_region.base) < READ_ONCE(region_len);
}

void region_slot_give(uintptr_t seg)
{
	unsigned i = (unsigned)((seg - seg_region.base) >> SEG_SHIFT);

	seg_lock_take();
	ASSERT(region_slot_holds(seg) && !bit(region_freed_map, i));
	region_freed_map[i / 64] |= 1ull << (i % 64);
	region_freed++;
	seg_unlock();
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
