/* SPDX-License-Identifier: MIT */
/*
 * malloc.c - the malloc family under uslab_ names (always exported).
 * override.c maps the standard names onto the same code.
 *
 * Semantics follow glibc's manual: malloc(0) returns a unique pointer;
 * realloc(p, 0) frees p and returns NULL; size overflow and sizes that
 * cannot be mapped give NULL with errno = ENOMEM; memalign and
 * aligned_alloc round a non-power-of-two alignment up; posix_memalign
 * returns EINVAL for an alignment that is not a power of two multiple of
 * sizeof(void *).
 */
#define _GNU_SOURCE
#include "api.h"
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

USLAB_API void *uslab_malloc(size_t n)
{
	return kmalloc(n);
}

USLAB_API void uslab_free(void *p)
{
	kfree(p, "free");
}

USLAB_API void *uslab_calloc(size_t n, size_t m)
{
	size_t bytes;
	void *p;

	if (unlikely(__builtin_mul_overflow(n, m, &bytes))) {
		errno = ENOMEM;
		return NULL;
	}
	if (debug_active())
		return debug_alloc(bytes, 0, true, "calloc", DEBUG_SITE);
	if (bytes > LARGE_MIN) {   /* a run: its fresh pages need no memset */
		bool zeroed = false;

		if (prof_active() && prof_sample_due(bytes))
			return prof_alloc(bytes, 0, true, DEBUG_SITE);

		p = malloc_large_or_huge(bytes, 0, &zeroed);
		if (p && !zeroed)
			memset(p, 0, bytes);
		return p;
	}
	p = kmalloc(bytes);
	if (p)
		memset(p, 0, bytes);
	return p;
}

/* Block p (have bytes usable) moved to a new one of n bytes; NULL (p
 * untouched, errno = ENOMEM) when there is no memory for it. */
static void *realloc_move(void *p, size_t have, size_t n)
{
	void *q = kmalloc(n);

	if (!q)
		return NULL;
	memcpy(q, p, have < n ? have : n);
	kfree(p, "realloc");
	return q;
}

USLAB_API void *uslab_realloc(void *p, size_t n)
{
	void *q;

	if (debug_active())
		return debug_realloc(p, n, DEBUG_SITE);
	if (!p)
		return kmalloc(n);
	if (n == 0) {
		kfree(p, "realloc");
		return NULL;
	}
	struct kblock b;

	/* the one look at p: inline for a slab object, and for a large run
	 * when no sampled block (a run) can be one */
	if (!kmalloc_block_fast(p, &b) || (!b.small && prof_active())) {
		kmalloc_block(p, &b, "realloc");
		if (prof_active() && !b.small && prof_owns(p))
			return prof_realloc(p, n, DEBUG_SITE);
		if (unlikely(!b.size))
			kmalloc_usable_size(p, "realloc");   /* no block starts at p: aborts */
	}
	if (kblock_holds(&b, n))
		return p;
	if (b.small && n <= LARGE_MIN)   /* to another class */
		return realloc_move(p, b.size, n);
	size_t have = b.size;
	q = kmalloc_resize_block(p, &b, n);
	/* grown in place: the growth counts as bytes allocated */
	if (q && n > have && prof_active() && prof_sample_due(n - have))
		prof_grown(n - have, DEBUG_SITE);
	return q ? q : realloc_move(p, have, n);
}

USLAB_API void *uslab_reallocarray(void *p, size_t n, size_t m)
{
	size_t bytes;

	if (unlikely(__builtin_mul_overflow(n, m, &bytes))) {
		errno = ENOMEM;
		return NULL;
	}
	return uslab_realloc(p, bytes);
}

static size_t pow2_ceil(size_t a)
{
	if (a <= 1)
		return 1;
	if (a > (SIZE_MAX >> 1) + 1)
		return 0;
	return (size_t)1 << (64 - __builtin_clzl(a - 1));
}

/* memalign for the call at site (the debug mode names it) */
static void *memalign_at(size_t align, size_t n, const char *call, const void *site)
{
	align = pow2_ceil(align);
	if (!align) {
		errno = EINVAL;
		return NULL;
	}
	if (debug_active())
		return debug_alloc(n, align, false, call, site);
	if (align <= 16)   /* every class is a multiple of 16 */
		return kmalloc(n);
	if (prof_active() && prof_sample_due(n))
		return prof_alloc(n, align, false, site);
	return kmalloc_aligned(align, n);
}

USLAB_API void *uslab_memalign(size_t align, size_t n)
{
	return memalign_at(align, n, "memalign", DEBUG_SITE);
}

USLAB_API void *uslab_aligned_alloc(size_t align, size_t n)
{
	return memalign_at(align, n, "aligned_alloc", DEBUG_SITE);
}

USLAB_API int uslab_posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	int saved = errno;
	p = memalign_at(align, n, "posix_memalign", DEBUG_SITE);
	if (!p) {
		errno = saved;   /* posix_memalign reports through its result only */
		return ENOMEM;
	}
	*out = p;
	return 0;
}

USLAB_API void *uslab_valloc(size_t n)
{
	return memalign_at(os_page_size(), n, "valloc", DEBUG_SITE);
}

USLAB_API void *uslab_pvalloc(size_t n)
{
	size_t page = os_page_size();
	size_t r = round_up(n ? n : 1, page);

	if (r < n) {
		errno = ENOMEM;
		return NULL;
	}
	return memalign_at(page, r, "pvalloc", DEBUG_SITE);
}

USLAB_API size_t uslab_malloc_usable_size(void *p)
{
	if (debug_active())
		return debug_usable_size(p);
	if (prof_active() && p) {
		struct kblock b;

		kmalloc_block(p, &b, "malloc_usable_size");
		if (!b.small && prof_owns(p))
			return prof_usable_size(p);
		if (b.size)
			return b.size;
	}
	return kmalloc_usable_size(p, "malloc_usable_size");
}

USLAB_API void uslab_free_sized(void *p, size_t n)
{
	if (debug_active())
		return debug_free(p, n, "free_sized", DEBUG_SITE);
	kfree(p, "free_sized");
}

USLAB_API void uslab_free_aligned_sized(void *p, size_t align, size_t n)
{
	(void)align;
	if (debug_active())   /* C++'s unsized aligned delete passes 0: no size said */
		return debug_free(p, n ? n : SIZE_MAX, "free_aligned_sized", DEBUG_SITE);
	kfree(p, "free_aligned_sized");
}

USLAB_API int uslab_trim(void)
{
	return kmalloc_trim();
}

USLAB_API int uslab_ctl(const char *name, long *old, const long *new_value)
{
	return options_set(name, old, new_value);
}

/* glibc's mallopt parameters that have a meaning here (malloc.h's values) */
#define GLIBC_M_TRIM_THRESHOLD (-1)

/*
 * mallopt(M_TRIM_THRESHOLD, n): glibc gives memory back once more than n
 * bytes are free at the top of its heap; here that is the free committed
 * memory kept before giving it back (USLAB_DIRTY_MAX). Every other
 * parameter describes glibc's own heaps (arenas, fastbins, the mmap
 * threshold) and returns 0, as glibc does for one it does not know.
 */
USLAB_API int uslab_mallopt(int param, int value)
{
	long v = value;

	if (param == GLIBC_M_TRIM_THRESHOLD && value >= 0)
		return uslab_ctl("dirty_max", NULL, &v) == 0;
	return 0;
}

struct info_walk {
	FILE *f;
	size_t count, bytes;   /* free objects in slabs, over every cache */
};

static void info_size(const struct cache_report *r, void *arg)
{
	struct info_walk *w = arg;
	long live = r->live_objects > 0 ? r->live_objects : 0;
	size_t slots = r->slabs * r->objects_per_slab;
	size_t free_objs = slots > (size_t)live ? slots - (size_t)live : 0;

	if (!free_objs)
		return;
	fprintf(w->f, "  <size from=\"%zu\" to=\"%zu\" total=\"%zu\" count=\"%zu\"/>\n",
		r->object_size, r->object_size, free_objs * r->object_size, free_objs);
	w->count += free_objs;
	w->bytes += free_objs * r->object_size;
}

/*
 * glibc's malloc_info shape: one <heap> (uslab's heaps share their segments)
 * whose <sizes> are the caches' free objects, then totals: "rest" is what
 * is free in segments, "mmap" the huge blocks, "current" what is mapped.
 */
USLAB_API int uslab_malloc_info(int options, FILE *f)
{
	struct uslab_mallinfo mi = uslab_mallinfo();
	struct info_walk w = { .f = f };

	if (options != 0 || !f) {
		errno = EINVAL;
		return -1;
	}
	fprintf(f, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
	caches_for_each_report(info_size, &w);
	fprintf(f, "</sizes>\n<total type=\"fast\" count=\"%zu\" size=\"%zu\"/>\n"
		   "<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>\n"
		   "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
		   "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n"
		   "</heap>\n",
		w.count, w.bytes, (size_t)1, mi.fordblks, mi.arena, mi.arena, mi.arena, mi.arena);
	fprintf(f, "<total type=\"fast\" count=\"%zu\" size=\"%zu\"/>\n"
		   "<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>\n"
		   "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
		   "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
		   "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n"
		   "</malloc>\n",
		w.count, w.bytes, (size_t)1, mi.fordblks, mi.hblks, mi.hblkhd, mi.arena + mi.hblkhd,
		mi.arena + mi.hblkhd, mi.arena + mi.hblkhd, mi.arena + mi.hblkhd);
	return 0;
}

/* ---- glibc-style reports ------------------------------------------------------ */

struct usage {
	size_t slab_bytes, used_bytes, large_bytes;
};

static void add_usage(struct slab *slab, void *arg)
{
	struct usage *u = arg;

	struct uslab_cache *s = READ_ONCE(slab->cache);

	if (slab->kind == SLAB_KIND_LARGE) {
		u->large_bytes += (size_t)slab->nunits << UNIT_SHIFT;
		return;
	}
	if (!s)
		return;   /* being set up */
	u->slab_bytes += (size_t)slab->nunits << UNIT_SHIFT;
	u->used_bytes += (size_t)ctr_inuse(dwcas_read(&slab->xword).hi) * s->stride;
}

USLAB_API struct uslab_mallinfo uslab_mallinfo(void)
{
	struct usage u = { 0 };
	struct uslab_mallinfo mi = { 0 };

	segment_for_each_slab(add_usage, &u);
	/* the start-up arena counts like a segment: what it has cut and not
	 * given back is its system bytes, its live blocks are in use */
	mi.arena = segment_mapped_bytes() + arena_held_bytes();
	mi.hblks = kmalloc_huge_count();
	mi.hblkhd = kmalloc_huge_bytes();
	mi.uordblks = u.used_bytes + u.large_bytes + arena_live_bytes();
	mi.fordblks = mi.arena - mi.uordblks;
	mi.keepcost = 0;
	return mi;
}

USLAB_API void uslab_malloc_stats(void)
{
	struct uslab_mallinfo mi = uslab_mallinfo();

	fprintf(stderr, "uslab (dwcas: %s)\n", dwcas_path_name());
	fprintf(stderr, "system bytes     = %10zu\n", mi.arena);
	fprintf(stderr, "in use bytes     = %10zu\n", mi.uordblks);
	fprintf(stderr, "Total (incl. mmap):\n");
	fprintf(stderr, "system bytes     = %10zu\n", mi.arena + mi.hblkhd);
	fprintf(stderr, "in use bytes     = %10zu\n", mi.uordblks + mi.hblkhd);
	fprintf(stderr, "max mmap regions = %10zu\n", mi.hblks);
	fprintf(stderr, "max mmap bytes   = %10zu\n", mi.hblkhd);
}
