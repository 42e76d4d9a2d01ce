/* SPDX-License-Identifier: MIT */
/*
 * ranges.c - freed huge mappings, kept for reuse.
 *
 * A program that churns multi-megabyte buffers would otherwise pay a munmap
 * and a page fault per page on every cycle. Freed huge mappings wait here
 * (range_lock), still committed, for the next huge request:
 *  - best fit: the smallest cached range that holds the request gives its
 *    head, and its tail stays cached (no system call, no fault);
 *  - else a fresh mapping (see range_cache_take for why not mremap);
 *  - a freed range joins the cached ranges next to it that come from the
 *    same mapping (same origin: an address range carved from one mmap or
 *    mremap result and never moved, so the joined range is still one VMA
 *    and mremap works on it), so freed pieces become one big range again.
 * The cache holds at most dirty_budget() bytes (oldest ranges unmapped
 * first); ranges older than USLAB_DECAY_MS are unmapped by the next huge
 * free or decay tick, and all of them by malloc_trim.
 */
#include "segment.h"
#include "options.h"

#define RANGE_SLOTS 32

static struct range {
	uintptr_t map;     /* 0: empty slot */
	size_t len;
	unsigned long origin;
	uint64_t freed_ms;
} ranges[RANGE_SLOTS];
static size_t range_bytes;
static mutex_t range_lock = MUTEX_INIT;
FORK_LOCK(range_lock, RANK_RANGES);
static atomic_long_t range_origins;

/* A new origin: for every fresh mapping, and for a range mremap moved. */
unsigned long range_new_origin(void)
{
	return (unsigned long)atomic_long_inc_return_relaxed(&range_origins);
}

/* range_lock held: the first len bytes (at most its length) of cached range
 * e go out, its tail stays cached; returns where they start. */
static uintptr_t range_take_head(struct range *e, size_t len)
{
	uintptr_t map = e->map;

	if (e->len > len) {
		e->map += len;
		e->len -= len;
	} else {
		e->map = 0;
	}
	WRITE_ONCE(range_bytes, range_bytes - len);
	return map;
}

/*
 * Cached memory for a request of len bytes (a multiple of the page size):
 * the head of the smallest cached range that holds it; 0 if none does.
 * *origin is the returned range's origin.
 */
uintptr_t range_cache_take(size_t len, unsigned long *origin)
{
	int best = -1;

	if (!READ_ONCE(range_bytes))
		return 0;
	lock_ranked(&range_lock, RANK_RANGES);
	for (int i = 0; i < RANGE_SLOTS; i++) {
		if (!ranges[i].map)
			continue;
		size_t l = ranges[i].len, b = best < 0 ? 0 : ranges[best].len;
		if (best < 0 || (l >= len ? (b < len || l < b) : (b < len && l > b)))
			best = i;
	}
	/* None big enough: growing one with mremap would move its pages unless
	 * the addresses after it are free, and touching moved pages is slow
	 * under a hypervisor that shadows page tables (measured: slower than
	 * fresh pages); a fresh mapping then, and the cached ranges wait. */
	if (best < 0 || ranges[best].len < len) {
		unlock_ranked(&range_lock, RANK_RANGES);
		return 0;
	}
	uintptr_t map = range_take_head(&ranges[best], len);

	*origin = ranges[best].origin;
	unlock_ranked(&range_lock, RANK_RANGES);
	return map;
}

/*
 * The head, len bytes, of the cached range that starts at end and comes from
 * mapping origin (the one that ends at end: the same VMA), for a huge block
 * that grows in place into it - its pages committed already. false (nothing
 * taken) when there is none or it is shorter.
 */
bool range_cache_take_after(uintptr_t end, unsigned long origin, size_t len)
{
	bool taken = false;

	if (!READ_ONCE(range_bytes))
		return false;
	lock_ranked(&range_lock, RANK_RANGES);
	for (int i = 0; i < RANGE_SLOTS && !taken; i++) {
		struct range *e = &ranges[i];

		if (e->map != end || e->origin != origin || e->len < len)
			continue;
		range_take_head(e, len);
		taken = true;
	}
	unlock_ranked(&range_lock, RANK_RANGES);
	return taken;
}

/*
 * len bytes at an align boundary from any cached range that holds them, for
 * a new segment (segment_map): memory a freed huge block left committed then
 * serves slabs instead of waiting for another huge request while fresh
 * pages fault in beside it. The head and tail around the window stay
 * cached (one of them in a free slot; with none free the window is not
 * taken). Returns 0 if no range will do.
 */
uintptr_t range_cache_take_aligned(size_t len, size_t align)
{
	uintptr_t a = 0;

	if (READ_ONCE(range_bytes) < len)
		return 0;
	lock_ranked(&range_lock, RANK_RANGES);
	int spare = -1, best = -1;
	for (int i = 0; i < RANGE_SLOTS; i++) {
		struct range *e = &ranges[i];

		if (!e->map) {
			spare = i;
			continue;
		}
		uintptr_t w = round_up(e->map, align);
		if (w + len <= e->map + e->len && (best < 0 || e->len < ranges[best].len))
			best = i;
	}
	if (best >= 0) {
		struct range *e = &ranges[best];
		uintptr_t end = e->map + e->len;

		a = round_up(e->map, align);
		if (a > e->map && a + len < end && spare < 0) {
			a = 0;   /* no slot for the tail */
		} else {
			if (a + len < end) {   /* the tail */
				struct range *t = a > e->map ? &ranges[spare] : e;
				*t = (struct range){ a + len, end - (a + len), e->origin, e->freed_ms };
			}
			if (a > e->map)   /* the head keeps the slot */
				e->len = a - e->map;
			else if (a + len == end)
				e->map = 0;
			WRITE_ONCE(range_bytes, range_bytes - len);
		}
	}
	unlock_ranked(&range_lock, RANK_RANGES);
	return a;
}

/* Take cached ranges freed at or before `older_than` (ms) out of the cache
 * into victims (range_lock held); returns how many. */
static int range_expire_locked(uint64_t older_than, struct range *victims)
{
	int n = 0;

	for (int i = 0; i < RANGE_SLOTS; i++) {
		if (ranges[i].map && ranges[i].freed_ms <= older_than) {
			victims[n++] = ranges[i];
			WRITE_ONCE(range_bytes, range_bytes - ranges[i].len);
			ranges[i].map = 0;
		}
	}
	return n;
}

static void ranges_unmap(const struct range *v, int n)
{
	for (int i = 0; i < n; i++)
		os_unmap((void *)v[i].map, v[i].len);
}

/* Unmap cached ranges freed at or before `older_than` (ms). */
void range_cache_expire(uint64_t older_than)
{
	struct range victims[RANGE_SLOTS];
	int n;

	if (!READ_ONCE(range_bytes))
		return;
	lock_ranked(&range_lock, RANK_RANGES);
	n = range_expire_locked(older_than, victims);
	unlock_ranked(&range_lock, RANK_RANGES);
	ranges_unmap(victims, n);
}

/* The decay tick (segment_decay, throttled): unmap ranges freed more than
 * decay ms ago, so a program that stops making huge requests does not keep
 * its last freed ones for good. */
void range_cache_decay(uint64_t now, uint64_t decay)
{
	range_cache_expire(now > decay ? now - decay : 0);
}

/* Keep a freed mapping for reuse, or unmap it (or older ones) to stay
 * within the budget. */
void range_cache_put(uintptr_t map, size_t len, unsigned long origin)
{
	struct range victims[RANGE_SLOTS + 1];
	uint64_t now = os_now_ms(), decay = (uint64_t)option(OPT_DECAY_MS);
	size_t cap = dirty_budget();
	int n, slot = -1;

	lock_ranked(&range_lock, RANK_RANGES);
	n = range_expire_locked(now > decay ? now - decay : 0, victims);
	for (int i = 0; i < RANGE_SLOTS; i++) {
		struct range *e = &ranges[i];

		if (!e->map || e->origin != origin)
			continue;
		if (e->map + e->len == map)
			map = e->map;
		else if (map + len != e->map)
			continue;
		len += e->len;   /* joined: one range of one mapping */
		WRITE_ONCE(range_bytes, range_bytes - e->len);
		e->map = 0;
	}
	/* room: unmap the oldest ranges while the budget or the slots are short */
	for (;;) {
		int oldest = -1;

		slot = -1;
		for (int i = 0; i < RANGE_SLOTS; i++) {
			if (!ranges[i].map)
				slot = i;
			else if (oldest < 0 || ranges[i].freed_ms < ranges[oldest].freed_ms)
				oldest = i;
		}
		if (len > cap || (slot >= 0 && range_bytes + len <= cap) || oldest < 0)
			break;
		victims[n++] = ranges[oldest];
		WRITE_ONCE(range_bytes, range_bytes - ranges[oldest].len);
		ranges[oldest].map = 0;
	}
	if (len <= cap && slot >= 0) {
		ranges[slot] = (struct range){ map, len, origin, now };
		WRITE_ONCE(range_bytes, range_bytes + len);
	} else {
		victims[n++] = (struct range){ map, len, origin, now };
	}
	unlock_ranked(&range_lock, RANK_RANGES);
	ranges_unmap(victims, n);
}

size_t range_cache_bytes(void)
{
	return READ_ONCE(range_bytes);
}