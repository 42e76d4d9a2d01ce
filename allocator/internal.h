/* SPDX-License-Identifier: MIT */
/*
 * internal.h - uslab's internal types and the inline fast paths.
 *
 * Memory layout (see docs/slab.md for the slab state machine):
 *
 *   segment: SEG_SIZE bytes aligned to SEG_SIZE, carved into UNIT_SIZE units.
 *   +------------------+--------+--------+-----+--------+
 *   | header (3 units) | unit 3 | unit 4 | ... | unit N |
 *   | struct segment   |   slabs are runs of 1..SLAB_MAX_UNITS units
 *   |  .desc[N] ------------> one struct slab per unit (tails point to head)
 *   +------------------+--------+--------+-----+--------+
 *   A free unit's descriptor has head NULL, kind FREE and no free-check
 *   fields, as a zero page reads: a new segment writes only the descriptor
 *   pages of the units it hands out.
 *
 *   pointer -> slab:  seg  = p & ~(SEG_SIZE - 1)
 *                     slab = seg->desc[(p - seg) >> UNIT_SHIFT].head
 *
 * Lock order (outer first; all ticket spinlocks; process.c's fork handlers
 * take them all in this order):
 *   kmalloc_init_lock > huge_lock (leaf in normal use) > cache_registry (qrwlock)
 *       > heaps_lock > heap->lock > cache->list_lock > seg_lock > meta_lock
 *       > dwcas stripe locks (leaf, inside dwcas only)
 *   arena_lock (arena.c): a leaf, taken last at fork
 */
#ifndef USLAB_INTERNAL_H
#define USLAB_INTERNAL_H

#define USLAB_BUILDING_LIBRARY 1   /* uslab.h: no inline fast paths in here */
#include "uslab.h"
#include "atomic.h"
#include "dwcas.h"
#include "spinlock.h"
#include "kref.h"
#include "biased.h"
#include "qrwlock.h"
#include "mailbox.h"
#include "stats.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define USLAB_HAVE_SINGLE_THREADED 1
#endif

/* Everything declared from here on is internal to the library: hidden, so
 * the fast paths reach it without a trip through the GOT. */
#pragma GCC visibility push(hidden)

#define USLAB_API __attribute__((visibility("default")))
/* After every toolkit header: these names must not expand inside theirs. */
#define noinline __attribute__((__noinline__))
#define cold __attribute__((__cold__))

#define SEG_SHIFT      22                     /* 4 MiB segments */
#define SEG_SIZE       (1ul << SEG_SHIFT)
#define UNIT_SHIFT     14                     /* 16 KiB units */
#define UNIT_SIZE      (1ul << UNIT_SHIFT)
#define SEG_UNITS      (SEG_SIZE / UNIT_SIZE) /* 256 */
#define SEG_HDR_UNITS  3                      /* 256 x 128-byte descriptors + fields */
#define SLAB_MAX_UNITS 128                    /* 2 MiB: enough for a 1 MiB object */
#define CACHE_MAX_SIZE (1ul << 20)
#define CACHE_LINE     64

#define MAX_CACHES     4096                   /* live caches at once */
#define KMALLOC_IDS    64                     /* ids reserved for kmalloc caches */
#define NEVER_USED_ID  (KMALLOC_IDS - 1)      /* no cache: its cpu slab stays empty */
#define HEAP_RUNS      8                      /* large runs a thread keeps */
#define HEAP_RUN_UNITS 256                    /* ... up to 4 MiB of them */
#define CPU_CHUNK      64                     /* cpu slabs per page of a heap */
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

struct thread_heap;

struct slab {
	/* first cache line: everything malloc's free fast path reads */
	/* every unit of a run: its head, and (a kmalloc slab) what malloc's
	 * free checks a pointer with, copied from the head */
	struct slab *head;             /* head descriptor of this unit's run, NULL if free */
	uintptr_t base;                /* first object */
	uintptr_t owner_tp;            /* thread_self() of the thread whose heap froze it,
					  0 when none (written by that thread only) */
	void *local_free;              /* owner-only: its frees into this frozen slab */
	uint64_t local_count;          /* owner-only: length of local_free */
	uint64_t kfree_magic;          /* kmalloc slab: see object_index_magic(); else 0 */
	uint64_t kfree_limit;          /* (base, kfree_magic and kfree_limit: every unit) */
	struct uslab_cache *cache;
	/* second line: the coupled word and the lists */
	dword_t xword;                 /* {freelist, counters}: dwcas only */
	struct slab *next, *prev;      /* partial list (list_lock) or cpu-partial (owner) */
	struct thread_heap *owner;     /* the heap that froze it, NULL when none */
	uint16_t nunits;
	uint8_t kind;
	uint8_t on_partial;            /* on cache->partial; changed under list_lock */
	uint32_t span;                 /* objects * stride */
	uint32_t built;                /* objects linked so far (slab_build); below
					  objects only while frozen, owner-written */
	uint32_t reuse_refills;        /* owner-only: refills served by frees alone
					  since the last build (slab_build_more) */
	char pad[8];
};
_Static_assert(offsetof(struct slab, xword) % 16 == 0, "the coupled word must be 16-aligned");
_Static_assert(offsetof(struct slab, xword) == 64, "free-path fields share one cache line");
_Static_assert(sizeof(struct slab) == 128, "descriptors are two cache lines (ptr_to_slab's << 7)");

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
	uint64_t free_map[SEG_UNITS / 64];   /* bit set = unit free; under seg_lock */
	uint64_t dirty_map[SEG_UNITS / 64];  /* free but still committed */
	uint64_t aged_map[SEG_UNITS / 64];   /* dirty since before the last tick */
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
	/* statistics, owner-only, folded into the cache's at each refill: */
	uint32_t supplied;             /* objects the slow path put on freelist */
	uint64_t fast_frees;           /* frees pushed on freelist (cache API, foreign) */
	uint32_t foreign_left;         /* malloc: other slabs' objects it may still take
					  before a flush (0 in empty_heap: always slow) */
	uint32_t pad;
};
_Static_assert(sizeof(struct cpu_slab) == 64, "one cpu slab per cache line");
/* uslab.h's inline fast paths see these fields through its mirror structs */
#define MIRRORS(T, f, U, g) \
	_Static_assert(offsetof(T, f) == offsetof(U, g) && sizeof(((T *)0)->f) == sizeof(((U *)0)->g), \
		       #T "." #f " moved: update " #U " in uslab.h")
MIRRORS(struct cpu_slab, freelist, struct uslab_cpu_cache_, freelist);
MIRRORS(struct cpu_slab, base, struct uslab_cpu_cache_, base);
MIRRORS(struct cpu_slab, span, struct uslab_cpu_cache_, span);
MIRRORS(struct cpu_slab, fast_frees, struct uslab_cpu_cache_, fast_frees);
_Static_assert(sizeof(struct cpu_slab) == sizeof(struct uslab_cpu_cache_), "uslab_cpu_cache_ size");

/*
 * A thread's heap: one cpu slab per possible cache, at byte offset
 * cache->cpu_offset (= id * 64), so the fast paths reach theirs with one
 * load from the TLS pointer. 256 KiB of address space, mapped fresh: only
 * the pages (chunks of 64 cpu slabs) of caches the thread uses are ever
 * touched, and chunks_used says which, so walks never touch the others.
 */
/*
 * Remote frees by message (cache.c, docs/slab.md): a thread that frees
 * objects of slabs another thread's heap owns collects the pointers, per
 * cache, in a message addressed to that heap, and pushes the message onto
 * the heap's inbox for the cache when it is full (or when the next object
 * has another owner, or at flush). The owner takes the inbox in its
 * allocation slow path and puts the objects on its own slabs' lists: only
 * the owner writes its objects, and the freeing thread touches none.
 */
#define MSG_OBJS 59
struct remote_msg {
	struct mailbox_node node;      /* first: in an inbox, a returns box or a pool */
	struct uslab_cache *cache;
	struct thread_heap *to;
	struct thread_heap *from;      /* its sender's heap, which gets it back */
	uint64_t count;
	void *obj[MSG_OBJS];
};
_Static_assert(sizeof(struct remote_msg) == 512, "a message is 8 cache lines");

/*
 * A heap is a page-aligned mapping, and its cpu slabs start one line in, so
 * that the one at the start of each page is cpu[64k - 1]: ids 63, 127, ...,
 * which no cache is given (63 is NEVER_USED_ID, cache_id_alloc skips the
 * rest). A cpu slab at a page start would share its low 12 address bits
 * with every slab's first object, and the CPU's store-to-load
 * disambiguation, which compares only those bits, then makes a free's
 * stores and the next allocation's loads wait on each other: malloc(8) +
 * free took 5.7 ns (4.0 now) while class 0's cpu slab was at offset 0, and
 * the uslab_cache pair of the first cache a program made (id 64, offset
 * 4096) 12 ns (1.5 now).
 */
struct thread_heap {
	uint64_t chunks_used;                /* bit k: cpu[k*64 .. k*64+63] in use */
	struct thread_heap *next;            /* all heaps, under heaps_lock */
	struct remote_msg *msg_pool;         /* spare messages (owner only) */
	uint32_t run_units;                  /* units held in runs[] */
	int live;                            /* owned by a running thread */
	int exited;                          /* its thread ran the exit flush */
	/* held by its thread while it flushes (exit, uslab_thread_flush,
	 * shrink), and by destroy, validate and fork while they read or flush
	 * its cpu slabs and messages; a thread's fast and slow paths take none */
	spinlock_t lock;
	struct cpu_slab cpu[MAX_CACHES]      /* ids 0..63: the kmalloc caches */
		__attribute__((aligned(CACHE_LINE)));
	/*
	 * Rows by cache, reached through heap_outbox/heap_inbox/heap_stat: the
	 * message this thread is filling (owner only); the stack of messages
	 * other threads sent here (pushed by any thread with a CAS, taken whole
	 * by the owner; closed from its exit on); statistics, written by the
	 * owner only (stat_add; heaps live for good, so these are never lost;
	 * a new cache clears its row). The kmalloc caches' rows come first,
	 * together, their statistics by storage slot (start-up classes first):
	 * a short-lived program's heap is then two pages written, its cpu
	 * slabs' and this one, not five. The other caches' follow, by id.
	 */
	struct slab *runs[HEAP_RUNS];        /* freed large runs kept for reuse */
	struct mailbox msg_returns;          /* its messages, drained: posted back by
						their receivers, taken whole by the owner */
	struct remote_msg *k_outbox[KMALLOC_IDS];
	struct mailbox k_inbox[KMALLOC_IDS] __attribute__((aligned(CACHE_LINE)));
	long k_stat[KMALLOC_IDS][NR_CACHE_STATS] __attribute__((aligned(CACHE_LINE)));
	struct remote_msg *outbox[MAX_CACHES - KMALLOC_IDS];
	struct mailbox inbox[MAX_CACHES - KMALLOC_IDS] __attribute__((aligned(CACHE_LINE)));
	long stat[MAX_CACHES - KMALLOC_IDS][NR_CACHE_STATS] __attribute__((aligned(CACHE_LINE)));
};
_Static_assert(NR_CHUNKS <= 64, "chunks_used is one word");
_Static_assert(offsetof(struct thread_heap, cpu) == CACHE_LINE,
	       "cpu[64k - 1] (never a live cache's) starts each page of a heap");
_Static_assert(NEVER_USED_ID % 64 == 63, "the never-used id is one at a page start");

extern const uint8_t kmalloc_slot[];   /* kmalloc.h: a kmalloc class's storage slot */

static inline struct remote_msg **heap_outbox(struct thread_heap *h, unsigned id)
{
	return id < KMALLOC_IDS ? &h->k_outbox[id] : &h->outbox[id - KMALLOC_IDS];
}

static inline struct mailbox *heap_inbox(struct thread_heap *h, unsigned id)
{
	return id < KMALLOC_IDS ? &h->k_inbox[id] : &h->inbox[id - KMALLOC_IDS];
}

/* where cache `id`'s statistics row is in every heap (uslab_cache.stat_off) */
static inline uint32_t heap_stat_off(unsigned id)
{
	size_t row = sizeof(long) * NR_CACHE_STATS;

	return (uint32_t)(id < KMALLOC_IDS ?
			  offsetof(struct thread_heap, k_stat) + kmalloc_slot[id] * row :
			  offsetof(struct thread_heap, stat) + (id - KMALLOC_IDS) * row);
}

struct uslab_cache {
	/* read by the fast paths; the first by uslab.h's inline ones, which
	 * take the free pointer at offset 0 and so serve only caches that keep
	 * it there: for a cache with a constructor (free pointer after the
	 * object) it is the offset of cpu[NEVER_USED_ID], always empty, so
	 * they call the library for every allocation and free */
	uint32_t inline_offset;
	uint32_t cpu_offset;           /* byte offset of its cpu slab in a heap: id * 64 */
	uint32_t fp_offset;            /* free pointer offset inside an object slot */
	uint32_t chunk;                /* id / 64: its bit in heap->chunks_used */
	uint32_t stride;               /* bytes per object slot */
	uint32_t stat_off;             /* byte offset of its statistics row in a heap */
	uint64_t stride_magic;         /* ceil(2^64 / stride): on_object_boundary() */

	uint32_t size;                 /* requested object size */
	uint32_t align;
	uint32_t objects;              /* per slab */
	uint32_t units;                /* per slab */
	unsigned flags;
	unsigned id;
	unsigned min_partial;          /* empty slabs kept on the partial list */
	unsigned foreign_max;          /* objects of slabs nobody owns a thread caches */
	unsigned cpu_partial;          /* frozen slabs a thread may hold back */
	void (*ctor)(void *);

	spinlock_t list_lock __attribute__((aligned(CACHE_LINE)));
	struct slab *partial;          /* doubly linked, under list_lock */
	unsigned long nr_partial;

	atomic_long_t nr_slabs;
	atomic_long_t slabs_allocated;
	atomic_long_t slabs_freed;
	atomic_long_t stat[NR_CACHE_STATS];

	struct uslab_cache *next;      /* registry */
	struct kref ref;               /* creator + statistics walks */
	int dead;                      /* destroyed; set under the registry lock */
	char name[32];
};
MIRRORS(struct uslab_cache, inline_offset, struct uslab_cache_fast_, inline_offset);

/* Divisibility by the stride with one multiply (Lemire's test): off is on
 * an object boundary iff off * ceil(2^64 / stride) < ceil(2^64 / stride). */
static inline bool on_object_boundary(uint64_t stride_magic, uintptr_t off)
{
	return off * stride_magic < stride_magic;
}

/* ---- free pointer: the one pair of helpers --------------------------------- */

static inline void *fp_get(const struct uslab_cache *s, const void *obj)
{
	return *(void *const *)((const char *)obj + s->fp_offset);
}

static inline void fp_set(const struct uslab_cache *s, void *obj, void *fp)
{
	*(void **)((char *)obj + s->fp_offset) = fp;
}

/* The two private pushes, one home each; fp_offset is the cache's (0 for
 * the kmalloc caches, which lets malloc's free use a constant). The caller
 * has checked that obj belongs there and is not the head (double free). */
static inline void cpu_freelist_push(struct cpu_slab *c, void *obj, uint32_t fp_offset)
{
	*(void **)((char *)obj + fp_offset) = c->freelist;
	c->freelist = obj;
	c->fast_frees++;
}

static inline void slab_clear_owner(struct slab *slab)
{
	WRITE_ONCE(slab->owner_tp, 0);
	WRITE_ONCE(slab->owner, NULL);
}

static inline void slab_local_push(struct slab *slab, void *obj, uint32_t fp_offset)
{
	*(void **)((char *)obj + fp_offset) = slab->local_free;
	slab->local_free = obj;
	slab->local_count++;
}

/* The remote-free fast path: obj goes into this thread's message for the
 * slab's owner when there is one with room (free_by_message does the rest:
 * a new message, sending a full one). No atomic, and obj is not touched. */
static inline bool outbox_add(struct thread_heap *h, const struct uslab_cache *s,
			      const struct slab *slab, void *obj)
{
	struct remote_msg *m = *heap_outbox(h, s->id);

	if (m && m->to == READ_ONCE(slab->owner) && m->count < MSG_OBJS - 1 &&
	    m->obj[m->count - 1] != obj) {
		m->obj[m->count++] = obj;
		return true;
	}
	return false;
}

/* ---- pointer -> slab --------------------------------------------------------- */

/* One byte per possible segment of the 47-bit user address space: 32 MiB of
 * .bss zero pages, of which only those covering our segments are touched. */
#define REG_ADDR_BITS 47
#define REG_SEGMENTS  (1ul << (REG_ADDR_BITS - SEG_SHIFT))
extern uint8_t seg_registry[REG_SEGMENTS];

/* Is seg (any address in it) one of our segments? One byte load. */
static inline bool segment_is_registered(uintptr_t p)
{
	uintptr_t idx = p >> SEG_SHIFT;

	if (unlikely(idx >= REG_SEGMENTS))
		return false;
	/* a plain load, so that it folds into a compare: the byte of a
	 * segment holding p was written before p was handed out */
	return seg_registry[idx] != 0;
}

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
static inline struct slab *desc_at(uintptr_t seg, uintptr_t off)
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

/*
 * "off is k * stride with k < objects" in one multiply and one compare.
 * With magic = floor(2^64 / stride) + 1 and e = magic * stride - 2^64
 * (0 < e <= stride): off = k * stride gives off * magic = k * e (mod 2^64),
 * while any other off < 2^21 gives at least 2^64 / stride > 2^43. So
 * off * magic < objects * e exactly when off is a valid object offset.
 */
static inline void object_index_magic(uint32_t stride, uint32_t objects, uint64_t *magic,
				      uint64_t *limit)
{
	unsigned __int128 m = ((unsigned __int128)1 << 64) / stride + 1;
	uint64_t e = (uint64_t)(m * stride - ((unsigned __int128)1 << 64));

	*magic = (uint64_t)m;
	*limit = (uint64_t)objects * e;
}

/* Index in its segment of the unit a descriptor stands for. */
static inline unsigned desc_unit(const struct slab *d)
{
	return (unsigned)((((uintptr_t)d & (SEG_SIZE - 1)) - offsetof(struct segment, desc)) /
			  sizeof(struct slab));
}

static inline uintptr_t slab_start(const struct slab *slab)
{
	return ((uintptr_t)slab & ~(SEG_SIZE - 1)) + ((uintptr_t)desc_unit(slab) << UNIT_SHIFT);
}

/* ---- os.c ---------------------------------------------------------------- */
#define HUGE_PAGE_SIZE (2ul << 20)   /* a transparent huge page (x86-64, arm64 4K) */
void *os_map(size_t size, size_t align, size_t skew, bool reserve);
void *os_map_aligned(size_t size, size_t align);   /* os_map, not reserved */
void os_hugepage(void *p, size_t size, bool on);
void os_unmap(void *p, size_t size);
void os_decommit(void *p, size_t size);
void os_populate(void *p, size_t size);   /* best effort: fault in at once */
size_t os_page_size(void);
uint64_t os_now_ms(void);

/* ---- segment.c ------------------------------------------------------------ */
/* A run of nunits units, its head descriptor marked kind (cache NULL);
 * NULL + ENOMEM. *zeroed (if not NULL) tells whether the run reads as zero
 * (no unit of it was freed since it was last given back to the OS). */
struct slab *segment_alloc_units(unsigned nunits, uint8_t kind, bool *zeroed);
void segment_purge_all(void);                         /* decommit every dirty unit */
void segment_decay(void);                             /* slow paths: purge old dirt */
void huge_cache_decay(uint64_t now, uint64_t decay);  /* kmalloc.c: segment_decay's tick */
size_t kmalloc_huge_cached_bytes(void);                /* kmalloc.c: freed huge mappings kept */
uintptr_t huge_cache_take_aligned(size_t len, size_t align);   /* kmalloc.c: segment_map */
int segment_unit_state(const void *p);                /* tests: 0 used, 1 dirty, 2 clean */
long segment_check_descs(void);                       /* tests: problems found, printed */

/* A purge's batch: ranges of units it madvises outside seg_lock. */
#define PURGE_BATCH 32
struct purge_range {
	struct segment *seg;
	unsigned first, n;
};
extern struct purge_range purge_inflight[PURGE_BATCH];   /* segment.c, in layout.c */
extern void (*purge_test_hook)(void);                 /* tests: called mid-purge */
void segment_free_units(struct slab *head);
bool segment_resize_units(struct slab *head, unsigned nunits);
size_t segment_mapped_bytes(void);
void segment_give_back(struct segment *seg);
void segment_release_empty_over(unsigned keep);       /* unmap empty segments */
void segment_note_outside(long delta);                /* huge bytes in use: +/- */
size_t dirty_budget(void);                            /* free committed bytes to keep */
void segment_lock_all(void);                          /* fork: hold seg_lock */
void segment_unlock_all(bool child);
/* Visit every slab and large-block head (seg_lock held during the walk;
 * a slab's cache may still be NULL while it is being set up). */
void segment_for_each_slab(void (*fn)(struct slab *, void *), void *arg);

void *meta_alloc(size_t size);                        /* zeroed, cache-line aligned */
void meta_free(void *p, size_t size);

/* ---- slab.c ---------------------------------------------------------------- */
struct slab *slab_new(struct uslab_cache *s);         /* frozen, nothing built */
/* how much slab_build links: as many as are built (the first call: the
 * objects that start in the first page), one page's worth, or all the rest */
enum build_step { BUILD_GROW, BUILD_PAGE, BUILD_REST };
/* after REUSE_REFILLS_MAX refills of an active slab served by frees alone,
 * it builds a page more (cache.c, slab_build_more) */
#define REUSE_REFILLS_MAX 64
void *slab_build(struct uslab_cache *s, struct slab *slab, void *then, enum build_step step,
		 unsigned *count);
void slab_discard(struct uslab_cache *s, struct slab *slab);
void slab_unfreeze(struct uslab_cache *s, struct slab *slab, void *head, void *tail,
		   unsigned n);
void *slab_take_freelist(struct uslab_cache *s, struct slab *slab, bool freeze, unsigned *count);
struct slab *partial_take(struct uslab_cache *s, void **freelist, unsigned *count);
bool __slab_free(struct uslab_cache *s, struct slab *slab, void *head, void *tail,
		 unsigned cnt, bool can_freeze);
void cache_shrink_partial(struct uslab_cache *s);

/* Copy a C string into dst[size], truncated and always terminated. (Not
 * snprintf: the first cache setup of a short-lived program would fault in
 * libc's formatting code for it.) */
static inline void name_copy(char *dst, size_t size, const char *src)
{
	size_t i = 0;

	for (; i + 1 < size && src[i]; i++)
		dst[i] = src[i];
	dst[i] = 0;
}

/* ---- cache.c: per-thread heap access ---------------------------------------- */

/* The process has never made a second thread (glibc's
 * __libc_single_threaded: it goes false, for good, before one starts);
 * false when the C library cannot say. */
static inline bool process_single_threaded(void)
{
#if USLAB_HAVE_SINGLE_THREADED
	return __libc_single_threaded;
#else
	return false;
#endif
}

/*
 * The calling thread's identity as the free fast path compares it with
 * slab->owner_tp: the thread pointer, one %fs-relative operand on x86-64 (no
 * GOT load as for tls_heap). Unique among live threads; a new thread may
 * reuse a dead one's, which is harmless because a thread's exit flush
 * unfreezes every slab it owned (and a fork child's threads may inherit the
 * value of a thread that did not survive the fork, whose slabs are then as
 * unreachable as before: see process.c).
 */
static inline uintptr_t thread_self(void)
{
#if defined(__has_builtin) && __has_builtin(__builtin_thread_pointer)
	return (uintptr_t)__builtin_thread_pointer();
#else
	extern __thread struct thread_heap *tls_heap_addr __asm__("uslab_tls_heap_");
	return (uintptr_t)&tls_heap_addr;   /* also unique per thread */
#endif
}

/* Exported (as uslab_tls_heap_) for the inline fast paths in uslab.h. */
extern __thread struct thread_heap *tls_heap __asm__("uslab_tls_heap_")
	__attribute__((tls_model("initial-exec"), visibility("default")));

extern struct thread_heap empty_heap;   /* tls_heap of a thread without a heap */

/*
 * Slow paths only. Into the thread's own row (a relaxed store, no locked
 * instruction, no line shared with other threads: shared atomic counters
 * cost the 8 KiB malloc+free pair 40 % of its time); a thread without a
 * heap adds to the cache's atomic counters. Readers (cache_report) sum
 * both under heaps_lock.
 */
static inline long *heap_stat(struct thread_heap *h, const struct uslab_cache *s)
{
	return (long *)((char *)h + s->stat_off);
}

static inline void stat_add(struct uslab_cache *s, enum cache_stat id, long n)
{
	struct thread_heap *h = tls_heap;

	if (likely(h != &empty_heap)) {
		long *ctr = &heap_stat(h, s)[id];
		__atomic_store_n(ctr, *ctr + n, __ATOMIC_RELAXED);
	} else {
		atomic_long_add(n, &s->stat[id]);
	}
}

static inline struct cpu_slab *heap_cpu_slab(struct thread_heap *h, const struct uslab_cache *s)
{
	return (struct cpu_slab *)((char *)h + s->cpu_offset);
}

/* Has h ever used the chunk of cpu slabs that holds s's? (else all zero) */
static inline bool heap_has_chunk(const struct thread_heap *h, const struct uslab_cache *s)
{
	return h->chunks_used >> s->chunk & 1;
}

static inline struct cpu_slab *this_cpu_slab(const struct uslab_cache *s)
{
	return heap_cpu_slab(tls_heap, s);
}

struct cpu_slab *cpu_slab_get(struct uslab_cache *s);  /* makes a real heap/chunk */
void cache_drain_cpu_partial(struct uslab_cache *s);   /* tests: caller's cpu partial */
bool heap_run_put(struct slab *head);                  /* keep a freed large run */
struct slab *heap_run_take(unsigned units);            /* one of units..units*5/4 */
/* id < 0: the first free id above the kmalloc range */
int cache_setup(struct uslab_cache *s, const char *name, size_t size, size_t align,
		unsigned flags, void (*ctor)(void *), int id);
/* kmalloc.c: set up a static cache, or name its start-up class */
struct uslab_cache *kmalloc_class_init(struct uslab_cache *s);
extern bool kmalloc_startup;                           /* kmalloc.c: start-up classes */
void kmalloc_startup_end(void);                        /* ... end: the fine ones */
struct cache_report {
	const char *name;
	size_t size, object_size, objects_per_slab, slab_bytes;
	size_t slabs, partial_slabs;
	long live_objects;
	long stat[NR_CACHE_STATS];
};
void caches_for_each_report(void (*fn)(const struct cache_report *, void *), void *arg);
void stats_poll(void);                                 /* stats.c: a signalled dump */
void stats_init(void);                                 /* stats.c: the signal, if any */
bool uslab_fork_took_locks_(void);                     /* process.c: for tests */
size_t segment_committed_bytes(void);
extern int stats_pending;
void caches_lock_all(void);                            /* fork: registry, heaps, lists */
void caches_unlock_all(bool child);

void *cache_alloc_slow(struct uslab_cache *s);
void cache_free_slow(struct uslab_cache *s, void *obj);
void slab_free_slow(struct uslab_cache *s, struct slab *slab, void *obj);
void slab_free_cached(struct uslab_cache *s, struct slab *slab, void *obj);
noinline void kfree_slow(void *p, const char *call);
noinline cold __attribute__((noreturn)) void uslab_fatal(const char *call, const void *p, const char *what);

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
			uslab_fatal("free", obj, "double free");
		cpu_freelist_push(c, obj, s->fp_offset);
		return;
	}
	cache_free_slow(s, obj);
}


#pragma GCC visibility pop

#endif /* USLAB_INTERNAL_H */
