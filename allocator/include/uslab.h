/* SPDX-License-Identifier: MIT */
/*
 * uslab.h - the public API of uslab, a SLUB-style userspace slab allocator.
 *
 * Object caches hand out objects of one size from slabs; the per-thread fast
 * path takes and returns objects without any atomic instruction. All functions
 * are thread-safe. Link with -luslab (pkg-config uslab, CMake uslab::uslab):
 * the program keeps its malloc. -luslab-malloc (pkg-config uslab-malloc,
 * CMake uslab::malloc, or LD_PRELOAD) also makes uslab its malloc.
 */
#ifndef USLAB_H
#define USLAB_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define USLAB_VERSION_MAJOR 0
#define USLAB_VERSION_MINOR 4

/* ---- object caches ------------------------------------------------------ */

struct uslab_cache;

/* uslab_cache_create flags */
#define USLAB_HWCACHE_ALIGN  0x1u   /* align objects to the cache line (64) */
/* Frees of objects of slabs this thread does not own go to their slab at
 * once, one double-width CAS each (the kernel SLUB's behaviour). Without
 * it, an object of a slab another thread owns goes to that thread in a
 * message (batched, no atomic per object; its owner reuses it), and one of
 * a slab nobody owns is kept on the freeing thread's private list for
 * reuse, at most 64 KiB of them per cache, given back to their slabs in
 * batches: when that budget is spent, at uslab_thread_flush and
 * uslab_cache_shrink, at thread exit, and when the cache is destroyed. */
#define USLAB_REMOTE_IMMEDIATE 0x2u

/*
 * Create a cache of objects of `size` bytes (1 ... 1 MiB).
 * align: 0 = natural (8, or 16 for sizes >= 16); otherwise a power of two up
 *        to the page size.
 * ctor:  run once per object when its slab is created, not on every alloc;
 *        callers must return objects to the cache in their constructed state.
 * name:  copied (up to 31 characters); shows up in statistics and messages.
 * Returns NULL with errno = EINVAL for bad arguments, ENOMEM when out of memory.
 */
struct uslab_cache *uslab_cache_create(const char *name, size_t size, size_t align,
				       unsigned flags, void (*ctor)(void *obj));

/* One object, or NULL with errno = ENOMEM. Inline (see below). */
void *uslab_cache_alloc(struct uslab_cache *cache);

/* Return obj (NULL is ignored). A pointer that is not an object of `cache`
 * is reported on stderr and the process aborts. Inline (see below). */
void uslab_cache_free(struct uslab_cache *cache, void *obj);

/* Fill objs[0..n) and return n, or return 0 having allocated nothing. */
size_t uslab_cache_alloc_bulk(struct uslab_cache *cache, size_t n, void **objs);
void uslab_cache_free_bulk(struct uslab_cache *cache, size_t n, void **objs);

/* Give the calling thread's cached slabs and all empty slabs back. */
void uslab_cache_shrink(struct uslab_cache *cache);

/* 0 on success; -EBUSY (cache left intact and usable) when objects are
 * live; -EINVAL for NULL or a cache destroyed already. Both errors also
 * print one line on stderr. */
int uslab_cache_destroy(struct uslab_cache *cache);

/* Walk every slab and recount; prints one line per problem on stderr.
 * Returns the number of problems found (0 = consistent). */
long uslab_cache_validate(struct uslab_cache *cache);

/* Object size as the cache serves it (after alignment), and its name. */
size_t uslab_cache_object_size(const struct uslab_cache *cache);
const char *uslab_cache_name(const struct uslab_cache *cache);

/* Per-cache counters, a snapshot. Objects cached on another live thread's
 * private lists count as live until that thread flushes or exits. */
struct uslab_cache_info {
	size_t object_size;        /* bytes per object slot */
	size_t objects_per_slab;
	size_t slab_bytes;
	size_t slabs;              /* slabs currently owned by the cache */
	size_t partial_slabs;      /* on the cache's partial list */
	size_t live_objects;       /* allocated and not yet freed */
	size_t slabs_allocated;    /* total slabs ever created */
	size_t slabs_freed;        /* total slabs given back */
};
int uslab_cache_info(struct uslab_cache *cache, struct uslab_cache_info *info);

/* ---- the malloc family ---------------------------------------------------
 * Always available under these names, from either library; only
 * libuslab-malloc.so also exports the standard names.
 * Semantics are glibc's; see docs/malloc.md.
 */
void  *uslab_malloc(size_t size);
void   uslab_free(void *ptr);
void  *uslab_calloc(size_t nmemb, size_t size);
void  *uslab_realloc(void *ptr, size_t size);
void  *uslab_reallocarray(void *ptr, size_t nmemb, size_t size);
int    uslab_posix_memalign(void **out, size_t alignment, size_t size);
void  *uslab_aligned_alloc(size_t alignment, size_t size);
void  *uslab_memalign(size_t alignment, size_t size);
void  *uslab_valloc(size_t size);
void  *uslab_pvalloc(size_t size);
size_t uslab_malloc_usable_size(void *ptr);
void   uslab_free_sized(void *ptr, size_t size);
void   uslab_free_aligned_sized(void *ptr, size_t alignment, size_t size);

/* Release every empty slab, the caller's cached slabs and empty segments.
 * Returns 1 if memory was given back to the OS, else 0 (as malloc_trim). */
int    uslab_trim(void);

/* glibc's mallopt: M_TRIM_THRESHOLD (-1) sets how much free memory stays
 * committed (as uslab_ctl "dirty_max") and returns 1; every other
 * parameter is glibc's own and returns 0. */
int    uslab_mallopt(int param, int value);

/* glibc's malloc_info: an XML report on f (options must be 0; else -1 with
 * errno = EINVAL): the caches' free objects by size, and the totals. */
int    uslab_malloc_info(int options, FILE *f);

/* The fields of glibc's struct mallinfo2 that uslab fills. */
struct uslab_mallinfo {
	size_t arena;     /* bytes mapped in segments */
	size_t ordblks, smblks;
	size_t hblks;     /* huge blocks (own mappings) */
	size_t hblkhd;    /* bytes in huge blocks */
	size_t usmblks, fsmblks;
	size_t uordblks;  /* bytes in use in segments (small + large) */
	size_t fordblks;  /* bytes mapped in segments but not in use */
	size_t keepcost;
};
struct uslab_mallinfo uslab_mallinfo(void);
void   uslab_malloc_stats(void);   /* a short report on stderr */

/* ---- whole-allocator ----------------------------------------------------- */

/* Which double-width CAS is in use: "cmpxchg16b", "casp", "ldaxp/stlxp", "locked". */
const char *uslab_dwcas_path(void);

/*
 * Read or change a setting while the program runs. name: an option of
 * docs/options.md without "USLAB_", in any case: "decay_ms", "dirty_max",
 * "dirty_percent", "reserve_segments", "huge_pages" or "stats" (the others
 * are read once, at start-up). *old (if old is not NULL) receives the value
 * in effect; if new_value is not NULL, *new_value takes effect at once.
 * Returns 0, or -EINVAL for an unknown name, one that cannot change now, or
 * a value out of range (booleans 0 or 1; numbers >= 0), changing nothing.
 */
int uslab_ctl(const char *name, long *old, const long *new_value);

/* Flush the calling thread's per-thread caches (also done at thread exit). */
void uslab_thread_flush(void);

/* Bytes currently mapped from the OS for slabs (segments). */
size_t uslab_mapped_bytes(void);

/* ---- statistics (docs/stats.md) -------------------------------------------
 * The table is for people; the JSON is what tools/uslabinfo reads. Exact
 * when no other thread is allocating meanwhile. */
void uslab_stats_print(FILE *out);
void uslab_stats_json(FILE *out);

/* ---- heap profiling (docs/profiling.md) -----------------------------------
 * With USLAB_PROF=1: write the heap profile now (gperftools' text format,
 * which google-pprof and jeprof read) to path - %p in it becomes the process
 * id, %n the dump's number - or, path NULL, where USLAB_PROF_FILE says.
 * Returns 0, -EINVAL when the profiler is off, or the negative errno of
 * the failed write. */
int uslab_prof_dump(const char *path);

/* ---- the inline fast paths ------------------------------------------------
 * uslab_cache_alloc and uslab_cache_free are also defined here, inline, so an
 * allocation or a free of the calling thread's active slab costs a handful of
 * instructions and no call: the thread's cpu slab for the cache is reached
 * through one initial-exec TLS pointer, exactly as inside the library.
 * They keep the free pointer in an object's first word, so they serve the
 * caches made without a constructor; a cache with one keeps it after the
 * object, and its inline_offset names a cpu slab that is always empty.
 * Everything else (an empty freelist, an object of another slab, NULL, a
 * pointer inside an object, a double free of the freelist head, a thread with no heap yet, a cache
 * with a constructor) calls the
 * library's uslab_cache_alloc/uslab_cache_free (as uslab__cache_alloc and
 * uslab__cache_free), which repeat the fast path with its checks and take
 * the slow path. The symbols stay exported, so the
 * functions' addresses, dlsym and -O0 builds work as for any function.
 *
 * Free pointers are stored encoded: the word an object keeps is
 * next ^ (the word's own address) ^ key, key a random secret of the process
 * (each cache holds a copy), so a leaked word reveals no heap
 * address, and a word overwritten after the free decodes to noise rather
 * than to an address of the writer's choosing.
 *
 * The structures below mirror the first fields of uslab's private ones (the
 * library checks the offsets at compile time): they, the encoding and the
 * TLS symbol's name are part of the ABI of USLAB_VERSION_MAJOR.MINOR while
 * the major version is 0. Define USLAB_NO_INLINE before including this header
 * to always call the library; USLAB_INLINE_FAST_PATHS says whether a
 * translation unit got the inline versions (GCC or Clang, optimising).
 */
#if defined(__GNUC__)
#define USLAB_MAY_ALIAS_ __attribute__((__may_alias__))
/* always inlined, never emitted: usable from the extern inline functions below */
#define USLAB_CORE_INLINE_ extern __inline __attribute__((__gnu_inline__, __always_inline__))
#else
#define USLAB_MAY_ALIAS_
#define USLAB_CORE_INLINE_ static inline
#endif
/* may_alias: the library reaches its own cpu slabs through this type too */
struct USLAB_MAY_ALIAS_ uslab_cpu_cache_ {   /* per thread, per cache */
	void *freelist;                  /* objects of the active slab, private */
	unsigned long base;              /* the active slab's first object */
	unsigned long limit;             /* obj is one of its objects when
					    (obj - base) * obj_magic < limit; 0 when
					    there is none (or objects are big) */
	void *private_[3];
	unsigned long long fast_frees;   /* frees pushed here (statistics) */
	unsigned int private2_[2];
};
typedef unsigned long USLAB_MAY_ALIAS_ uslab_word_;
struct uslab_cache_fast_ {           /* the head of struct uslab_cache */
	unsigned int inline_offset;      /* byte offset of the cpu slab these paths use
					    in a thread's heap (an always-empty one for a
					    cache with a constructor) */
	unsigned int private_;
	uslab_word_ fp_key;              /* the free-pointer key */
	unsigned long obj_magic;         /* about 2^64 / object stride */
};

/*
 * The fast paths, defined once: these serve the inline functions below, the
 * library's own uslab_cache_alloc/free, and malloc and free. fp_offset is
 * where an object keeps its free pointer (0 but for caches with a
 * constructor), key where the free-pointer key is kept: read where it is
 * used, so that it folds into the xor. No atomic instruction, no lock, no
 * call.
 */
/* The free pointer kept at slot, decoded; and stored, encoded. */
USLAB_CORE_INLINE_ void *uslab_fp_load_(const void *slot, const uslab_word_ *key)
{
	return (void *)(*(const uslab_word_ *)slot ^ (unsigned long)slot ^ *key);
}

USLAB_CORE_INLINE_ void uslab_fp_store_(void *slot, const void *next, const uslab_word_ *key)
{
	*(uslab_word_ *)slot = (unsigned long)next ^ (unsigned long)slot ^ *key;
}

/* Every object lies below 2^USLAB_ADDR_BITS_ (the library maps nothing
 * higher: x86-64's user space, and arm64's 48-bit one). */
#if defined(__x86_64__)
#define USLAB_ADDR_BITS_ 47
#else
#define USLAB_ADDR_BITS_ 48
#endif

/*
 * The cpu slab off bytes into base (a thread's heap and a cache's place in
 * it; or a cpu slab's address and 0). Under GCC and Clang an empty asm
 * hides off from the compiler at each use, so that it does not add the two
 * into a register of their own once and then address through that: each
 * load and store folds base + off into its address, one instruction fewer.
 */
USLAB_CORE_INLINE_ struct uslab_cpu_cache_ *uslab_cpu_at_(void *base, unsigned long *off)
{
#if defined(__GNUC__)
	if (!__builtin_constant_p(*off))
		__asm__("" : "+r"(*off));
#endif
	return (struct uslab_cpu_cache_ *)(void *)((char *)base + *off);
}

/*
 * The next object of the cpu freelist at base + off, or NULL when it is
 * empty - or when the head is no address at all: a free pointer
 * overwritten after its free decodes to noise, which the pop that would
 * follow it refuses (the slow path then names it). One instruction more
 * than a NULL test: 0 and anything at or above 2^USLAB_ADDR_BITS_ both
 * fail one compare.
 */
USLAB_CORE_INLINE_ void *uslab_cpu_pop_at_(void *base, unsigned long *off, unsigned long fp_offset,
					  const uslab_word_ *key)
{
	void *obj = uslab_cpu_at_(base, off)->freelist;

	if (__builtin_expect(((unsigned long)obj - 1) >> USLAB_ADDR_BITS_ == 0, 1)) {
		uslab_cpu_at_(base, off)->freelist = uslab_fp_load_((char *)obj + fp_offset, key);
		return obj;
	}
	return 0;
}

/* The same of the cpu slab at c. */
USLAB_CORE_INLINE_ void *uslab_cpu_pop_(struct uslab_cpu_cache_ *c, unsigned long fp_offset,
				       const uslab_word_ *key)
{
	unsigned long off = 0;

	return uslab_cpu_pop_at_(c, &off, fp_offset, key);
}

/* obj onto the cpu freelist, unchecked. */
USLAB_CORE_INLINE_ void uslab_cpu_link_(struct uslab_cpu_cache_ *c, void *obj,
				       unsigned long fp_offset, const uslab_word_ *key)
{
	uslab_fp_store_((char *)obj + fp_offset, c->freelist, key);
	c->freelist = obj;
	c->fast_frees++;
}

/* obj onto the cpu freelist if it is an object of the active slab - at an
 * object's start, as one multiply and one compare tell (magic: the cache's
 * obj_magic) - and not the list's head; 0 otherwise (another slab's, NULL,
 * inside an object, a double free: the caller's slow path tells them
 * apart). */
USLAB_CORE_INLINE_ int uslab_cpu_push_(struct uslab_cpu_cache_ *c, void *obj,
				      unsigned long fp_offset, const uslab_word_ *key,
				      const unsigned long *magic)
{
	if (__builtin_expect(((unsigned long)obj - c->base) * *magic < c->limit &&
			     obj != c->freelist, 1)) {
		uslab_cpu_link_(c, obj, fp_offset, key);
		return 1;
	}
	return 0;
}

#if !defined(USLAB_NO_INLINE) && !defined(USLAB_BUILDING_LIBRARY) && defined(__GNUC__) && \
	defined(__OPTIMIZE__)
#define USLAB_INLINE_FAST_PATHS 1
extern __thread char *uslab_tls_heap_ __asm__("uslab_tls_heap_v4_")
	__attribute__((tls_model("initial-exec")));

#define USLAB_FAST_INLINE_ extern __inline __attribute__((__gnu_inline__, __always_inline__))
/* the library's out-of-line functions (aliases of the two below) */
void *uslab__cache_alloc(struct uslab_cache *cache);
void uslab__cache_free(struct uslab_cache *cache, void *obj);

/* the calling thread's cpu slab for the cache (the empty one before it has a
 * heap), and the free-pointer key the cache holds a copy of (read through
 * the cache, which the caller has in hand, so the cpu slab's address
 * folds into the loads and stores) */
#define USLAB_CPU_CACHE_(s) ((struct uslab_cpu_cache_ *)(void *)(uslab_tls_heap_ + (s)->inline_offset))
#define USLAB_FP_KEY_(s) (&(s)->fp_key)

USLAB_FAST_INLINE_ void *uslab_cache_alloc(struct uslab_cache *cache)
{
	const struct uslab_cache_fast_ *s = (const struct uslab_cache_fast_ *)(const void *)cache;
	unsigned long off = s->inline_offset;
	void *obj = uslab_cpu_pop_at_(uslab_tls_heap_, &off, 0, USLAB_FP_KEY_(s));

	if (__builtin_expect(obj != 0, 1))
		return obj;
	return uslab__cache_alloc(cache);   /* refill */
}

USLAB_FAST_INLINE_ void uslab_cache_free(struct uslab_cache *cache, void *obj)
{
	const struct uslab_cache_fast_ *s = (const struct uslab_cache_fast_ *)(const void *)cache;

	if (__builtin_expect(uslab_cpu_push_(USLAB_CPU_CACHE_(s), obj, 0, USLAB_FP_KEY_(s),
					     &s->obj_magic), 1))
		return;
	uslab__cache_free(cache, obj);   /* checks, other slabs */
}
#undef USLAB_FAST_INLINE_
#undef USLAB_CPU_CACHE_
#undef USLAB_FP_KEY_
#endif

#ifdef __cplusplus
}
#endif

#endif /* USLAB_H */
