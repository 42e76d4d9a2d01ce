/* SPDX-License-Identifier: MIT */
/*
 * internal.h - uslab's internal types and the inline fast paths.
 *
 * Memory layout (see docs/slab.md for the slab state machine):
 *
 *   segment: SEG_SIZE bytes aligned to SEG_SIZE, carved into UNIT_SIZE units.
 *   +------------------+--------+--------+-----+--------+
 *   | header (2 units) | unit 2 | unit 3 | ... | unit N |
 *   | struct segment   |   slabs are runs of 1..SLAB_MAX_UNITS units
 *   |  .desc[N] ------------> one struct slab per unit (tails point to head)
 *   +------------------+--------+--------+-----+--------+
 *
 *   pointer -> slab:  seg  = p & ~(SEG_SIZE - 1)
 *                     slab = seg->desc[(p - seg) >> UNIT_SHIFT].head
 *
 * Lock order (outer first; the rank enum in debug builds asserts it):
 *   cache_registry (qrwlock) > heaps_lock > cache->list_lock
 *       > seg_lock > meta_lock > dwcas stripe locks (leaf, inside dwcas only)
 */
#ifndef USLAB_INTERNAL_H
#define USLAB_INTERNAL_H

#include "uslab.h"
#include "atomic.h"
#include "dwcas.h"
#include "spinlock.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define USLAB_API __attribute__((visibility("default")))
#define noinline __attribute__((noinline))
#define cold __attribute__((cold))

#define SEG_SHIFT      22                     /* 4 MiB segments */
#define SEG_SIZE       (1ul << SEG_SHIFT)
#define UNIT_SHIFT     14                     /* 16 KiB units */
#define UNIT_SIZE      (1ul << UNIT_SHIFT)
#define SEG_UNITS      (SEG_SIZE / UNIT_SIZE) /* 256 */
#define SEG_HDR_UNITS  2
#define SLAB_MAX_UNITS 128                    /* 2 MiB: enough for a 1 MiB object */
#define CACHE_MAX_SIZE (1ul << 20)
#define CACHE_LINE     64

#define MAX_CACHES     4096                   /* live caches at once */
#define CPU_CHUNK      64                     /* cpu slabs per per-thread chunk */
#define NR_CHUNKS      (MAX_CACHES / CPU_CHUNK)

#define round_up(x, a) (((x) + (a) - 1) & ~((uintptr_t)(a) - 1))
#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

/* ---- the slab and its coupled word ---------------------------------------
 *
 *  xword.lo  freelist: shared free objects (remote frees push here)
 *  xword.hi  counters:
 *   63            32 31    30           16 15            0
 *  +----------------+------+---------------+---------------+
 *  |     spare      |frozen|    objects    |     inuse     |
 *  +----------------+------+---------------+---------------+
 *
 *  inuse counts objects not on this word's freelist: live objects plus,
 *  while the slab is frozen, those on its owner's private (cpu) freelist.
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

enum slab_kind {
	SLAB_KIND_FREE = 0,      /* unit not in use */
	SLAB_KIND_SLAB = 1,      /* head unit of an object slab */
	SLAB_KIND_TAIL = 2,      /* later unit of a multi-unit run */
	SLAB_KIND_LARGE = 3,     /* head unit of a large block (malloc) */
};

struct uslab_cache;

struct slab {
	dword_t xword;                 /* {freelist, counters}: dwcas only */
	struct uslab_cache *cache;
	struct slab *next, *prev;      /* partial list (list_lock) or cpu-partial (owner) */
	struct slab *head;             /* head descriptor of this unit's run */
	uintptr_t base;                /* first object */
	uint16_t nunits;
	uint8_t kind;
	uint8_t on_partial;            /* on cache->partial; changed under list_lock */
	uint32_t unit;                 /* index of this unit in its segment */
};
_Static_assert(offsetof(struct slab, xword) % 16 == 0, "the coupled word must be 16-aligned");
_Static_assert(sizeof(struct slab) == 64, "one descriptor per cache line");

struct segment {
	uint64_t magic;
	struct segment *next, *prev;   /* all segments, under seg_lock */
	atomic_t used_units;           /* units handed out (biased: top bit = releasing) */
	unsigned free_units;
	uint64_t free_map[SEG_UNITS / 64];   /* bit set = unit free; under seg_lock */
	struct slab desc[SEG_UNITS] __attribute__((aligned(CACHE_LINE)));
};
#define SEG_MAGIC 0x75736c6162536567ull   /* "uslabSeg" */
_Static_assert(sizeof(struct segment) <= SEG_HDR_UNITS * UNIT_SIZE, "header fits its units");

/* ---- caches and per-thread cpu slabs -------------------------------------- */

struct cpu_slab {
	void *freelist;                /* private: only the owning thread */
	uintptr_t base;                /* active slab's object area [base, base+span) */
	uintptr_t span;                /* 0 when there is no active slab */
	struct slab *slab;             /* active (frozen) slab */
	struct slab *partial;          /* frozen slabs held back, linked by ->next */
	unsigned nr_partial;
	unsigned pad;
};

struct thread_heap {
	struct cpu_slab *chunk[NR_CHUNKS];   /* chunk k holds caches k*64 .. k*64+63 */
	struct thread_heap *next;            /* all heaps, under heaps_lock */
	int live;                            /* owned by a running thread */
	int exited;                          /* its thread ran the exit flush */
};

struct uslab_cache {
	/* read by the fast paths */
	uint32_t chunk, slot;          /* where this cache's cpu slab lives in a heap */
	uint32_t fp_offset;            /* free pointer offset inside an object slot */
	uint32_t stride;               /* bytes per object slot */
	uint64_t stride_magic;         /* ceil(2^64 / stride): on_object_boundary() */

	uint32_t size;                 /* requested object size */
	uint32_t align;
	uint32_t objects;              /* per slab */
	uint32_t units;                /* per slab */
	unsigned flags;
	unsigned id;
	unsigned min_partial;          /* empty slabs kept on the partial list */
	unsigned cpu_partial;          /* frozen slabs a thread may hold back */
	void (*ctor)(void *);

	spinlock_t list_lock __attribute__((aligned(CACHE_LINE)));
	struct slab *partial;          /* doubly linked, under list_lock */
	unsigned long nr_partial;

	atomic_long_t nr_slabs;
	atomic_long_t slabs_allocated;
	atomic_long_t slabs_freed;

	struct uslab_cache *next;      /* registry */
	char name[32];
};

/* ---- free pointer: the one pair of helpers --------------------------------- */

static inline void *fp_get(const struct uslab_cache *s, const void *obj)
{
	return *(void *const *)((const char *)obj + s->fp_offset);
}

static inline void fp_set(const struct uslab_cache *s, void *obj, void *fp)
{
	*(void **)((char *)obj + s->fp_offset) = fp;
}

/* ---- pointer -> slab --------------------------------------------------------- */

bool segment_is_registered(uintptr_t seg);

static inline struct segment *ptr_segment(const void *p)
{
	return (struct segment *)((uintptr_t)p & ~(SEG_SIZE - 1));
}

/* The slab holding p, or NULL when p is not in a live slab of ours. */
static inline struct slab *ptr_to_slab(const void *p)
{
	uintptr_t seg = (uintptr_t)p & ~(SEG_SIZE - 1);

	if (unlikely(!segment_is_registered(seg)))
		return NULL;
	struct slab *d = &((struct segment *)seg)->desc[((uintptr_t)p - seg) >> UNIT_SHIFT];
	return READ_ONCE(d->head);
}

static inline uintptr_t slab_start(const struct slab *slab)
{
	return ((uintptr_t)slab & ~(SEG_SIZE - 1)) + ((uintptr_t)slab->unit << UNIT_SHIFT);
}

/* ---- os.c ---------------------------------------------------------------- */
void *os_map_aligned(size_t size, size_t align);
void os_unmap(void *p, size_t size);
void os_decommit(void *p, size_t size);
size_t os_page_size(void);

/* ---- segment.c ------------------------------------------------------------ */
/* A run of nunits units, its head descriptor marked kind (cache NULL);
 * NULL + ENOMEM. Free units are decommitted, so a new run reads as zero. */
struct slab *segment_alloc_units(unsigned nunits, uint8_t kind);
void segment_free_units(struct slab *head);
bool segment_resize_units(struct slab *head, unsigned nunits);
size_t segment_mapped_bytes(void);
void segment_give_back(struct segment *seg);
void segment_release_empty_over(unsigned keep);       /* unmap empty segments */
void segment_lock_all(void);                          /* fork: hold seg_lock */
void segment_unlock_all(void);
/* Visit every slab and large-block head (seg_lock held during the walk;
 * a slab's cache may still be NULL while it is being set up). */
void segment_for_each_slab(void (*fn)(struct slab *, void *), void *arg);

void *meta_alloc(size_t size);                        /* zeroed, cache-line aligned */
void meta_free(void *p, size_t size);

/* ---- slab.c ---------------------------------------------------------------- */
struct slab *slab_new(struct uslab_cache *s);         /* frozen, full private list */
void slab_discard(struct uslab_cache *s, struct slab *slab);
void slab_unfreeze(struct uslab_cache *s, struct slab *slab, void *head, void *tail,
		   unsigned n);
void *slab_take_freelist(struct slab *slab, bool freeze);
struct slab *partial_take(struct uslab_cache *s, void **freelist);
bool __slab_free(struct uslab_cache *s, struct slab *slab, void *head, void *tail,
		 unsigned cnt, bool can_freeze);
void cache_shrink_partial(struct uslab_cache *s, bool all);

/* ---- cache.c: per-thread heap access ---------------------------------------- */

extern __thread struct thread_heap *tls_heap __attribute__((tls_model("initial-exec")));

static inline struct cpu_slab *this_cpu_slab(const struct uslab_cache *s)
{
	return &tls_heap->chunk[s->chunk][s->slot];
}

struct cpu_slab *cpu_slab_get(struct uslab_cache *s);  /* makes a real heap/chunk */
int cache_setup(struct uslab_cache *s, const char *name, size_t size, size_t align,
		unsigned flags, void (*ctor)(void *));
bool kmalloc_init(void);                               /* kmalloc.c: the static caches */
void caches_lock_all(void);                            /* fork: registry, heaps, lists */
void caches_unlock_all(void);
void caches_reclaim_dead_heaps(void);

void *cache_alloc_slow(struct uslab_cache *s);
void cache_free_slow(struct uslab_cache *s, void *obj);
noinline cold void uslab_fatal(const char *call, const void *p, const char *what);

/*
 * Fast paths: no atomic instruction, no lock. An empty static heap stands in
 * for a thread that has none yet, so neither path tests for it: its freelist
 * is NULL and its span 0, and both fall through to the slow path.
 */
static inline void *cache_alloc_fast(struct uslab_cache *s)
{
	struct cpu_slab *c = this_cpu_slab(s);
	void *obj = c->freelist;

	if (unlikely(!obj))
		return cache_alloc_slow(s);
	c->freelist = fp_get(s, obj);
	return obj;
}

static inline void cache_free_fast(struct uslab_cache *s, void *obj)
{
	struct cpu_slab *c = this_cpu_slab(s);

	if (likely((uintptr_t)obj - c->base < c->span)) {
		if (unlikely(obj == c->freelist))
			uslab_fatal("uslab_cache_free", obj, "double free");
		fp_set(s, obj, c->freelist);
		c->freelist = obj;
		return;
	}
	cache_free_slow(s, obj);
}

#endif /* USLAB_INTERNAL_H */
