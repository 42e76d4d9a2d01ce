/* SPDX-License-Identifier: MIT */
/*
 * cache.h - the cache layer: per-thread heaps of cpu slabs, the fast paths,
 * their slow paths, remote frees by message, the registry of caches, and
 * validation and statistics walks. What the layers above use; the files of
 * this layer share cache/local.h besides.
 *
 * Lock order (outer first; platform.h's enum lock_rank checks it in debug
 * builds): cache_registry (qrwlock) > heaps_lock > heap->lock >
 * cache->list_lock (slab layer) > the segment layer's locks.
 */
#ifndef USLAB_CACHE_H
#define USLAB_CACHE_H

#include "slab.h"   /* and uslab.h, without its inline fast paths */

#pragma GCC visibility push(hidden)

#define MAX_CACHES     4096                   /* live caches at once */
#define STATIC_IDS     64                     /* ids for caches set up with a fixed id */
#define NEVER_USED_ID  (STATIC_IDS - 1)       /* no cache: its cpu slab stays empty */
#define CPU_CHUNK      64                     /* cpu slabs per page of a heap */
#define NR_CHUNKS      (MAX_CACHES / CPU_CHUNK)
/* refills of an active slab served by frees alone before it builds a page
 * more (cpu.c, slab_build_more) */
#define REUSE_REFILLS_MAX 64
/* refills a thread makes before its refills are handed out in address
 * order (cpu.c, refill_ordered) */
#define ORDER_AFTER_REFILLS 64
/* objects such a thread takes from a partial slab before that, at most
 * (cpu.c, cold_refill_objects) */
#define COLD_REFILL_MAX 16
/* slabs a thread may keep frozen per cache besides its active one, in bytes
 * (api.c; USLAB_CPU_PARTIAL sets a count instead, at most CPU_PARTIAL_MAX) */
#define CPU_PARTIAL_BYTES (512ul << 10)
#define CPU_PARTIAL_MAX   4096
/* foreign objects a thread may keep of a cache, at most, in bytes (cpu.c,
 * flush_foreign; the bound matters above 32 KiB objects) */
#define FOREIGN_BYTES_MAX (512ul << 10)
/* empty slabs a cache keeps on its partial list, at most, in bytes (slab.h,
 * min_partial; the bound matters for slabs above 128 KiB) */
#define MIN_PARTIAL_BYTES (1ul << 20)

/* How many of s's slabs make `bytes`, 2 to 32 of them (a cpu-partial bound). */
static inline unsigned cpu_partial_slabs(const struct uslab_cache *s, size_t bytes)
{
	unsigned n = (unsigned)(bytes >> UNIT_SHIFT) / s->units;

	return n < 2 ? 2 : n > 32 ? 32 : n;
}

/* ---- per-thread cpu slabs and heaps ------------------------------------------- */

struct cpu_slab {
	void *freelist;                /* private: only the owning thread */
	uintptr_t base;                /* active slab's first object */
	uint64_t limit;                /* uslab.h's inline free takes obj when
					  (obj - base) * s->obj_magic < limit: the
					  cache's obj_limit, exact for its strides up
					  to STRIDE_EXACT_MAX; 0 without an active slab
					  or with bigger objects (cpu_slab_holds) */
	struct slab *slab;             /* active (frozen) slab */
	struct slab *partial;          /* the cpu-partial list: frozen slabs held back
					  (cpu.c, "The cpu-partial list") */
	uint16_t nr_partial;           /* its length, at most the cache's cpu_partial */
	uint16_t foreign_left;         /* malloc: other slabs' objects it may still take
					  before a flush (0 in empty_heap: always slow) */
	/* statistics, owner-only, folded into the cache's at each refill: */
	uint32_t supplied;             /* objects the slow path put on freelist */
	uint64_t fast_frees;           /* frees pushed on freelist (cache API, foreign) */
	uint32_t parked;               /* objects on the cpu-partial slabs' owner-local
					  lists (owner-only) */
	uint32_t xcached;              /* its cached objects as its slow paths last
					  counted them: cpu_cached_set/_add/_read */
};
_Static_assert(sizeof(struct cpu_slab) == 64, "one cpu slab per cache line");
/* uslab.h's inline fast paths see these fields through its mirror structs */
#define MIRRORS(T, f, U, g) \
	_Static_assert(offsetof(T, f) == offsetof(U, g) && sizeof(((T *)0)->f) == sizeof(((U *)0)->g), \
		       #T "." #f " moved: update " #U " in uslab.h")
MIRRORS(struct cpu_slab, freelist, struct uslab_cpu_cache_, freelist);
MIRRORS(struct cpu_slab, base, struct uslab_cpu_cache_, base);
MIRRORS(struct cpu_slab, limit, struct uslab_cpu_cache_, limit);
MIRRORS(struct cpu_slab, fast_frees, struct uslab_cpu_cache_, fast_frees);
_Static_assert(sizeof(struct cpu_slab) == sizeof(struct uslab_cpu_cache_), "uslab_cpu_cache_ size");

MIRRORS(struct uslab_cache, inline_offset, struct uslab_cache_fast_, inline_offset);
MIRRORS(struct uslab_cache, fp_key, struct uslab_cache_fast_, fp_key);
MIRRORS(struct uslab_cache, obj_magic, struct uslab_cache_fast_, obj_magic);

/*
 * Remote frees by message (cache.c, docs/slab.md): a thread that frees
 * objects of slabs another thread's heap owns collects the pointers, per
 * cache, in a message addressed to that heap, and pushes the message onto
 * the heap's inbox for the cache when it is full (or when the next object
 * has another owner, or at flush). The owner takes the inbox in its
 * allocation slow path and puts the objects on its own slabs' lists: only
 * the owner writes their links (the freeing thread writes nothing of them
 * but, for malloc's, the free mark in the second word: kmalloc.h).
 * A message holds at most MSG_BYTES of objects (and MSG_OBJS): a sender
 * that frees big objects of a class now and then must not keep megabytes
 * of them out of their owner's reach in a message that fills slowly - with
 * threads far beyond the cores, those messages were most of the memory.
 */
#define MSG_OBJS  59
#define MSG_BYTES (16u << 10)
struct remote_msg {
	struct mailbox_node node;      /* first: in an inbox, a returns box or a pool */
	struct uslab_cache *cache;
	struct thread_heap *to;
	struct thread_heap *from;      /* its sender's heap, which gets it back */
	uint32_t count;
	uint32_t fast_max;             /* the fast path adds below this count; the
					  slow path adds the last object and sends */
	void *obj[MSG_OBJS];
};
_Static_assert(sizeof(struct remote_msg) == 512, "a message is 8 cache lines");

/*
 * A thread's heap: one cpu slab per possible cache, at byte offset
 * cache->cpu_offset (= id * 64), so the fast paths reach theirs with one
 * load from the TLS pointer. 256 KiB of address space, mapped fresh: only
 * the pages (chunks of 64 cpu slabs) of caches the thread uses are ever
 * touched, and chunks_used says which, so walks never touch the others.
 *
 * A heap is a page-aligned mapping, and its cpu slabs start one line in, so
 * that the one at the start of each page is cpu[64k - 1]: ids 63, 127, ...,
 * which no cache is given (63 is NEVER_USED_ID, cache_id_alloc skips the
 * rest). A cpu slab at a page start would share its low 12 address bits
 * with every slab's first object, and the CPU's store-to-load
 * disambiguation, which compares only those bits, then makes a free's
 * stores and the next allocation's loads wait on each other (measured in
 * docs/slab.md).
 */
struct thread_heap {
	uint64_t chunks_used;                /* bit k: cpu[k*64 .. k*64+63] in use */
	struct thread_heap *next;            /* all heaps, under heaps_lock */
	struct remote_msg *msg_pool;         /* spare messages (owner only) */
	int live;                            /* owned by a running thread */
	int exited;                          /* its thread ran the exit flush */
	unsigned refills;                    /* refills of any cache by its thread
						(owner only; from 0 when a thread
						takes the heap): cpu.c, refill_ordered */
	unsigned fresh_units;                /* units of new slabs its thread took since
						it last gave back its classes' foreign
						objects (owner only): cpu.c,
						release_foreign */
	/* held by its thread while it flushes (exit, uslab_thread_flush,
	 * shrink), and by destroy, validate and fork while they read or flush
	 * its cpu slabs and messages; a thread's fast and slow paths take none */
	mutex_t lock;
	struct cpu_slab cpu[MAX_CACHES]      /* ids below STATIC_IDS: malloc's classes */
		__attribute__((aligned(CACHE_LINE)));
	/*
	 * Bit id % 64 of word id / 64 (a chunk's word): the heap's thread has
	 * come to a slow path of cache id (cpu_slab_get), in this life of the
	 * heap or an earlier one. Only those ids' cpu slabs, outboxes and
	 * inboxes can hold anything, or be closed: the fast paths add only to
	 * what a slow path began (a freelist, a frozen slab, a foreign budget,
	 * a message), and messages come only for slabs the heap froze. Written
	 * by its thread; never cleared, since a message addressed in an earlier
	 * life may still come (heap_messages_flush). Walks of a heap's caches
	 * visit these ids only (for_each_heap_id), not all 64 of a chunk.
	 */
	uint64_t ids_used[NR_CHUNKS];
	/*
	 * Rows by cache, reached through heap_outbox/heap_inbox/heap_stat: the
	 * message this thread is filling (owner only); the stack of messages
	 * other threads sent here (pushed by any thread with a CAS, taken whole
	 * by the owner; closed from its exit on); statistics, written by the
	 * owner only (stat_add; heaps live for good, so these are never lost;
	 * a new cache clears its row). The static caches' rows come first,
	 * together, their statistics in the row order their creator gives
	 * (malloc: start-up classes first): a short-lived program's heap is
	 * then two pages written, its cpu slabs' and this one, not five. The
	 * other caches' follow, by id.
	 */
	struct run_cache runs;               /* freed large runs kept for reuse */
	struct mailbox msg_returns;          /* its messages, drained: posted back by
						their receivers, taken whole by the owner */
	struct remote_msg *k_outbox[STATIC_IDS];
	uint8_t k_refilled[STATIC_IDS];      /* 1: its thread has refilled that
						malloc class (owner only; 0 when a
						thread takes the heap): cpu.c,
						foreign_budget */
	uint8_t k_partial_doubled[STATIC_IDS]; /* 1: its thread keeps twice the
						cpu-partial slabs of that cache
						(owner only; 0 when a thread takes the
						heap or the cache is destroyed):
						local.h, cpu_partial_bound */
	struct mailbox k_inbox[STATIC_IDS] __attribute__((aligned(CACHE_LINE)));
	long k_stat[STATIC_IDS][NR_CACHE_STATS] __attribute__((aligned(CACHE_LINE)));
	struct remote_msg *outbox[MAX_CACHES - STATIC_IDS];
	struct mailbox inbox[MAX_CACHES - STATIC_IDS] __attribute__((aligned(CACHE_LINE)));
	long stat[MAX_CACHES - STATIC_IDS][NR_CACHE_STATS] __attribute__((aligned(CACHE_LINE)));
	uint8_t partial_doubled[MAX_CACHES - STATIC_IDS];   /* the other caches':
							       as k_partial_doubled */
};
_Static_assert(NR_CHUNKS <= 64, "chunks_used is one word");
_Static_assert(offsetof(struct thread_heap, cpu) == CACHE_LINE,
	       "cpu[64k - 1] (never a live cache's) starts each page of a heap");
_Static_assert(NEVER_USED_ID % 64 == 63, "the never-used id is one at a page start");

static inline struct remote_msg **heap_outbox(struct thread_heap *h, unsigned id)
{
	return id < STATIC_IDS ? &h->k_outbox[id] : &h->outbox[id - STATIC_IDS];
}

static inline struct mailbox *heap_inbox(struct thread_heap *h, unsigned id)
{
	return id < STATIC_IDS ? &h->k_inbox[id] : &h->inbox[id - STATIC_IDS];
}

static inline uint8_t *heap_partial_doubled(struct thread_heap *h, unsigned id)
{
	return id < STATIC_IDS ? &h->k_partial_doubled[id] : &h->partial_doubled[id - STATIC_IDS];
}

/* Exported (as uslab_tls_heap_v4_) for the inline fast paths in uslab.h. */
extern __thread struct thread_heap *tls_heap __asm__("uslab_tls_heap_v4_")
	__attribute__((tls_model("initial-exec"), visibility("default")));

extern struct thread_heap empty_heap;   /* tls_heap of a thread without a heap */

static inline long *heap_stat(struct thread_heap *h, const struct uslab_cache *s)
{
	return (long *)((char *)h + s->stat_off);
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

/*
 * A cpu slab's cached objects - on its freelist and on the owner-local lists
 * of the slabs it holds frozen - for other threads' reports, which may not
 * walk those lists (they change under any reader) nor read their counts
 * (fast paths write them with plain stores). The owner counts them in its
 * slow paths instead and publishes the figure in xcached: set exactly where
 * the freelist's length is known (a refill, a foreign flush, a flush), moved
 * by the objects a slow path itself adds or takes (a slow free, a drained
 * inbox or cpu-partial list). The fast paths are not seen: another
 * thread's figure is off by what its owner allocated and freed on them
 * since its last refill or flush (a report bounds it by the cache's
 * objects out; docs/stats.md, "Cached by threads").
 * Relaxed: a report wants the one word whole, nothing ordered with it; a
 * thread flushing another's cpu slab (destroy) holds that heap's lock.
 */
static inline uint32_t cpu_cached_read(const struct cpu_slab *c)
{
	return READ_ONCE(c->xcached);
}

static inline void cpu_cached_set(struct cpu_slab *c, uint64_t n)
{
	WRITE_ONCE(c->xcached, n < UINT32_MAX ? (uint32_t)n : UINT32_MAX);
}

static inline void cpu_cached_add(struct cpu_slab *c, long d)
{
	long n = (long)cpu_cached_read(c) + d;

	cpu_cached_set(c, n > 0 ? (uint64_t)n : 0);
}

/* The library's view of a cpu slab as uslab.h's fast paths take it. */
static inline struct uslab_cpu_cache_ *cpu_fast(struct cpu_slab *c)
{
	return (struct uslab_cpu_cache_ *)(void *)c;
}

/* The remote-free fast path: obj goes into this thread's message for the
 * slab's owner when there is one with room (free_by_message does the rest:
 * a new message, sending a full one). No atomic, and obj is not touched. */
static inline bool outbox_add(struct thread_heap *h, const struct uslab_cache *s,
			      const struct slab *slab, void *obj)
{
	struct remote_msg *m = *heap_outbox(h, s->id);

	if (m && m->to == READ_ONCE(slab->owner) && m->count < m->fast_max &&
	    m->obj[m->count - 1] != obj) {
		m->obj[m->count++] = obj;
		return true;
	}
	return false;
}

/* ---- what the layers above use ------------------------------------------------- */

struct cpu_slab *cpu_slab_get(struct uslab_cache *s);  /* makes a real heap/chunk */
/* running threads above which malloc's refills share slabs (cpu.c, "Shared
 * refills"); -1, the default: 2 x the CPUs. Tests set it. */
extern int shared_threads_over;
struct run_cache *heap_runs(void);                     /* NULL: the thread has no heap */
void cache_drain_cpu_partial(struct uslab_cache *s);   /* tests: caller's cpu partial */
/*
 * Fill in a cache's geometry and register it. id < 0: the first free id
 * above the static ones; else exactly that static id, with its statistics
 * in static row `row`. Allocates nothing. Returns 0, or an errno value.
 */
int cache_setup(struct uslab_cache *s, const char *name, size_t size, size_t align,
		unsigned flags, void (*ctor)(void *), int id, unsigned row);
struct cache_report {
	const char *name;
	size_t size, object_size, objects_per_slab, slab_bytes;
	size_t slabs, partial_slabs;
	long live_objects;
	long cached_objects;   /* free, on threads' own lists (cpu freelists,
				  their slabs' owner-local lists): the calling
				  thread's exactly, the others' as published
				  (cpu_cached_read), at most live_objects */
	long stat[NR_CACHE_STATS];
};
void caches_for_each_report(void (*fn)(const struct cache_report *, void *), void *arg);
/* s's geometry and counters (summed over every thread), without its slabs
 * and without a lock: a signal handler may ask, s alive meanwhile. What
 * threads have not folded yet is missing (docs/stats.md). */
void cache_report_counters(const struct uslab_cache *s, struct cache_report *r);
/* What every thread but skip (NULL: none) holds cached of s, as each last
 * published it (cpu_cached_read): no lock, so a signal handler may ask. */
long cache_cached_published(const struct uslab_cache *s, const struct thread_heap *skip);
void caches_lock_all(void);                            /* fork: registry, heaps, lists */
void caches_unlock_all(bool child);

void *cache_alloc_slow(struct uslab_cache *s);
void cache_free_slow(struct uslab_cache *s, struct cpu_slab *c, void *obj);
void slab_free_slow(struct uslab_cache *s, struct slab *slab, void *obj);
void slab_free_cached(struct uslab_cache *s, struct slab *slab, void *obj);

/*
 * Fast paths: uslab.h's, on the library's own cpu slab for s (an empty
 * static heap stands in for a thread that has none yet, so neither tests for
 * it: its freelist is NULL and its limit 0, and both fall through).
 */
/* Whether p lies in c's active slab (at an object's start or not). */
static inline bool cpu_slab_holds(const struct uslab_cache *s, const struct cpu_slab *c,
				  const void *p)
{
	return c->slab && (uintptr_t)p - c->base < (uintptr_t)s->objects * s->stride;
}

static inline void *cache_alloc_fast(struct uslab_cache *s)
{
	void *obj = uslab_cpu_pop_(cpu_fast(this_cpu_slab(s)), s->fp_offset, fp_key_get());

	if (likely(obj))
		return obj;
	return cache_alloc_slow(s);
}

static inline void cache_free_fast(struct uslab_cache *s, void *obj)
{
	struct cpu_slab *c = this_cpu_slab(s);

	if (likely(uslab_cpu_push_(cpu_fast(c), obj, s->fp_offset, fp_key_get(), &s->obj_magic)))
		return;
	cache_free_slow(s, c, obj);
}

#pragma GCC visibility pop

#endif /* USLAB_CACHE_H */
