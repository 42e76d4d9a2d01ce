/* SPDX-License-Identifier: MIT */
/*
 * segment.c - segments, runs of units, the registry, and the walks over
 * every descriptor.
 *
 * A segment is SEG_SIZE bytes aligned to SEG_SIZE. Its first SEG_HDR_UNITS
 * units hold struct segment with one descriptor (struct slab) per unit; the
 * other units are handed out as runs that become slabs or large blocks. A
 * descriptor is written when its unit joins a run and cleared when it
 * leaves: a free unit's reads as zero, so a fresh mapping needs no
 * initialisation beyond the header's first fields and touches a descriptor
 * page only when a run reaches it. seg_lock protects the segment list, the
 * search index and every unit map; descriptors of a run belong to its
 * owner.
 *
 * The registry answers "is this a segment of ours?" with one relaxed load: a
 * byte per possible segment of the 47-bit address space (32 MiB of zero
 * pages in .bss; only the pages covering our segments are ever touched).
 */
#include "local.h"
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

mutex_t seg_lock = MUTEX_INIT;
FORK_LOCK(seg_lock, RANK_SEG);
struct segment *seg_list;
size_t clean_free_units;
size_t dirty_free_units;
unsigned long seg_lock_taken;
static unsigned nr_empty_segments;
static atomic_long_t mapped_bytes;

/* Published with a release store before the segment's first unit is handed
 * out; a pointer from it reaches another thread only through some later
 * synchronisation, which orders that thread's relaxed lookup after this. */
static void registry_set(uintptr_t seg, uint8_t v)
{
	smp_store_release(&seg_registry[seg >> SEG_SHIFT], v);
}

void segment_divert_frees(bool on)
{
	seg_lock_take();
	region_divert(on);
	seg_unlock();
}

unsigned long segment_lock_count(void)
{
	return READ_ONCE(seg_lock_taken);
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

/* ---- segments ------------------------------------------------------------ */

/* A segment at seg made of a freed huge block's pages (carved or moved):
 * its huge block asked for huge pages, a segment for slabs keeps them;
 * the header is cleared, the units keep their pages. */
static struct segment *segment_of_range(uintptr_t seg, bool huge, bool *recycled)
{
	*recycled = true;
	if (option(OPT_HUGE_PAGES))
		os_hugepage((void *)seg, SEG_SIZE, huge);
	memset((void *)seg, 0, sizeof(struct segment));
	return (struct segment *)seg;
}

/* A segment carved from a freed huge range kept for reuse (committed
 * memory a freed huge block left), if one is big enough (*carved set);
 * NULL if not. */
static struct segment *segment_carve(bool huge, bool *carved)
{
	uintptr_t seg = range_cache_take_aligned(SEG_SIZE, SEG_SIZE);

	return seg ? segment_of_range(seg, huge, carved) : NULL;
}

/*
 * A slot of the segment region made memory; NULL if it has none. The
 * pages of a freed huge block's range still cached, if one holds 4 MiB,
 * are moved into it (*moved set; its units then count as dirty, as a
 * carved segment's), so that the segment's pages do not come on top of
 * them: giving the range back instead and faulting fresh pages cost
 * realloc_grow a third of its time (the next huge block faults), keeping
 * both cost sqlite3 10 MiB of peak RSS (its freed group_concat string).
 */
static struct segment *segment_slot(bool huge, bool *moved)
{
	uintptr_t slot = region_slot_take();

	if (!slot)
		return NULL;
	uintptr_t range = range_cache_take_aligned(SEG_SIZE, HUGE_PAGE_SIZE);

	if (range && os_move_fixed((void *)range, SEG_SIZE, (void *)slot))
		return segment_of_range(slot, huge, moved);
	if (range)
		os_unmap((void *)range, SEG_SIZE);
	if (!os_commit_fixed((void *)slot, SEG_SIZE)) {
		region_slot_give(slot);
		return NULL;
	}
	if (huge)
		os_hugepage((void *)slot, SEG_SIZE, true);
	return (struct segment *)slot;
}

/*
 * A new segment, for a run of kind large (else of slabs): a slot of the
 * region (region.c) while it has one; else carved from a freed huge range
 * kept for reuse when one is big enough; else a fresh mapping. For a large
 * run the carve comes first: its frees take the slow path wherever it is,
 * and the range's pages are committed already. Such a segment, outside the
 * region while the region has room, then holds large runs only
 * (segment_serves), so that no slab's frees miss the inline path. A slot
 * for slabs takes the pages of a cached range if one holds 4 MiB (moved
 * by mremap: segment_slot). A carved or moved segment's units all count
 * as dirty: they may hold pages and data, so none is claimed as zeroed,
 * and decay gives them back in time.
 */
static struct segment *segment_map(bool huge, bool large)
{
	bool recycled = false;
	struct segment *seg = large ? segment_carve(huge, &recycled) : NULL;
	bool large_only = seg && region_reserved_bytes();

	if (!seg)
		seg = segment_slot(huge, &recycled);
	if (!seg)
		seg = segment_carve(huge, &recycled);
	if (!seg) {
		seg = os_map_aligned(SEG_SIZE, SEG_SIZE);
		if (!seg)
			return NULL;
		if (huge)
			os_hugepage(seg, SEG_SIZE, true);
	}
	seg->large_only = large_only;
	seg->huge = huge;
	if ((uintptr_t)seg >> REG_ADDR_BITS) {   /* outside what the registry covers */
		os_unmap(seg, SEG_SIZE);
		errno = ENOMEM;
		return NULL;
	}
	seg->magic = SEG_MAGIC;
	seg->slab_units = 0;
	memset(seg->free_map, 0xff, sizeof(seg->free_map));
	seg->free_map[0] &= ~((1ull << SEG_HDR_UNITS) - 1);
	seg->free_units = SEG_UNITS - SEG_HDR_UNITS;
	if (recycled) {
		memcpy(seg->dirty_map, seg->free_map, sizeof(seg->dirty_map));
		seg->dirty_units = seg->free_units;
		seg->aged_ms = os_now_ms();
	}
	atomic_long_add(SEG_SIZE, &mapped_bytes);
	return seg;   /* registered when it is listed, before any unit is out */
}

static void segment_unmap(struct segment *seg)
{
	registry_set((uintptr_t)seg, REG_NONE);
	seg->magic = 0;
	atomic_long_sub(SEG_SIZE, &mapped_bytes);
	if (!region_slot_holds((uintptr_t)seg)) {
		os_unmap(seg, SEG_SIZE);
		return;
	}
	os_release_fixed(seg, SEG_SIZE);   /* zeros before the slot is free */
	region_slot_give((uintptr_t)seg);
}

static void seg_list_add(struct segment *seg)
{
	seg->prev = NULL;
	seg->next = seg_list;
	if (seg_list)
		seg_list->prev = seg;
	seg_list = seg;
}

/* ---- the search index -----------------------------------------------------
 *
 * What a search for a free run needs to know of a segment, one entry per
 * listed segment in an array of its own (oldest first), so that the search
 * passes a segment that cannot serve without touching it: every header is a
 * cache line and a TLB entry of its own, and reading each of them made a
 * large malloc's search over a heap of a few hundred segments take more
 * time than everything else the program did (docs/large.md, "A heap of
 * many segments"). free_max and dirty_max are upper bounds on the segment's
 * longest free and dirty runs: a freed run raises them to the length of the
 * run it joins, a claim lowers them to the segment's counts, and a search
 * that finds no run of n units there lowers them to n - 1. Each group of
 * SEG_GROUP entries has bounds over its entries' bounds too, one pair per
 * kind of segment (which runs it may hold: its flags), raised with theirs
 * and lowered to their maximum when a search has looked at every entry of
 * the group; so a search passes by a group whose segments of the kinds it
 * may use have no run that long, and a heap of thousands of segments costs
 * it tens of entries, not thousands. A segment taken off the list leaves
 * its entry empty (seg NULL, bounds 0) until seg_index_compact. All under
 * seg_lock.
 */
struct run_bounds {
	uint16_t free_max, dirty_max;
};
enum {
	KIND_SLABS = 1,        /* holds slabs (slab_units != 0) */
	KIND_HUGE = 2,         /* the segment's huge: huge_ok runs only */
	KIND_LARGE_ONLY = 4,   /* the segment's large_only: large runs only */
	NR_SEG_KINDS = 8
};
struct seg_slot {
	struct segment *seg;
	struct run_bounds b;
	uint8_t kind;
};
#define SEG_GROUP 64
struct seg_group {
	struct run_bounds kind[NR_SEG_KINDS];
};
static struct seg_slot *seg_index;
static struct seg_group *seg_groups;   /* seg_slots_cap / SEG_GROUP of them */
static unsigned seg_slots, seg_slots_cap;
static bool seg_index_holes;

static struct seg_slot *slot_of(const struct segment *seg)
{
	return &seg_index[seg->slot];
}

/* Its kind, as its entry must say it. */
static uint8_t seg_kind(const struct segment *seg)
{
	return (uint8_t)((seg->slab_units ? KIND_SLABS : 0) | (seg->huge ? KIND_HUGE : 0) |
			 (seg->large_only ? KIND_LARGE_ONLY : 0));
}

/* Entry i's bounds went up, or its kind changed: its group's follow. */
static void group_raise(unsigned i)
{
	const struct seg_slot *s = &seg_index[i];
	struct run_bounds *g = &seg_groups[i / SEG_GROUP].kind[s->kind];

	if (g->free_max < s->b.free_max)
		g->free_max = s->b.free_max;
	if (g->dirty_max < s->b.dirty_max)
		g->dirty_max = s->b.dirty_max;
}

/* Room for one more entry; false when no metadata memory is left. */
static bool seg_index_reserve(void)
{
	if (seg_slots < seg_slots_cap)
		return true;
	unsigned cap = seg_slots_cap ? seg_slots_cap * 2 : SEG_GROUP;
	size_t slots_len = cap * sizeof(struct seg_slot);
	struct seg_slot *tab = meta_alloc(slots_len + cap / SEG_GROUP * sizeof(struct seg_group));

	if (!tab)
		return false;
	struct seg_group *groups = (struct seg_group *)(void *)((char *)tab + slots_len);

	if (seg_index) {
		memcpy(tab, seg_index, seg_slots * sizeof(*tab));
		memcpy(groups, seg_groups, seg_slots_cap / SEG_GROUP * sizeof(*groups));
		meta_free(seg_index, seg_slots_cap * sizeof(struct seg_slot) +
					     seg_slots_cap / SEG_GROUP * sizeof(struct seg_group));
	}
	seg_index = tab;
	seg_groups = groups;
	seg_slots_cap = cap;
	return true;
}

/* The empty entries go; the others keep their order; the groups' bounds
 * are their entries' again. */
static void seg_index_compact(void)
{
	unsigned k = 0;

	if (!seg_index_holes)
		return;
	for (unsigned i = 0; i < seg_slots; i++) {
		if (!seg_index[i].seg)
			continue;
		seg_index[k] = seg_index[i];
		seg_index[k].seg->slot = k;
		k++;
	}
	seg_slots = k;
	memset(seg_groups, 0, seg_slots_cap / SEG_GROUP * sizeof(*seg_groups));
	for (unsigned i = 0; i < seg_slots; i++)
		group_raise(i);
	seg_index_holes = false;
}

static void seg_slab_units_add(struct segment *seg, int n)
{
	struct seg_slot *s = slot_of(seg);

	seg->slab_units = (uint16_t)(seg->slab_units + n);
	if (s->kind != seg_kind(seg)) {
		s->kind = seg_kind(seg);
		group_raise(seg->slot);
	}
}

static void seg_list_del(struct segment *seg)
{
	if (seg->prev)
		seg->prev->next = seg->next;
	else
		seg_list = seg->next;
	if (seg->next)
		seg->next->prev = seg->prev;
	*slot_of(seg) = (struct seg_slot){ 0 };
	seg_index_holes = true;
}

/* seg_lock held: a new segment (all units free) joins the list, the index
 * and the counts; false (nothing changed) when the index has no room. */
static bool seg_list_add_new(struct segment *seg)
{
	if (!seg_index_reserve())
		return false;
	seg->slot = seg_slots;
	/* all its free units are one run, and so are its dirty ones */
	seg_index[seg_slots] = (struct seg_slot){
		seg, { (uint16_t)seg->free_units, (uint16_t)seg->dirty_units }, seg_kind(seg)
	};
	group_raise(seg_slots++);
	registry_set((uintptr_t)seg, REG_SEGMENT);
	seg_list_add(seg);
	nr_empty_segments++;
	WRITE_ONCE(clean_free_units, clean_free_units + seg->free_units - seg->dirty_units);
	WRITE_ONCE(dirty_free_units, dirty_free_units + seg->dirty_units);
	return true;
}

#define MAP_WORDS (SEG_UNITS / 64)

bool bit(const uint64_t *map, unsigned i)
{
	return (map[i / 64] >> (i % 64)) & 1;
}

/* The bits of word w of a map that units first .. first + n - 1 cover. */
static uint64_t word_mask(unsigned w, unsigned first, unsigned n)
{
	unsigned lo = first > w * 64 ? first - w * 64 : 0;
	unsigned hi = first + n < (w + 1) * 64 ? first + n - w * 64 : 64;

	if (lo >= hi)
		return 0;
	return (hi - lo == 64 ? ~0ull : ((1ull << (hi - lo)) - 1)) << lo;
}

static void set_bits(uint64_t *map, unsigned first, unsigned n, bool on)
{
	for (unsigned w = first / 64; w < MAP_WORDS && w * 64 < first + n; w++) {
		uint64_t m = word_mask(w, first, n);

		map[w] = on ? map[w] | m : map[w] & ~m;
	}
}

/* How many of units first .. first + n - 1 have their bit set in map. */
static unsigned count_bits(const uint64_t *map, unsigned first, unsigned n)
{
	unsigned c = 0;

	for (unsigned w = first / 64; w < MAP_WORDS && w * 64 < first + n; w++)
		c += (unsigned)__builtin_popcountll(map[w] & word_mask(w, first, n));
	return c;
}

/* The length of the run of set bits in map that holds units first ..
 * first + n - 1 (all set), or bound if that is more. Header units are never
 * free, so a run starts after unit 0. */
static uint16_t run_around(const uint64_t *map, unsigned first, unsigned n, uint16_t bound)
{
	unsigned w = first / 64, start;
	uint64_t clear = ~map[w] & ((1ull << (first % 64)) - 1);   /* below first */

	while (!clear && w)
		clear = ~map[--w];
	start = clear ? w * 64 + 64 - (unsigned)__builtin_clzll(clear) : 0;
	unsigned len = next_bit(map, first + n, false) - start;

	return len > bound ? (uint16_t)len : bound;
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
void units_take(struct segment *seg, unsigned first, unsigned n, bool *zeroed)
{
	unsigned dirty = count_bits(seg->dirty_map, first, n);

	ASSERT(count_bits(seg->free_map, first, n) == n);   /* only free units are claimed */
	if (seg->free_units == SEG_UNITS - SEG_HDR_UNITS)
		nr_empty_segments--;
	set_bits(seg->free_map, first, n, false);
	set_bits(seg->dirty_map, first, n, false);
	set_bits(seg->aged_map, first, n, false);
	seg->free_units -= n;
	seg->dirty_units -= dirty;
	struct run_bounds *b = &slot_of(seg)->b;

	if (b->free_max > seg->free_units)
		b->free_max = (uint16_t)seg->free_units;
	if (b->dirty_max > seg->dirty_units)
		b->dirty_max = (uint16_t)seg->dirty_units;
	WRITE_ONCE(dirty_free_units, dirty_free_units - dirty);   /* segment_decay peeks */
	WRITE_ONCE(clean_free_units, clean_free_units - (n - dirty));
	if (zeroed)
		*zeroed = dirty == 0;
}

void units_give(struct segment *seg, unsigned first, unsigned n, bool dirty)
{
	for (unsigned i = first; i < first + n; i++)
		ASSERT(!bit(seg->free_map, i) && !seg->desc[i].head);   /* in use, then cleared */
	struct run_bounds *b = &slot_of(seg)->b;

	set_bits(seg->free_map, first, n, true);
	seg->free_units += n;
	b->free_max = run_around(seg->free_map, first, n, b->free_max);
	if (dirty) {
		if (!seg->dirty_units)   /* its decay clock starts with its first */
			seg->aged_ms = os_now_ms();
		set_bits(seg->dirty_map, first, n, true);
		seg->dirty_units += n;
		b->dirty_max = run_around(seg->dirty_map, first, n, b->dirty_max);
		WRITE_ONCE(dirty_free_units, dirty_free_units + n);
	} else {
		WRITE_ONCE(clean_free_units, clean_free_units + n);
	}
	group_raise(seg->slot);
	if (seg->free_units == SEG_UNITS - SEG_HDR_UNITS)
		nr_empty_segments++;
}

/* The first index >= i whose bit in map is `want` (SEG_UNITS if none):
 * a word at a time, so sparse and full maps cost a few instructions. */
unsigned next_bit(const uint64_t *map, unsigned i, bool want)
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

/* m &= m >> s, the map taken as one number of SEG_UNITS bits: bit i stays
 * set only if bit i + s is set too. Low words first, in place: each reads
 * only words at or above its own, not changed yet. */
static void map_and_down(uint64_t *m, unsigned s)
{
	unsigned q = s / 64, r = s % 64;

	for (unsigned w = 0; w < MAP_WORDS; w++) {
		uint64_t lo = w + q < MAP_WORDS ? m[w + q] : 0;
		uint64_t hi = w + q + 1 < MAP_WORDS ? m[w + q + 1] : 0;

		m[w] &= r ? lo >> r | hi << (64 - r) : lo;
	}
}

/*
 * First fit run of n units set in map (the free_map, or the dirty_map: runs
 * still committed throughout); SEG_UNITS when there is none. Bit i of a
 * copy m stands for "bits i .. i + len - 1 of map are set": each round
 * ANDs m with itself shifted down by up to len, so len doubles, and the
 * answer is m's first bit - a few words per round, log2(n) rounds, however
 * the map is cut up (a walk from run to run cost some 300 instructions a
 * call on a fragmented segment).
 */
static unsigned find_run(const uint64_t *map, unsigned n)
{
	uint64_t m[MAP_WORDS];

	memcpy(m, map, sizeof(m));
	for (unsigned len = 1, step; len < n; len += step) {
		step = len < n - len ? len : n - len;
		map_and_down(m, step);
	}
	return next_bit(m, SEG_HDR_UNITS, true);
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
		WRITE_ONCE(d->owner_tp, 0);
		WRITE_ONCE(d->owner_cpu, NULL);
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

	/* acquire (biased.h), under seg_lock like every change of users; the
	 * lock orders them, the biased word is the cross-check */
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

/*
 * Huge pages under segments (docs/malloc.md, "Huge pages"). Slabs of
 * objects up to a page are written densely (an object is linked when its
 * page is built, and reused), so a 2 MiB page under them costs little
 * memory and saves 511 page faults and most TLB misses; a large block, or
 * an object of several pages, is written as its program writes it, and
 * calloc's fresh ones not at all, so under a huge page it would cost the
 * whole 2 MiB at its first write. So segments come in two kinds: marked
 * for huge pages, holding only runs that may lie under them (huge_ok), and
 * unmarked, holding the others and, where they have room, those too. A
 * process's first HUGE_SEGMENTS_AFTER segments are unmarked: a heap of a
 * few MiB stays in 4 KiB pages, where the 2 MiB a huge page commits at its
 * first write would be a share of it worth counting.
 */
static bool huge_segment_wanted(bool huge_ok)
{
	return huge_ok && option(OPT_HUGE_PAGES) &&
	       atomic_long_read(&mapped_bytes) >= (long)(HUGE_SEGMENTS_AFTER * SEG_SIZE);
}

/* Which segments a search looks in: any, those that hold slabs, or those
 * that hold none. */
enum seg_pick { PICK_ANY, PICK_SLABS, PICK_NO_SLABS };

/* The kinds of segment (bit k: KIND_ flags k) that may hold a run (of
 * kind large, or of slabs) and that pick looks in: any run where huge pages
 * are not, only one that may lie under them where they are; only a large
 * run in a segment that holds large runs only (segment_map). */
static unsigned kinds_serving(bool huge_ok, bool large, enum seg_pick pick)
{
	/* the kinds without KIND_HUGE: 0, 1, 4, 5; without KIND_LARGE_ONLY:
	 * 0 to 3; with KIND_SLABS: the odd ones */
	return (huge_ok ? 0xffu : 0x33u) & (large ? 0xffu : 0x0fu) &
	       (pick == PICK_ANY ? 0xffu : pick == PICK_SLABS ? 0xaau : 0x55u);
}

/* The most any segment of group g of the kinds in mask may have: its
 * longest dirty run's bound, or its longest free run's. */
static unsigned group_max(const struct seg_group *g, unsigned mask, bool dirty)
{
	unsigned m = 0;

	for (; mask; mask &= mask - 1) {
		const struct run_bounds *b = &g->kind[__builtin_ctz(mask)];
		unsigned v = dirty ? b->dirty_max : b->free_max;

		if (v > m)
			m = v;
	}
	return m;
}

/* The entries of group g: [*lo, return). */
static unsigned group_end(unsigned g, unsigned *lo)
{
	*lo = g * SEG_GROUP;
	return *lo + SEG_GROUP < seg_slots ? *lo + SEG_GROUP : seg_slots;
}

/*
 * seg_lock held: the segment and first unit of a free run of n units in a
 * segment that may hold it and that pick allows (kinds_serving), NULL if
 * none. Committed runs first (reusing them costs no page faults), then,
 * unless dirty_only, the free run with the fewest clean units. Newest
 * segment first. A segment whose bound says it has no run that long is
 * passed by on its index entry alone; one that turns out to have none gets
 * its bound lowered.
 */
static struct segment *find_free_run_in(unsigned n, bool huge_ok, bool large, enum seg_pick pick,
					bool dirty_only, unsigned *first)
{
	unsigned mask = kinds_serving(huge_ok, large, pick), best_clean = n + 1;
	struct segment *best = NULL;

	for (unsigned g = round_up(seg_slots, SEG_GROUP) / SEG_GROUP; g--;) {
		struct seg_group top = { 0 };
		unsigned lo;

		if (group_max(&seg_groups[g], mask, true) < n)
			continue;
		for (unsigned i = group_end(g, &lo); i-- > lo;) {
			struct seg_slot *s = &seg_index[i];

			if (s->b.dirty_max >= n && (mask >> s->kind & 1)) {
				*first = find_run(s->seg->dirty_map, n);
				if (*first < SEG_UNITS)
					return s->seg;
				s->b.dirty_max = (uint16_t)(n - 1);
			}
			if (s->b.dirty_max > top.kind[s->kind].dirty_max)
				top.kind[s->kind].dirty_max = s->b.dirty_max;
		}
		for (unsigned k = 0; k < NR_SEG_KINDS; k++)   /* every entry looked at */
			seg_groups[g].kind[k].dirty_max = top.kind[k].dirty_max;
	}
	if (dirty_only)
		return NULL;
	for (unsigned g = round_up(seg_slots, SEG_GROUP) / SEG_GROUP; g-- && best_clean > 1;) {
		struct seg_group top = { 0 };
		unsigned i, lo;

		if (group_max(&seg_groups[g], mask, false) < n)
			continue;
		for (i = group_end(g, &lo); i-- > lo && best_clean > 1;) {
			struct seg_slot *s = &seg_index[i];
			unsigned clean, at;

			if (s->b.free_max >= n && (mask >> s->kind & 1)) {
				at = find_window(s->seg, n, &clean);
				if (at == SEG_UNITS) {
					s->b.free_max = (uint16_t)(n - 1);
				} else if (clean < best_clean) {
					best = s->seg;
					*first = at;
					best_clean = clean;
				}
			}
			if (s->b.free_max > top.kind[s->kind].free_max)
				top.kind[s->kind].free_max = s->b.free_max;
		}
		if (i == lo - 1u)   /* every entry looked at */
			for (unsigned k = 0; k < NR_SEG_KINDS; k++)
				seg_groups[g].kind[k].free_max = top.kind[k].free_max;
	}
	return best;
}

/*
 * seg_lock held: where a run of n units goes. Slabs and large runs are
 * kept apart where they can be: a slab cut from the free run a large block
 * left splits the room the next large block needs, which then comes from
 * fresh pages (docs/large.md, "Slabs and large runs apart"). So a slab
 * looks first in the segments that hold slabs (committed units, then the
 * fewest clean: a slab is a few units, faulted in once), a large run first
 * at the committed runs of segments that hold none; then either takes the
 * best run anywhere, as when there is no other.
 */
static struct segment *find_free_run(unsigned n, bool huge_ok, bool large, unsigned *first)
{
	struct segment *seg = large ? find_free_run_in(n, huge_ok, true, PICK_NO_SLABS, true, first) :
				      find_free_run_in(n, huge_ok, false, PICK_SLABS, false, first);

	return seg ? seg : find_free_run_in(n, huge_ok, large, PICK_ANY, false, first);
}

struct slab *segment_alloc_units_aligned(unsigned n, unsigned align, uint8_t kind, bool huge_ok,
					bool *zeroed)
{
	struct segment *seg, *fresh = NULL;
	unsigned first = SEG_HDR_UNITS, window = n + align - 1;
	bool large = kind == SLAB_KIND_LARGE;

	/* a window of n + align - 1 free units holds an aligned run of n
	 * (segments are aligned to their size, so units to theirs) */
	ASSERT(align && !(align & (align - 1)) && round_up(SEG_HDR_UNITS, align) + n <= SEG_UNITS);
	seg_lock_take();
	while (!(seg = find_free_run(window, huge_ok, large, &first))) {
		if (fresh) {   /* mapped on the last round: it serves */
			seg = fresh;
			fresh = NULL;
			if (!seg_list_add_new(seg)) {
				seg_unlock();
				segment_unmap(seg);
				errno = ENOMEM;
				return NULL;
			}
			first = SEG_HDR_UNITS;
			break;
		}
		/* Map outside the lock; another thread may free units meanwhile. */
		seg_unlock();
		fresh = segment_map(huge_segment_wanted(huge_ok), large);
		if (!fresh)
			return NULL;
		seg_lock_take();
	}
	struct slab *head = run_claim(seg, round_up(first, align), n, kind, zeroed);

	if (kind == SLAB_KIND_SLAB)
		seg_slab_units_add(seg, (int)n);
	seg_unlock();
	if (fresh)   /* raced: someone else made room; keep ours as the reserve */
		segment_give_back(fresh);
	segment_decay();
	return head;
}

/* A mapped, never-listed segment joins the list as an empty reserve. */
void segment_give_back(struct segment *seg)
{
	seg_lock_take();
	bool listed = seg_list_add_new(seg);

	seg_unlock();
	if (!listed) {
		segment_unmap(seg);
		return;
	}
	segment_release_empty_over((unsigned)option(OPT_RESERVE_SEGMENTS));
}

/* seg_lock held: head's run goes back to its segment, its units dirty.
 * Returns whether the segment is empty now. */
static bool __segment_free_units(struct slab *head)
{
	struct segment *seg = ptr_segment(head);
	unsigned first = desc_unit(head), n = head->nunits;

	ASSERT(head->head == head && n >= 1 && first + n <= SEG_UNITS);
	if (head->kind == SLAB_KIND_SLAB)
		seg_slab_units_add(seg, -(int)n);
	descs_clear(seg, first, n);
	units_give(seg, first, n, true);
	biased_dec_return(&seg->users);
	return seg->free_units == SEG_UNITS - SEG_HDR_UNITS;
}

void segment_free_units(struct slab *head)
{
	seg_lock_take();
	bool empty = __segment_free_units(head);
	seg_unlock();
	if (empty)
		segment_release_empty_over((unsigned)option(OPT_RESERVE_SEGMENTS));
	segment_decay();
}

/* Tests: the unit holding p is in use (0), free and committed (1), or free
 * and given back (2). */
int segment_unit_state(const void *p)
{
	struct segment *seg = ptr_segment(p);
	unsigned i = (unsigned)(((uintptr_t)p - (uintptr_t)seg) >> UNIT_SHIFT);
	int state;

	seg_lock_take();
	state = !bit(seg->free_map, i) ? 0 : bit(seg->dirty_map, i) ? 1 : 2;
	seg_unlock();
	return state;
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

	seg_lock_take();
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
	seg_index_compact();
	seg_unlock();
	for (seg = victims; seg; seg = next) {
		next = seg->next;
		segment_unmap(seg);
	}
}

void segment_for_each_slab(void (*fn)(struct slab *, void *), void *arg)
{
	seg_lock_take();
	for (struct segment *seg = seg_list; seg; seg = seg->next)
		for (unsigned i = SEG_HDR_UNITS; i < SEG_UNITS; i++)
			if (seg->desc[i].kind == SLAB_KIND_SLAB ||
			    seg->desc[i].kind == SLAB_KIND_LARGE)
				fn(&seg->desc[i], arg);
	seg_unlock();
}

/* A fork child, seg_lock held (the fork handlers hold every lock): the
 * thread that was purging, if one was out with units, is not here. */
void segment_fork_child(void)
{
	purge_fork_child();
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
		seg_lock_take();
		descs_clear(seg, first + n, have - n);
		units_give(seg, first + n, have - n, true);
		head->nunits = (uint16_t)n;
		seg_unlock();
		segment_decay();
		return true;
	}
	if (first + n > SEG_UNITS)
		return false;
	seg_lock_take();
	for (unsigned i = first + have; i < first + n; i++) {
		if (!bit(seg->free_map, i)) {
			seg_unlock();
			return false;
		}
	}
	units_take(seg, first + have, n - have, NULL);
	descs_join(seg, first + have, n - have, head);
	head->nunits = (uint16_t)n;
	seg_unlock();
	return true;
}

/* ---- runs a thread keeps ------------------------------------------------------------ */

/*
 * A kept run is out of its segment (its units are not in free_map, it holds
 * one of the segment's `users`), so its descriptors are its keeper's alone,
 * as any run's are its owner's: splitting and joining kept runs rewrites
 * them without seg_lock. A kept run's head is marked TAIL (freed: a second
 * free of its block finds it so), names itself and has its start as base,
 * as a large block's head does; its later units name it and have base 0.
 * A split makes a run the segment did not hand out, so it takes a `users`
 * reference; a join gives one back. Neither brings `users` to zero (the
 * other run stays out), so the release flag - set only under seg_lock and
 * only while `users` is zero - cannot race with them: the biased word's own
 * atomics are enough.
 */

/* Units [first, first + n) of seg name head as theirs. */
static void descs_point(struct segment *seg, unsigned first, unsigned n, struct slab *head)
{
	for (unsigned i = first; i < first + n; i++)
		WRITE_ONCE(seg->desc[i].head, head);
}

/* back, a kept run that starts where front ends, becomes front's tail. */
static void run_join(struct slab *front, struct slab *back)
{
	struct segment *seg = ptr_segment(front);
	unsigned n = back->nunits;

	WRITE_ONCE(back->base, 0);
	WRITE_ONCE(back->nunits, 0);   /* the accounting walk reads nunits without us */
	descs_point(seg, desc_unit(back), n, front);
	WRITE_ONCE(front->nunits, (uint16_t)(front->nunits + n));
	biased_dec_return(&seg->users);   /* front stays out: never the last */
}

/* The last nunits - n units of kept run head become a kept run of their
 * own, which is returned; head keeps its first n. */
static struct slab *run_split(struct slab *head, unsigned n)
{
	struct segment *seg = ptr_segment(head);
	struct slab *rest = head + n;   /* descriptors are one array per segment */
	unsigned left = head->nunits - n;

	/* head is out, so users is not zero and no release is under way */
	if (unlikely(!biased_try_get(&seg->users)))
		uslab_fatal("malloc", head, "internal error: kept run in a segment being released");
	WRITE_ONCE(head->nunits, (uint16_t)n);   /* as in run_join */
	WRITE_ONCE(rest->nunits, (uint16_t)left);
	WRITE_ONCE(rest->base, slab_start(rest));
	WRITE_ONCE(rest->kind, SLAB_KIND_TAIL);
	descs_point(seg, desc_unit(rest), left, rest);
	return rest;
}

/* Is b the run right after a in one segment? */
static bool runs_adjacent(const struct slab *a, const struct slab *b)
{
	return ptr_segment(a) == ptr_segment(b) && a + a->nunits == b;
}

/*
 * Keep a freed run (its head already marked TAIL), joined with the kept runs
 * on either side of it, so that runs freed next to each other come back as
 * one that serves a bigger block. false: no credit, or no room
 * (RUN_CACHE_UNITS, or every slot taken by a run it does not touch); the
 * caller gives it back.
 */
bool run_cache_put(struct run_cache *rc, struct slab *head)
{
	unsigned n = head->nunits;
	int free_slot = -1;

	if (!rc->credit || rc->units + n > RUN_CACHE_UNITS)
		return false;
	for (int i = 0; i < RUN_CACHE_RUNS; i++) {
		struct slab *r = rc->runs[i];

		if (r && runs_adjacent(r, head)) {
			run_join(r, head);
			head = r;
		} else if (r && runs_adjacent(head, r)) {
			run_join(head, r);
		} else {
			if (!r && free_slot < 0)
				free_slot = i;
			continue;
		}
		rc->runs[i] = NULL;   /* joined: head now stands for it */
		if (free_slot < 0)
			free_slot = i;
	}
	if (free_slot < 0)
		return false;
	rc->runs[free_slot] = head;
	rc->units += n;
	rc->credit--;
	return true;
}

/*
 * A run of exactly units units: cut from the front of the smallest kept run
 * that holds it (best fit; the rest stays kept), or NULL. Its head is still
 * marked TAIL: the caller hands it out. A kept run more than twice the
 * request is not cut: it is what a later big request needs, and cutting it
 * for small ones sent the big ones to fresh pages (peak RSS of
 * realloc_grow 21 -> 32 MiB, midsize_churn 59 -> 62, large 190 -> 206).
 */
struct slab *run_cache_take(struct run_cache *rc, unsigned units)
{
	int best = -1;

	for (int i = 0; rc->units >= units && i < RUN_CACHE_RUNS; i++) {
		struct slab *r = rc->runs[i];

		if (r && r->nunits >= units && r->nunits <= 2 * units &&
		    (best < 0 || r->nunits < rc->runs[best]->nunits))
			best = i;
	}
	if (best < 0 && rc->units) {   /* it kept runs, and none serves */
		rc->credit /= 2;
		return NULL;
	}
	if (rc->credit < RUN_CACHE_CREDIT)
		rc->credit++;
	if (best < 0)
		return NULL;
	struct slab *r = rc->runs[best];

	rc->runs[best] = r->nunits > units ? run_split(r, units) : NULL;
	rc->units -= units;
	return r;
}

/* Every kept run back to its segment, in one trip through seg_lock. */
void run_cache_flush(struct run_cache *rc)
{
	bool empty = false;

	if (!rc->units)
		return;
	seg_lock_take();
	for (unsigned i = 0; i < RUN_CACHE_RUNS; i++) {
		if (rc->runs[i]) {
			empty |= __segment_free_units(rc->runs[i]);
			rc->runs[i] = NULL;
		}
	}
	seg_unlock();
	rc->units = 0;
	if (empty)
		segment_release_empty_over((unsigned)option(OPT_RESERVE_SEGMENTS));
	segment_decay();
}

/* ---- checking every descriptor (tests) ------------------------------------------------ */

#define DPROBLEM(seg, i, ...)                                                          \
	do {                                                                           \
		fprintf(stderr, "uslab: descriptor of unit %u of segment %p: ", (i),   \
			(void *)(seg));                                                \
		fprintf(stderr, __VA_ARGS__);                                          \
		fputc('\n', stderr);                                                   \
		bad++;                                                                 \
	} while (0)

/* The run headed by unit i of seg (in use): its later units are its tails,
 * with the head's free-check fields when it has them. */
static long check_run(struct segment *seg, unsigned i, bool (*has_free_check)(const struct slab *))
{
	const struct slab *d = &seg->desc[i];
	bool checked = d->kind == SLAB_KIND_SLAB && d->cache && has_free_check(d);
	long bad = 0;

	if (!checked && (d->kfree_magic || d->kfree_limit))
		DPROBLEM(seg, i, "free-check fields on a run malloc's free must not take");
	if (checked && !d->kfree_limit)
		DPROBLEM(seg, i, "malloc slab without free-check fields");
	for (unsigned k = 1; k < d->nunits; k++) {
		const struct slab *t = &d[k];

		if (i + k >= SEG_UNITS || bit(seg->free_map, i + k))
			DPROBLEM(seg, i + k, "a run's later unit is free");
		else if (t->head != d || t->kind != SLAB_KIND_TAIL)
			DPROBLEM(seg, i + k, "a run's later unit is not its tail");
		else if (t->base != (checked ? d->base : 0) || t->kfree_magic != d->kfree_magic ||
			 t->kfree_limit != d->kfree_limit)
			DPROBLEM(seg, i + k, "free-check fields differ from the head's");
	}
	return bad;
}

/* A bound (free_max, dirty_max) that says no run in map is longer must be
 * right: find_free_run passes the segment by on its word. */
static long check_max(const struct segment *seg, const uint64_t *map, unsigned max,
		      const char *what)
{
	if (max + 1 > SEG_UNITS || find_run(map, max + 1) == SEG_UNITS)
		return 0;
	fprintf(stderr, "uslab: segment %p: %s_max is %u, but a longer %s run is there\n",
		(const void *)seg, what, max, what);
	return 1;
}

/* The segment's index entry: its own, its flags the segment's. */
static long check_slot(const struct segment *seg)
{
	const struct seg_slot *s = seg->slot < seg_slots ? slot_of(seg) : NULL;

	uint8_t kind = seg_kind(seg);
	const struct run_bounds *g = s ? &seg_groups[seg->slot / SEG_GROUP].kind[kind] : NULL;

	if (s && s->seg == seg && s->kind == kind && g->free_max >= s->b.free_max &&
	    g->dirty_max >= s->b.dirty_max)
		return check_max(seg, seg->free_map, s->b.free_max, "free") +
		       check_max(seg, seg->dirty_map, s->b.dirty_max, "dirty");
	fprintf(stderr, "uslab: segment %p: its search index entry (%u) is not its own\n",
		(const void *)seg, seg->slot);
	return 1;
}

/*
 * Tests: every descriptor as the rules in segment.h say. A free unit's
 * reads as a zero page would (head NULL, kind FREE, no free-check fields);
 * a run's units all name its head and its later ones are tails; a slab
 * whose objects are malloc's has its free-check fields in every unit,
 * anything else has none; each listed segment has its entry in the search
 * index, and no bound there says a run is not there that is.
 * Exact when no thread is setting up a slab. Prints each problem; returns
 * how many there were.
 */
long segment_check_descs(bool (*has_free_check)(const struct slab *head))
{
	unsigned listed = 0;
	long bad = 0;

	seg_lock_take();
	for (struct segment *seg = seg_list; seg; seg = seg->next) {
		unsigned slab_units = 0;

		for (unsigned i = 0; i < SEG_HDR_UNITS; i++)
			if (seg->desc[i].head || seg->desc[i].kind || seg->desc[i].kfree_limit)
				DPROBLEM(seg, i, "a header unit's descriptor is written");
		for (unsigned i = SEG_HDR_UNITS; i < SEG_UNITS;) {
			const struct slab *d = &seg->desc[i];

			if (bit(seg->free_map, i)) {
				if (d->head || d->kind != SLAB_KIND_FREE || d->base ||
				    d->kfree_magic || d->kfree_limit || d->cache || d->owner_tp ||
				    d->owner_cpu)
					DPROBLEM(seg, i, "free unit, descriptor not clear");
				i++;
			} else if (d->head != d || d->kind == SLAB_KIND_FREE) {
				/* a head of kind TAIL: a freed large run a thread keeps */
				DPROBLEM(seg, i, "a unit in use that heads no run");
				i++;
			} else {
				bad += check_run(seg, i, has_free_check);
				if (d->kind == SLAB_KIND_SLAB)
					slab_units += d->nunits;
				i += d->nunits ? d->nunits : 1;
			}
		}
		if (slab_units != seg->slab_units) {
			fprintf(stderr, "uslab: segment %p: its slabs take %u units, slab_units says %u\n",
				(void *)seg, slab_units, seg->slab_units);
			bad++;
		}
		bad += check_slot(seg);
		listed++;
	}
	if (listed != seg_slots) {
		fprintf(stderr, "uslab: %u segments listed, %u in the search index\n", listed,
			seg_slots);
		bad++;
	}
	seg_unlock();
	return bad;
}
