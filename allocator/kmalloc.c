/* SPDX-License-Identifier: MIT */
/*
 * kmalloc.c - size classes -> static caches, large runs and huge mappings.
 *
 * The 46 small-class caches are static objects, each set up lazily by its
 * first slow-path allocation (kmalloc_class_init): before that its cpu slabs
 * are the empty ones, so the fast path needs no "initialised?" test.
 *
 * Large blocks are runs of units in segments (descriptor kind LARGE). Huge
 * blocks are their own mappings, recorded in an open-addressing table under
 * huge_lock: huge allocations cost a system call anyway, and a table (rather
 * than a segment-shaped header in the mapping) lets them have any alignment,
 * including multiples of the segment size, and grow with mremap.
 */
#define _GNU_SOURCE
#include "kmalloc.h"
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

/* kmalloc_statics is in layout.c */

const uint8_t kmalloc_slot_class[NR_CLASSES] = {
	1, 2, 4, 8, 12, 16, 20, 25, 30, 35, 40, 45,   /* 16 B, 32 B, ... 32 KiB */
	0, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 24, 26,
	27, 28, 29, 31, 32, 33, 34, 36, 37, 38, 39, 41, 42, 43, 44,
};

const uint8_t kmalloc_slot[NR_CLASSES] = {
	12, 0, 1, 13, 2, 14, 15, 16, 3, 17, 18, 19, 4, 20, 21, 22, 5, 23, 24,
	25, 6, 26, 27, 28, 29, 7, 30, 31, 32, 33, 8, 34, 35, 36, 37, 9, 38, 39,
	40, 41, 10, 42, 43, 44, 45, 11,
};

/* size_class() for n <= 1024, as cpu-slab offsets, indexed by n itself: 2 KiB
 * (a line covers 32 sizes), and no rounding instructions on the fast path */
#define C(cls) ((cls) << CPU_SLAB_SHIFT)
const uint16_t kmalloc_small_off[1025] __attribute__((aligned(CACHE_LINE))) = {
	[0 ... 8] = C(0),
	[9 ... 16] = C(1),
	[17 ... 32] = C(2),
	[33 ... 48] = C(3),
	[49 ... 64] = C(4),
	[65 ... 80] = C(5),
	[81 ... 96] = C(6),
	[97 ... 112] = C(7),
	[113 ... 128] = C(8),
	[129 ... 160] = C(9),
	[161 ... 192] = C(10),
	[193 ... 224] = C(11),
	[225 ... 256] = C(12),
	[257 ... 320] = C(13),
	[321 ... 384] = C(14),
	[385 ... 448] = C(15),
	[449 ... 512] = C(16),
	[513 ... 640] = C(17),
	[641 ... 768] = C(18),
	[769 ... 896] = C(19),
	[897 ... 1024] = C(20),
};
#undef C

const uint32_t kmalloc_class_size[NR_CLASSES] = {
	8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512,
	640, 768, 896, 1024,
	1152, 1280, 1536, 1792, 2048, 2304, 2560, 3072, 3584, 4096, 4608, 5120, 6144,
	7168, 8192, 9216, 10240, 12288, 14336, 16384, 18432, 20480, 24576, 28672,
	32768,
};

/* size_class() for 1024 < n <= SMALL_MAX, indexed by (n - 1) / 128: every
 * class above 1 KiB is a multiple of 128. */
const uint8_t kmalloc_big_class[SMALL_MAX / 128] = {
	[8] = 21,   /* 1152 */
	[9] = 22,   /* 1280 */
	[10 ... 11] = 23,   /* 1536 */
	[12 ... 13] = 24,   /* 1792 */
	[14 ... 15] = 25,   /* 2048 */
	[16 ... 17] = 26,   /* 2304 */
	[18 ... 19] = 27,   /* 2560 */
	[20 ... 23] = 28,   /* 3072 */
	[24 ... 27] = 29,   /* 3584 */
	[28 ... 31] = 30,   /* 4096 */
	[32 ... 35] = 31,   /* 4608 */
	[36 ... 39] = 32,   /* 5120 */
	[40 ... 47] = 33,   /* 6144 */
	[48 ... 55] = 34,   /* 7168 */
	[56 ... 63] = 35,   /* 8192 */
	[64 ... 71] = 36,   /* 9216 */
	[72 ... 79] = 37,   /* 10240 */
	[80 ... 95] = 38,   /* 12288 */
	[96 ... 111] = 39,   /* 14336 */
	[112 ... 127] = 40,   /* 16384 */
	[128 ... 143] = 41,   /* 18432 */
	[144 ... 159] = 42,   /* 20480 */
	[160 ... 191] = 43,   /* 24576 */
	[192 ... 223] = 44,   /* 28672 */
	[224 ... 255] = 45,   /* 32768 */
};

/*
 * Start-up classes. Every class a process uses costs it at least one page of
 * its own slab, a setup and lines of its heap; a short-lived program (md5sum,
 * sh, sort on a small file) spreads a few hundred blocks over some 20
 * classes, and on a VM each first touch of a page costs about 13 us. So
 * until some class needs a second slab, a request whose class is not set up
 * yet is served from the power-of-two class above it (16 B ... 32 KiB, 12
 * classes instead of 46): at most half a block wasted, in at most one slab
 * per start-up class. Done in the slow path (the fine class's cpu slab stays
 * empty, so its requests land there), which leaves the fast path and its
 * tables as they are; so it also ends after STARTUP_REDIRECTS_MAX slow-path
 * visits of classes not set up. USLAB_STARTUP_CLASSES=0 ends it at the first
 * slow path.
 */
bool kmalloc_startup = true;

/* Redirected requests so far, and how many end the start-up classes too: a
 * program that keeps allocating and freeing a few blocks of one size never
 * needs a second slab, and would otherwise pay the slow path on every one
 * of them for good (malloc(8) + free: 7.6 ns against 3.9). */
static atomic_long_t startup_redirects;
#define STARTUP_REDIRECTS_MAX 4096

static unsigned startup_class(unsigned c)
{
	size_t p = 16;

	while (p < kmalloc_class_size[c])
		p <<= 1;
	return size_class(p);
}

static spinlock_t kmalloc_init_lock = SPINLOCK_INIT;

/* From here on every class is set up on its first use (start-up classes). */
void kmalloc_startup_end(void)
{
	WRITE_ONCE(kmalloc_startup, false);
}

/*
 * Set up kmalloc cache s on its first slow-path allocation. One class at a
 * time: a short-lived program that uses a dozen classes pays for a dozen
 * (each setup writes its cache's lines), not for all of them. Returns the
 * cache to allocate from: s, or its start-up class; NULL (ENOMEM) if the
 * setup failed.
 */
struct uslab_cache *kmalloc_class_init(struct uslab_cache *s)
{
	unsigned i = kmalloc_class_of(s);
	int err = 0;

	options_init();
	if (READ_ONCE(kmalloc_startup)) {
		unsigned t = startup_class(i);

		if (!option(OPT_STARTUP_CLASSES) ||
		    atomic_long_inc_return_relaxed(&startup_redirects) > STARTUP_REDIRECTS_MAX)
			kmalloc_startup_end();
		else if (t != i)
			return kmalloc_cache(t);
	}
	spin_lock(&kmalloc_init_lock);
	if (kmalloc_unready(s)) {
		char name[24];
		unsigned sz = kmalloc_class_size[i];
		/* natural alignment of the class: its power-of-two factor, max 16 */
		unsigned align = sz & -sz;

		if (align > 16)
			align = 16;
		/* "kmalloc-<size>", without snprintf (see name_copy) */
		char digits[12], *d = digits + sizeof(digits);
		*--d = 0;
		unsigned v = sz;
		do
			*--d = (char)('0' + v % 10);
		while (v /= 10);
		name_copy(name, sizeof(name), "kmalloc-");
		name_copy(name + 8, sizeof(name) - 8, d);
		/* no constructor: the free pointer is at offset 0, which
		 * kmalloc()/kfree() use as a constant */
		err = cache_setup(s, name, sz, align, 0, NULL, (int)i);
		if (!err)
			smp_store_release(&kmalloc_statics.ready,
					  kmalloc_statics.ready | 1ull << (s - kmalloc_store));
	}
	spin_unlock(&kmalloc_init_lock);
	if (err) {
		errno = ENOMEM;
		return NULL;
	}
	return s;
}

/* ---- huge blocks ------------------------------------------------------------ */

struct huge {
	uintptr_t addr;        /* block start (0 = empty slot, 1 = deleted) */
	uintptr_t map;         /* mapping start */
	size_t map_len;
	size_t align;
	unsigned long origin;  /* see huge_cache: ranges of one mapping share it */
};

static spinlock_t huge_lock = SPINLOCK_INIT;
static struct huge *huge_tab;
static size_t huge_cap, huge_used, huge_tomb;
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
	struct huge *tab = os_map_aligned(cap * sizeof(*tab), os_page_size()), *old = huge_tab;

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
		os_unmap(old, huge_cap * sizeof(*old));
	huge_cap = cap;
	huge_tomb = 0;
	return true;
}

/* force: skip the load check (a caller that has just removed an entry
 * knows a slot is there), so re-inserting cannot fail. */
static bool __huge_insert(const struct huge *h, bool force)
{
	spin_lock(&huge_lock);
	if (!force && (huge_used + huge_tomb + 1) * 2 > huge_cap && !huge_grow()) {
		spin_unlock(&huge_lock);
		return false;
	}
	size_t i = huge_hash(h->addr, huge_cap);
	while (huge_tab[i].addr > 1)
		i = (i + 1) & (huge_cap - 1);
	if (huge_tab[i].addr == 1)
		huge_tomb--;
	huge_tab[i] = *h;
	huge_used++;
	spin_unlock(&huge_lock);
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
	spin_lock(&huge_lock);
	struct huge *h = huge_find(a);
	if (h) {
		*out = *h;
		h->addr = 1;
		huge_used--;
		huge_tomb++;
	}
	spin_unlock(&huge_lock);
	if (h) {
		atomic_long_sub((long)out->map_len, &huge_bytes);
		segment_note_outside(-(long)out->map_len);
		atomic_long_dec(&huge_count);
	}
	return h != NULL;
}

static bool huge_lookup(uintptr_t a, struct huge *out)
{
	spin_lock(&huge_lock);
	struct huge *h = huge_find(a);
	if (h)
		*out = *h;
	spin_unlock(&huge_lock);
	return h != NULL;
}

/* ---- freed huge memory, kept for reuse --------------------------------------
 * A program that churns multi-megabyte buffers would otherwise pay a munmap
 * and a page fault per page on every cycle. Freed huge mappings wait here
 * (huge_lock), still committed, for the next huge request:
 *  - best fit: the smallest cached range that holds the request gives its
 *    head, and its tail stays cached (no system call, no fault);
 *  - else a fresh mapping (see huge_cache_take for why not mremap);
 *  - a freed range joins the cached ranges next to it that come from the
 *    same mapping (same origin: an address range carved from one mmap or
 *    mremap result and never moved, so the joined range is still one VMA
 *    and mremap works on it), so freed pieces become one big range again.
 * The cache holds at most dirty_budget() bytes (oldest ranges unmapped
 * first); ranges older than USLAB_DECAY_MS are unmapped by the next huge
 * free or decay tick, and all of them by malloc_trim.
 */
#define HUGE_CACHE_SLOTS 32


static struct huge_free {
	uintptr_t map;     /* 0: empty slot */
	size_t len;
	unsigned long origin;
	uint64_t freed_ms;
} huge_cache[HUGE_CACHE_SLOTS];
static size_t huge_cached_bytes;
static atomic_long_t huge_origins;

/* A new origin: for every fresh mapping, and for a range mremap moved. */
static unsigned long huge_new_origin(void)
{
	return (unsigned long)atomic_long_inc_return_relaxed(&huge_origins);
}

/*
 * Cached memory for a request of len bytes (a multiple of the page size):
 * the head of the smallest cached range that holds it; 0 if none does.
 * *origin is the returned range's origin.
 */
static uintptr_t huge_cache_take(size_t len, unsigned long *origin)
{
	int best = -1;

	if (!READ_ONCE(huge_cached_bytes))
		return 0;
	spin_lock(&huge_lock);
	for (int i = 0; i < HUGE_CACHE_SLOTS; i++) {
		if (!huge_cache[i].map)
			continue;
		size_t l = huge_cache[i].len, b = best < 0 ? 0 : huge_cache[best].len;
		if (best < 0 || (l >= len ? (b < len || l < b) : (b < len && l > b)))
			best = i;
	}
	/* None big enough: growing one with mremap would move its pages unless
	 * the addresses after it are free, and touching moved pages is slow
	 * under a hypervisor that shadows page tables (measured: slower than
	 * fresh pages); a fresh mapping then, and the cached ranges wait. */
	if (best < 0 || huge_cache[best].len < len) {
		spin_unlock(&huge_lock);
		return 0;
	}
	struct huge_free e = huge_cache[best];
	if (e.len > len) {   /* the head goes out, the tail stays */
		huge_cache[best].map += len;
		huge_cache[best].len -= len;
		e.len = len;
	} else {
		huge_cache[best].map = 0;
	}
	WRITE_ONCE(huge_cached_bytes, huge_cached_bytes - e.len);
	spin_unlock(&huge_lock);
	*origin = e.origin;
	return e.map;
}

/*
 * len bytes at an align boundary from any cached range that holds them, for
 * a new segment (segment_map): memory a freed huge block left committed then
 * serves slabs instead of waiting for another huge request while fresh
 * pages fault in beside it. The head and tail around the window stay
 * cached (one of them in a free slot; with none free the window is not
 * taken). Returns 0 if no range will do.
 */
uintptr_t huge_cache_take_aligned(size_t len, size_t align)
{
	uintptr_t a = 0;

	if (READ_ONCE(huge_cached_bytes) < len)
		return 0;
	spin_lock(&huge_lock);
	int spare = -1, best = -1;
	for (int i = 0; i < HUGE_CACHE_SLOTS; i++) {
		struct huge_free *e = &huge_cache[i];

		if (!e->map) {
			spare = i;
			continue;
		}
		uintptr_t w = round_up(e->map, align);
		if (w + len <= e->map + e->len && (best < 0 || e->len < huge_cache[best].len))
			best = i;
	}
	if (best >= 0) {
		struct huge_free *e = &huge_cache[best];
		uintptr_t end = e->map + e->len;

		a = round_up(e->map, align);
		if (a > e->map && a + len < end && spare < 0) {
			a = 0;   /* no slot for the tail */
		} else {
			if (a + len < end) {   /* the tail */
				struct huge_free *t = a > e->map ? &huge_cache[spare] : e;
				*t = (struct huge_free){ a + len, end - (a + len), e->origin, e->freed_ms };
			}
			if (a > e->map)   /* the head keeps the slot */
				e->len = a - e->map;
			else if (a + len == end)
				e->map = 0;
			WRITE_ONCE(huge_cached_bytes, huge_cached_bytes - len);
		}
	}
	spin_unlock(&huge_lock);
	return a;
}

/* Take cached ranges freed at or before `older_than` (ms) out of the cache
 * into victims (huge_lock held); returns how many. */
static int huge_cache_expire_locked(uint64_t older_than, struct huge_free *victims)
{
	int n = 0;

	for (int i = 0; i < HUGE_CACHE_SLOTS; i++) {
		if (huge_cache[i].map && huge_cache[i].freed_ms <= older_than) {
			victims[n++] = huge_cache[i];
			WRITE_ONCE(huge_cached_bytes, huge_cached_bytes - huge_cache[i].len);
			huge_cache[i].map = 0;
		}
	}
	return n;
}

static void huge_unmap_all(const struct huge_free *v, int n)
{
	for (int i = 0; i < n; i++)
		os_unmap((void *)v[i].map, v[i].len);
}

/* Unmap cached ranges freed at or before `older_than` (ms). */
static void huge_cache_expire(uint64_t older_than)
{
	struct huge_free victims[HUGE_CACHE_SLOTS];
	int n;

	if (!READ_ONCE(huge_cached_bytes))
		return;
	spin_lock(&huge_lock);
	n = huge_cache_expire_locked(older_than, victims);
	spin_unlock(&huge_lock);
	huge_unmap_all(victims, n);
}

/* The decay tick (segment_decay, throttled): unmap ranges freed more than
 * decay ms ago, so a program that stops making huge requests does not keep
 * its last freed ones for good. */
void huge_cache_decay(uint64_t now, uint64_t decay)
{
	huge_cache_expire(now > decay ? now - decay : 0);
}

/* Keep a freed mapping for reuse, or unmap it (or older ones) to stay
 * within the budget. */
static void huge_cache_put(uintptr_t map, size_t len, unsigned long origin)
{
	struct huge_free victims[HUGE_CACHE_SLOTS + 1];
	uint64_t now = os_now_ms(), decay = (uint64_t)option(OPT_DECAY_MS);
	size_t cap = dirty_budget();
	int n, slot = -1;

	spin_lock(&huge_lock);
	n = huge_cache_expire_locked(now > decay ? now - decay : 0, victims);
	for (int i = 0; i < HUGE_CACHE_SLOTS; i++) {
		struct huge_free *e = &huge_cache[i];

		if (!e->map || e->origin != origin)
			continue;
		if (e->map + e->len == map)
			map = e->map;
		else if (map + len != e->map)
			continue;
		len += e->len;   /* joined: one range of one mapping */
		WRITE_ONCE(huge_cached_bytes, huge_cached_bytes - e->len);
		e->map = 0;
	}
	/* room: unmap the oldest ranges while the budget or the slots are short */
	for (;;) {
		int oldest = -1;

		slot = -1;
		for (int i = 0; i < HUGE_CACHE_SLOTS; i++) {
			if (!huge_cache[i].map)
				slot = i;
			else if (oldest < 0 || huge_cache[i].freed_ms < huge_cache[oldest].freed_ms)
				oldest = i;
		}
		if (len > cap || (slot >= 0 && huge_cached_bytes + len <= cap) || oldest < 0)
			break;
		victims[n++] = huge_cache[oldest];
		WRITE_ONCE(huge_cached_bytes, huge_cached_bytes - huge_cache[oldest].len);
		huge_cache[oldest].map = 0;
	}
	if (len <= cap && slot >= 0) {
		huge_cache[slot] = (struct huge_free){ map, len, origin, now };
		WRITE_ONCE(huge_cached_bytes, huge_cached_bytes + len);
	} else {
		victims[n++] = (struct huge_free){ map, len, origin, now };
	}
	spin_unlock(&huge_lock);
	huge_unmap_all(victims, n);
}

size_t kmalloc_huge_cached_bytes(void)
{
	return READ_ONCE(huge_cached_bytes);
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
static void *huge_alloc(size_t n, size_t align, bool thp_wanted, bool *zeroed)
{
	size_t page = os_page_size();
	size_t len = round_up(n, page);
	size_t map_len = len + (align > page ? align - page : 0);
	unsigned long origin;
	uintptr_t map;

	if (len < n || map_len < len) {
		errno = ENOMEM;
		return NULL;
	}
	if (align < page)
		align = page;
	map = huge_cache_take(map_len, &origin);
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
		origin = huge_new_origin();
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

/* ---- large blocks ------------------------------------------------------------ */

static void *large_alloc(size_t n, bool *zeroed)
{
	unsigned units = (unsigned)((n + UNIT_SIZE - 1) >> UNIT_SHIFT);
	struct slab *head = heap_run_take(units);

	if (head) {   /* a run this thread freed: committed, not zero */
		if (zeroed)
			*zeroed = false;
		smp_store_release(&head->kind, SLAB_KIND_LARGE);
		return (void *)head->base;
	}
	head = segment_alloc_units(units, SLAB_KIND_LARGE, zeroed);
	if (!head)
		return NULL;
	head->base = slab_start(head);
	return (void *)head->base;
}

/* *zeroed (if not NULL): the block reads as zero (fresh from the OS). */
void *malloc_large_or_huge(size_t n, size_t align, bool *zeroed)
{
	if (n > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	if (n <= LARGE_MAX && align <= UNIT_SIZE) {
		void *p;
		/* a plain malloc (no alignment) may come from the start-up arena */
		if (unlikely(READ_ONCE(kmalloc_arena_on)) && !align && (p = arena_alloc_large(n))) {
			if (zeroed)
				*zeroed = false;
			return p;
		}
		return large_alloc(n, zeroed);
	}
	/* calloc (zeroed) gets no huge pages: a big zeroed table is often
	 * touched here and there, and a 4 KiB page costs only where it is */
	bool z = false;
	void *p = huge_alloc(n, align, !zeroed, &z);
	if (zeroed)
		*zeroed = z;
	return p;
}

/* malloc's slow path for class cls: the start-up arena while it lasts
 * (arena.c), then the class's cache. */
noinline void *kmalloc_slow(unsigned cls)
{
	if (unlikely(READ_ONCE(kmalloc_arena_on))) {
		void *p = arena_alloc(cls);

		if (p)
			return p;
	}
	return cache_alloc_slow(kmalloc_cache(cls));
}

noinline cold void free_invalid(const void *p, const char *call)
{
	uslab_fatal(call, p, "invalid pointer");
}

/* free of anything but a small object: large run, huge block, or garbage. */
void free_nonsmall(void *p, struct slab *slab, const char *call)
{
	struct huge h;

	if (slab) {
		uint8_t kind = SLAB_KIND_LARGE;

		if ((uintptr_t)p != slab->base)
			free_invalid(p, call);
		/* claim the block: a second free of it finds the kind changed */
		if (!try_cmpxchg_acq_rel(&slab->kind, &kind, SLAB_KIND_TAIL))
			uslab_fatal(call, p, kind == SLAB_KIND_TAIL ? "double free" : "invalid pointer");
		if (!heap_run_put(slab))   /* kept runs stay marked TAIL: freed */
			segment_free_units(slab);
		return;
	}
	if (!huge_remove((uintptr_t)p, &h))
		free_invalid(p, call);
	huge_cache_put(h.map, h.map_len, h.origin);
}

/*
 * free() of anything the inline path did not take: NULL, a kmalloc object of
 * a slab another thread owns (or nobody), an immediate double free, a large
 * run, a huge mapping, a uslab_cache object, or a bad pointer.
 */
noinline void kfree_slow(void *p, const char *call)
{
	if (!p)
		return;
	struct slab *slab = ptr_to_slab(p);
	if (!slab || slab->kind != SLAB_KIND_SLAB) {
		if (!slab && arena_owns(p))
			arena_free(p, call);
		else
			free_nonsmall(p, slab, call);
		return;
	}
	struct uslab_cache *s = READ_ONCE(slab->cache);
	uintptr_t off = (uintptr_t)p - slab->base;
	if (unlikely(!s || off >= slab->span || !on_object_boundary(s->stride_magic, off)))
		free_invalid(p, call);
	if (unlikely(s->id >= KMALLOC_IDS))
		uslab_fatal(call, p, "pointer from uslab_cache_alloc");
	/* owner-local, cached as foreign (flushing, or making the heap, first),
	 * or home at once for small objects of another thread's slab */
	slab_free_slow(s, slab, p);
}

/* Bytes the caller may use at p; 0 for NULL. Aborts on a foreign pointer. */
size_t kmalloc_usable_size(const void *p, const char *call)
{
	struct huge h;

	if (!p)
		return 0;
	struct slab *slab = ptr_to_slab(p);
	if (!slab && arena_owns(p))
		return arena_usable_size(p, call);
	if (slab) {
		uintptr_t off = (uintptr_t)p - slab->base;
		if (slab->kind == SLAB_KIND_SLAB && off < slab->span &&
		    on_object_boundary(slab->cache->stride_magic, off))
			return slab->cache->stride;
		if (slab->kind == SLAB_KIND_LARGE && off == 0)
			return (size_t)slab->nunits << UNIT_SHIFT;
		free_invalid(p, call);
	}
	if (!huge_lookup((uintptr_t)p, &h))
		free_invalid(p, call);
	return h.map_len - ((uintptr_t)p - h.map);
}

/*
 * Resize p in place when its block allows it: the same small class range,
 * a large run that can grow into free neighbouring units or shrink, or a
 * huge mapping that mremap can resize (moving it if needed). have is p's
 * usable size (kmalloc_usable_size: realloc has checked p with it). Returns
 * the (possibly moved) block, or NULL when the caller must allocate and copy.
 */
void *kmalloc_resize(void *p, size_t n, size_t have)
{
	struct slab *slab = ptr_to_slab(p);
	struct huge h;

	/* a small block (slab object or arena block): in place while it fits
	 * and would not fit in half */
	if ((slab && slab->kind == SLAB_KIND_SLAB) || (!slab && arena_owns(p)))
		return (n <= have && (n > have / 2 || have <= 16)) ? p : NULL;
	if (slab) {   /* large */
		if (n <= SMALL_MAX || n > LARGE_MAX)
			return NULL;
		unsigned units = (unsigned)((n + UNIT_SIZE - 1) >> UNIT_SHIFT);
		return segment_resize_units(slab, units) ? p : NULL;
	}
	if (n <= LARGE_MAX || !huge_lookup((uintptr_t)p, &h))
		return NULL;
	if (h.align > os_page_size() || h.map != (uintptr_t)p)
		return NULL;
	/* Off the table before mremap: once the block moves, another thread's
	 * mmap may reuse address p and record it. */
	if (!huge_remove((uintptr_t)p, &h))
		return NULL;
	size_t len = round_up(n, os_page_size());
	void *q = mremap((void *)h.map, h.map_len, len, MREMAP_MAYMOVE);
	struct huge nh = h;
	if (q != MAP_FAILED) {
		if ((uintptr_t)q != h.map)   /* moved: a VMA of its own */
			nh.origin = huge_new_origin();
		nh.addr = nh.map = (uintptr_t)q;
		nh.map_len = len;
	}
	__huge_insert(&nh, true);   /* into the slot huge_remove just freed */
	return q == MAP_FAILED ? NULL : q;
}

/* Small class for an aligned request: the first class >= n whose size is a
 * multiple of align (objects then start on align boundaries). */
void *kmalloc_aligned(size_t align, size_t n)
{
	size_t want = n > align ? n : align;

	/* slabs start on unit boundaries, so a class that is a multiple of
	 * align (<= UNIT_SIZE) puts every object on an align boundary */
	if (want <= SMALL_MAX && align <= UNIT_SIZE) {
		for (unsigned c = size_class(want); c < NR_CLASSES; c++) {
			struct uslab_cache *s = kmalloc_cache(c);

			if (kmalloc_class_size[c] % align)
				continue;
			/* a class not set up yet has no cpu_offset to go by */
			return likely(!kmalloc_unready(s)) ? cache_alloc_fast(s) :
							     cache_alloc_slow(s);
		}
	}
	return malloc_large_or_huge(n, align, NULL);
}

/* Give back everything that can be: the caller's cached slabs, empty slabs
 * of every cache, empty segments. Returns true if memory was released. */
bool kmalloc_trim(void)
{
	size_t before = segment_mapped_bytes();

	size_t committed = segment_committed_bytes();
	bool cached = kmalloc_huge_cached_bytes() != 0;

	uslab_thread_flush();
	for (unsigned i = 0; i < NR_CLASSES; i++)
		if (!kmalloc_unready(&kmalloc_store[i]))
			cache_shrink_partial(&kmalloc_store[i]);
	segment_purge_all();
	segment_release_empty_over(0);
	huge_cache_expire(UINT64_MAX);
	return segment_mapped_bytes() < before || segment_committed_bytes() < committed ||
	       cached;
}

void kmalloc_fork_prepare(void)
{
	spin_lock(&kmalloc_init_lock);
	spin_lock(&huge_lock);
}
void kmalloc_fork_release(bool child)
{
	if (child) {
		spin_unlock_after_fork_child(&huge_lock);
		spin_unlock_after_fork_child(&kmalloc_init_lock);
	} else {
		spin_unlock(&huge_lock);
		spin_unlock(&kmalloc_init_lock);
	}
}
