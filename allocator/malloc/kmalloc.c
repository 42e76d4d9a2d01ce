/* SPDX-License-Identifier: MIT */
/*
 * kmalloc.c - malloc's blocks by kind: small objects of the class caches,
 * large runs of units in segments (descriptor kind LARGE), huge blocks
 * (huge.c); their slow paths, sizes, resizing, and trim.
 */
#define _GNU_SOURCE
#include "local.h"

#include <errno.h>
#include <string.h>

/* ---- large blocks ------------------------------------------------------------ */

#define LARGE_MAX_UNITS ((unsigned)(LARGE_MAX >> UNIT_SHIFT))
_Static_assert(round_up(SEG_HDR_UNITS, LARGE_ALIGN_MAX >> UNIT_SHIFT) + LARGE_MAX_UNITS <= SEG_UNITS,
	       "the most aligned large run fits in a segment");

/*
 * The calling thread's kept runs (segment.h), its heap made first if it has
 * none: a thread that only ever allocates large blocks (a worker filling
 * buffers) has no other reason to have one, and would take seg_lock for
 * every block and every free.
 */
static struct run_cache *large_runs(void)
{
	struct run_cache *rc = heap_runs();

	if (unlikely(!rc) && cpu_slab_get(kmalloc_cache(0)))
		rc = heap_runs();
	return rc;
}

/* A large run of units, at a multiple of align units (1: any unit). */
static void *large_alloc(unsigned units, unsigned align, bool *zeroed)
{
	struct run_cache *rc = large_runs();
	struct slab *head = rc && align == 1 ? run_cache_take(rc, units) : NULL;

	if (head) {   /* a run this thread freed: committed, not zero */
		if (zeroed)
			*zeroed = false;
		/* release: pairs with the acq_rel claim in free_nonsmall, which
		 * may run in whichever thread frees the block */
		smp_store_release(&head->kind, SLAB_KIND_LARGE);
		return (void *)head->base;
	}
	/* None of the kept runs is big enough: they go back first, so that the
	 * segments can join them with the free units around them and serve
	 * this block from committed memory rather than fresh pages. */
	if (rc)
		run_cache_flush(rc);
	head = segment_alloc_units_aligned(units, align, SLAB_KIND_LARGE, false, zeroed);
	if (!head)
		return NULL;
	head->base = slab_start(head);
	return (void *)head->base;
}

/* A freed large run (claimed: marked TAIL) is kept by the freeing thread,
 * if it has allocated large blocks lately (run_cache_put's credit), else
 * it goes back to its segment. */
static void large_free(struct slab *head)
{
	struct run_cache *rc = heap_runs();

	if (!rc || !run_cache_put(rc, head))
		segment_free_units(head);
}

/* *zeroed (if not NULL): the block reads as zero (fresh from the OS). */
void *malloc_large_or_huge(size_t n, size_t align, bool *zeroed)
{
	if (n > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	if (!n)   /* aligned_alloc(64 KiB, 0): a block of its own, as malloc(0) */
		n = 1;
	if (n <= LARGE_MAX && align <= LARGE_ALIGN_MAX)
		return large_alloc(units_of(n), align > UNIT_SIZE ? (unsigned)(align >> UNIT_SHIFT) : 1,
				   zeroed);
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
	void *p = kmalloc_class_alloc(kmalloc_cache(cls));

	return p ? kmalloc_unmark(p) : NULL;
}

noinline cold void free_invalid(const void *p, const char *call)
{
	uslab_fatal(call, p, "invalid pointer");
}

/*
 * p is a large or huge block freed already: a second free, or a realloc
 * (which frees it), is a double free; malloc_usable_size, the one other
 * call that gets here, is told of an invalid pointer, as for any block
 * that is not live.
 */
static noinline cold void free_freed(const void *p, const char *call)
{
	uslab_fatal(call, p, strcmp(call, "malloc_usable_size") ? "double free" : "invalid pointer");
}

/* No block starts at p: the layer above's if its stray hook takes p
 * (kmalloc.h), else invalid. */
static void free_stray(void *p, const char *call)
{
	bool (*hook)(void *, const char *) = READ_ONCE(kdiv.stray);

	if (!hook || !hook(p, call))
		free_invalid(p, call);
}

/* The layer above's hook told of every large or huge block about to be
 * freed (kmalloc.h), or NULL. */
static void (*kgone)(void *p);

void kmalloc_divert_gone(void (*hook)(void *))
{
	WRITE_ONCE(kgone, hook);
}

/* free of anything but a small object: large run, huge block, or garbage. */
void free_nonsmall(void *p, struct slab *slab, const char *call)
{
	void (*gone)(void *) = READ_ONCE(kgone);

	if (slab) {
		uint8_t kind = SLAB_KIND_LARGE;

		if ((uintptr_t)p != slab->base)
			return free_stray(p, call);
		/* claim the block: a second free of it finds the kind changed.
		 * acq_rel: acquires the release that handed the run out
		 * (large_alloc) and releases this free to a racing second one */
		if (!try_cmpxchg_acq_rel(&slab->kind, &kind, SLAB_KIND_TAIL))
			uslab_fatal(call, p, kind == SLAB_KIND_TAIL ? "double free" : "invalid pointer");
		if (unlikely(gone))
			gone(p);
		large_free(slab);   /* kept runs stay marked TAIL: freed */
		return;
	}
	if (unlikely(gone))   /* before the mapping can be another block */
		gone(p);
	if (!huge_free(p)) {
		if (huge_was_freed(p))
			free_freed(p, call);
		free_stray(p, call);
	}
}

/* malloc of what the inline path does not serve while malloc is not
 * diverted (kmalloc.h): large and huge blocks. */
noinline void *kmalloc_beyond(size_t n, const void *site)
{
	(void)site;
	if (n <= SMALL_MAX)   /* saw the limits of a divert that has ended */
		return kmalloc_direct(n);
	return malloc_large_or_huge(n, 0, NULL);
}

void kmalloc_divert(void *(*malloc_hook)(size_t, const void *),
		    void (*free_hook)(void *, const char *, const void *))
{
	segment_divert_frees(free_hook != NULL);
	WRITE_ONCE(kdiv.beyond, malloc_hook ? malloc_hook : kmalloc_beyond);
	WRITE_ONCE(kdiv.free, free_hook);
	WRITE_ONCE(kdiv.small_lim, malloc_hook ? 0 : KMALLOC_SMALL_LIM);
	WRITE_ONCE(kdiv.mid_lim, malloc_hook ? 0 : KMALLOC_MID_LIM);
}

void kmalloc_divert_stray(bool (*hook)(void *, const char *))
{
	WRITE_ONCE(kdiv.stray, hook);
}

/*
 * free() of anything the inline path did not take: NULL, a kmalloc object of
 * a slab another thread owns (or nobody), an immediate double free, a large
 * run, a huge mapping, a uslab_cache object, or a bad pointer.
 */
noinline void kfree_slow(void *p, const char *call, const void *site)
{
	void (*hook)(void *, const char *, const void *) = READ_ONCE(kdiv.free);

	if (unlikely(hook))
		return hook(p, call, site);
	kfree_direct(p, call);
}

void kfree_direct(void *p, const char *call)
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
	if (unlikely(!s || !object_offset_valid(s->obj_magic, s->obj_limit, (uintptr_t)p - slab->base)))
		return free_stray(p, call);
	if (unlikely(!(s->flags & CACHE_MALLOC)))
		uslab_fatal(call, p, "pointer from uslab_cache_alloc");
	if (unlikely(free_marked(p)))
		uslab_fatal(call, p, "double free");
	kfree_mark(p, free_mark);
	/* a block of the calling thread's own slab: where kfree's inline path
	 * puts one (a block it sent here for its second word's low byte above
	 * all); else cached as foreign (flushing, or making the heap, first),
	 * or home at once for small objects of another thread's slab */
	if (READ_ONCE(slab->owner_tp) == thread_self()) {
		uslab_cpu_link_(cpu_fast(READ_ONCE(slab->owner_cpu)), p, 0, fp_key_get());
		return;
	}
	slab_free_slow(s, slab, p);
}

/* The stride of slab's objects if one starts at p, else 0 (slab: the run
 * holding p, of any kind). */
static size_t slab_object_size(const struct slab *slab, const void *p)
{
	const struct uslab_cache *s = slab->cache;

	if (slab->kind == SLAB_KIND_SLAB &&
	    object_offset_valid(s->obj_magic, s->obj_limit, (uintptr_t)p - slab->base))
		return s->stride;
	return 0;
}

/*
 * The block that starts at p (not NULL), from one look at its descriptor,
 * for realloc and malloc_usable_size (kmalloc.h, struct kblock). An arena
 * pointer that starts no block aborts here, with call.
 */
void kmalloc_block(const void *p, struct kblock *b, const char *call)
{
	struct slab *slab = ptr_to_slab(p);
	size_t size;

	b->run = NULL;
	b->small = true;
	if (slab) {
		b->size = slab_object_size(slab, p);
		if (b->size)
			return;
		b->small = false;
		if (slab->kind == SLAB_KIND_LARGE && (uintptr_t)p == slab->base) {
			b->run = slab;
			b->size = (size_t)slab->nunits << UNIT_SHIFT;
		}
		return;
	}
	if (arena_owns(p)) {
		b->size = arena_usable_size(p, call);
		return;
	}
	b->small = false;
	b->size = huge_usable_size(p, &size) ? size : 0;
}

/* Bytes the caller may use at p; 0 for NULL. Aborts on a foreign pointer. */
size_t kmalloc_usable_size(const void *p, const char *call)
{
	struct kblock b;

	if (!p)
		return 0;
	kmalloc_block(p, &b, call);
	/* a slab's object freed already has the free mark (an arena block's
	 * map tells it, in arena_usable_size) */
	if (likely(b.size) && !(b.small && !arena_owns(p) && free_marked(p)))
		return b.size;
	struct slab *slab = ptr_to_slab(p);
	if (b.size || (slab && slab->kind == SLAB_KIND_TAIL && (uintptr_t)p == slab->base))
		free_freed(p, call);   /* a freed object, or a freed run kept */
	if (!slab && huge_was_freed(p))
		free_freed(p, call);
	free_invalid(p, call);
}

/*
 * Large block p (its run headed by slab) resized to n bytes, n large too.
 * In place when it shrinks by less than half (the units stay: a buffer that
 * shrinks a little often grows again), or shrinks more (the tail goes back),
 * or when the units after it are free (as many as it had, if they are).
 * Else it moves to a new run with room to grow: twice what it had, so that
 * a block grown in small steps among other growing blocks moves a
 * logarithmic number of times, not whenever a neighbour stands in its way
 * (realloc_interleaved's step buffers: 416 moves copying 82 MB before, 242
 * and 41 MB with this; 1.5 times: 319 and 56). The room is units the block
 * has not touched: committed only if they already were. NULL: no memory,
 * p unchanged.
 */
static void *large_resize(void *p, struct slab *slab, size_t n)
{
	unsigned units = units_of(n), have = slab->nunits;
	unsigned roomy = 2 * have;

	if (units <= have)   /* by more than half: kblock_holds kept the rest */
		return segment_resize_units(slab, units) ? p : NULL;
	if (roomy < units)   /* doubling or more: the request is its own room */
		roomy = units;
	if (roomy > LARGE_MAX_UNITS)
		roomy = LARGE_MAX_UNITS;
	if (segment_resize_units(slab, roomy) || (roomy > units && segment_resize_units(slab, units)))
		return p;
	void *q = large_alloc(roomy, 1, NULL);

	if (!q)
		q = large_alloc(units, 1, NULL);
	if (q) {
		memcpy(q, p, (size_t)have << UNIT_SHIFT);
		free_nonsmall(p, slab, "realloc");
	}
	return q;
}

/*
 * Small block p (size bytes) grown to n bytes, past LARGE_MIN: moved to
 * a large run rather than to the next class. A block grown once is likely
 * to grow again, and a run grows in place while the units after it are
 * free (large_resize), where each class boundary up to SMALL_MAX would be
 * a copy (eight of them from 32 to 128 KiB). NULL: no memory, p unchanged.
 */
static void *small_to_run(void *p, size_t size, size_t n)
{
	void *q = large_alloc(units_of(n), 1, NULL);

	if (q) {
		memcpy(q, p, size);
		kfree_direct(p, "realloc");
	}
	return q;
}

/*
 * Resize block b at p (kmalloc_block) where it allows it: the same small
 * class range, a large run (large_resize: in place, or moved with room to
 * grow; a small block grown past LARGE_MIN becomes one), or a huge
 * mapping that mremap can resize (moving it if needed). Returns the
 * (possibly moved) block, or NULL when the caller must allocate and copy.
 */
void *kmalloc_resize_block(void *p, const struct kblock *b, size_t n)
{
	bool runs = n > LARGE_MIN && n <= LARGE_MAX;

	if (kblock_holds(b, n))
		return p;
	if (b->small)   /* slab object or arena block */
		return runs && n > b->size ? small_to_run(p, b->size, n) : NULL;
	if (b->run)
		return runs ? large_resize(p, b->run, n) : NULL;
	return n > LARGE_MAX ? huge_resize(p, n) : NULL;
}

void *kmalloc_resize(void *p, size_t n)
{
	struct kblock b;

	kmalloc_block(p, &b, "realloc");
	return kmalloc_resize_block(p, &b, n);
}

/* Small class for an aligned request (kmalloc_aligned_class), else a large
 * or huge block. */
void *kmalloc_aligned(size_t align, size_t n)
{
	unsigned c = kmalloc_aligned_class(align, n);

	if (c < NR_CLASSES) {
		struct uslab_cache *s = kmalloc_cache(c);
		/* a class not set up yet has no cpu_offset to go by */
		void *p = likely(!kmalloc_unready(s)) ?
				  uslab_cpu_pop_(cpu_fast(this_cpu_slab(s)), s->fp_offset, fp_key_get()) :
				  NULL;

		if (p)
			return kmalloc_unmark(p);
		p = kmalloc_class_alloc(s);
		return p ? kmalloc_unmark(p) : NULL;
	}
	return malloc_large_or_huge(n, align, NULL);
}

/* The class kmalloc_aligned serves align (a power of two), n from: the
 * first class >= n whose size is a multiple of align; NR_CLASSES: none (a
 * large or huge block). */
unsigned kmalloc_aligned_class(size_t align, size_t n)
{
	size_t want = n > align ? n : align;

	ASSERT(align && !(align & (align - 1)));
	/* slabs start on unit boundaries, so a class that is a multiple of
	 * align (<= UNIT_SIZE) puts every object on an align boundary; a mask,
	 * not %, which is a division on every class tried */
	if (want <= SMALL_MAX && align <= UNIT_SIZE) {
		for (unsigned c = size_class(want); c < NR_CLASSES; c++)
			if (!(kmalloc_class_size[c] & (align - 1)))
				return c;
	}
	return NR_CLASSES;
}

/* Give back everything that can be: the caller's cached slabs, empty slabs
 * of every cache, empty segments. Returns true if memory was released. */
bool kmalloc_trim(void)
{
	size_t before = segment_mapped_bytes();

	size_t committed = segment_committed_bytes();
	bool cached = range_cache_bytes() != 0;

	uslab_thread_flush();
	for (unsigned i = 0; i < NR_CLASSES; i++)
		if (!kmalloc_unready(&kmalloc_store[i]))
			cache_shrink_partial(&kmalloc_store[i]);
	segment_purge_all();
	segment_release_empty_over(0);
	range_cache_expire(UINT64_MAX);
	ASSERT_EXPENSIVE(kmalloc_check_descs() == 0);
	return segment_mapped_bytes() < before || segment_committed_bytes() < committed ||
	       cached;
}

static bool is_malloc_slab(const struct slab *head)
{
	return head->cache->flags & CACHE_MALLOC;
}

long kmalloc_check_descs(void)
{
	return segment_check_descs(is_malloc_slab);
}
