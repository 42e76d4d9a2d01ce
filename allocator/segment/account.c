/* SPDX-License-Identifier: MIT */
/*
 * account.c - where the segments' memory is, for the statistics report.
 *
 * One pass over every segment under seg_lock splits what the segments have
 * committed into header units, runs handed out (the layer above is shown
 * each run's head and sorts slabs from large blocks) and free units still
 * committed, so the parts add up to the committed total by construction:
 * a read of the running totals (segment_committed_bytes) and a walk made a
 * moment later would not. Read-only: it changes nothing it visits.
 *
 * A signal handler may ask (try): then seg_lock is only tried, for up to
 * 50 ms, without the lock-rank bookkeeping (the interrupted thread may be
 * in the middle of its own), and false says the walk did not happen.
 * Everything else is loads, and the unlock (a release exchange, and a futex
 * wake if a thread waits), which a handler may do.
 */
#define _GNU_SOURCE
#include "local.h"

#include <sys/mman.h>
#include <time.h>

/* seg_lock for the signal path: tried for up to 50 ms (a thread of the
 * process may be holding it in a slow path, or be preempted holding it),
 * never waited on, since the holder may be the very thread the handler
 * interrupted. clock_gettime and nanosleep are async-signal-safe. */
static bool seg_lock_try_for_signal(void)
{
	struct timespec now, pause = { 0, 100 * 1000 };
	long long deadline = -1;

	for (;;) {
		if (mutex_trylock(&seg_lock))
			return true;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long long ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
		if (deadline < 0)
			deadline = ms + 50;
		else if (ms >= deadline)
			return false;
		nanosleep(&pause, NULL);
	}
}

bool segment_account(struct seg_account *a, void (*head_fn)(struct slab *head, void *arg),
		     void *arg, bool try)
{
	size_t runs_units = 0;

	*a = (struct seg_account){ 0 };
	if (try) {
		if (!seg_lock_try_for_signal())
			return false;
	} else {
		lock_ranked(&seg_lock, RANK_SEG);
	}
	for (struct segment *seg = seg_list; seg; seg = seg->next) {
		unsigned used = SEG_UNITS - SEG_HDR_UNITS - seg->free_units;

		a->segments++;
		a->dirty_bytes += (size_t)seg->dirty_units << UNIT_SHIFT;
		a->clean_bytes += (size_t)(seg->free_units - seg->dirty_units) << UNIT_SHIFT;
		runs_units += used;
		for (unsigned i = SEG_HDR_UNITS; i < SEG_UNITS; i++) {
			struct slab *d = &seg->desc[i];
			/* a large block's free claims it by its kind, without
			 * seg_lock (malloc/kmalloc.c, free_nonsmall): a run read
			 * as TAIL here is counted as kept */
			uint8_t kind = READ_ONCE(d->kind);

			/* and a kept run's keeper cuts and joins it (nunits)
			 * without seg_lock too (segment.c, run_split/run_join) */
			if (kind == SLAB_KIND_SLAB) {
				a->slab_bytes += (size_t)READ_ONCE(d->nunits) << UNIT_SHIFT;
				a->slab_runs++;
			} else if (kind == SLAB_KIND_LARGE) {
				a->large_bytes += (size_t)READ_ONCE(d->nunits) << UNIT_SHIFT;
				a->large_runs++;
			} else {
				continue;
			}
			if (head_fn)
				head_fn(d, arg);
		}
	}
	if (try)
		mutex_unlock(&seg_lock);
	else
		unlock_ranked(&seg_lock, RANK_SEG);
	a->header_bytes = a->segments * SEG_HDR_UNITS * UNIT_SIZE;
	/* runs out that are neither a slab nor a large block: freed large runs
	 * a thread keeps for its next one (struct run_cache; their heads are
	 * marked TAIL), and slabs being set up this instant */
	size_t heads = a->slab_bytes + a->large_bytes;
	a->kept_bytes = (runs_units << UNIT_SHIFT) > heads ? (runs_units << UNIT_SHIFT) - heads : 0;
	a->committed_bytes = a->header_bytes + (runs_units << UNIT_SHIFT) + a->dirty_bytes;
	return true;
}

size_t meta_mapped_bytes(void)
{
	return (size_t)atomic_long_read(&meta_mapped);
}

/*
 * The metadata's committed pages: the blocks' pages handed out, and of each
 * mapping of its own (thread heaps, mostly: a heap is 1 MiB of address
 * space, of which a thread touches its header, the pages of the cpu slabs
 * and rows of the caches it uses) the pages mincore(2) finds present. A page
 * that was only read counts too (the kernel maps the shared zero page for
 * it); the statistics walks read the rows of every heap, so a heap's row
 * pages of the program's caches count even if its thread never wrote them.
 * No lock (meta.c): a mapping made or freed meanwhile may count or not.
 */
size_t meta_committed_bytes(void)
{
	size_t page = os_page_size(), bytes = (size_t)atomic_long_read(&meta_touched);
	unsigned char vec[256];

	/* acquire, both: pair with meta_map_record's release stores */
	for (struct meta_map *m = smp_load_acquire(&meta_maps); m; m = m->next) {
		size_t len = smp_load_acquire(&m->len);
		char *addr = READ_ONCE(m->addr);

		for (size_t off = 0; off < len; off += sizeof(vec) * page) {
			size_t n = (len - off) / page < sizeof(vec) ? (len - off) / page : sizeof(vec);

			if (mincore(addr + off, n * page, vec) != 0)
				break;   /* unmapped meanwhile */
			for (size_t i = 0; i < n; i++)
				bytes += (vec[i] & 1) * page;
		}
	}
	return bytes;
}
