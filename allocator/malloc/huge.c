/* SPDX-License-Identifier: MIT */
/*
 * huge.c - huge blocks: each its own mapping (or a range the segment layer
 * kept from a freed one), recorded in an open-addressing table under
 * huge_lock. Huge allocations cost a system call anyway, and a table
 * (rather than a segment-shaped header in the mapping) lets them have any
 * alignment, including multiples of the segment size, and grow with mremap.
 */
#define _GNU_SOURCE
#include "local.h"
#include "options.h"

#include <errno.h>
#include <sys/mman.h>

struct huge {
	uintptr_t addr;        /* block start (0 = empty slot, 1 = deleted) */
	uintptr_t map;         /* mapping start */
	size_t map_len;
	size_t align;
	unsigned long origin;  /* see huge_cache: ranges of one mapping share it */
};

static mutex_t huge_lock = MUTEX_INIT;
FORK_LOCK(huge_lock, RANK_HUGE);
static struct huge *huge_tab;
static size_t huge_cap, huge_used, huge_tomb;
/* The blocks freed last, under huge_lock: a second free (or a realloc) of
 * one of them is a double free, not an invalid pointer (its memory is
 * gone; a block at that address since is in the table, and found first). */
#define HUGE_FREED 64
static uintptr_t huge_freed_addr[HUGE_FREED];
static unsigned huge_freed_next;
static atomic_long_t huge_bytes, huge_count;

static size_t huge_hash(uintptr_t a, size_t cap)
{
	return (size_t)((a >> 12) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

static struct huge *huge_find(uintptr_t a)
{
	if (!huge_tab)
		return NULL;
	for (size_t i = huge_hash(a, huge_cap);; i = (i + 1) & (huge_cap - 1)) {
		if (huge_tab[i].addr == a)
			return &huge_tab[i];
		if (huge_tab[i].addr == 0)
			return NULL;
	}
}

/* Rehash into a new table: twice the size when live entries need the
 * room, the same size when tombstones are what filled it. */
static bool huge_grow(void)
{
	size_t cap = !huge_cap ? 256 : huge_used * 4 >= huge_cap ? huge_cap * 2 : huge_cap;
	/* metadata memory: counted in the statistics' account of it */
	struct huge *tab = meta_alloc(cap * sizeof(*tab)), *old = huge_tab;

	if (!tab)
		return false;
	for (size_t j = 0; j < huge_cap; j++) {
		if (old[j].addr <= 1)
			continue;
		size_t i = huge_hash(old[j].addr, cap);
		while (tab[i].addr)
			i = (i + 1) & (cap - 1);
		tab[i] = old[j];
	}
	huge_tab = tab;
	if (old)
		meta_free(old, huge_cap * sizeof(*old));
	huge_cap = cap;
	huge_tomb = 0;
	return true;
}

/* force: skip the load check (a caller that has just removed an entry
 * knows a slot is there), so re-inserting cannot fail. */
static bool __huge_insert(const struct huge *h, bool force)
{
	lock_ranked(&huge_lock, RANK_HUGE);
	if (!force && (huge_used + huge_tomb + 1) * 2 > huge_cap && !huge_grow()) {
		unlock_ranked(&huge_lock, RANK_HUGE);
		return false;
	}
	size_t i = huge_hash(h->addr, huge_cap);
	while (huge_tab[i].addr > 1)
		i = (i + 1) & (huge_cap - 1);
	if (huge_tab[i].addr == 1)
		huge_tomb--;
	huge_tab[i] = *h;
	huge_used++;
	unlock_ranked(&huge_lock, RANK_HUGE);
	atomic_long_add((long)h->map_len, &huge_bytes);
	segment_note_outside((long)h->map_len);
	atomic_long_inc(&huge_count);
	return true;
}

static bool huge_insert(const struct huge *h)
{
	return __huge_insert(h, false);
}

/* Remove and return the record of block a; false if a is not a huge block. */
static bool huge_remove(uintptr_t a, struct huge *out)
{
	lock_ranked(&huge_lock, RANK_HUGE);
	struct huge *h = huge_find(a);
	if (h) {
		*out = *h;
		h->addr = 1;
		huge_used--;
		huge_tomb++;
	}
	unlock_ranked(&huge_lock, RANK_HUGE);
	if (h) {
		atomic_long_sub((long)out->map_len, &huge_bytes);
		segment_note_outside(-(long)out->map_len);
		atomic_long_dec(&huge_count);
	}
	return h != NULL;
}

static bool huge_lookup(uintptr_t a, struct huge *out)
{
	lock_ranked(&huge_lock, RANK_HUGE);
	struct huge *h = huge_find(a);
	if (h)
		*out = *h;
	unlock_ranked(&huge_lock, RANK_HUGE);
	return h != NULL;
}


/*
 * Where a huge block starts past a 2 MiB boundary when it asks for huge
 * pages. The kernel gives a huge page only to an aligned 2 MiB range wholly
 * inside the mapping; the partial ranges at the two ends stay in 4 KiB
 * pages. The start is placed so that both of those are about 1 MiB or more:
 * a buffer touched only at its ends (filled from the front, like a vector,
 * or from both ends, like sort's text and line records) costs what it
 * touches, and huge pages serve the interior, which a block gets to only
 * by being filled. Blocks under about 4 MiB thus get none.
 */
static size_t huge_thp_skew(size_t len)
{
	size_t r = len & (HUGE_PAGE_SIZE - 1), half = HUGE_PAGE_SIZE / 2;

	if (r < half)   /* head 1 MiB + r ... tail ends 1 MiB past a boundary */
		return half - r;
	/* head 2 MiB less a page, tail r + a page; an end on a boundary
	 * would make the last range whole, so then start 1 MiB in */
	return r + os_page_size() < HUGE_PAGE_SIZE ? os_page_size() : half;
}

/*
 * A huge block: a mapping of its own, or a cached range. An alignment above
 * the page size takes align - page bytes more (mmap and the cache hand out
 * page-aligned ranges, so the aligned start is always within reach): the
 * head before it is never touched, so it costs address space, not memory,
 * and the whole range goes back to the cache on free like any other. A
 * fresh mapping of 4 MiB or more asks for huge pages if thp_wanted and the
 * block is not over-aligned (huge_thp_skew places it).
 */
void *huge_alloc(size_t n, size_t align, bool thp_wanted, bool *zeroed)
{
	size_t page = os_page_size();
	size_t len = round_up(n, page);

	ASSERT(n > 0);   /* a zero length would put the block past its mapping */
	size_t map_len = len + (align > page ? align - page : 0);
	unsigned long origin;
	uintptr_t map;

	if (len < n || map_len < len) {
		errno = ENOMEM;
		return NULL;
	}
	if (align < page)
		align = page;
	map = range_cache_take(map_len, &origin);
	*zeroed = !map;
	if (!map) {
		bool thp = thp_wanted && align <= page && map_len >= 2 * HUGE_PAGE_SIZE &&
			   option(OPT_HUGE_PAGES);
		void *m = thp ? os_map(map_len, HUGE_PAGE_SIZE, huge_thp_skew(map_len), true) :
				os_map(map_len, page, 0, true);

		if (!m)
			return NULL;
		if (thp)   /* the whole mapping: one VMA still, so mremap works */
			os_hugepage(m, map_len, true);
		map = (uintptr_t)m;
		origin = range_new_origin();
	}
	struct huge h = { .addr = round_up(map, align), .map = map, .map_len = map_len,
			  .align = align, .origin = origin };
	if (!huge_insert(&h)) {
		os_unmap((void *)map, map_len);
		errno = ENOMEM;
		return NULL;
	}
	return (void *)h.addr;
}

size_t kmalloc_huge_bytes(void)
{
	return (size_t)atomic_long_read(&huge_bytes);
}

size_t kmalloc_huge_count(void)
{
	return (size_t)atomic_long_read(&huge_count);
}


/* free() of p if it is a huge block: its range is kept for reuse (or
 * unmapped). false: p is no huge block. */
bool huge_free(const void *p)
{
	struct huge h;

	if (!huge_remove((uintptr_t)p, &h))
		return false;
	lock_ranked(&huge_lock, RANK_HUGE);
	huge_freed_addr[huge_freed_next++ % HUGE_FREED] = (uintptr_t)p;
	unlock_ranked(&huge_lock, RANK_HUGE);
	range_cache_put(h.map, h.map_len, h.origin);
	return true;
}

/* p, no huge block now, is one of the last ones freed. */
bool huge_was_freed(const void *p)
{
	bool freed = false;

	lock_ranked(&huge_lock, RANK_HUGE);
	for (unsigned i = 0; i < HUGE_FREED && !freed; i++)
		freed = huge_freed_addr[i] == (uintptr_t)p;
	unlock_ranked(&huge_lock, RANK_HUGE);
	return freed;
}

/* Bytes usable at huge block p; false: p is no huge block. */
bool huge_usable_size(const void *p, size_t *size)
{
	struct huge h;

	if (!huge_lookup((uintptr_t)p, &h))
		return false;
	*size = h.map_len - ((uintptr_t)p - h.map);
	return true;
}

/*
 * Huge block p resized to n bytes (> LARGE_MAX) in place or by mremap,
 * moved if need be; NULL when it cannot be (over-aligned, or mremap
 * failed): the caller allocates and copies. A block that grows takes a
 * quarter more than it had when it asks for less, so that one grown in
 * small steps resizes a logarithmic number of times, not at each page:
 * first from the cached range right after it (a freed block's pages,
 * committed, no system call), else by mremap - address space only, as a
 * page the program does not write is not committed; an mremap that finds
 * no room after the mapping moves it, page tables and all.
 */
void *huge_resize(void *p, size_t n)
{
	struct huge h;

	if (!huge_lookup((uintptr_t)p, &h))
		return NULL;
	if (h.align > os_page_size() || h.map != (uintptr_t)p)
		return NULL;
	/* Off the table before mremap: once the block moves, another thread's
	 * mmap may reuse address p and record it. */
	if (!huge_remove((uintptr_t)p, &h))
		return NULL;
	size_t len = round_up(n, os_page_size());
	size_t want = len;
	void *q = MAP_FAILED;

	if (len > h.map_len) {
		size_t roomy = round_up(h.map_len + h.map_len / 4, os_page_size());
		uintptr_t end = h.map + h.map_len;

		want = roomy > len ? roomy : len;
		if (range_cache_take_after(end, h.origin, want - h.map_len)) {
			q = p;
			len = want;
		} else if (want > len && range_cache_take_after(end, h.origin, len - h.map_len)) {
			q = p;
		}
	}
	if (q == MAP_FAILED && want > len) {
		q = mremap((void *)h.map, h.map_len, want, MREMAP_MAYMOVE);
		if (q != MAP_FAILED)
			len = want;
	}
	if (q == MAP_FAILED)
		q = mremap((void *)h.map, h.map_len, len, MREMAP_MAYMOVE);
	struct huge nh = h;
	if (q != MAP_FAILED) {
		if ((uintptr_t)q != h.map)   /* moved: a VMA of its own */
			nh.origin = range_new_origin();
		nh.addr = nh.map = (uintptr_t)q;
		nh.map_len = len;
	}
	__huge_insert(&nh, true);   /* into the slot huge_remove just freed */
	return q == MAP_FAILED ? NULL : q;
}
