/* SPDX-License-Identifier: MIT */
/*
 * api.c - the uslab_cache_* API: create (cache_setup, also for malloc's
 * static caches), alloc and free (uslab.h's fast paths), bulk calls,
 * shrink, destroy, info; and the registry of caches.
 *
 * uslab_cache_destroy reads other threads' cpu slabs: the caller
 * guarantees those threads are not using that cache meanwhile (the API
 * contract).
 */
#define _GNU_SOURCE
#include "local.h"
#include "debug.h"
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* A cache's memory lives while anyone holds a reference (kref): the
 * creator's, dropped by destroy, and those statistics walks take so that they
 * need not hold the registry lock through their long walks. */
qrwlock_t cache_registry;
struct uslab_cache *caches;
/* ids in use; ids 63, 127, ... are never given (their cpu slabs start the
 * pages of a heap: see struct thread_heap) */
static uint64_t cache_ids[MAX_CACHES / 64] = { [0 ... MAX_CACHES / 64 - 1] = 1ull << 63 };

/* ---- the API ------------------------------------------------------------------------ */

/*
 * A cache watched by the program's checker (CACHE_WATCHED: AddressSanitizer
 * in the program, or valgrind's memcheck underneath; platform.h) tells it
 * which of its memory is whose: an allocated object is addressable for its
 * size (ASan: its slot's padding poisoned; memcheck: a malloc-like block,
 * undefined, or defined for a constructor's cache), a free one is not (ASan:
 * its whole slot poisoned; memcheck: a freed block, but for the word that
 * keeps its free pointer, which the library writes and reads). Such a
 * cache's inline_offset names the always-empty cpu slab (cache_setup), so
 * every call comes here.
 */
static noinline void watch_alloc(struct uslab_cache *s, void *obj)
{
	size_t n = round_up(s->size, 8);   /* ASan's granule */

	if (!obj)
		return;
	san_unpoison(obj, s->size);
	if (n < s->stride)   /* a fresh slot's padding was never poisoned */
		san_poison((char *)obj + n, s->stride - n);
#if VG_HOOKS
	if (vg_running()) {
		char *end = (char *)obj + s->size, *fp = (char *)obj + s->fp_offset;

		VALGRIND_MALLOCLIKE_BLOCK(obj, s->size, 0, s->ctor != NULL);
		/* the slot's padding is no one's, but for a constructor's cache
		 * the free-pointer word kept there */
		if (fp >= end) {
			VALGRIND_MAKE_MEM_NOACCESS(end, fp - end);
			end = fp + sizeof(void *);
		}
		VALGRIND_MAKE_MEM_NOACCESS(end, (char *)obj + s->stride - end);
	}
#endif
}

static noinline void watch_free(struct uslab_cache *s, void *obj)
{
	if (!obj)
		return;
	san_poison(obj, s->stride);
#if VG_HOOKS
	if (vg_running()) {
		VALGRIND_FREELIKE_BLOCK(obj, 0);
		VALGRIND_MAKE_MEM_DEFINED((char *)obj + s->fp_offset, sizeof(void *));
	}
#endif
}

/*
 * The caches whose every call needs more than the fast path: watched ones,
 * the debug mode's (cache/debug.c) and destroyed ones (their handle is
 * recognised while the dead ring keeps its memory). Their inline_offset
 * names the always-empty cpu slab, so uslab.h's inline paths come here
 * too; one test of the flags word sends them aside.
 */
#define CACHE_SLOW_CALLS (CACHE_WATCHED | CACHE_DEBUG | CACHE_DEAD)

static noinline void *cache_alloc_special(struct uslab_cache *s, const void *site)
{
	if (s->flags & CACHE_DEAD)
		uslab_fatal("uslab_cache_alloc", s, "destroyed cache");
	if (s->flags & CACHE_DEBUG)
		return cache_debug_alloc(s, site);
	void *obj = cache_alloc_fast(s);
	watch_alloc(s, obj);
	return obj;
}

static noinline void cache_free_special(struct uslab_cache *s, void *obj, const char *call,
					const void *site)
{
	if (s->flags & CACHE_DEAD)
		uslab_fatal(call, s, "destroyed cache");
	if (s->flags & CACHE_DEBUG) {
		cache_debug_free(s, obj, call, site);
		return;
	}
	/* before the free: once given back, another thread may take it */
	watch_free(s, obj);
	cache_free_fast(s, obj);
}

/* site: the program's call (the debug mode records it) */
static inline void *cache_alloc(struct uslab_cache *cache, const void *site)
{
	if (unlikely(cache->flags & CACHE_SLOW_CALLS))
		return cache_alloc_special(cache, site);
	return cache_alloc_fast(cache);
}

USLAB_API void *uslab_cache_alloc(struct uslab_cache *cache)
{
	return cache_alloc(cache, __builtin_return_address(0));
}

USLAB_API void uslab_cache_free(struct uslab_cache *cache, void *obj)
{
	if (unlikely(cache->flags & CACHE_SLOW_CALLS)) {
		cache_free_special(cache, obj, "uslab_cache_free", __builtin_return_address(0));
		return;
	}
	cache_free_fast(cache, obj);   /* NULL falls through to the slow path */
}

/* What uslab.h's inline fast paths call when theirs does not apply. */
USLAB_API void *uslab__cache_alloc(struct uslab_cache *cache) __attribute__((alias("uslab_cache_alloc")));
USLAB_API void uslab__cache_free(struct uslab_cache *cache, void *obj)
	__attribute__((alias("uslab_cache_free")));

USLAB_API size_t uslab_cache_alloc_bulk(struct uslab_cache *cache, size_t n, void **objs)
{
	for (size_t i = 0; i < n; i++) {
		objs[i] = cache_alloc(cache, __builtin_return_address(0));
		if (unlikely(!objs[i])) {
			uslab_cache_free_bulk(cache, i, objs);
			errno = ENOMEM;
			return 0;
		}
	}
	return n;
}

/* Marks obj's index in seen (objects of one slab, one run of free_bulk):
 * one marked already is a second free of it in the same run. */
static void bulk_mark(struct uslab_cache *s, struct slab *slab, void *obj, uint64_t *seen)
{
	unsigned k = object_index(s, (uintptr_t)obj - slab->base);

	if (seen[k / 64] >> (k % 64) & 1)
		uslab_fatal("uslab_cache_free_bulk", obj, "double free");
	seen[k / 64] |= 1ull << (k % 64);
}

/*
 * Frees runs of objects that share a slab with one dwcas per run (the
 * kernel's build_detached_freelist idea, limited to adjacent entries). An
 * object twice in one run is reported (it would be counted twice); the
 * marks are cleared run by run, so seen is zeroed once.
 */
USLAB_API void uslab_cache_free_bulk(struct uslab_cache *cache, size_t n, void **objs)
{
	struct cpu_slab *c = this_cpu_slab(cache);
	uint64_t seen[(CTR_OBJ_MASK + 64) / 64];
	size_t i = 0;

	/* one at a time: the debug mode's records tell duplicates apart */
	if (unlikely(cache->flags & (CACHE_DEBUG | CACHE_DEAD))) {
		for (; i < n; i++)
			cache_free_special(cache, objs[i], "uslab_cache_free_bulk",
					   __builtin_return_address(0));
		return;
	}
	memset(seen, 0, sizeof(seen));
	while (i < n) {
		void *obj = objs[i];

		if (!obj || cpu_slab_holds(cache, c, obj)) {
			uslab_cache_free(cache, obj);
			i++;
			continue;
		}
		struct slab *slab = object_slab(cache, obj, "uslab_cache_free_bulk");
		void *head = obj, *tail = obj;
		unsigned cnt = 1;
		size_t first = i;

		bulk_mark(cache, slab, obj, seen);
		for (i++; i < n && objs[i] && ptr_to_slab(objs[i]) == slab; i++, cnt++) {
			object_slab(cache, objs[i], "uslab_cache_free_bulk");
			bulk_mark(cache, slab, objs[i], seen);
			fp_set(cache, objs[i], head);
			head = objs[i];
		}
		for (size_t k = first; k < i; k++) {
			/* the next run starts clear */
			seen[object_index(cache, (uintptr_t)objs[k] - slab->base) / 64] = 0;
			/* before the dwcas: once given back, another thread may take it */
			if (unlikely(cache->flags & CACHE_WATCHED))
				watch_free(cache, objs[k]);
		}
		c = cpu_slab_get(cache);
		stat_add(cache, STAT_FREE_REMOTE, cnt);
		slab_free_chain(cache, c, slab, head, tail, cnt);
	}
}

static unsigned ilog2(size_t x)
{
	return 63 - __builtin_clzl(x);
}

/* Slab size: the fewest units with <= 1/8 tail waste and enough objects per
 * slab to keep slow paths rare; a power of two of them for objects up to
 * 32 KiB, any number above (four objects of a multiple of 8 KiB then fill
 * whole units, where the next power of two would hold up to eleven). */
static uint32_t calculate_units(struct uslab_cache *s)
{
	unsigned want = s->stride <= 256 ? 16 : s->stride <= 4096 ? 8 : 4;

	for (unsigned u = 1;; u = s->stride > (32u << 10) ? u + 1 : 2 * u) {
		size_t bytes = (size_t)u << UNIT_SHIFT;
		size_t objs = bytes / s->stride;

		if (objs > CTR_OBJ_MASK)
			objs = CTR_OBJ_MASK;
		bool waste_ok = bytes - objs * s->stride <= bytes / 8;
		if ((objs >= want && waste_ok) || u == SLAB_MAX_UNITS) {
			s->units = u;
			return (uint32_t)objs;
		}
	}
}

/* cache_registry write-locked. want >= 0: exactly that id; else the first free one
 * above the ids reserved for the kmalloc caches. */
static int cache_id_alloc(int want)
{
	if (want >= 0) {
		if (cache_ids[want / 64] & (1ull << (want % 64)))
			return -1;
		cache_ids[want / 64] |= 1ull << (want % 64);
		return want;
	}
	for (unsigned w = STATIC_IDS / 64; w < MAX_CACHES / 64; w++) {
		if (cache_ids[w] == ~0ull)
			continue;
		unsigned b = __builtin_ctzll(~cache_ids[w]);
		cache_ids[w] |= 1ull << b;
		return (int)(w * 64 + b);
	}
	return -1;
}

/* The last reference is gone: the cache's memory goes back. The static
 * caches are never destroyed, so never get here. */
/*
 * Destroyed caches wait here, dead, before their memory is reused: a
 * program that destroys a cache twice, or uses a handle after destroy, then
 * finds a dead cache, not a new one at the same address (destroy says so).
 */
#define DEAD_CACHES 64
static struct uslab_cache *dead_caches[DEAD_CACHES];
static atomic_long_t dead_next;

void cache_release(struct kref *ref)
{
	struct uslab_cache *s = container_of(ref, struct uslab_cache, ref);
	/* relaxed: a slot number, it orders nothing (the xchg does) */
	long slot = atomic_long_inc_return_relaxed(&dead_next) % DEAD_CACHES;
	/* acq_rel: our writes to s come before its reuse by whoever evicts it;
	 * the evicted cache's writes before our meta_free of it */
	struct uslab_cache *old = xchg_acq_rel(&dead_caches[slot], s);

	if (old)
		meta_free(old, sizeof(*old));
}

/* s is a cache in the registry (not destroyed, not garbage). */
static bool cache_is_live(const struct uslab_cache *s)
{
	bool live = false;

	lock_rank_acquire(RANK_REGISTRY);
	qrw_read_lock(&cache_registry);
	for (struct uslab_cache *c = caches; c && !live; c = c->next)
		live = c == s;
	qrw_read_unlock(&cache_registry);
	lock_rank_release(RANK_REGISTRY);
	return live;
}

/* The geometry of a cache of size-byte objects; returns objects per slab
 * (0: no memory for the debug mode's state). */
static uint32_t cache_geometry(struct uslab_cache *s, size_t size, size_t align, void (*ctor)(void *))
{
	size_t slot;

	if (!align)
		align = size >= 16 ? 16 : 8;
	if (align < sizeof(void *))
		align = sizeof(void *);
	if ((s->flags & USLAB_HWCACHE_ALIGN) && align < CACHE_LINE)
		align = CACHE_LINE;
	s->size = (uint32_t)size;
	s->align = (uint32_t)align;
	s->ctor = ctor;
	/* With a constructor the object's contents must survive while it is
	 * free, so the free pointer lives in a word after the object. */
	s->fp_offset = ctor ? (uint32_t)round_up(size, sizeof(void *)) : 0;
	slot = ctor ? s->fp_offset + sizeof(void *) : size;
	if (s->flags & CACHE_DEBUG)   /* red zones around the object, the free pointer after */
		slot = cache_debug_layout(s);
	if (!slot)
		return 0;
	if (slot < sizeof(void *))
		slot = sizeof(void *);
	s->stride = (uint32_t)round_up(slot, align);
	uint32_t objects = calculate_units(s);
	object_index_magic(s->stride, objects, &s->obj_magic, &s->obj_limit);
	/* 64 KiB of objects, 16 to 1024 of them, and at most FOREIGN_BYTES_MAX */
	s->foreign_max = (64u << 10) / s->stride;
	s->foreign_max = s->foreign_max < 16 ? 16 : s->foreign_max > 1024 ? 1024 : s->foreign_max;
	if ((size_t)s->foreign_max * s->stride > FOREIGN_BYTES_MAX)
		s->foreign_max = (unsigned)(FOREIGN_BYTES_MAX / s->stride) ?: 1;
	/* 5 to 10 empty slabs, the bigger objects the more, and at most
	 * MIN_PARTIAL_BYTES of them (at least one) */
	s->min_partial = ilog2(s->stride) / 2;
	s->min_partial = s->min_partial < 5 ? 5 : s->min_partial > 10 ? 10 : s->min_partial;
	if (((size_t)s->min_partial * s->units << UNIT_SHIFT) > MIN_PARTIAL_BYTES)
		s->min_partial = (unsigned)(MIN_PARTIAL_BYTES >> UNIT_SHIFT) / s->units ?: 1;
	/* 512 KiB of slabs, 2 to 32 of them: a thread keeps the slabs that hold
	 * what it allocated (docs/ownership.md) */
	s->cpu_partial = option(OPT_CPU_PARTIAL) > 0 ? (unsigned)option(OPT_CPU_PARTIAL) :
			 cpu_partial_slabs(s, CPU_PARTIAL_BYTES);
	if (s->cpu_partial > CPU_PARTIAL_MAX)
		s->cpu_partial = CPU_PARTIAL_MAX;
	return objects;
}

/* The always-empty cpu slab's offset in a heap: a cache's inline_offset
 * when every call of it is to come to the library. */
static uint32_t never_used_offset(void)
{
	return (uint32_t)(offsetof(struct thread_heap, cpu) +
			  NEVER_USED_ID * sizeof(struct cpu_slab));
}

/* Where cache id's statistics row is in every heap (a static id: row
 * `row` of the static ones). */
static uint32_t heap_stat_off(unsigned id, unsigned row)
{
	size_t size = sizeof(long) * NR_CACHE_STATS;

	return (uint32_t)(id < STATIC_IDS ? offsetof(struct thread_heap, k_stat) + row * size :
			  offsetof(struct thread_heap, stat) + (id - STATIC_IDS) * size);
}

int cache_setup(struct uslab_cache *s, const char *name, size_t size, size_t align,
		unsigned flags, void (*ctor)(void *), int want_id, unsigned row)
{
	if (size == 0 || size > CACHE_MAX_SIZE || (align & (align - 1)) ||
	    align > os_page_size() ||
	    (flags & ~(USLAB_HWCACHE_ALIGN | USLAB_REMOTE_IMMEDIATE | CACHE_MALLOC)))
		return EINVAL;
	dwcas_init();
	options_init();
	s->flags = flags;
	if (!(flags & CACHE_MALLOC) && option(OPT_DEBUG))
		s->flags |= CACHE_DEBUG;
	uint32_t objects = cache_geometry(s, size, align, ctor);
	if (!objects)
		return ENOMEM;
	mutex_init(&s->list_lock);
	name_copy(s->name, sizeof(s->name), name ? name : "unnamed");

	kref_init(&s->ref);
	lock_rank_acquire(RANK_REGISTRY);
	qrw_write_lock(&cache_registry);
	int id = cache_id_alloc(want_id);
	if (id >= 0) {
		s->id = (unsigned)id;
		s->chunk = (uint32_t)id / CPU_CHUNK;
		s->cpu_offset = (uint32_t)(offsetof(struct thread_heap, cpu) +
					   (size_t)id * sizeof(struct cpu_slab));
		s->stat_off = heap_stat_off((unsigned)id, row);
		/* uslab.h's inline paths serve a cache through the always-empty
		 * cpu slab (so never) when its free pointer is not at offset 0,
		 * or when a checker in the program is to see its objects */
		if ((san_active() || vg_running()) && !(s->flags & (CACHE_MALLOC | CACHE_DEBUG)))
			s->flags |= CACHE_WATCHED;
		s->fp_key = fp_key_setup();
		s->inline_offset = s->fp_offset || (s->flags & CACHE_SLOW_CALLS) ?
				   never_used_offset() : s->cpu_offset;
		if (s->flags & CACHE_DEBUG)
			cache_debug_attach(s, ctor);
		/* s reaches other threads through the registry lock (walks),
		 * its creator (the API), or a release of its own (malloc's
		 * static caches: their ready bit, malloc/classes.c) */
		s->objects = objects;
		s->next = caches;
		caches = s;
	}
	qrw_write_unlock(&cache_registry);
	lock_rank_release(RANK_REGISTRY);
	return id < 0 ? ENOMEM : 0;
}

USLAB_API struct uslab_cache *uslab_cache_create(const char *name, size_t size, size_t align,
						 unsigned flags, void (*ctor)(void *))
{
	struct uslab_cache *s = meta_alloc(sizeof(*s));
	int err;

	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	err = flags & CACHE_MALLOC ? EINVAL : cache_setup(s, name, size, align, flags, ctor, -1, 0);
	if (err) {
		meta_free(s, sizeof(*s));
		errno = err;
		return NULL;
	}
	return s;
}

/* Flush this cache's cpu slab in every heap (callers: heaps_lock held; each
 * heap's lock keeps its thread's own flushes out meanwhile). */
static void flush_all_heaps(struct uslab_cache *s)
{
	for (struct thread_heap *h = heaps; h; h = h->next) {
		if (heap_has_chunk(h, s)) {
			lock_ranked(&h->lock, RANK_HEAP);
			cpu_slab_flush(s, heap_cpu_slab(h, s));
			/* the next cache with this id has its own foreign budget
			 * (a stale larger one kept foreign objects past it, and
			 * out of deactivate's sight) */
			heap_cpu_slab(h, s)->foreign_left = 0;
			unlock_ranked(&h->lock, RANK_HEAP);
		}
	}
	/* after every slab of s is unfrozen: the messages' objects go home */
	for (struct thread_heap *h = heaps; h; h = h->next) {
		if (heap_has_chunk(h, s)) {
			INTERLEAVE("destroy:drop");
			lock_ranked(&h->lock, RANK_HEAP);
			heap_messages_drop(h, s);
			unlock_ranked(&h->lock, RANK_HEAP);
		}
	}
}

USLAB_API int uslab_cache_destroy(struct uslab_cache *s)
{
	if (!s)
		return -EINVAL;
	if (!cache_is_live(s)) {
		fprintf(stderr, "uslab: uslab_cache_destroy(): %p is no live cache (destroyed "
			"already?); nothing done\n", (void *)s);
		return -EINVAL;
	}
	if (s->flags & CACHE_DEBUG)   /* quarantined objects are no one's */
		cache_debug_drain(s);
	lock_ranked(&heaps_lock, RANK_HEAPS);
	flush_all_heaps(s);
	unlock_ranked(&heaps_lock, RANK_HEAPS);
	ASSERT_EXPENSIVE(uslab_cache_validate(s) == 0);   /* nothing frozen is left */
	size_t live = cache_live_objects(s);
	if (live) {
		if (s->flags & CACHE_DEBUG)
			cache_debug_leaks(s);
		fprintf(stderr, "uslab: uslab_cache_destroy(): cache %s still has %zu live object%s\n",
			s->name, live, live == 1 ? "" : "s");
		return -EBUSY;
	}
	cache_shrink_partial(s);

	lock_rank_acquire(RANK_REGISTRY);
	qrw_write_lock(&cache_registry);
	WRITE_ONCE(s->dead, 1);
	/* a later call with this handle comes to the library, which says so */
	if (s->flags & CACHE_DEBUG)
		cache_debug_forget(s);   /* before its id can be another cache's */
	WRITE_ONCE(s->flags, s->flags | CACHE_DEAD);
	WRITE_ONCE(s->inline_offset, never_used_offset());
	for (struct uslab_cache **pp = &caches; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	/* the next cache with this id starts its statistics from zero, and
	 * each thread's cpu-partial bound from the cache's */
	lock_ranked(&heaps_lock, RANK_HEAPS);
	for (struct thread_heap *h = heaps; h; h = h->next) {
		for (int i = 0; i < NR_CACHE_STATS; i++)
			if (READ_ONCE(heap_stat(h, s)[i]))   /* no write to rows never used */
				WRITE_ONCE(heap_stat(h, s)[i], 0);
		if (*heap_partial_doubled(h, s->id))
			*heap_partial_doubled(h, s->id) = 0;
	}
	unlock_ranked(&heaps_lock, RANK_HEAPS);
	cache_ids[s->id / 64] &= ~(1ull << (s->id % 64));
	qrw_write_unlock(&cache_registry);
	lock_rank_release(RANK_REGISTRY);
	kref_put(&s->ref, cache_release);   /* the creator's reference */
	return 0;
}

USLAB_API void uslab_cache_shrink(struct uslab_cache *s)
{
	struct thread_heap *h = tls_heap;

	if (heap_has_chunk(h, s)) {
		lock_ranked(&h->lock, RANK_HEAP);
		outbox_send(h, s->id);
		inbox_drain(h, s->id, false);
		cpu_slab_flush(s, heap_cpu_slab(h, s));
		unlock_ranked(&h->lock, RANK_HEAP);
	}
	cache_shrink_partial(s);
	segment_purge_all();
	segment_release_empty_over(0);
}

/* a debug cache's objects end where their red zone starts */
USLAB_API size_t uslab_cache_object_size(const struct uslab_cache *s)
{
	return s->flags & CACHE_DEBUG ? s->size : s->stride;
}

USLAB_API const char *uslab_cache_name(const struct uslab_cache *s)
{
	return s->name;
}

USLAB_API int uslab_cache_info(struct uslab_cache *s, struct uslab_cache_info *info)
{
	if (!s || !info)
		return -EINVAL;
	own_inbox_drain(s);
	size_t live = cache_live_objects(s) - (size_t)own_private_objects(s);
	if (s->flags & CACHE_DEBUG) {   /* in quarantine: freed, not yet given back */
		size_t q = cache_debug_quarantined(s);
		live = live > q ? live - q : 0;
	}
	memset(info, 0, sizeof(*info));
	info->object_size = uslab_cache_object_size(s);
	info->objects_per_slab = s->objects;
	info->slab_bytes = (size_t)s->units << UNIT_SHIFT;
	info->slabs = (size_t)atomic_long_read(&s->nr_slabs);
	info->partial_slabs = READ_ONCE(s->nr_partial);
	info->live_objects = live;
	info->slabs_allocated = (size_t)atomic_long_read(&s->slabs_allocated);
	info->slabs_freed = (size_t)atomic_long_read(&s->slabs_freed);
	return 0;
}

USLAB_API const char *uslab_dwcas_path(void)
{
	return dwcas_path_name();
}

USLAB_API size_t uslab_mapped_bytes(void)
{
	return segment_mapped_bytes();
}
