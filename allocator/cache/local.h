/* SPDX-License-Identifier: MIT */
/*
 * local.h - what the files of the cache layer share among themselves:
 *   heap.c    thread heaps, their flush at exit, the fork locks
 *   cpu.c     the cpu slab slow paths: refill, deactivate, frees outside the
 *             active slab
 *   remote.c  remote frees by message
 *   api.c     the uslab_cache_* API and the registry of caches
 *   walk.c    walks over a cache's slabs: validate, live counts, reports
 * Nothing outside cache/ includes it.
 */
#ifndef USLAB_CACHE_LOCAL_H
#define USLAB_CACHE_LOCAL_H

#include "cache.h"

#pragma GCC visibility push(hidden)

/*
 * heap.c: every heap ever made. Heaps live for good and are only ever
 * pushed onto the list's head, under heaps_lock, with a release store after
 * the heap is whole: a reader that loads the head with acquire may walk the
 * list without the lock (a statistics signal does), since no next pointer
 * changes once published and no heap goes away.
 */
extern mutex_t heaps_lock;
extern struct thread_heap *heaps;
void heaps_lock_each(void);                  /* heaps_lock held: every heap's lock */
extern unsigned live_heaps;                  /* heaps of running threads (heaps_lock;
						read without it) */
void heaps_unlock_each(bool child);

/* api.c: the registry. Readers walk it for statistics, writers add and
 * remove caches; a cache's memory lives while anyone holds a reference. */
extern qrwlock_t cache_registry;
extern struct uslab_cache *caches;
void cache_release(struct kref *ref);

/*
 * The most slabs h's thread keeps on its cpu-partial list of s (cpu.c, "The
 * cpu-partial list"): the cache's cpu_partial, or twice that once the
 * thread, which allocates from s (it has an active slab of it), had its
 * list full when a free of its froze one more slab for it
 * (cpu_partial_put). Its frees then land in more slabs than the list holds
 * - its live blocks of the class span them - and with the list drained at
 * each overflow, the slabs it gave up would turn its frees into them
 * foreign (a dwcas each) and be frozen again one by one (docs/ownership.md,
 * "How many slabs a thread keeps"). A thread that only allocates the class
 * fills the list with its dry slabs, and one that only frees it (a
 * consumer) with slabs of blocks others allocated: both keep the cache's
 * bound.
 */
static inline unsigned cpu_partial_bound(const struct uslab_cache *s, struct thread_heap *h)
{
	return s->cpu_partial << *heap_partial_doubled(h, s->id);
}

/* cpu.c */
void cpu_slab_flush(struct uslab_cache *s, struct cpu_slab *c);
bool cpu_shares(const struct uslab_cache *s);   /* "Shared refills" */
void cpu_partial_put(struct uslab_cache *s, struct cpu_slab *c, struct slab *slab);
/* the owner's objects onto a slab it holds (cpu.c, "The cpu-partial list") */
void cpu_local_push(struct uslab_cache *s, struct cpu_slab *c, struct slab *slab, void *head,
		    void *tail, unsigned n);
/* s's slab holding obj, or a one-line abort naming call and what is wrong */
struct slab *object_slab(struct uslab_cache *s, void *obj, const char *call);
/*
 * The one way a chain head..tail of cnt objects goes back to its slab when
 * the caller does not own it: one dwcas (slab_free_quick, else
 * __slab_free); a FULL slab it thereby freezes for the caller joins c's
 * cpu-partial list (c NULL: the caller has no heap and cannot own slabs;
 * nor does a thread that refills s from shared slabs: cpu_shares).
 */
static inline void slab_free_chain(struct uslab_cache *s, struct cpu_slab *c, struct slab *slab,
				   void *head, void *tail, unsigned cnt)
{
	if (likely(slab_free_quick(s, slab, head, tail, cnt)))
		return;
	if (__slab_free(s, slab, head, tail, cnt, c != NULL && !cpu_shares(s)))
		cpu_partial_put(s, c, slab);
}

/*
 * A slab of the cache whose cpu slab c is - its active one, a cpu-partial
 * one, or that of the object on its freelist's head (a thread that only
 * frees holds objects and no slab) - for the walks of a heap, whose cpu
 * slabs are known by id; NULL when c holds none (or when that head was
 * written over after its free, which the class's next malloc reports).
 */
static inline struct slab *cpu_any_slab(const struct cpu_slab *c)
{
	return c->slab ? c->slab : c->partial ? c->partial :
	       c->freelist ? ptr_to_slab(c->freelist) : NULL;
}

/* remote.c */
void inbox_drain(struct thread_heap *h, unsigned id, bool close);
void *inbox_take(struct thread_heap *h, unsigned id, void **tail, unsigned *n);
void outbox_send(struct thread_heap *h, unsigned id);
void heap_messages_flush(struct thread_heap *h, bool exiting);
void heap_messages_drop(struct thread_heap *h, struct uslab_cache *s);
void heap_inboxes_close(struct thread_heap *h);
void heap_inboxes_open(struct thread_heap *h);
void free_by_message(struct uslab_cache *s, struct slab *slab, void *obj,
		     struct thread_heap *to);

/* walk.c */
void own_inbox_drain(struct uslab_cache *s);
long own_private_objects(struct uslab_cache *s);
size_t cache_live_objects(struct uslab_cache *s);

/* Each id whose slow path h's thread has come to (thread_heap.ids_used),
 * in order; the body must not break out. */
#define for_each_heap_id(h, id)                                                         \
	for (uint64_t c_ = (h)->chunks_used; c_; c_ &= c_ - 1)                          \
		for (uint64_t b_ = (h)->ids_used[__builtin_ctzll(c_)]; b_; b_ &= b_ - 1)  \
			for (unsigned id = (unsigned)(__builtin_ctzll(c_) * CPU_CHUNK +     \
						      __builtin_ctzll(b_)),               \
				      once_ = 1; once_; once_ = 0)

#pragma GCC visibility pop

#endif
