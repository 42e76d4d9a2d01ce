/* SPDX-License-Identifier: MIT */
/*
 * decay.c - giving free units' memory back to the OS.
 *
 * A freed unit stays committed ("dirty") so that reusing it soon costs no
 * page faults. Slow paths call segment_decay(): units dirty for longer than
 * USLAB_DECAY_MS, and all dirty units whenever there are more than
 * dirty_budget() bytes of them, are given back with madvise(MADV_DONTNEED)
 * (not MADV_FREE: the kernel then frees at once, so RSS reflects it, and a
 * unit reused later faults in zero pages, which calloc relies on).
 * The madvise runs outside seg_lock; the units are taken off the free map
 * meanwhile so nobody can claim memory that is being zapped.
 */
#include "local.h"
#include "options.h"

#include <string.h>

static uint64_t last_decay_ms;

/*
 * The ranges a purge has taken off the free maps while it madvises them
 * outside seg_lock: purge_inflight[] (api/layout.c) and its count, under
 * seg_lock; one purge at a time (purge_busy). A child of
 * fork() has not the purging thread: purge_fork_child gives them back to
 * its free maps, as dirty (they may or may not have been zapped).
 */
static unsigned purge_nr_inflight;
static bool purge_busy;
void (*purge_test_hook)(void);   /* tests: runs while a batch is out */

/*
 * Purge free committed units, madvise outside seg_lock, in batches.
 * keep_units == SIZE_MAX: decay. A segment whose last tick is at least
 * `decay` ms old purges its aged units (dirty at that tick and ever since,
 * so idle for between one and two decay periods), then ticks: the units
 * dirty now become aged. Units freed moments ago are never purged by decay,
 * however long the segment has been busy.
 * Otherwise (over the budget): any dirty units, until no more than
 * keep_units remain.
 */
static void purge(uint64_t now, uint64_t decay, size_t keep_units)
{
	struct purge_range *r = purge_inflight;
	unsigned nr, purged = 0;
	bool aging = keep_units == SIZE_MAX;

	seg_lock_take();
	if (purge_busy) {   /* another thread is purging: it will do */
		seg_unlock();
		return;
	}
	purge_busy = true;
	do {
		nr = 0;
		for (struct segment *seg = seg_list; seg && nr < PURGE_BATCH; seg = seg->next) {
			const uint64_t *map = aging ? seg->aged_map : seg->dirty_map;
			unsigned i;

			if (!seg->dirty_units || (aging && now - seg->aged_ms < decay))
				continue;
			for (i = next_bit(map, SEG_HDR_UNITS, true); i < SEG_UNITS && nr < PURGE_BATCH &&
						 dirty_free_units > (aging ? 0 : keep_units);) {
				unsigned n = next_bit(map, i, false) - i;

				units_take(seg, i, n, NULL);   /* reserved while zapped */
				r[nr++] = (struct purge_range){ seg, i, n };
				i = next_bit(map, i + n, true);
			}
			if (aging && i >= SEG_UNITS) {   /* all aged ones taken: tick */
				memcpy(seg->aged_map, seg->dirty_map, sizeof(seg->aged_map));
				seg->aged_ms = now;
			}
		}
		purge_nr_inflight = nr;
		seg_unlock();
		if (unlikely(purge_test_hook))
			purge_test_hook();
		for (unsigned k = 0; k < nr; k++)
			os_decommit((char *)r[k].seg + ((size_t)r[k].first << UNIT_SHIFT),
				    (size_t)r[k].n << UNIT_SHIFT);
		seg_lock_take();
		for (unsigned k = 0; k < nr; k++)
			units_give(r[k].seg, r[k].first, r[k].n, false);
		purge_nr_inflight = 0;
		purged += nr;
	} while (nr == PURGE_BATCH);
	purge_busy = false;
	seg_unlock();
	if (purged)   /* segments it emptied of dirt may go now */
		segment_release_empty_over((unsigned)option(OPT_RESERVE_SEGMENTS));
}

/* Bytes in use outside segments (huge blocks), reported by the layer above. */
static atomic_long_t outside_in_use;

void segment_note_outside(long delta)
{
	atomic_long_add(delta, &outside_in_use);
}

/*
 * How much free but committed memory each pool (the dirty units here, the
 * huge ranges in ranges.c) may hold: USLAB_DIRTY_MAX, or
 * USLAB_DIRTY_PERCENT of the bytes in use (segments' units out, segment
 * headers, huge blocks) when that is more. A fixed cap that suits a small
 * heap makes a big one that churns blocks purge and re-fault the same
 * memory over and over; one that follows the heap keeps the committed
 * reserve in proportion, and falls back to the fixed floor as the heap
 * empties (so a program that frees everything still gives it back).
 */
size_t dirty_budget(void)
{
	size_t free_units = READ_ONCE(clean_free_units) + READ_ONCE(dirty_free_units);
	size_t mapped = segment_mapped_bytes(), in_use = 0;
	long outside = atomic_long_read(&outside_in_use);

	if (mapped > free_units << UNIT_SHIFT)   /* racy reads: never below zero */
		in_use = mapped - (free_units << UNIT_SHIFT);
	if (outside > 0)
		in_use += (size_t)outside;
	size_t scaled = in_use / 100 * (size_t)option(OPT_DIRTY_PERCENT);
	size_t floor = (size_t)option(OPT_DIRTY_MAX);
	return scaled > floor ? scaled : floor;
}

void segment_decay(void)
{
	uint64_t decay = (uint64_t)option(OPT_DECAY_MS);
	size_t dirty_bytes = READ_ONCE(dirty_free_units) << UNIT_SHIFT;

	/* Nothing to age: no clock read (a short-lived program's first
	 * clock_gettime costs it two page faults, libc's and the vDSO's). */
	if (!dirty_bytes && !range_cache_bytes())
		return;
	if (decay == 0) {   /* range_cache_put expires the ranges itself */
		if (dirty_bytes)
			purge(0, 0, 0);
		return;
	}
	if (dirty_bytes) {
		size_t cap = dirty_budget();
		if (dirty_bytes > cap) {   /* down to half the budget */
			purge(0, 0, (cap >> UNIT_SHIFT) / 2);
			return;
		}
	}
	uint64_t now = os_now_ms();
	if (now - READ_ONCE(last_decay_ms) < decay / 4 + 1)
		return;
	WRITE_ONCE(last_decay_ms, now);
	if (dirty_bytes)
		purge(now, decay, SIZE_MAX);
	range_cache_decay(now, decay);   /* the other pool ages on the same tick */
}

void segment_purge_all(void)
{
	purge(0, 0, 0);
}
/* In a fork child (seg_lock held): the purging thread, if one was out with
 * units, is not here; its units go back as dirty. */
void purge_fork_child(void)
{
	for (unsigned k = 0; k < purge_nr_inflight; k++)
		units_give(purge_inflight[k].seg, purge_inflight[k].first, purge_inflight[k].n, true);
	purge_nr_inflight = 0;
	purge_busy = false;
}
