/* SPDX-License-Identifier: MIT */
/*
 * slab.h - object caches made of slabs: struct uslab_cache, the slab's
 * coupled word, freeze/unfreeze, the partial lists, and the statistics.
 *
 * The states of a slab (docs/slab.md has the full table and the arguments):
 *
 *   FROZEN   frozen=1. Owned by one thread: its active slab, or on its
 *            cpu-partial list. Only the owner takes the shared freelist.
 *   PARTIAL  frozen=0, 0 < free objects, on cache->partial. A holder of
 *            list_lock may take some of them and leave it PARTIAL (a
 *            shared refill: partial_take_shared), or all of them once it
 *            has taken it off the list (FULL).
 *   FULL     frozen=0, no free object, on no list.
 *   EMPTY    frozen=0, inuse=0: kept on cache->partial (up to min_partial)
 *            or discarded back to its segment.
 *
 * Every change of {freelist, counters} is one dwcas on slab->xword. A thread
 * that makes an unfrozen slab enter or leave cache->partial takes list_lock
 * before its dwcas and adds/removes it before unlocking, so under list_lock
 * "unfrozen with a live object and a free object" always means "on the
 * list". Two exceptions touch only unfrozen EMPTY slabs, which nobody else
 * can free into or take off the list: an owner's unfreeze of a slab that
 * becomes EMPTY (the lock after the dwcas, to list or discard it), and
 * cache_shrink_partial, which removes empty slabs under the lock with no
 * dwcas at all.
 *
 * Locking: cache->list_lock protects cache->partial, nr_partial and each
 * slab's on_partial/next/prev while the slab is on the list. A frozen slab's
 * next pointer belongs to its owner.
 */
#ifndef USLAB_SLAB_H
#define USLAB_SLAB_H

#include "segment.h"
#define USLAB_BUILDING_LIBRARY 1   /* uslab.h: no inline fast paths in here */
#include "uslab.h"

#pragma GCC visibility push(hidden)

#define CACHE_MAX_SIZE (1ul << 20)

/* ---- the coupled word ---------------------------------------------------------
 *
 *  xword.lo  freelist: shared free objects (remote frees push here)
 *  xword.hi  counters:
 *   63            32 31    30           16 15            0
 *  +----------------+------+---------------+---------------+
 *  |     spare      |frozen|    objects    |     inuse     |
 *  +----------------+------+---------------+---------------+
 *
 *  inuse counts objects not on this word's freelist: live objects plus,
 *  while the slab is frozen, those its owner holds privately (cpu freelist,
 *  owner-local list, not yet built) and those in remote messages.
 *  Invariant: inuse + length(freelist) == objects, at every dwcas.
 */
#define CTR_INUSE_MASK   0xffffull
#define CTR_OBJ_SHIFT    16
#define CTR_OBJ_MASK     0x7fffull
#define CTR_FROZEN       (1ull << 31)

static inline unsigned ctr_inuse(uintptr_t c) { return c & CTR_INUSE_MASK; }
static inline unsigned ctr_objects(uintptr_t c) { return (c >> CTR_OBJ_SHIFT) & CTR_OBJ_MASK; }
static inline bool ctr_frozen(uintptr_t c) { return c & CTR_FROZEN; }
static inline uintptr_t ctr_make(unsigned inuse, unsigned objects, bool frozen)
{
	return (uintptr_t)inuse | ((uintptr_t)objects << CTR_OBJ_SHIFT) | (frozen ? CTR_FROZEN : 0);
}

/* ---- statistics ---------------------------------------------------------------
 * Defined once: the X-macro expands into the counter enum, the report's
 * column names and the JSON keys. Slow paths count into the calling
 * thread's own row (stat_add); the fast paths count nothing per operation
 * except where the count is needed anyway (an owner-local free bumps
 * slab->local_count); fast allocations and cache-API fast frees are derived:
 * the slow path notes how many objects it put on a cpu freelist and folds
 * "supplied + fast frees - left over" into the counts at each refill.
 */
#define USLAB_CACHE_STATS(X)                                                            \
	X(ALLOC_FAST, "alloc_fast", "allocations from the thread's private freelist")      \
	X(ALLOC_SLOW, "alloc_slow", "allocations through the slow path")                   \
	X(FREE_FAST, "free_fast", "frees onto the thread's private list (cache API: active "  \
	  "slab; malloc: its own slabs' objects and those of slabs nobody owns)")            \
	X(FREE_LOCAL, "free_local", "frees onto a frozen slab's owner-local list (no atomic)") \
	X(FREE_REMOTE, "free_remote", "frees by dwcas into a slab of another thread/none") \
	X(FOREIGN_FLUSHED, "foreign_flushed", "cached frees given back to their slabs (dwcas)") \
	X(REFILL_LOCAL, "refill_local", "refills from a slab's owner-local list")           \
	X(REFILL_REMOTE, "refill_remote", "refills taking the active slab's remote frees") \
	X(REFILL_CPU_PARTIAL, "refill_cpu_partial", "refills from the cpu-partial list")   \
	X(REFILL_PARTIAL, "refill_partial", "slabs taken from the cache's partial list")   \
	X(NEW_SLAB, "new_slab", "slabs created")                                           \
	X(SLAB_FREED, "slab_freed", "empty slabs given back to their segment")             \
	X(CHAIN_ORDERED, "chain_ordered", "refills whose chain (half a slab or more) was "   \
	  "relinked in address order")                                                       \
	X(CPU_PARTIAL_PUT, "cpu_partial_put", "full slabs frozen by a remote free")         \
	X(CPU_PARTIAL_DRAIN, "cpu_partial_drain", "cpu-partial lists drained")             \
	X(DEACTIVATE_FULL, "deactivate_full", "slabs given up with no free object")        \
	X(DEACTIVATE_PARTIAL, "deactivate_partial", "slabs given up onto the partial list") \
	X(DEACTIVATE_EMPTY, "deactivate_empty", "slabs given up with every object free")   \
	X(DWCAS_RETRY, "dwcas_retry", "double-width CAS attempts that failed and retried")

enum cache_stat {
#define X(id, name, doc) STAT_##id,
	USLAB_CACHE_STATS(X)
#undef X
	NR_CACHE_STATS
};

/* ---- a cache -------------------------------------------------------------------- */

/* Internal cache flags, above uslab.h's public ones. */
#define CACHE_MALLOC 0x10000u   /* malloc's objects: free-check fields in every unit */
#define CACHE_WATCHED 0x20000u  /* the program's ASan or memcheck sees its objects */
#define CACHE_DEBUG 0x40000u    /* USLAB_DEBUG=1: red zones, poison, quarantine (cache/debug.c) */
#define CACHE_DEAD 0x80000u     /* destroyed: its handle's every call ends in a report */

struct uslab_cache {
	/* read by the fast paths; the first by uslab.h's inline ones, which
	 * take the free pointer at offset 0 and so serve only caches that keep
	 * it there: for a cache with a constructor (free pointer after the
	 * object) it is the offset of an always-empty cpu slab, so they call
	 * the library for every allocation and free (cache layer, cache_setup) */
	uint32_t inline_offset;
	uint32_t cpu_offset;           /* byte offset of its cpu slab in a thread heap */
	uintptr_t fp_key;              /* a copy of fp_key, for uslab.h's inline paths */
	uint64_t obj_magic, obj_limit; /* object_index_magic(): object_offset_valid() */
	uint32_t fp_offset;            /* free pointer offset inside an object slot */
	uint32_t chunk;                /* its bit in a heap's chunks_used (cache layer) */
	uint32_t stride;               /* bytes per object slot */
	uint32_t stat_off;             /* byte offset of its statistics row (stat_add) */

	uint32_t size;                 /* requested object size */
	uint32_t align;
	uint32_t objects;              /* per slab */
	uint32_t units;                /* per slab */
	unsigned flags;                /* uslab.h's USLAB_*, and CACHE_* above */
	unsigned id;
	unsigned min_partial;          /* empty slabs kept on the partial list */
	unsigned foreign_max;          /* objects of slabs nobody owns a thread caches */
	unsigned cpu_partial;          /* frozen slabs a thread may hold back */
	void (*ctor)(void *);

	mutex_t list_lock __attribute__((aligned(CACHE_LINE)));
	struct slab *partial;          /* doubly linked, under list_lock */
	struct slab *partial_tail;     /* its last slab */
	unsigned long nr_partial;

	atomic_long_t nr_slabs;
	atomic_long_t slabs_allocated;
	atomic_long_t slabs_freed;
	atomic_long_t stat[NR_CACHE_STATS];   /* of threads without a heap */

	/* the cache layer's registry */
	struct uslab_cache *next;
	struct kref ref;               /* creator + statistics walks */
	int dead;                      /* destroyed; set under the registry lock */
	char name[32];
};

/*
 * The calling thread's statistics rows: a cache's row is at s->stat_off
 * from it. The cache layer points it at the thread's heap when it makes
 * one, and back to NULL at its exit; a thread without one counts into the
 * cache's shared atomic counters. Rows are written by their thread only
 * (a relaxed store, no locked instruction, no line shared with other
 * threads: shared atomic counters cost the 8 KiB malloc+free pair 40 % of
 * its time); readers sum every row (cache layer, cache_report).
 */
extern __thread char *tls_stat_rows __attribute__((tls_model("initial-exec")));

static inline void stat_add(struct uslab_cache *s, enum cache_stat id, long n)
{
	char *rows = tls_stat_rows;

	if (likely(rows)) {
		long *ctr = (long *)(rows + s->stat_off) + id;
		WRITE_ONCE(*ctr, *ctr + n);
	} else {
		atomic_long_add(n, &s->stat[id]);
	}
}

/* ---- objects ------------------------------------------------------------------- */

/* The call that frees s's objects, for messages: malloc's caches' are
 * freed by free() (and realloc), the others' by uslab_cache_free (or its
 * bulk form). */
static inline const char *cache_free_call(const struct uslab_cache *s)
{
	return s->flags & CACHE_MALLOC ? "free" : "uslab_cache_free";
}

/*
 * The free-pointer key (uslab.h: a free object's link is stored as
 * next ^ its own address ^ key). Set once, from the kernel's random bits,
 * before the first slab is made (fp_key_setup, by slab_new and by the
 * cache layer before it copies the key into a new heap); no link exists
 * before it.
 */
extern uintptr_t fp_key;
uintptr_t fp_key_setup(void);

/*
 * The free mark: what a free malloc object keeps in its second word, from
 * its free until its next allocation (which clears it), wherever it waits -
 * a cpu freelist, an owner-local list, a message, a slab's freelist. A free
 * that finds it is a double free (kmalloc.h). Random, set with the key (so
 * before any object exists), and not the key: a leaked mark tells nothing
 * about links. Its low byte is odd, 0x81 to 0xef (FREE_MARK_BYTE): no small
 * number, ASCII character, aligned pointer's low byte or small negative
 * number has it, which the inline free's one-byte test relies on
 * (free_mark_maybe). A live block holds the whole mark only if the program
 * put it there, 1 in 2^56 for data it did not copy from a freed block.
 */
extern uintptr_t free_mark;
_Static_assert(USLAB_ADDR_BITS_ == REG_ADDR_BITS, "uslab.h's pop check covers every segment");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the mark's low byte is its first");
#define FREE_MARK_BYTE(r) (0x81u + 2u * (unsigned)((r) % 56u))   /* 0x81, 0x83, ..., 0xef */

static inline bool free_marked(const void *obj)
{
	return ((const uintptr_t *)obj)[1] == free_mark;
}

/*
 * The inline free's test: the second word's low byte against the mark's.
 * A block the program has just written a byte or a few at a time sits in
 * the store buffer, and a word load over several of those stores must
 * wait for them to reach the cache; a byte load takes its value from the
 * store that wrote it, whatever its width. A byte that matches (every
 * double free, and a live block whose byte happens to) sends the free to
 * the slow path, which compares the whole word (free_marked).
 */
static inline bool free_mark_maybe(const void *obj, uintptr_t mark)
{
	return ((const uint8_t *)obj)[sizeof(uintptr_t)] == (uint8_t)mark;
}

/* Where the fast paths read the key, with a plain load that folds into
 * their XOR: it is set by a constructor, before the program's threads
 * (fp_key_setup covers the calls that come earlier, from other libraries'
 * constructors). */
static inline const uslab_word_ *fp_key_get(void)
{
	return (const uslab_word_ *)&fp_key;
}

/* The free pointer: the one pair of helpers. */
static inline void *fp_get(const struct uslab_cache *s, const void *obj)
{
	return uslab_fp_load_((const char *)obj + s->fp_offset, fp_key_get());
}

static inline void fp_set(const struct uslab_cache *s, void *obj, void *fp)
{
	uslab_fp_store_((char *)obj + s->fp_offset, fp, fp_key_get());
}

/*
 * The one object-validity test: "off is k * stride with k < objects" in one
 * multiply and one compare. With magic = floor(2^64 / stride) + 1 and
 * e = magic * stride - 2^64 (0 < e <= stride): off = k * stride gives
 * off * magic = k * e (mod 2^64), while any other off < 2^21 (a run holds
 * at most SLAB_MAX_UNITS units) gives at least 2^64 / stride > 2^43. So
 * off * magic < objects * e exactly when off is a valid object offset.
 * For stride <= STRIDE_EXACT_MAX it stays exact for any address difference
 * of user space, -2^48 < off < 2^48 (uslab.h's inline free, which has no
 * bound on off): with off = k * stride + r, 0 <= r < stride, the product
 * is k * e + r * magic, and k * e < 2^48 while magic >= 2^49, so it
 * neither wraps nor, for r > 0, falls below 2^49; a negative off gives
 * 2^64 minus such a sum, which stays above 2^49 - 2^48 as well.
 */
#define STRIDE_EXACT_MAX (32u << 10)
static inline void object_index_magic(uint32_t stride, uint32_t objects, uint64_t *magic,
				      uint64_t *limit)
{
	unsigned __int128 m = ((unsigned __int128)1 << 64) / stride + 1;
	uint64_t e = (uint64_t)(m * stride - ((unsigned __int128)1 << 64));

	*magic = (uint64_t)m;
	*limit = (uint64_t)objects * e;
}
_Static_assert((uint64_t)SLAB_MAX_UNITS * UNIT_SIZE <= 1ull << 21, "object_offset_valid's bound");

/* off: an address minus the base of the run (or unit) holding it. */
static inline bool object_offset_valid(uint64_t magic, uint64_t limit, uintptr_t off)
{
	return off * magic < limit;
}

/* The index of the object at a valid offset: off * magic = k * 2^64 + k * e
 * with k * e < 2^64, so the high word is k. */
static inline unsigned object_index(const struct uslab_cache *s, uintptr_t off)
{
	return (unsigned)(((unsigned __int128)off * s->obj_magic) >> 64);
}

/* ---- owner fields (docs/slab.md: ownership) ----------------------------------------- */

/*
 * malloc's free reads owner_tp and owner_cpu in the descriptor of the unit
 * its object is in, so a malloc slab of several units has them in each
 * (slab_set_owner, slab_clear_owner); any other slab only in its head.
 */
static inline unsigned slab_owner_units(const struct slab *slab)
{
	return slab->kfree_magic ? slab->nunits : 1;
}

static inline void slab_clear_owner(struct slab *slab)
{
	unsigned n = slab_owner_units(slab);

	for (unsigned i = 0; i < n; i++)
		WRITE_ONCE(slab[i].owner_tp, 0);
	WRITE_ONCE(slab->owner, NULL);
	for (unsigned i = 0; i < n; i++)
		WRITE_ONCE(slab[i].owner_cpu, NULL);
}

/* ---- slab life and the word (slab.c) ----------------------------------------------- */

struct slab *slab_new(struct uslab_cache *s);         /* frozen, nothing built */
/* how much slab_build links: as many as are built (the first call: the
 * objects that start in the first page), one page's worth, or all the rest */
enum build_step { BUILD_GROW, BUILD_PAGE, BUILD_REST };
void *slab_build(struct uslab_cache *s, struct slab *slab, void *then, enum build_step step,
		 unsigned *count);
void slab_discard(struct uslab_cache *s, struct slab *slab);
bool slab_release_unbuilt(struct uslab_cache *s, struct slab *slab, unsigned n);
void slab_unfreeze(struct uslab_cache *s, struct slab *slab, void *head, void *tail,
		   unsigned n);
void *slab_take_freelist(struct uslab_cache *s, struct slab *slab, bool freeze, unsigned max,
			 unsigned *count);
struct slab *partial_take(struct uslab_cache *s, void **freelist, unsigned max, unsigned *count);
void *partial_take_shared(struct uslab_cache *s, unsigned max, unsigned *count);
void *slab_new_shared(struct uslab_cache *s, unsigned max, unsigned *count);
bool __slab_free(struct uslab_cache *s, struct slab *slab, void *head, void *tail,
		 unsigned cnt, bool can_freeze);
void cache_shrink_partial(struct uslab_cache *s);

/*
 * __slab_free's common case, inline: the chain head..tail of cnt objects
 * onto a slab whose freelist is not empty and that keeps objects in use
 * after it - frozen, or PARTIAL staying PARTIAL - so the push changes no
 * list and freezes nothing: one read of the word, one dwcas. false, the
 * slab unchanged, when it is FULL, would be EMPTY, looks like a double free,
 * or the dwcas lost a race (a retry, as __slab_free counts its own);
 * __slab_free then decides on a fresh read (its loop sets tail's link, which
 * this may have written, again).
 */
static inline bool slab_free_quick(struct uslab_cache *s, struct slab *slab, void *head,
				   void *tail, unsigned cnt)
{
	dword_t old = dwcas_read(&slab->xword);
	void *prior = (void *)old.lo;

	if (!prior || ctr_inuse(old.hi) <= cnt || prior == head)
		return false;
	fp_set(s, tail, prior);
	INTERLEAVE("free:cas");
	/* inuse is the low field, and stays above 0: the others unchanged */
	if (likely(dwcas_try_cmpxchg(&slab->xword, &old, (dword_t){ (uintptr_t)head, old.hi - cnt })))
		return true;
	stat_add(s, STAT_DWCAS_RETRY, 1);
	return false;
}

#pragma GCC visibility pop

#endif /* USLAB_SLAB_H */
