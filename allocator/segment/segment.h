/* SPDX-License-Identifier: MIT */
/*
 * segment.h - memory from the OS: segments carved into units, one
 * descriptor per unit, the pointer -> descriptor lookup, runs of units,
 * giving free units back (decay), freed huge ranges kept for reuse, and the
 * metadata allocator.
 *
 *   segment: SEG_SIZE bytes aligned to SEG_SIZE, carved into UNIT_SIZE units.
 *   +------------------+--------+--------+-----+--------+
 *   | header (3 units) | unit 3 | unit 4 | ... | unit N |
 *   | struct segment   |   runs of 1..SLAB_MAX_UNITS units: slabs, large blocks
 *   |  .desc[N] ------------> one struct slab per unit (tails point to head)
 *   +------------------+--------+--------+-----+--------+
 *   A free unit's descriptor has head NULL, kind FREE and no free-check
 *   or owner fields, as a zero page reads: a new segment writes only the
 *   descriptor pages of the units it hands out.
 *
 *   pointer -> descriptor:  seg  = p & ~(SEG_SIZE - 1)
 *                           head = seg->desc[(p - seg) >> UNIT_SHIFT].head
 *
 * Invariants (seg_lock): a unit is free exactly when its free_map bit is
 * set, and then its descriptor is clear; dirty_map and aged_map are subsets
 * of free_map; a segment's biased `users` counts the runs it has out, and
 * its release flag goes on only while none is out.
 */
#ifndef USLAB_SEGMENT_H
#define USLAB_SEGMENT_H

#include "platform.h"

#pragma GCC visibility push(hidden)

#define SEG_SHIFT      22                     /* 4 MiB segments */
#define SEG_SIZE       (1ul << SEG_SHIFT)
#define UNIT_SHIFT     14                     /* 16 KiB units */
#define UNIT_SIZE      (1ul << UNIT_SHIFT)
#define SEG_UNITS      (SEG_SIZE / UNIT_SIZE) /* 256 */
#define SEG_HDR_UNITS  3                      /* 256 x 128-byte descriptors + fields */
#define SLAB_MAX_UNITS 128                    /* 2 MiB: enough for a 1 MiB object */
#define HUGE_SEGMENTS_AFTER 4                 /* segments mapped before slabs get
						 huge pages (segment.c, segment_map) */

enum slab_kind {
	SLAB_KIND_FREE = 0,      /* unit not in use */
	SLAB_KIND_SLAB = 1,      /* head unit of an object slab */
	SLAB_KIND_TAIL = 2,      /* later unit of a multi-unit run */
	SLAB_KIND_LARGE = 3,     /* head unit of a large block (malloc) */
};

struct uslab_cache;
struct thread_heap;
struct cpu_slab;

/*
 * A unit's descriptor. This layer owns head, kind and nunits (and clears
 * every field of a unit that leaves its run); the slab layer (slab/slab.h)
 * owns the rest of a slab's head descriptor: the coupled word and its lists;
 * the cache layer the owner fields. base, the free-check fields and
 * owner_tp and owner_cpu are in every unit of a run whose objects malloc's
 * free may take.
 */
struct slab {
	/* first cache line: everything malloc's free fast path reads */
	struct slab *head;             /* head descriptor of this unit's run, NULL if free */
	uintptr_t base;                /* first object */
	uintptr_t owner_tp;            /* thread_self() of the thread whose heap froze it,
					  0 when none (written by that thread only) */
	struct cpu_slab *owner_cpu;    /* where malloc's free puts the owner's frees: that
					  heap's cpu slab of the cache, or the list beside
					  it (the cache layer's choice; written by that
					  thread only) */
	uint16_t nunits;
	uint8_t kind;
	uint8_t on_partial;            /* on cache->partial; changed under list_lock */
	uint32_t span;                 /* objects * stride */
	uint64_t kfree_magic;          /* object_index_magic() of a slab malloc's free may
					  take, else 0 */
	uint64_t kfree_limit;          /* (base, kfree_magic and kfree_limit: every unit) */
	struct uslab_cache *cache;
	/* second line: the coupled word and the lists */
	void *local_free;              /* owner-only: its frees into this frozen slab
					  that did not go to a cpu freelist */
	struct slab *next, *prev;      /* partial list (list_lock) or cpu-partial (owner) */
	struct thread_heap *owner;     /* the heap that froze it, NULL when none */
	dword_t xword;                 /* {freelist, counters}: dwcas only (slab/slab.h) */
	uint64_t local_count;          /* owner-only: length of local_free */
	uint32_t built;                /* objects linked so far (slab_build); below
					  objects only while frozen, owner-written */
	uint32_t reuse_refills;        /* owner-only: refills served by frees alone
					  since the last build (slab_build_more) */
};
_Static_assert(offsetof(struct slab, xword) % 16 == 0, "the coupled word must be 16-aligned");
_Static_assert(offsetof(struct slab, cache) + sizeof(void *) <= 64 &&
	       offsetof(struct slab, local_free) == 64, "free-path fields share one cache line");
_Static_assert(sizeof(struct slab) == 128, "descriptors are two cache lines (unit_desc_off's << 7)");

struct segment {
	uint64_t magic;
	struct segment *next, *prev;   /* all segments, under seg_lock */
	/* runs handed out, and "being released" as the biased flag: the flag is
	 * set only while no run is out, and a segment with it set hands out
	 * nothing. Kept beside free_units (the unit-level view) as a cross-check. */
	struct biased users;
	unsigned free_units;
	unsigned dirty_units;
	uint64_t aged_ms;                    /* the segment's last decay tick */
	bool huge;                           /* marked for huge pages: huge_ok runs
						only (segment_map; set before it is
						listed) */
	bool large_only;                     /* carved outside the segment region:
						large runs only (segment_map) */
	uint16_t slab_units;                 /* units of its slabs in use: which
						runs it prefers (find_free_run) */
	uint32_t slot;                       /* its entry in the search index
						(segment.c), under seg_lock */
	uint64_t free_map[SEG_UNITS / 64];   /* bit set = unit free; under seg_lock */
	uint64_t dirty_map[SEG_UNITS / 64];  /* free but still committed */
	uint64_t aged_map[SEG_UNITS / 64];   /* dirty since before the last tick */
	struct slab desc[SEG_UNITS] __attribute__((aligned(CACHE_LINE)));
};
#define SEG_MAGIC 0x75736c6162536567ull   /* "uslabSeg" */
_Static_assert(sizeof(struct segment) <= SEG_HDR_UNITS * UNIT_SIZE, "header fits its units");

/* ---- pointer -> descriptor --------------------------------------------------------- */

/* One byte per possible segment of the user address space (47 bits on
 * x86-64, 48 on arm64, where mmap hands out addresses just below 2^48):
 * 32 or 64 MiB of .bss zero pages (api/layout.c), of which only those
 * covering our segments are touched. A mapping above it is not used
 * (segment_map), so every object lies below 2^REG_ADDR_BITS, which the
 * cpu freelist's pop relies on (uslab.h, USLAB_ADDR_BITS_). */
#if defined(__x86_64__)
#define REG_ADDR_BITS 47
#else
#define REG_ADDR_BITS 48
#endif
#define REG_SEGMENTS  (1ul << (REG_ADDR_BITS - SEG_SHIFT))
extern uint8_t seg_registry[REG_SEGMENTS];

/* A segment's byte: REG_SEGMENT while it is listed, else REG_NONE. */
enum { REG_NONE, REG_SEGMENT };

/* The registry byte of the segment holding p: a plain load, so that it
 * folds into a compare. The byte of a segment holding p was written
 * (release, registry_set) before p was handed out, and p reached this
 * thread through some later synchronisation. A byte that says "no
 * segment" for a huge block's p may have been written when a segment
 * there was unmapped, before the kernel mapped the block at its addresses:
 * an order through munmap and mmap, which ThreadSanitizer cannot see, so
 * under it the load is a relaxed atomic one (the same byte, read whole). */
static inline bool segment_registry_is(uintptr_t p, uint8_t v)
{
	uintptr_t idx = p >> SEG_SHIFT;

#if defined(__SANITIZE_THREAD__)
	return likely(idx < REG_SEGMENTS) && READ_ONCE(seg_registry[idx]) == v;
#else
	return likely(idx < REG_SEGMENTS) && seg_registry[idx] == v;
#endif
}

/* Is seg (any address in it) one of our segments? One byte load. */
static inline bool segment_is_registered(uintptr_t p)
{
	return !segment_registry_is(p, REG_NONE);
}

/*
 * The segment region (region.c): address space reserved from the first
 * segment on, growing in place as it fills, in which segments are placed
 * while it has room. Its unused parts read as zero, so a descriptor
 * anywhere in fast_len bytes from base can be read whatever p is: one of
 * a segment not in use is clear, as a free unit's, and refuses every
 * free. free's inline path so tells a pointer to take by one subtraction
 * and one compare (fast_len is what is reserved: 0 before the
 * reservation, without one, and while frees are diverted; base starts at
 * 2^63, so that a thread that sees fast_len set before base still finds
 * no pointer inside). A segment outside it (the region full, or none) is
 * still registered: its frees take the slow path.
 */
struct seg_region {
	uintptr_t base;
	uintptr_t fast_len;
};
extern struct seg_region seg_region;
#define REGION_MAX       (1ul << 42)            /* 4 TiB: USLAB_REGION is cut to it */
#define REGION_SLOTS_MAX (REGION_MAX >> SEG_SHIFT)
extern uint64_t region_freed_map[REGION_SLOTS_MAX / 64];   /* in api/layout.c */

/* p's offset in the region, and whether free's inline path may take it. */
static inline bool segment_region_fast(uintptr_t p, uintptr_t *rel)
{
#if defined(__SANITIZE_THREAD__)
	*rel = p - READ_ONCE(seg_region.base);
	return likely(*rel < READ_ONCE(seg_region.fast_len));
#else
	*rel = p - seg_region.base;
	return likely(*rel < seg_region.fast_len);
#endif
}

/* region.c, each taking seg_lock: a slot of the region for a new segment
 * (0: none), a slot given back (its pages read-only zeros again already);
 * region_slot_holds, without it: is seg one? */
uintptr_t region_slot_take(void);
void region_slot_give(uintptr_t seg);
bool region_slot_holds(uintptr_t seg);
void region_divert(bool on);
/* While on, free's inline path takes no block (fast_len is 0): the layers
 * above want every free of theirs to take the slow path (kmalloc.h). */
void segment_divert_frees(bool on);
size_t region_reserved_bytes(void);

static inline struct segment *ptr_segment(const void *p)
{
	return (struct segment *)((uintptr_t)p & ~(SEG_SIZE - 1));
}

/* Byte offset of p's unit descriptor in its segment's descriptor array:
 * the unit index times sizeof(struct slab), in one mask. */
static inline uintptr_t unit_desc_off(const void *p)
{
	return ((uintptr_t)p >> (UNIT_SHIFT - 7)) & ((SEG_UNITS - 1) << 7);
}

/* The descriptor at that offset. The empty asm hides that seg and off share
 * no bits (else GCC ORs them and misses base + index addressing), and, as
 * it runs for every call, keeps GCC from materialising the address once
 * when a caller reads several fields: each load folds seg + off + field. */
static __always_inline struct slab *desc_at(uintptr_t seg, uintptr_t off)
{
	__asm__("" : "+r"(off));
	return (struct slab *)(seg + offsetof(struct segment, desc) + off);
}

/* The head descriptor of p's run; NULL for a free unit (a descriptor that
 * was never written is one). */
static inline struct slab *segment_desc_head(uintptr_t seg, const void *p)
{
	return READ_ONCE(desc_at(seg, unit_desc_off(p))->head);
}

/* The slab or large run holding p, or NULL when p is in none of ours. */
static inline struct slab *ptr_to_slab(const void *p)
{
	uintptr_t seg = (uintptr_t)p & ~(SEG_SIZE - 1);

	if (unlikely(!segment_is_registered(seg)))
		return NULL;
	return segment_desc_head(seg, p);
}

/* Index in its segment of the unit a descriptor stands for. */
static inline unsigned desc_unit(const struct slab *d)
{
	return (unsigned)((((uintptr_t)d & (SEG_SIZE - 1)) - offsetof(struct segment, desc)) /
			  sizeof(struct slab));
}

/* First byte of the run a head descriptor stands for. */
static inline uintptr_t slab_start(const struct slab *slab)
{
	return ((uintptr_t)slab & ~(SEG_SIZE - 1)) + ((uintptr_t)desc_unit(slab) << UNIT_SHIFT);
}

/* ---- runs of units (segment.c) ------------------------------------------------------ */

/* A run of nunits units, its head descriptor marked kind (cache NULL);
 * NULL + ENOMEM. *zeroed (if not NULL) tells whether the run reads as zero
 * (no unit of it was freed since it was last given back to the OS).
 * huge_ok: its memory is written densely, so it may lie under huge pages
 * (segment.c, huge_segment_wanted). align: the index of its first unit in
 * its segment, so its address, is a multiple of align units (a power of
 * two, small enough that such a run fits beside the header). */
struct slab *segment_alloc_units_aligned(unsigned nunits, unsigned align, uint8_t kind,
					bool huge_ok, bool *zeroed);
static inline struct slab *segment_alloc_units(unsigned nunits, uint8_t kind, bool huge_ok,
					       bool *zeroed)
{
	return segment_alloc_units_aligned(nunits, 1, kind, huge_ok, zeroed);
}
void segment_free_units(struct slab *head);
/* Grow or shrink a run in place; false (unchanged) when it cannot grow. */
bool segment_resize_units(struct slab *head, unsigned nunits);
size_t segment_mapped_bytes(void);
size_t segment_committed_bytes(void);
unsigned long segment_lock_count(void);               /* tests: seg_lock taken so far */
void segment_give_back(struct segment *seg);
void segment_release_empty_over(unsigned keep);       /* unmap empty segments */
void segment_fork_child(void);                        /* fork child, locks held */
/* Visit every slab and large-block head (seg_lock held during the walk;
 * a slab's cache may still be NULL while it is being set up). */
void segment_for_each_slab(void (*fn)(struct slab *, void *), void *arg);
int segment_unit_state(const void *p);                /* tests: 0 used, 1 dirty, 2 clean */
/* Tests: every descriptor as the rules above say; problems printed, counted.
 * has_free_check(head) says whether a slab's objects are malloc's (the
 * layer above decides), so whether its units must carry free-check fields. */
long segment_check_descs(bool (*has_free_check)(const struct slab *head));

/*
 * Free runs a thread keeps (struct thread_heap holds one): a thread that
 * frees a large block is likely to ask for another soon, and a kept run
 * spares two trips through seg_lock. A freed run joins the kept runs next
 * to it in its segment; a request is cut from the smallest kept run that
 * holds it (segment.c argues why neither needs seg_lock). Owner-only, no
 * lock; bounded; a kept run's head stays marked TAIL (freed). Only a thread
 * whose kept runs serve it keeps them: a take from an empty cache or a take
 * served earns a credit (up to RUN_CACHE_CREDIT), a take that finds kept
 * runs but none that fits halves it, each run kept spends one. So a thread
 * that only frees blocks others allocated (a consumer) gives them back to
 * their segments, where the producer finds them, and one whose sizes vary
 * too much to reuse its own runs stops holding memory its next request
 * cannot use.
 */
#define RUN_CACHE_RUNS   8
#define RUN_CACHE_UNITS  256                  /* ... up to 4 MiB of them */
#define RUN_CACHE_CREDIT 16
struct run_cache {
	struct slab *runs[RUN_CACHE_RUNS];
	uint32_t units;
	uint32_t credit;                      /* runs it may still keep */
};
bool run_cache_put(struct run_cache *rc, struct slab *head);          /* false: no room */
struct slab *run_cache_take(struct run_cache *rc, unsigned units);   /* exactly units, or NULL */
void run_cache_flush(struct run_cache *rc);

/* ---- decay: giving free units' memory back (decay.c) -------------------------------- */

void segment_decay(void);                             /* slow paths: purge old dirt */
void segment_purge_all(void);                         /* decommit every dirty unit */
void segment_note_outside(long delta);                /* huge bytes in use: +/- */
size_t dirty_budget(void);                            /* free committed bytes to keep */

/* A purge's batch: ranges of units it madvises outside seg_lock. */
#define PURGE_BATCH 32
struct purge_range {
	struct segment *seg;
	unsigned first, n;
};
extern struct purge_range purge_inflight[PURGE_BATCH];   /* in api/layout.c */
extern void (*purge_test_hook)(void);                 /* tests: called mid-purge */

/* ---- freed huge ranges, kept for reuse (ranges.c) ------------------------------------
 * Committed memory a freed huge block left: the next huge request, or a new
 * segment, takes it instead of fresh pages. A range has an origin: ranges
 * carved from one mapping and never moved share it, and only those are
 * joined (so a joined range is still one mapping, which mremap can grow).
 */
uintptr_t range_cache_take(size_t len, unsigned long *origin);
uintptr_t range_cache_take_aligned(size_t len, size_t align);
bool range_cache_take_after(uintptr_t end, unsigned long origin, size_t len);
void range_cache_put(uintptr_t map, size_t len, unsigned long origin);
void range_cache_expire(uint64_t older_than);         /* UINT64_MAX: all */
void range_cache_decay(uint64_t now, uint64_t decay);
size_t range_cache_bytes(void);
unsigned long range_new_origin(void);                 /* a fresh or moved mapping's */

/* ---- metadata memory: heaps, messages, caches (meta.c) ------------------------------- */

void *meta_alloc(size_t size);                        /* zeroed, cache-line aligned */
void meta_free(void *p, size_t size);

/* ---- accounting, for the statistics report (account.c) -------------------------------
 * Where the segments' committed memory is, from one walk under seg_lock:
 * committed = header + slab + large + kept + dirty (clean units hold none).
 */
struct seg_account {
	size_t segments;           /* on the segment list */
	size_t committed_bytes;    /* the sum below */
	size_t header_bytes;       /* header units: struct segment and its descriptors */
	size_t slab_bytes;         /* units in object slabs */
	size_t large_bytes;        /* units in large blocks handed out */
	size_t kept_bytes;         /* units out in neither: freed large runs threads keep */
	size_t dirty_bytes;        /* free units still committed (decay gives them back) */
	size_t clean_bytes;        /* free units that hold no memory (not committed) */
	size_t slab_runs, large_runs;
};
/* Fill *a, calling head_fn (if not NULL) for each slab and large-block head
 * while seg_lock is held. try: for a signal handler (seg_lock only tried,
 * no lock-rank bookkeeping); false when the lock stayed busy. */
bool segment_account(struct seg_account *a, void (*head_fn)(struct slab *head, void *arg),
		     void *arg, bool try);
size_t meta_mapped_bytes(void);                      /* metadata mappings (meta.c) */
/* of those, the pages touched: async-signal-safe, takes no lock */
size_t meta_committed_bytes(void);

#pragma GCC visibility pop

#endif /* USLAB_SEGMENT_H */
