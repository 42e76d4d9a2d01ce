/* SPDX-License-Identifier: MIT */
/*
 * segment.c - segments, unit runs, the pointer registry, and metadata memory.
 *
 * A segment is SEG_SIZE bytes aligned to SEG_SIZE. Its first SEG_HDR_UNITS
 * units hold struct segment with one descriptor (struct slab) per unit; the
 * other units are handed out as runs that become slabs. A descriptor is
 * written when its unit joins a run and cleared when it leaves: a free
 * unit's reads as zero, so a fresh mapping needs no initialisation beyond
 * the header's first fields and touches a descriptor page only when a run
 * reaches it. seg_lock protects the
 * segment list and every free_map; descriptors of a run belong to its slab.
 *
 * The registry answers "is this a segment of ours?" with one relaxed load: a
 * byte per possible segment of the 47-bit address space (32 MiB of zero
 * pages in .bss; only the pages covering our segments are ever touched).
 */
#include "internal.h"
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static spinlock_t seg_lock = SPINLOCK_INIT;
static struct segment *seg_list;
static unsigned nr_empty_segments;
static atomic_long_t mapped_bytes;
static size_t clean_free_units;    /* free units that hold no memory (seg_lock) */
static size_t dirty_free_units;    /* free units still committed (seg_lock) */
static uint64_t last_decay_ms;

/* Published with a release store before the segment's first unit is handed
 * out; a pointer from it reaches another thread only through some later
 * synchronisation, which orders that thread's relaxed lookup after this. */
static void registry_set(uintptr_t seg, bool on)
{
	smp_store_release(&seg_registry[seg >> SEG_SHIFT], (uint8_t)on);
}

size_t segment_mapped_bytes(void)
{
	return (size_t)atomic_long_read(&mapped_bytes);
}

/* Mapped minus the free units that hold no memory (never touched, or given
 * back with madvise); headers count as committed. */
size_t segment_committed_bytes(void)
{
	return segment_mapped_bytes() - (READ_ONCE(clean_free_units) << UNIT_SHIFT);
}

#define now_ms os_now_ms

/* ---- segments ------------------------------------------------------------ */

/*
 * A new segment: carved from a range the huge cache holds (committed memory
 * a freed huge block left) when one is big enough, else a fresh mapping.
 * A carved segment's units all count as dirty: they may hold pages and
 * data, so none is claimed as zeroed, and decay gives them back in time.
 */
static struct segment *segment_map(void)
{
	struct segment *seg = (struct segment *)huge_cache_take_aligned(SEG_SIZE, SEG_SIZE);
	bool recycled = seg != NULL;

	if (recycled) {
		/* slabs are purged unit by unit: no huge pages under them */
		if (option(OPT_HUGE_PAGES))
			os_hugepage(seg, SEG_SIZE, false);
		memset(seg, 0, sizeof(*seg));   /* the header; the units keep their pages */
	} else if (!(seg = os_map_aligned(SEG_SIZE, SEG_SIZE))) {
		return NULL;
	}
	if ((uintptr_t)seg >> REG_ADDR_BITS) {   /* outside what the registry covers */
		os_unmap(seg, SEG_SIZE);
		errno = ENOMEM;
		return NULL;
	}
	seg->magic = SEG_MAGIC;
	memset(seg->free_map, 0xff, sizeof(seg->free_map));
	seg->free_map[0] &= ~((1ull << SEG_HDR_UNITS) - 1);
	seg->free_units = SEG_UNITS - SEG_HDR_UNITS;
	if (recycled) {
		memcpy(seg->dirty_map, seg->free_map, sizeof(seg->dirty_map));
		seg->dirty_units = seg->free_units;
		seg->aged_ms = now_ms();
	}
	atomic_long_add(SEG_SIZE, &mapped_bytes);
	registry_set((uintptr_t)seg, true);
	return seg;
}

static void segment_unmap(struct segment *seg)
{
	registry_set((uintptr_t)seg, false);
	seg->magic = 0;
	atomic_long_sub(SEG_SIZE, &mapped_bytes);
	os_unmap(seg, SEG_SIZE);
}

static void seg_list_add(struct segment *seg)
{
	seg->prev = NULL;
	seg->next = seg_list;
	if (seg_list)
		seg_list->prev = seg;
	seg_list = seg;
}

static void seg_list_del(struct segment *seg)
{
	if (seg->prev)
		seg->prev->next = seg->next;
	else
		seg_list = seg->next;
	if (seg->next)
		seg->next->prev = seg->prev;
}

/* seg_lock held: a new segment (all units free) joins the list and the counts. */
static void seg_list_add_new(struct segment *seg)
{
	seg_list_add(seg);
	nr_empty_segments++;
	WRITE_ONCE(clean_free_units, clean_free_units + seg->free_units - seg->dirty_units);
	WRITE_ONCE(dirty_free_units, dirty_free_units + seg->dirty_units);
}

static bool bit(const uint64_t *map, unsigned i)
{
	return (map[i / 64] >> (i % 64)) & 1;
}

static void set_bits(uint64_t *map, unsigned first, unsigned n, bool on)
{
	for (unsigned i = first; i < first + n; i++) {
		if (on)
			map[i / 64] |= 1ull << (i % 64);
		else
			map[i / 64] &= ~(1ull << (i % 64));
	}
}

/*
 * Free units move between three states, all under seg_lock:
 *   in use -> (free) -> dirty: free, still committed
 *   dirty  -> (purge: madvise) -> clean: free, holding no memory
 *   clean or dirty -> (claim) -> in use
 * Counts per segment (free_units, dirty_units) and in total
 * (clean_free_units, dirty_free_units) follow every move. aged_map is a
 * subset of dirty_map: a claim clears both bits, a free sets neither.
 */
static void units_take(struct segment *seg, unsigned first, unsigned n, bool *zeroed)
{
	unsigned dirty = 0;

	for (unsigned i = first; i < first + n; i++)
		dirty += bit(seg->dirty_map, i);
	if (seg->free_units == SEG_UNITS - SEG_HDR_UNITS)
		nr_empty_segments--;
	set_bits(seg->free_map, first, n, false);
	set_bits(seg->dirty_map, first, n, false);
	set_bits(seg->aged_map, first, n, false);
	seg->free_units -= n;
	seg->dirty_units -= dirty;
	WRITE_ONCE(dirty_free_units, dirty_free_units - dirty);   /* segment_decay peeks */
	WRITE_ONCE(clean_free_units, clean_free_units - (n - dirty));
	if (zeroed)
		*zeroed = dirty == 0;
}

static void units_give(struct segment *seg, unsigned first, unsigned n, bool dirty)
{
	set_bits(seg->free_map, first, n, true);
	seg->free_units += n;
	if (dirty) {
		if (!seg->dirty_units)   /* its decay clock starts with its first */
			seg->aged_ms = now_ms();
		set_bits(seg->dirty_map, first, n, true);
		seg->dirty_units += n;
		WRITE_ONCE(dirty_free_units, dirty_free_units + n);
	} else {
		WRITE_ONCE(clean_free_units, clean_free_units + n);
	}
	if (seg->free_units == SEG_UNITS - SEG_HDR_UNITS)
		nr_empty_segments++;
}

/* The first index >= i whose bit in map is `want` (SEG_UNITS if none):
 * a word at a time, so sparse and full maps cost a few instructions. */
static unsigned next_bit(const uint64_t *map, unsigned i, bool want)
{
	while (i < SEG_UNITS) {
		uint64_t w = want ? map[i / 64] : ~map[i / 64];

		w &= ~0ull << (i % 64);
		if (w)
			return (i & ~63u) + (unsigned)__builtin_ctzll(w);
		i = (i & ~63u) + 64;
	}
	return SEG_UNITS;
}

/* First fit run of n units set in map (the dirty_map: runs still
 * committed throughout); SEG_UNITS when there is none. */
static unsigned find_run(const uint64_t *map, unsigned n)
{
	for (unsigned i = next_bit(map, SEG_HDR_UNITS, true); i < SEG_UNITS;) {
		unsigned end = next_bit(map, i, false);

		if (end - i >= n)
			return i;
		i = next_bit(map, end, true);
	}
	return SEG_UNITS;
}

/*
 * The window of n free units of seg with the fewest clean ones (units that
 * will page-fault when used), the first among equals; SEG_UNITS when seg
 * has no free run of n. *clean is its count of clean units. A run that is
 * partly committed spares that many faults, where first fit over the free
 * map would often pick fresh units next to committed ones. Free runs are
 * found a word at a time; only runs of n or more are slid over.
 */
static unsigned find_window(const struct segment *seg, unsigned n, unsigned *clean)
{
	unsigned best = SEG_UNITS, best_clean = n + 1;

	if (!seg->dirty_units) {   /* every window is all clean: first fit */
		best = find_run(seg->free_map, n);
		*clean = best < SEG_UNITS ? n : n + 1;
		return best;
	}
	for (unsigned i = next_bit(seg->free_map, SEG_HDR_UNITS, true); i < SEG_UNITS;) {
		unsigned end = next_bit(seg->free_map, i, false), c = 0;

		for (unsigned k = i; k < end; k++) {
			c += !bit(seg->dirty_map, k);
			if (k >= i + n)
				c -= !bit(seg->dirty_map, k - n);
			if (k + 1 >= i + n && c < best_clean) {
				best = k + 1 - n;
				best_clean = c;
				if (!c)
					goto done;
			}
		}
		i = next_bit(seg->free_map, end, true);
	}
done:
	*clean = best_clean;
	return best;
}

/* seg_lock held: units [first, first + n) join head's run as its tails. */
static void descs_join(struct segment *seg, unsigned first, unsigned n, struct slab *head)
{
	for (unsigned i = first; i < first + n; i++) {
		WRITE_ONCE(seg->desc[i].kind, SLAB_KIND_TAIL);
		WRITE_ONCE(seg->desc[i].head, head);
	}
}

/* seg_lock held: units [first, first + n) leave their run. Their descriptors
 * go back to what a free unit's reads (head NULL, kind FREE, free-check
 * fields zero); malloc's free fast path tests the free-check fields before
 * it reads head, so those are cleared first. */
static void descs_clear(struct segment *seg, unsigned first, unsigned n)
{
	for (unsigned i = first; i < first + n; i++) {
		struct slab *d = &seg->desc[i];

		WRITE_ONCE(d->kfree_limit, 0);
		WRITE_ONCE(d->kfree_magic, 0);
		WRITE_ONCE(d->base, 0);
		WRITE_ONCE(d->kind, SLAB_KIND_FREE);
		WRITE_ONCE(d->cache, NULL);
		WRITE_ONCE(d->head, NULL);
	}
}

/* The free units' descriptors are clear (descs_clear, or never written). */
static struct slab *run_claim(struct segment *seg, unsigned first, unsigned n, uint8_t kind,
			      bool *zeroed)
{
	struct slab *head = &seg->desc[first];

	if (unlikely(!biased_try_get(&seg->users)))
		uslab_fatal("malloc", seg, "internal error: run from a segment being released");
	units_take(seg, first, n, zeroed);
	head->nunits = (uint16_t)n;
	head->span = 0;
	WRITE_ONCE(head->kind, kind);
	descs_join(seg, first + 1, n - 1, head);
	WRITE_ONCE(head->head, head);
	return head;
}

struct slab *segment_alloc_units(unsigned n, uint8_t kind, bool *zeroed)
{
	struct segment *seg, *fresh = NULL;
	unsigned first;

	for (;;) {
		spin_lock(&seg_lock);
		/* committed runs first: reusing them costs no page faults */
		for (seg = seg_list; seg; seg = seg->next) {
			if (seg->dirty_units < n)
				continue;
			first = find_run(seg->dirty_map, n);
			if (first < SEG_UNITS)
				goto found;
		}
		/* else the free run with the fewest clean units, in any segment */
		struct segment *best = NULL;
		unsigned best_first = SEG_UNITS, best_clean = n + 1;
		for (seg = seg_list; seg && best_clean > 1; seg = seg->next) {
			unsigned clean;
			if (seg->free_units < n)
				continue;
			first = find_window(seg, n, &clean);
			if (first < SEG_UNITS && clean < best_clean) {
				best = seg;
				best_first = first;
				best_clean = clean;
			}
		}
		if (best) {
			seg = best;
			first = best_first;
			goto found;
		}
		if (fresh) {
			seg = fresh;
			fresh = NULL;
			seg_list_add_new(seg);
			first = SEG_HDR_UNITS;
			goto found;
		}
		spin_unlock(&seg_lock);
		/* Map outside the lock; another thread may free units meanwhile. */
		fresh = segment_map();
		if (!fresh)
			return NULL;
	}
found:;
	struct slab *head = run_claim(seg, first, n, kind, zeroed);

	spin_unlock(&seg_lock);
	if (fresh)   /* raced: someone else made room; keep ours as the reserve */
		segment_give_back(fresh);
	segment_decay();
	return head;
}

/* A mapped, never-listed segment joins the list as an empty reserve. */
void segment_give_back(struct segment *seg)
{
	spin_lock(&seg_lock);
	seg_list_add_new(seg);
	spin_unlock(&seg_lock);
	segment_release_empty_over((unsigned)option(OPT_RESERVE_SEGMENTS));
}

void segment_free_units(struct slab *head)
{
	struct segment *seg = ptr_segment(head);
	unsigned first = desc_unit(head), n = head->nunits;

	spin_lock(&seg_lock);
	descs_clear(seg, first, n);
	units_give(seg, first, n, true);
	biased_dec_return(&seg->users);
	bool empty = seg->free_units == SEG_UNITS - SEG_HDR_UNITS;
	spin_unlock(&seg_lock);
	if (empty)
		segment_release_empty_over((unsigned)option(OPT_RESERVE_SEGMENTS));
	segment_decay();
}

/* ---- decay: giving free units' memory back ----------------------------------
 *
 * A freed unit stays committed ("dirty") so that reusing it soon costs no
 * page faults. Slow paths call segment_decay(): units dirty for longer than
 * USLAB_DECAY_MS, and all dirty units whenever there are more than
 * USLAB_DIRTY_MAX bytes of them, are given back with madvise(MADV_DONTNEED)
 * (not MADV_FREE: the kernel then frees at once, so RSS reflects it, and a
 * unit reused later faults in zero pages, which calloc relies on).
 * The madvise runs outside seg_lock; the units are taken off the free map
 * meanwhile so nobody can claim memory that is being zapped.
 */

/*
 * The ranges a purge has taken off the free maps while it madvises them
 * outside seg_lock: purge_inflight[] (layout.c) and its count, under
 * seg_lock; one purge at a time (purge_busy). A child of
 * fork() has not the purging thread: segment_unlock_all gives them back to
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

	spin_lock(&seg_lock);
	if (purge_busy) {   /* another thread is purging: it will do */
		spin_unlock(&seg_lock);
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
		spin_unlock(&seg_lock);
		if (unlikely(purge_test_hook))
			purge_test_hook();
		for (unsigned k = 0; k < nr; k++)
			os_decommit((char *)r[k].seg + ((size_t)r[k].first << UNIT_SHIFT),
				    (size_t)r[k].n << UNIT_SHIFT);
		spin_lock(&seg_lock);
		for (unsigned k = 0; k < nr; k++)
			units_give(r[k].seg, r[k].first, r[k].n, false);
		purge_nr_inflight = 0;
		purged += nr;
	} while (nr == PURGE_BATCH);
	purge_busy = false;
	spin_unlock(&seg_lock);
	if (purged)   /* segments it emptied of dirt may go now */
		segment_release_empty_over((unsigned)option(OPT_RESERVE_SEGMENTS));
}

/* Bytes in use outside segments (huge blocks), reported by kmalloc. */
static atomic_long_t outside_in_use;

void segment_note_outside(long delta)
{
	atomic_long_add(delta, &outside_in_use);
}

/*
 * How much free but committed memory each pool (the dirty units here, the
 * huge cache in kmalloc.c) may hold: USLAB_DIRTY_MAX, or
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
	if (!dirty_bytes && !kmalloc_huge_cached_bytes())
		return;
	if (decay == 0) {   /* huge_cache_put expires the huge cache itself */
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
	uint64_t now = now_ms();
	if (now - READ_ONCE(last_decay_ms) < decay / 4 + 1)
		return;
	WRITE_ONCE(last_decay_ms, now);
	if (dirty_bytes)
		purge(now, decay, SIZE_MAX);
	huge_cache_decay(now, decay);   /* the other pool ages on the same tick */
}

/* Tests: the unit holding p is in use (0), free and committed (1), or free
 * and given back (2). */
int segment_unit_state(const void *p)
{
	struct segment *seg = ptr_segment(p);
	unsigned i = (unsigned)(((uintptr_t)p - (uintptr_t)seg) >> UNIT_SHIFT);
	int state;

	spin_lock(&seg_lock);
	state = !bit(seg->free_map, i) ? 0 : bit(seg->dirty_map, i) ? 1 : 2;
	spin_unlock(&seg_lock);
	return state;
}

#define DPROBLEM(seg, i, ...)                                                          \
	do {                                                                           \
		fprintf(stderr, "uslab: descriptor of unit %u of segment %p: ", (i),   \
			(void *)(seg));                                                \
		fprintf(stderr, __VA_ARGS__);                                          \
		fputc('\n', stderr);                                                   \
		bad++;                                                                 \
	} while (0)

/*
 * Tests: every descriptor as the rules at the top say. A free unit's reads
 * as a zero page would (head NULL, kind FREE, no free-check fields); a
 * run's units all name its head and its later ones are tails; a kmalloc
 * slab's free-check fields are in every unit, anything else has none.
 * Exact when no thread is setting up a slab. Prints each problem; returns
 * how many there were.
 */
long segment_check_descs(void)
{
	long bad = 0;

	spin_lock(&seg_lock);
	for (struct segment *seg = seg_list; seg; seg = seg->next) {
		for (unsigned i = 0; i < SEG_HDR_UNITS; i++)
			if (seg->desc[i].head || seg->desc[i].kind || seg->desc[i].kfree_limit)
				DPROBLEM(seg, i, "a header unit's descriptor is written");
		for (unsigned i = SEG_HDR_UNITS; i < SEG_UNITS;) {
			const struct slab *d = &seg->desc[i];

			if (bit(seg->free_map, i)) {
				if (d->head || d->kind != SLAB_KIND_FREE || d->base ||
				    d->kfree_magic || d->kfree_limit || d->cache)
					DPROBLEM(seg, i, "free unit, descriptor not clear");
				i++;
				continue;
			}
			/* a head of kind TAIL: a freed large run a thread heap keeps */
			if (d->head != d || d->kind == SLAB_KIND_FREE) {
				DPROBLEM(seg, i, "a unit in use that heads no run");
				i++;
				continue;
			}
			const struct uslab_cache *s = d->kind == SLAB_KIND_SLAB ? d->cache : NULL;
			bool kmalloc_slab = s && s->id < KMALLOC_IDS;

			if (!kmalloc_slab && (d->kfree_magic || d->kfree_limit))
				DPROBLEM(seg, i, "free-check fields on a run malloc's free must not take");
			if (kmalloc_slab && !d->kfree_limit)
				DPROBLEM(seg, i, "kmalloc slab without free-check fields");
			for (unsigned k = 1; k < d->nunits; k++) {
				const struct slab *t = &d[k];

				if (i + k >= SEG_UNITS || bit(seg->free_map, i + k))
					DPROBLEM(seg, i + k, "a run's later unit is free");
				else if (t->head != d || t->kind != SLAB_KIND_TAIL)
					DPROBLEM(seg, i + k, "a run's later unit is not its tail");
				else if (t->base != (kmalloc_slab ? d->base : 0) ||
					 t->kfree_magic != d->kfree_magic ||
					 t->kfree_limit != d->kfree_limit)
					DPROBLEM(seg, i + k, "free-check fields differ from the head's");
			}
			i += d->nunits ? d->nunits : 1;
		}
	}
	spin_unlock(&seg_lock);
	return bad;
}

void segment_purge_all(void)
{
	purge(0, 0, 0);
}

/*
 * Unmap wholly empty segments that hold no dirty unit until at most keep
 * empty segments remain. An empty segment whose units are still committed
 * stays: it is free memory like any dirty unit, reused without faults, and
 * decay or the dirty cap purges it (then it goes here).
 */
void segment_release_empty_over(unsigned keep)
{
	struct segment *victims = NULL, *seg, *next;

	spin_lock(&seg_lock);
	for (seg = seg_list; seg && nr_empty_segments > keep; seg = next) {
		next = seg->next;
		if (seg->free_units != SEG_UNITS - SEG_HDR_UNITS || seg->dirty_units)
			continue;
		/* every unit free must mean no run out: the flag goes on only then */
		if (unlikely(!biased_try_set_flag(&seg->users)))
			uslab_fatal("free", seg, "internal error: empty segment with runs out");
		seg_list_del(seg);
		nr_empty_segments--;
		WRITE_ONCE(dirty_free_units, dirty_free_units - seg->dirty_units);
		WRITE_ONCE(clean_free_units, clean_free_units - (seg->free_units - seg->dirty_units));
		seg->next = victims;
		victims = seg;
	}
	spin_unlock(&seg_lock);
	for (seg = victims; seg; seg = next) {
		next = seg->next;
		segment_unmap(seg);
	}
}

void segment_for_each_slab(void (*fn)(struct slab *, void *), void *arg)
{
	spin_lock(&seg_lock);
	for (struct segment *seg = seg_list; seg; seg = seg->next)
		for (unsigned i = SEG_HDR_UNITS; i < SEG_UNITS; i++)
			if (seg->desc[i].kind == SLAB_KIND_SLAB ||
			    seg->desc[i].kind == SLAB_KIND_LARGE)
				fn(&seg->desc[i], arg);
	spin_unlock(&seg_lock);
}

static spinlock_t meta_lock;

/* fork: seg_lock, then meta_lock (the documented order) */
void segment_lock_all(void)
{
	spin_lock(&seg_lock);
	spin_lock(&meta_lock);
}

void segment_unlock_all(bool child)
{
	if (child) {
		/* the purging thread, if one was out with units, is not here */
		for (unsigned k = 0; k < purge_nr_inflight; k++)
			units_give(purge_inflight[k].seg, purge_inflight[k].first,
				   purge_inflight[k].n, true);
		purge_nr_inflight = 0;
		purge_busy = false;
		spin_unlock_after_fork_child(&meta_lock);
		spin_unlock_after_fork_child(&seg_lock);
	} else {
		spin_unlock(&meta_lock);
		spin_unlock(&seg_lock);
	}
}

/* ---- metadata memory: heaps, cpu-slab chunks, caches ------------------------
 * Size-segregated free lists over 64 KiB mapped blocks; never given back. */

#define META_BLOCK   (64ul << 10)
#define META_CLASSES 64            /* 64-byte steps up to 4 KiB */

static void *meta_free_list[META_CLASSES + 1];
static char *meta_bump, *meta_end;

void *meta_alloc(size_t size)
{
	size_t cls = round_up(size, CACHE_LINE) / CACHE_LINE;
	void *p;

	if (cls > META_CLASSES) {
		p = os_map_aligned(round_up(size, os_page_size()), os_page_size());
		return p;   /* fresh mappings read as zero */
	}
	spin_lock(&meta_lock);
	p = meta_free_list[cls];
	if (p) {
		meta_free_list[cls] = *(void **)p;
	} else {
		if (!meta_bump || meta_bump + cls * CACHE_LINE > meta_end) {
			char *blk = os_map_aligned(META_BLOCK, os_page_size());
			if (!blk) {
				spin_unlock(&meta_lock);
				return NULL;
			}
			meta_bump = blk;
			meta_end = blk + META_BLOCK;
		}
		p = meta_bump;
		meta_bump += cls * CACHE_LINE;
	}
	spin_unlock(&meta_lock);
	memset(p, 0, cls * CACHE_LINE);
	return p;
}

void meta_free(void *p, size_t size)
{
	size_t cls = round_up(size, CACHE_LINE) / CACHE_LINE;

	if (!p)
		return;
	if (cls > META_CLASSES) {
		os_unmap(p, round_up(size, os_page_size()));
		return;
	}
	spin_lock(&meta_lock);
	*(void **)p = meta_free_list[cls];
	meta_free_list[cls] = p;
	spin_unlock(&meta_lock);
}

/*
 * Grow or shrink the run headed by head to n units in place. Growing needs
 * the following units free and inside the segment. Returns false (run
 * unchanged) when that is not possible.
 */
bool segment_resize_units(struct slab *head, unsigned n)
{
	struct segment *seg = ptr_segment(head);
	unsigned first = desc_unit(head), have = head->nunits;

	if (n == have)
		return true;
	if (n < have) {
		spin_lock(&seg_lock);
		descs_clear(seg, first + n, have - n);
		units_give(seg, first + n, have - n, true);
		head->nunits = (uint16_t)n;
		spin_unlock(&seg_lock);
		segment_decay();
		return true;
	}
	if (first + n > SEG_UNITS)
		return false;
	spin_lock(&seg_lock);
	for (unsigned i = first + have; i < first + n; i++) {
		if (!bit(seg->free_map, i)) {
			spin_unlock(&seg_lock);
			return false;
		}
	}
	units_take(seg, first + have, n - have, NULL);
	descs_join(seg, first + have, n - have, head);
	head->nunits = (uint16_t)n;
	spin_unlock(&seg_lock);
	return true;
}
