/* SPDX-License-Identifier: MIT */
/*
 * heap.c - per-thread heaps: made on a thread's first slow path, flushed
 * and recycled when it exits, and every lock of this layer for fork.
 *
 * Each thread reaches its heap through one initial-exec TLS pointer. A heap
 * holds, per cache, a struct cpu_slab: the active frozen slab, the private
 * freelist taken from it, and a short list of other frozen slabs (cpu
 * partial). A thread without a heap points at empty_heap, whose cpu slabs
 * are empty, so the fast paths never test for it; the slow path makes the
 * real heap. Heaps live for good; an exited thread's is recycled.
 */
#define _GNU_SOURCE
#include "local.h"

#include <pthread.h>
#include <string.h>

mutex_t heaps_lock = MUTEX_INIT;
struct thread_heap *heaps;   /* local.h: pushed under heaps_lock, read also without */
static pthread_key_t heap_key;
static pthread_once_t heap_key_once = PTHREAD_ONCE_INIT;

/* empty_heap (all zero: no chunk in use) is in api/layout.c */
__thread struct thread_heap *tls_heap __attribute__((tls_model("initial-exec"))) = &empty_heap;

static void heap_thread_exit(void *arg);

static void heap_key_create(void)
{
	pthread_key_create(&heap_key, heap_thread_exit);
}

unsigned live_heaps;

/* The calling thread's real heap, made (or recycled) on first need. */
static struct thread_heap *heap_get(void)
{
	struct thread_heap *h = tls_heap;

	if (likely(h != &empty_heap))
		return h;
	pthread_once(&heap_key_once, heap_key_create);
	lock_ranked(&heaps_lock, RANK_HEAPS);
	for (h = heaps; h; h = h->next)
		if (!h->live)
			break;
	if (!h) {
		h = meta_alloc(sizeof(*h));
		if (!h) {
			unlock_ranked(&heaps_lock, RANK_HEAPS);
			return NULL;
		}
		h->chunks_used = 1;   /* the static caches' */
		h->next = heaps;
		/* release: h whole, next included, before it is on the list;
		 * pairs with the acquire of heaps_for_each_lockless (walk.c) */
		smp_store_release(&heaps, h);
	}
	if (h->exited) {   /* a recycled heap: messages may come again */
		heap_inboxes_open(h);
		/* a foreign budget is its thread's (cpu.c, foreign_budget), and
		 * so is a doubled cpu-partial bound (local.h) */
		for_each_heap_id(h, id) {
			h->cpu[id].foreign_left = 0;
			*heap_partial_doubled(h, id) = 0;
		}
	}
	h->live = 1;
	WRITE_ONCE(live_heaps, live_heaps + 1);
	/* its last thread's runs went back at its exit; its credit goes too,
	 * or a thread that only frees large blocks would keep them */
	h->runs.credit = 0;
	memset(h->k_refilled, 0, sizeof(h->k_refilled));
	h->refills = 0;
	h->fresh_units = 0;
	h->exited = 0;
	unlock_ranked(&heaps_lock, RANK_HEAPS);
	pthread_setspecific(heap_key, h);
	tls_heap = h;
	tls_stat_rows = (char *)h;   /* stat_add: this thread's rows from now on */
	return h;
}

struct cpu_slab *cpu_slab_get(struct uslab_cache *s)
{
	struct thread_heap *h = heap_get();

	if (!h)
		return NULL;
	uint64_t id_bit = 1ull << (s->id % CPU_CHUNK);

	if (unlikely(!(h->ids_used[s->chunk] & id_bit))) {
		if (!heap_has_chunk(h, s)) {
			/* heaps_lock: destroy/validate walk chunks of other heaps;
			 * relaxed store: reports read it without the lock
			 * (cache_cached_published), the word whole */
			lock_ranked(&heaps_lock, RANK_HEAPS);
			WRITE_ONCE(h->chunks_used, h->chunks_used | 1ull << s->chunk);
			unlock_ranked(&heaps_lock, RANK_HEAPS);
		}
		h->ids_used[s->chunk] |= id_bit;
	}
	return heap_cpu_slab(h, s);
}

#if USLAB_ASSERTS >= 1
/* Debug builds: every cache id of h's chunks outside ids_used has nothing
 * in h's cpu slab, outbox or inbox, and an open inbox (thread_heap). */
static bool heap_ids_cover(struct thread_heap *h)
{
	for (unsigned id = 0; id < MAX_CACHES; id++) {
		struct cpu_slab *c = &h->cpu[id];

		if (!(h->chunks_used >> (id / CPU_CHUNK) & 1) ||
		    h->ids_used[id / CPU_CHUNK] >> (id % CPU_CHUNK) & 1)
			continue;
		if (c->slab || c->partial || c->freelist || *heap_outbox(h, id) ||
		    mailbox_peek(heap_inbox(h, id)))
			return false;
	}
	return true;
}
#endif

/* exiting: its thread exits (see heap_messages_flush) */
static void heap_flush_all(struct thread_heap *h, bool exiting)
{
	run_cache_flush(&h->runs);
	heap_messages_flush(h, exiting);
	INTERLEAVE("flush:slabs");
#if USLAB_ASSERTS >= 1
	ASSERT(heap_ids_cover(h));
#endif
	for_each_heap_id(h, id) {
		struct cpu_slab *c = &h->cpu[id];
		/* a thread that only frees may hold cached objects and no
		 * slab */
		struct slab *any = cpu_any_slab(c);

		if (any)
			cpu_slab_flush(any->cache, c);
	}
}

/* pthread key destructor: give every slab back, recycle the heap. A later
 * allocation from another TLS destructor makes a heap again (and re-arms
 * the key, so that one is flushed on the next destructor round). */
static void heap_thread_exit(void *arg)
{
	struct thread_heap *h = arg;

	/* its own lock, not heaps_lock: threads exiting together flush at once */
	lock_ranked(&h->lock, RANK_HEAP);
	heap_flush_all(h, true);
	unlock_ranked(&h->lock, RANK_HEAP);
	lock_ranked(&heaps_lock, RANK_HEAPS);
	h->live = 0;
	WRITE_ONCE(live_heaps, live_heaps - 1);
	h->exited = 1;
	unlock_ranked(&heaps_lock, RANK_HEAPS);
	tls_heap = &empty_heap;
	tls_stat_rows = NULL;
}

/* The calling thread's kept runs (segment.h); NULL if it has no heap. */
struct run_cache *heap_runs(void)
{
	struct thread_heap *h = tls_heap;

	return h != &empty_heap ? &h->runs : NULL;
}

USLAB_API void uslab_thread_flush(void)
{
	struct thread_heap *h = tls_heap;

	if (h == &empty_heap)
		return;
	lock_ranked(&h->lock, RANK_HEAP);
	heap_flush_all(h, false);
	unlock_ranked(&h->lock, RANK_HEAP);
}

/* ---- fork: this layer's locks (api/process.c orders all layers) ------------------ */

/* heaps_lock held: every heap's own lock (validate, fork) */
void heaps_lock_each(void)
{
	for (struct thread_heap *h = heaps; h; h = h->next)
		lock_ranked(&h->lock, RANK_HEAP);
}

void heaps_unlock_each(bool child)
{
	for (struct thread_heap *h = heaps; h; h = h->next)
		unlock_ranked_fork(&h->lock, RANK_HEAP, child);
}

void caches_lock_all(void)
{
	lock_rank_acquire(RANK_REGISTRY);
	qrw_write_lock(&cache_registry);
	lock_ranked(&heaps_lock, RANK_HEAPS);
	heaps_lock_each();
	for (struct uslab_cache *s = caches; s; s = s->next)
		lock_ranked(&s->list_lock, RANK_LIST);
}

void caches_unlock_all(bool child)
{
	for (struct uslab_cache *s = caches; s; s = s->next)
		unlock_ranked_fork(&s->list_lock, RANK_LIST, child);
	/* the threads that did not survive: what was sent to them stays lost
	 * with the rest of what they cached */
	if (child) {
		for (struct thread_heap *h = heaps; h; h = h->next)
			if (h->live && h != tls_heap)
				heap_inboxes_close(h);
		live_heaps = tls_heap != &empty_heap;   /* the one thread left */
	}
	heaps_unlock_each(child);
	unlock_ranked_fork(&heaps_lock, RANK_HEAPS, child);
	if (child)
		qrwlock_init(&cache_registry);
	else
		qrw_write_unlock(&cache_registry);
	lock_rank_release(RANK_REGISTRY);
}
