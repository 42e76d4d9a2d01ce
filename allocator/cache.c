/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the uslab_cache_* API, per-thread heaps and the cpu slab paths.
 *
 * Each thread reaches its heap through one initial-exec TLS pointer. A heap
 * holds, per cache, a struct cpu_slab: the active frozen slab, the private
 * freelist taken from it, and a short list of other frozen slabs (cpu
 * partial). A thread without a heap points at empty_heap, whose cpu slabs
 * are empty, so the fast paths never test for it; the slow path makes the
 * real heap. Heaps are recycled when their thread exits, after a flush.
 *
 * Lock order: cache_registry > heaps_lock > cache->list_lock > seg_lock.
 * uslab_cache_destroy and uslab_cache_validate read other threads' cpu slabs:
 * the caller guarantees those threads are not using that cache meanwhile
 * (destroy: by the API contract; validate: its result is exact only then).
 */
#define _GNU_SOURCE
#include "internal.h"
#include "kmalloc.h"
#include "options.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- heaps ------------------------------------------------------------------- */

/* empty_heap (all zero: no chunk in use) is in layout.c */
__thread struct thread_heap *tls_heap __attribute__((tls_model("initial-exec"))) = &empty_heap;

static spinlock_t heaps_lock = SPINLOCK_INIT;
static struct thread_heap *heaps;
static pthread_key_t heap_key;
static pthread_once_t heap_key_once = PTHREAD_ONCE_INIT;

/* The registry: readers walk it for statistics, writers add and remove
 * caches. A cache's memory lives while anyone holds a reference (kref): the
 * creator's, dropped by destroy, and those statistics walks take so that they
 * need not hold the registry lock through their long walks. */
static qrwlock_t cache_registry;
static struct uslab_cache *caches;
/* ids in use; ids 63, 127, ... are never given (their cpu slabs start the
 * pages of a heap: see struct thread_heap) */
static uint64_t cache_ids[MAX_CACHES / 64] = { [0 ... MAX_CACHES / 64 - 1] = 1ull << 63 };

static void heap_thread_exit(void *arg);
static void cpu_slab_flush(struct uslab_cache *s, struct cpu_slab *c);
static void cpu_partial_put(struct uslab_cache *s, struct cpu_slab *c, struct slab *slab);
static void cpu_partial_drain(struct uslab_cache *s, struct cpu_slab *c);
static void heap_messages_flush(struct thread_heap *h, bool exiting);
static void inbox_drain(struct thread_heap *h, unsigned id, bool close);
static void heaps_lock_each(void);
static void heaps_unlock_each(bool child);
static void heap_inboxes_open(struct thread_heap *h);

static void heap_key_create(void)
{
	pthread_key_create(&heap_key, heap_thread_exit);
}

/* One line on stderr, then abort(). Formats on the stack and uses write(2):
 * nothing here may allocate, since the heap may be what is broken. */
noinline cold void uslab_fatal(const char *call, const void *p, const char *what)
{
	char buf[256];
	int n = snprintf(buf, sizeof(buf), "uslab: %s(): %s %p\n", call, what, p);

	if (n > 0 && write(2, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1) < 0)
		n = 0;
	abort();
}

/* The calling thread's real heap, made (or recycled) on first need. */
static struct thread_heap *heap_get(void)
{
	struct thread_heap *h = tls_heap;

	if (likely(h != &empty_heap))
		return h;
	pthread_once(&heap_key_once, heap_key_create);
	spin_lock(&heaps_lock);
	for (h = heaps; h; h = h->next)
		if (!h->live)
			break;
	if (!h) {
		h = meta_alloc(sizeof(*h));
		if (!h) {
			spin_unlock(&heaps_lock);
			return NULL;
		}
		h->chunks_used = 1;   /* the kmalloc caches' */
		h->next = heaps;
		heaps = h;
	}
	if (h->exited)   /* a recycled heap: messages may come again */
		heap_inboxes_open(h);
	h->live = 1;
	h->exited = 0;
	spin_unlock(&heaps_lock);
	pthread_setspecific(heap_key, h);
	tls_heap = h;
	return h;
}

struct cpu_slab *cpu_slab_get(struct uslab_cache *s)
{
	struct thread_heap *h = heap_get();

	if (!h)
		return NULL;
	if (unlikely(!heap_has_chunk(h, s))) {
		/* heaps_lock: destroy/validate walk chunks of other heaps */
		spin_lock(&heaps_lock);
		h->chunks_used |= 1ull << s->chunk;
		spin_unlock(&heaps_lock);
	}
	return heap_cpu_slab(h, s);
}

/* ---- freed large runs, kept per thread ----------------------------------------
 * A thread that frees a large block is likely to ask for one of the same
 * size soon (buffers, vectors): keeping a few runs here spares two trips
 * through seg_lock and the segment scan. Bounded per thread; given back at
 * flush, exit and trim. */

bool heap_run_put(struct slab *head)
{
	struct thread_heap *h = tls_heap;

	if (h == &empty_heap || h->run_units + head->nunits > HEAP_RUN_UNITS)
		return false;
	for (unsigned i = 0; i < HEAP_RUNS; i++) {
		if (!h->runs[i]) {
			h->runs[i] = head;
			h->run_units += head->nunits;
			return true;
		}
	}
	return false;
}

struct slab *heap_run_take(unsigned units)
{
	struct thread_heap *h = tls_heap;
	int best = -1;

	if (!h->run_units)   /* empty_heap included */
		return NULL;
	for (int i = 0; i < HEAP_RUNS; i++) {
		struct slab *r = h->runs[i];
		if (r && r->nunits >= units && r->nunits <= units + units / 4 &&
		    (best < 0 || r->nunits < h->runs[best]->nunits))
			best = i;
	}
	if (best < 0)
		return NULL;
	struct slab *r = h->runs[best];
	h->runs[best] = NULL;
	h->run_units -= r->nunits;
	return r;
}

static void heap_runs_flush(struct thread_heap *h)
{
	for (unsigned i = 0; i < HEAP_RUNS; i++) {
		if (h->runs[i]) {
			segment_free_units(h->runs[i]);
			h->runs[i] = NULL;
		}
	}
	h->run_units = 0;
}

/* exiting: its thread exits (see heap_messages_flush) */
static void heap_flush_all(struct thread_heap *h, bool exiting)
{
	heap_runs_flush(h);
	heap_messages_flush(h, exiting);
	for (unsigned k = 0; k < NR_CHUNKS; k++) {
		if (!(h->chunks_used >> k & 1))
			continue;
		for (unsigned i = 0; i < CPU_CHUNK; i++) {
			struct cpu_slab *c = &h->cpu[k * CPU_CHUNK + i];
			/* a thread that only frees may hold cached objects and no slab */
			struct slab *any = c->slab ? c->slab : c->partial ? c->partial :
					   c->freelist ? ptr_to_slab(c->freelist) : NULL;

			if (any)
				cpu_slab_flush(any->cache, c);
		}
	}
}

/* pthread key destructor: give every slab back, recycle the heap. A later
 * allocation from another TLS destructor makes a heap again (and re-arms
 * the key, so that one is flushed on the next destructor round). */
static void heap_thread_exit(void *arg)
{
	struct thread_heap *h = arg;

	/* its own lock, not heaps_lock: threads exiting together flush at once */
	spin_lock(&h->lock);
	heap_flush_all(h, true);
	spin_unlock(&h->lock);
	spin_lock(&heaps_lock);
	h->live = 0;
	h->exited = 1;
	spin_unlock(&heaps_lock);
	tls_heap = &empty_heap;
}

/* Tests: give up the calling thread's cpu-partial slabs of s (dry ones go
 * FULL), leaving its active slab alone. */
void cache_drain_cpu_partial(struct uslab_cache *s)
{
	if (heap_has_chunk(tls_heap, s))
		cpu_partial_drain(s, heap_cpu_slab(tls_heap, s));
}

USLAB_API void uslab_thread_flush(void)
{
	struct thread_heap *h = tls_heap;

	if (h == &empty_heap)
		return;
	spin_lock(&h->lock);
	heap_flush_all(h, false);
	spin_unlock(&h->lock);
}

/* ---- cpu slab slow paths -------------------------------------------------------- */

static void cpu_slab_activate(struct cpu_slab *c, struct uslab_cache *s, struct slab *slab,
			      void *freelist)
{
	c->slab = slab;
	c->freelist = freelist;
	c->base = slab->base;
	c->span = (uintptr_t)s->objects * s->stride;
}

/* The slab is frozen for the calling thread's heap: from now on that
 * thread's frees of its objects are local. */
static void slab_set_owner(struct slab *slab)
{
	WRITE_ONCE(slab->owner, tls_heap);
	WRITE_ONCE(slab->owner_tp, thread_self());
}

/* The last object of chain p (NULL if it is empty); its length is added to
 * *n. A walk: a cache miss per object the thread has not touched lately. */
static void *chain_last(const struct uslab_cache *s, void *p, unsigned *n)
{
	void *last = NULL;

	for (; p; p = fp_get(s, p)) {
		last = p;
		(*n)++;
	}
	return last;
}

/*
 * Owner only: give up a frozen slab. Its private objects are the chain
 * `chain` (the cpu freelist, for the active slab), its owner-local list and
 * its objects not built yet (an active slab's); all are spliced back by one
 * dwcas in slab_unfreeze. owner is cleared first, so no later free by this
 * thread goes to the local list. Returns the length of `chain`.
 */
static unsigned slab_release(struct uslab_cache *s, struct slab *slab, void *chain)
{
	void *head = chain, *tail;
	unsigned n = 0, k, chained;

	slab_clear_owner(slab);
	tail = chain_last(s, chain, &n);
	chained = n;
	if (slab->local_free) {
		if (tail)
			fp_set(s, tail, slab->local_free);
		else
			head = slab->local_free;
		tail = chain_last(s, slab->local_free, &n);
		stat_add(s, STAT_FREE_LOCAL, (long)slab->local_count);
		slab->local_free = NULL;
		slab->local_count = 0;
	}
	if (slab->built < s->objects) {
		head = slab_build(s, slab, head, BUILD_REST, &k);
		n += k;
		if (!tail)
			tail = (char *)slab->base + (size_t)(s->objects - 1) * s->stride;
	}
	slab_unfreeze(s, slab, head, tail, n);
	return chained;
}

/*
 * Statistics of the fast paths, which count nothing themselves: everything
 * the slow path supplied to the cpu freelist, plus what frees pushed there,
 * minus what left it without being allocated (removed) and what is still on
 * it (remaining, which becomes the next round's supply), was allocated fast.
 */
static void cpu_stats_fold(struct uslab_cache *s, struct cpu_slab *c, unsigned removed,
			   unsigned remaining)
{
	long fast = (long)c->supplied + (long)c->fast_frees - (long)removed - (long)remaining;

	if (fast)
		stat_add(s, STAT_ALLOC_FAST, fast);
	if (c->fast_frees)
		stat_add(s, STAT_FREE_FAST, (long)c->fast_frees);
	c->supplied = remaining;
	c->fast_frees = 0;
}

/*
 * malloc's frees of objects from slabs this thread does not own go on its
 * cpu freelist (no atomic), to be allocated again here; the freelist then
 * holds objects of other slabs too ("foreign"), at most foreign_max pushed
 * since it was last empty. This gives them back to their slabs: runs of
 * neighbours from one slab with one dwcas each. The active slab's objects
 * stay on the list.
 */
static void flush_foreign(struct uslab_cache *s, struct cpu_slab *c)
{
	void *keep = NULL, **link = &keep;
	struct slab *run = NULL;
	void *head = NULL, *tail = NULL;
	unsigned cnt = 0, kept = 0, gone = 0;

	for (void *p = c->freelist, *next; p; p = next) {
		next = fp_get(s, p);
		if ((uintptr_t)p - c->base < c->span) {
			*link = p;
			link = (void **)((char *)p + s->fp_offset);
			kept++;
			continue;
		}
		struct slab *slab = ptr_to_slab(p);
		if (slab != run && run) {
			if (__slab_free(s, run, head, tail, cnt, true))
				cpu_partial_put(s, c, run);
			gone += cnt;
			run = NULL;
		}
		if (!run) {
			run = slab;
			head = tail = p;
			cnt = 1;
		} else {
			fp_set(s, p, head);
			head = p;
			cnt++;
		}
	}
	*link = NULL;
	if (run) {
		if (__slab_free(s, run, head, tail, cnt, true))
			cpu_partial_put(s, c, run);
		gone += cnt;
	}
	stat_add(s, STAT_FOREIGN_FLUSHED, gone);   /* counted as frees when pushed */
	cpu_stats_fold(s, c, gone, kept);
	c->freelist = keep;
	c->foreign_left = s->foreign_max;
}

/* Give up the active slab: splice the private chain back and unfreeze. */
static void cpu_slab_deactivate(struct uslab_cache *s, struct cpu_slab *c)
{
	struct slab *slab = c->slab;
	void *chain;

	if (c->foreign_left != s->foreign_max)   /* foreign objects may be on the list */
		flush_foreign(s, c);
	chain = c->freelist;   /* only the active slab's objects now: none without one */
	c->slab = NULL;
	c->freelist = NULL;
	c->base = c->span = 0;
	/* one walk of the chain (at thread exit, a cache miss per object) */
	cpu_stats_fold(s, c, slab ? slab_release(s, slab, chain) : 0, 0);
}

static void cpu_partial_drain(struct uslab_cache *s, struct cpu_slab *c)
{
	struct slab *slab = c->partial, *next;

	c->partial = NULL;
	c->nr_partial = 0;
	if (slab)
		stat_add(s, STAT_CPU_PARTIAL_DRAIN, 1);
	for (; slab; slab = next) {
		next = slab->next;
		slab->next = NULL;
		slab_release(s, slab, NULL);
	}
}

static void cpu_slab_flush(struct uslab_cache *s, struct cpu_slab *c)
{
	cpu_slab_deactivate(s, c);
	cpu_partial_drain(s, c);
}

/* A slab a remote free has just frozen for us joins our cpu-partial list. */
static void cpu_partial_put(struct uslab_cache *s, struct cpu_slab *c, struct slab *slab)
{
	if (c->nr_partial >= s->cpu_partial)
		cpu_partial_drain(s, c);
	slab_set_owner(slab);
	slab->next = c->partial;
	c->partial = slab;
	c->nr_partial++;
	stat_add(s, STAT_CPU_PARTIAL_PUT, 1);
}

/*
 * The active slab ran dry: keep it frozen, at the tail of the cpu-partial
 * list, rather than let it go FULL. This thread's frees into it then stay
 * owner-local (no dwcas to re-freeze it), and by the time the refill loop
 * reaches it again they have had a chance to come back.
 */
static void cpu_partial_put_tail(struct uslab_cache *s, struct cpu_slab *c, struct slab *slab)
{
	struct slab **pp;

	if (c->nr_partial >= s->cpu_partial)
		cpu_partial_drain(s, c);
	for (pp = &c->partial; *pp; pp = &(*pp)->next)
		;
	slab->next = NULL;
	*pp = slab;
	c->nr_partial++;
}

/* Owner only: the objects a frozen slab can give now (local list first),
 * and how many. */
static void *slab_take_private(struct uslab_cache *s, struct slab *slab, unsigned *count)
{
	void *chain = slab->local_free;

	if (chain) {
		*count = (unsigned)slab->local_count;
		stat_add(s, STAT_FREE_LOCAL, (long)slab->local_count);
		stat_add(s, STAT_REFILL_LOCAL, 1);
		slab->local_free = NULL;
		slab->local_count = 0;
		return chain;
	}
	chain = slab_take_freelist(s, slab, false, count);
	if (chain)
		stat_add(s, STAT_REFILL_REMOTE, 1);
	return chain;
}

/*
 * Owner only, the active slab running dry with objects unbuilt and `reused`
 * objects freed back to it (malloc's frees of the active slab's objects go
 * to its local list): whether to build more, and how many. With none freed
 * back it must (BUILD_GROW). Otherwise reuse comes first: those objects are
 * warm, and an unbuilt one lies on a page never written, a page fault the
 * first time (13 us on the VM of docs/bench.md, ~1 us on bare metal, against
 * ~30 ns for a refill); a short process that cycles one buffer of a
 * page-sized class (md5sum's 4 KiB stdio buffer, file after file) so writes
 * one page of the slab, not all eight. But a thread cycling a few objects
 * would then come here every few allocations for good (a malloc/free pair
 * of a page-sized class: every time): after REUSE_REFILLS_MAX refills served
 * by frees alone the slab builds one more page's worth, so a thread that
 * keeps coming back gets its slab built (after at most pages x
 * REUSE_REFILLS_MAX refills), and then refills as rarely as before.
 */
static void *slab_build_more(struct uslab_cache *s, struct slab *slab, unsigned reused,
			     unsigned *count)
{
	if (!reused)
		return slab_build(s, slab, NULL, BUILD_GROW, count);
	*count = 0;
	if (++slab->reuse_refills < REUSE_REFILLS_MAX)
		return NULL;
	return slab_build(s, slab, NULL, BUILD_PAGE, count);
}

void *cache_alloc_slow(struct uslab_cache *s)
{
	struct cpu_slab *c;
	struct slab *slab;
	void *obj, *freelist = NULL;
	unsigned count = 0;

	if (unlikely(READ_ONCE(stats_pending)))
		stats_poll();
	/* acquire (in kmalloc_unready): pairs with the release after
	 * cache_setup, so a kmalloc cache is used only once its id, chunk and
	 * cpu_offset are visible */
	if (unlikely(kmalloc_unready(s))) {
		s = kmalloc_class_init(s);   /* or its start-up class */
		if (!s)
			return NULL;
		/* a start-up class not set up yet has no cpu_offset to go by
		 * (0 would name class 0's cpu slab): it sets itself up there */
		return likely(!kmalloc_unready(s)) ? cache_alloc_fast(s) : cache_alloc_slow(s);
	}
	c = cpu_slab_get(s);
	if (unlikely(!c)) {
		errno = ENOMEM;
		return NULL;
	}
	stat_add(s, STAT_ALLOC_SLOW, 1);
	if (c->freelist)
		goto pop;
	if (mailbox_peek(heap_inbox(tls_heap, s->id)))
		inbox_drain(tls_heap, s->id, false);   /* onto the local lists taken below */
	c->foreign_left = s->foreign_max;   /* every foreign object has been reused */
	cpu_stats_fold(s, c, 0, 0);
	if (c->slab) {
		/* owner-local and remote frees to the active slab first */
		freelist = slab_take_private(s, c->slab, &count);
		if (c->slab->built < s->objects) {
			unsigned more, back = 0;
			void *built = slab_build_more(s, c->slab, count, &more);

			/* after the objects freed back: they are the warm ones */
			if (built && freelist)
				fp_set(s, chain_last(s, freelist, &back), built);
			else if (built)
				freelist = built;
			count += more;
		}
		if (freelist) {
			c->freelist = freelist;
			goto supplied;
		}
		struct slab *dry = c->slab;

		c->slab = NULL;
		c->base = c->span = 0;
		cpu_partial_put_tail(s, c, dry);
	}
	/* the first cpu-partial slab with something to give; dry ones (kept
	 * after running out) stay until frees come back or the list drains */
	for (struct slab **pp = &c->partial; (slab = *pp); pp = &slab->next) {
		freelist = slab_take_private(s, slab, &count);
		if (freelist) {
			*pp = slab->next;
			slab->next = NULL;
			c->nr_partial--;
			stat_add(s, STAT_REFILL_CPU_PARTIAL, 1);
			goto activate;
		}
	}
	slab = partial_take(s, &freelist, &count);
	if (slab) {
		stat_add(s, STAT_REFILL_PARTIAL, 1);
	} else {
		slab = slab_new(s);
		if (!slab) {
			errno = ENOMEM;
			return NULL;
		}
		freelist = slab_build(s, slab, NULL, BUILD_GROW, &count);
	}
	slab_set_owner(slab);
activate:
	cpu_slab_activate(c, s, slab, freelist);
supplied:
	c->supplied = count ? count - 1 : 0;   /* all but the one popped below */
pop:
	obj = c->freelist;
	c->freelist = fp_get(s, obj);
	return obj;
}

static struct slab *object_slab(struct uslab_cache *s, void *obj, const char *call)
{
	struct slab *slab = ptr_to_slab(obj);

	if (unlikely(!slab || slab->kind != SLAB_KIND_SLAB))
		uslab_fatal(call, obj, "invalid pointer");
	if (unlikely(slab->cache != s))
		uslab_fatal(call, obj, "pointer from another cache");
	uintptr_t off = (uintptr_t)obj - slab->base;
	if (unlikely(off >= slab->span || !on_object_boundary(s->stride_magic, off)))
		uslab_fatal(call, obj, "misaligned pointer");
	return slab;
}

static noinline void free_remote(struct uslab_cache *s, struct slab *slab, void *obj)
{
	struct cpu_slab *c = cpu_slab_get(s);

	stat_add(s, STAT_FREE_REMOTE, 1);
	if (__slab_free(s, slab, obj, obj, 1, c != NULL))
		cpu_partial_put(s, c, slab);
}

/* ---- remote frees by message (struct remote_msg in internal.h) ----------------
 *
 * Invariants. An object in a message is counted in use by its slab's word
 * and is on no freelist: between its free and the owner's drain it is the
 * message's. A message is in exactly one place: a heap's outbox (its
 * sender's, owner-only), one inbox, or being drained by one thread (taken
 * with one exchange). An inbox is a mailbox (atomic/mailbox.h): a sender's
 * post never succeeds on a closed one, and its thread closes it (with the
 * exchange that takes it) before giving its slabs up at exit, so every message posted is
 * drained by that thread, or, after its exit, never pushed (the sender frees
 * the objects through their slabs' words instead). The drain trusts no
 * routing: an object whose slab the heap no longer owns goes home by dwcas.
 * Only an allocation of cache s drains s's inboxes, so a destroy, which no
 * thread may race with uses of s, may take them all.
 */

static struct remote_msg *msg_next(const struct remote_msg *m)
{
	return (struct remote_msg *)m->node.next;
}

/* A message for h to fill: a spare one, one its receivers gave back, or new. */
static struct remote_msg *msg_get(struct thread_heap *h)
{
	struct remote_msg *m = h->msg_pool;

	if (!m && mailbox_peek(&h->msg_returns))
		m = (struct remote_msg *)mailbox_take(&h->msg_returns);
	if (!m)
		return meta_alloc(sizeof(*m));
	h->msg_pool = msg_next(m);
	return m;
}

/* Done with m (h: the calling thread's heap): back to its sender, so that a
 * thread that only receives keeps none and one that only sends makes few.
 * A returns box is never closed, so the post always succeeds. */
static void msg_put(struct thread_heap *h, struct remote_msg *m)
{
	if (m->from == h) {
		m->node.next = h->msg_pool ? &h->msg_pool->node : NULL;
		h->msg_pool = m;
		return;
	}
	mailbox_post(&m->from->msg_returns, &m->node);
}

/* Objects of m not taken by owner h (NULL: none) go home by dwcas, runs of
 * one slab together; c (if not NULL) may freeze FULL slabs onto its list. */
static void msg_free_objects(struct uslab_cache *s, struct remote_msg *m, struct thread_heap *owner,
			     struct cpu_slab *c)
{
	long local = 0;

	for (unsigned i = 0, j; i < m->count; i = j) {
		void *head = m->obj[i], *tail = head;
		struct slab *slab = ptr_to_slab(head);

		/* a run of one slab's objects, linked through themselves: the
		 * slab's descriptor, which the freeing thread keeps reading, is
		 * written once per run, not once per object */
		for (j = i + 1; j < m->count && ptr_to_slab(m->obj[j]) == slab; j++) {
			fp_set(s, m->obj[j], head);
			head = m->obj[j];
		}
		if (owner && READ_ONCE(slab->owner) == owner) {
			void *top = slab->local_free;

			if (unlikely(top && (top == head || top == tail)))
				uslab_fatal("free", top, "double free");
			fp_set(s, tail, top);
			slab->local_free = head;
			slab->local_count += j - i;
			local += j - i;
			continue;
		}
		if (__slab_free(s, slab, head, tail, j - i, c != NULL))
			cpu_partial_put(s, c, slab);
	}
	if (local)   /* counted as remote frees when freed */
		stat_add(s, STAT_FREE_LOCAL, -local);
}

/* Post m to its heap's inbox, or, if that thread has exited, free its
 * objects here. The outbox slot is the caller's to clear. */
static void msg_send(struct thread_heap *h, struct remote_msg *m)
{
	struct uslab_cache *s = m->cache;

	stat_add(s, STAT_FREE_REMOTE, (long)m->count);   /* counted as they leave */
	/* release: the owner's acquiring take sees the message filled */
	if (!mailbox_post(heap_inbox(m->to, s->id), &m->node)) {
		msg_free_objects(s, m, NULL, cpu_slab_get(s));
		msg_put(h, m);
	}
}

static void outbox_send(struct thread_heap *h, unsigned id)
{
	struct remote_msg **box = heap_outbox(h, id), *m = *box;

	if (m) {
		*box = NULL;
		msg_send(h, m);
	}
}

/* A list of messages done with: their objects onto owner's slabs (owner:
 * the calling thread's heap) or, with none, home by dwcas; each message
 * back to its sender. */
static void msgs_free(struct remote_msg *m, struct thread_heap *owner)
{
	for (struct remote_msg *next; m; m = next) {
		next = msg_next(m);
		msg_free_objects(m->cache, m, owner, owner ? heap_cpu_slab(owner, m->cache) : NULL);
		msg_put(tls_heap, m);
	}
}

/* Owner h: take its messages for cache id (closing the inbox at exit) and
 * put their objects on its slabs' owner-local lists. */
static void inbox_drain(struct thread_heap *h, unsigned id, bool close)
{
	struct mailbox *box = heap_inbox(h, id);

	msgs_free((struct remote_msg *)(close ? mailbox_close(box) : mailbox_take(box)), h);
}

/* Each id of h's used chunks (skipping the unused 64 at a time). */
#define for_each_heap_id(h, id)                                                         \
	for (unsigned id = 0; id < MAX_CACHES;                                          \
	     id += ((h)->chunks_used >> (id / CPU_CHUNK) & 1) ? 1 : CPU_CHUNK)          \
		if ((h)->chunks_used >> (id / CPU_CHUNK) & 1)

/*
 * Owner (its heap's lock held): send every outbox, then drain every inbox.
 * At exit every inbox is closed by the same exchange that takes it, before
 * the caller gives the slabs up: a later sender frees through the slabs'
 * words, which a frozen slab's release then takes.
 */
static void heap_messages_flush(struct thread_heap *h, bool exiting)
{
	for_each_heap_id(h, id)
		outbox_send(h, id);
	for_each_heap_id(h, id)
		if (exiting || mailbox_peek(heap_inbox(h, id)))
			inbox_drain(h, id, exiting);
}

/* heaps_lock held, h not live: a recycled heap's inboxes open again. */
static void heap_inboxes_open(struct thread_heap *h)
{
	for_each_heap_id(h, id)
		mailbox_open(heap_inbox(h, id));
}

/* Destroy, for each heap (heaps_lock and its lock held, no thread using s):
 * its message for s being filled and those sent to it go home by dwcas. */
static void heap_messages_drop(struct thread_heap *h, struct uslab_cache *s)
{
	struct remote_msg **box = heap_outbox(h, s->id), *m = *box;

	*box = NULL;
	if (m) {
		m->node.next = NULL;
		msgs_free(m, NULL);
	}
	/* a closed inbox stays closed */
	msgs_free((struct remote_msg *)mailbox_take(heap_inbox(h, s->id)), NULL);
}

/* Free obj, of a slab heap `to` owns, by message (see above). */
static noinline void free_by_message(struct uslab_cache *s, struct slab *slab, void *obj,
				     struct thread_heap *to)
{
	struct thread_heap *h = cpu_slab_get(s) ? tls_heap : NULL;   /* makes the heap */
	struct remote_msg **box, *m;

	if (unlikely(!h)) {
		free_remote(s, slab, obj);
		return;
	}
	box = heap_outbox(h, s->id);
	m = *box;
	if (unlikely(m && m->count && m->obj[m->count - 1] == obj))
		uslab_fatal("free", obj, "double free");
	if (m && m->to != to) {
		*box = NULL;
		msg_send(h, m);
		m = NULL;
	}
	if (!m) {
		m = msg_get(h);
		if (unlikely(!m)) {
			stat_add(s, STAT_FREE_REMOTE, 1);
			if (__slab_free(s, slab, obj, obj, 1, true))
				cpu_partial_put(s, heap_cpu_slab(h, s), slab);
			return;
		}
		m->cache = s;
		m->to = to;
		m->from = h;
		m->count = 0;
		*box = m;
	}
	m->obj[m->count++] = obj;
	if (m->count == MSG_OBJS) {
		*box = NULL;
		msg_send(h, m);
	}
}

/*
 * Free outside the active slab, the slab already looked up: a local push if
 * this thread froze the slab; a message to the heap that froze it if
 * another thread did; else (nobody owns it) onto this thread's cpu freelist
 * as a foreign object (slab_free_cached: reused here, or given back to its
 * slab in runs, one dwcas per run, when the budget is spent). Caches made
 * USLAB_REMOTE_IMMEDIATE take one dwcas on the slab for every non-local
 * free (which may freeze a FULL slab for us, onto our cpu-partial list).
 */
static inline __attribute__((always_inline)) void
free_local_or_remote(struct uslab_cache *s, struct slab *slab, void *obj)
{
	uintptr_t owner = READ_ONCE(slab->owner_tp);

	if (owner == thread_self()) {
		if (unlikely(obj == slab->local_free))
			uslab_fatal("free", obj, "double free");
		slab_local_push(slab, obj, s->fp_offset);
		return;
	}
	if (unlikely(s->flags & USLAB_REMOTE_IMMEDIATE)) {
		free_remote(s, slab, obj);
		return;
	}
	struct thread_heap *to = owner ? READ_ONCE(slab->owner) : NULL;

	if (!to)
		slab_free_cached(s, slab, obj);
	else if (!outbox_add(tls_heap, s, slab, obj))
		free_by_message(s, slab, obj, to);
}

void slab_free_slow(struct uslab_cache *s, struct slab *slab, void *obj)
{
	free_local_or_remote(s, slab, obj);
}

/* malloc's free of an object of a slab another thread (or none) owns: onto
 * this thread's cpu freelist for reuse (see flush_foreign). */
void slab_free_cached(struct uslab_cache *s, struct slab *slab, void *obj)
{
	struct cpu_slab *c = cpu_slab_get(s);

	if (unlikely(!c)) {
		stat_add(s, STAT_FREE_REMOTE, 1);
		__slab_free(s, slab, obj, obj, 1, false);
		return;
	}
	if (unlikely(obj == c->freelist))
		uslab_fatal("free", obj, "double free");
	if (!c->foreign_left)   /* budget spent, or a new cpu slab */
		flush_foreign(s, c);
	c->foreign_left--;
	cpu_freelist_push(c, obj, s->fp_offset);
}

/*
 * Cache-API free outside the active slab: the checks object_slab makes, in
 * their cheap form, then an owner-local push or the dwcas path. NULL lands
 * here too (the fast path's range test fails for it).
 */
noinline void cache_free_slow(struct uslab_cache *s, void *obj)
{
	if (unlikely(!obj))
		return;
	struct slab *slab = ptr_to_slab(obj);
	if (likely(slab && slab->cache == s)) {
		uintptr_t off = (uintptr_t)obj - slab->base;

		if (likely(off < slab->span && on_object_boundary(s->stride_magic, off))) {
			free_local_or_remote(s, slab, obj);
			return;
		}
	}
	object_slab(s, obj, "uslab_cache_free");   /* reports what is wrong */
	__builtin_unreachable();
}

/* ---- the API ------------------------------------------------------------------------ */

USLAB_API void *uslab_cache_alloc(struct uslab_cache *cache)
{
	return cache_alloc_fast(cache);
}

USLAB_API void uslab_cache_free(struct uslab_cache *cache, void *obj)
{
	cache_free_fast(cache, obj);   /* NULL falls through to the slow path */
}

/* What uslab.h's inline fast paths call when theirs does not apply. */
USLAB_API void *uslab__cache_alloc(struct uslab_cache *cache) __attribute__((alias("uslab_cache_alloc")));
USLAB_API void uslab__cache_free(struct uslab_cache *cache, void *obj)
	__attribute__((alias("uslab_cache_free")));

USLAB_API size_t uslab_cache_alloc_bulk(struct uslab_cache *cache, size_t n, void **objs)
{
	for (size_t i = 0; i < n; i++) {
		objs[i] = cache_alloc_fast(cache);
		if (unlikely(!objs[i])) {
			uslab_cache_free_bulk(cache, i, objs);
			errno = ENOMEM;
			return 0;
		}
	}
	return n;
}

/*
 * Frees runs of objects that share a slab with one dwcas per run (the
 * kernel's build_detached_freelist idea, limited to adjacent entries).
 */
USLAB_API void uslab_cache_free_bulk(struct uslab_cache *cache, size_t n, void **objs)
{
	struct cpu_slab *c = this_cpu_slab(cache);
	size_t i = 0;

	while (i < n) {
		void *obj = objs[i];

		if (!obj || (uintptr_t)obj - c->base < c->span) {
			uslab_cache_free(cache, obj);
			i++;
			continue;
		}
		struct slab *slab = object_slab(cache, obj, "uslab_cache_free_bulk");
		void *head = obj, *tail = obj;
		unsigned cnt = 1;

		for (i++; i < n && objs[i] && ptr_to_slab(objs[i]) == slab; i++, cnt++) {
			object_slab(cache, objs[i], "uslab_cache_free_bulk");
			fp_set(cache, objs[i], head);
			head = objs[i];
		}
		c = cpu_slab_get(cache);
		stat_add(cache, STAT_FREE_REMOTE, cnt);
		if (__slab_free(cache, slab, head, tail, cnt, c != NULL))
			cpu_partial_put(cache, c, slab);
	}
}

static unsigned ilog2(size_t x)
{
	return 63 - __builtin_clzl(x);
}

/* Slab size: the fewest units (a power of two) with <= 1/8 tail waste and
 * enough objects per slab to keep slow paths rare. */
static uint32_t calculate_units(struct uslab_cache *s)
{
	unsigned want = s->stride <= 256 ? 16 : s->stride <= 4096 ? 8 : 4;

	for (unsigned u = 1;; u *= 2) {
		size_t bytes = (size_t)u << UNIT_SHIFT;
		size_t objs = bytes / s->stride;

		if (objs > CTR_OBJ_MASK)
			objs = CTR_OBJ_MASK;
		bool waste_ok = bytes - objs * s->stride <= bytes / 8;
		if ((objs >= want && waste_ok) || u == SLAB_MAX_UNITS) {
			s->units = u;
			return (uint32_t)objs;
		}
	}
}

/* cache_registry write-locked. want >= 0: exactly that id; else the first free one
 * above the ids reserved for the kmalloc caches. */
static int cache_id_alloc(int want)
{
	if (want >= 0) {
		if (cache_ids[want / 64] & (1ull << (want % 64)))
			return -1;
		cache_ids[want / 64] |= 1ull << (want % 64);
		return want;
	}
	for (unsigned w = KMALLOC_IDS / 64; w < MAX_CACHES / 64; w++) {
		if (cache_ids[w] == ~0ull)
			continue;
		unsigned b = __builtin_ctzll(~cache_ids[w]);
		cache_ids[w] |= 1ull << b;
		return (int)(w * 64 + b);
	}
	return -1;
}

/* The last reference is gone: the cache's memory goes back. The static
 * kmalloc caches are never destroyed, so never get here. */
static void cache_release(struct kref *ref)
{
	struct uslab_cache *s = container_of(ref, struct uslab_cache, ref);

	meta_free(s, sizeof(*s));
}

/*
 * Fill in a cache's geometry and register it (id, registry). Used by
 * uslab_cache_create and for the static kmalloc caches, so it allocates
 * nothing. Returns 0, or an errno value.
 */
int cache_setup(struct uslab_cache *s, const char *name, size_t size, size_t align,
		unsigned flags, void (*ctor)(void *), int want_id)
{
	size_t slot;

	if (size == 0 || size > CACHE_MAX_SIZE || (align & (align - 1)) ||
	    align > os_page_size() || (flags & ~(USLAB_HWCACHE_ALIGN | USLAB_REMOTE_IMMEDIATE)))
		return EINVAL;
	dwcas_init();
	options_init();
	if (!align)
		align = size >= 16 ? 16 : 8;
	if (align < sizeof(void *))
		align = sizeof(void *);
	if ((flags & USLAB_HWCACHE_ALIGN) && align < CACHE_LINE)
		align = CACHE_LINE;

	s->size = (uint32_t)size;
	s->align = (uint32_t)align;
	s->flags = flags;
	s->ctor = ctor;
	/* With a constructor the object's contents must survive while it is
	 * free, so the free pointer lives in a word after the object. */
	s->fp_offset = ctor ? (uint32_t)round_up(size, sizeof(void *)) : 0;
	slot = ctor ? s->fp_offset + sizeof(void *) : size;
	if (slot < sizeof(void *))
		slot = sizeof(void *);
	s->stride = (uint32_t)round_up(slot, align);
	s->stride_magic = UINT64_MAX / s->stride + 1;
	uint32_t objects = calculate_units(s);
	s->foreign_max = (64u << 10) / s->stride;
	s->foreign_max = s->foreign_max < 16 ? 16 : s->foreign_max > 1024 ? 1024 : s->foreign_max;
	s->min_partial = ilog2(s->stride) / 2;
	s->min_partial = s->min_partial < 5 ? 5 : s->min_partial > 10 ? 10 : s->min_partial;
	s->cpu_partial = option(OPT_CPU_PARTIAL) > 0 ? (unsigned)option(OPT_CPU_PARTIAL) :
			 s->stride >= 4096 ? 2 : 4;
	spin_lock_init(&s->list_lock);
	name_copy(s->name, sizeof(s->name), name ? name : "unnamed");

	kref_init(&s->ref);
	qrw_write_lock(&cache_registry);
	int id = cache_id_alloc(want_id);
	if (id >= 0) {
		s->id = (unsigned)id;
		s->chunk = (uint32_t)id / CPU_CHUNK;
		s->cpu_offset = (uint32_t)(offsetof(struct thread_heap, cpu) +
					   (size_t)id * sizeof(struct cpu_slab));
		s->stat_off = heap_stat_off((unsigned)id);
		s->inline_offset = s->fp_offset ? (uint32_t)(offsetof(struct thread_heap, cpu) +
				   NEVER_USED_ID * sizeof(struct cpu_slab)) : s->cpu_offset;
		s->next = caches;
		caches = s;
		/* last: cache_alloc_slow's acquire of objects sees the whole setup */
		smp_store_release(&s->objects, objects);
	}
	qrw_write_unlock(&cache_registry);
	return id < 0 ? ENOMEM : 0;
}

USLAB_API struct uslab_cache *uslab_cache_create(const char *name, size_t size, size_t align,
						 unsigned flags, void (*ctor)(void *))
{
	struct uslab_cache *s = meta_alloc(sizeof(*s));
	int err;

	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	err = cache_setup(s, name, size, align, flags, ctor, -1);
	if (err) {
		meta_free(s, sizeof(*s));
		errno = err;
		return NULL;
	}
	return s;
}

/* Flush this cache's cpu slab in every heap (callers: heaps_lock held; each
 * heap's lock keeps its thread's own flushes out meanwhile). */
static void flush_all_heaps(struct uslab_cache *s)
{
	for (struct thread_heap *h = heaps; h; h = h->next) {
		if (heap_has_chunk(h, s)) {
			spin_lock(&h->lock);
			cpu_slab_flush(s, heap_cpu_slab(h, s));
			/* the next cache with this id has its own foreign budget
			 * (a stale larger one kept foreign objects past it, and
			 * out of deactivate's sight) */
			heap_cpu_slab(h, s)->foreign_left = 0;
			spin_unlock(&h->lock);
		}
	}
	/* after every slab of s is unfrozen: the messages' objects go home */
	for (struct thread_heap *h = heaps; h; h = h->next) {
		if (heap_has_chunk(h, s)) {
			spin_lock(&h->lock);
			heap_messages_drop(h, s);
			spin_unlock(&h->lock);
		}
	}
}

/* Objects of a slab not built yet: counted in use by its word, never live.
 * Racy for another thread's active slab (the count only falls). */
static unsigned slab_unbuilt(const struct uslab_cache *s, const struct slab *slab)
{
	return s->objects - READ_ONCE(slab->built);
}

struct live_count {
	struct uslab_cache *s;
	size_t live, slabs;
};

/* Before counting: objects other threads sent this one are free, not live. */
static void own_inbox_drain(struct uslab_cache *s)
{
	if (heap_has_chunk(tls_heap, s) && mailbox_peek(heap_inbox(tls_heap, s->id)))
		inbox_drain(tls_heap, s->id, false);
}

static void count_live(struct slab *slab, void *arg)
{
	struct live_count *lc = arg;

	if (READ_ONCE(slab->cache) != lc->s)
		return;
	lc->slabs++;
	lc->live += ctr_inuse(dwcas_read(&slab->xword).hi) - slab_unbuilt(lc->s, slab);
	/* owner-local frees are counted in use in the word; only the owner may
	 * read its list, so another thread's count as live until it flushes */
	if (READ_ONCE(slab->owner) == tls_heap)
		lc->live -= slab->local_count;
}

/* The calling thread's private objects of cache s (on its cpu freelist). */
static long own_private_objects(struct uslab_cache *s)
{
	struct thread_heap *h = tls_heap;
	long n = 0;

	if (!heap_has_chunk(h, s))
		return 0;
	for (void *p = heap_cpu_slab(h, s)->freelist; p; p = fp_get(s, p))
		n++;
	return n;
}

USLAB_API int uslab_cache_destroy(struct uslab_cache *s)
{
	struct live_count lc = { .s = s };

	if (!s)
		return -EINVAL;
	spin_lock(&heaps_lock);
	flush_all_heaps(s);
	spin_unlock(&heaps_lock);
	segment_for_each_slab(count_live, &lc);
	if (lc.live) {
		fprintf(stderr, "uslab: uslab_cache_destroy(): cache %s still has %zu live object%s\n",
			s->name, lc.live, lc.live == 1 ? "" : "s");
		return -EBUSY;
	}
	cache_shrink_partial(s);

	qrw_write_lock(&cache_registry);
	WRITE_ONCE(s->dead, 1);
	for (struct uslab_cache **pp = &caches; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	/* the next cache with this id starts its statistics from zero */
	spin_lock(&heaps_lock);
	for (struct thread_heap *h = heaps; h; h = h->next)
		for (int i = 0; i < NR_CACHE_STATS; i++)
			if (__atomic_load_n(&heap_stat(h, s)[i], __ATOMIC_RELAXED))
				__atomic_store_n(&heap_stat(h, s)[i], 0, __ATOMIC_RELAXED);
	spin_unlock(&heaps_lock);
	cache_ids[s->id / 64] &= ~(1ull << (s->id % 64));
	qrw_write_unlock(&cache_registry);
	kref_put(&s->ref, cache_release);   /* the creator's reference */
	return 0;
}

USLAB_API void uslab_cache_shrink(struct uslab_cache *s)
{
	struct thread_heap *h = tls_heap;

	if (heap_has_chunk(h, s)) {
		spin_lock(&h->lock);
		outbox_send(h, s->id);
		inbox_drain(h, s->id, false);
		cpu_slab_flush(s, heap_cpu_slab(h, s));
		spin_unlock(&h->lock);
	}
	cache_shrink_partial(s);
	segment_purge_all();
	segment_release_empty_over(0);
}

USLAB_API size_t uslab_cache_object_size(const struct uslab_cache *s)
{
	return s->stride;
}

USLAB_API const char *uslab_cache_name(const struct uslab_cache *s)
{
	return s->name;
}

USLAB_API int uslab_cache_info(struct uslab_cache *s, struct uslab_cache_info *info)
{
	struct live_count lc = { .s = s };

	if (!s || !info)
		return -EINVAL;
	own_inbox_drain(s);
	segment_for_each_slab(count_live, &lc);
	lc.live -= own_private_objects(s);
	memset(info, 0, sizeof(*info));
	info->object_size = s->stride;
	info->objects_per_slab = s->objects;
	info->slab_bytes = (size_t)s->units << UNIT_SHIFT;
	info->slabs = (size_t)atomic_long_read(&s->nr_slabs);
	info->partial_slabs = READ_ONCE(s->nr_partial);
	info->live_objects = lc.live;
	info->slabs_allocated = (size_t)atomic_long_read(&s->slabs_allocated);
	info->slabs_freed = (size_t)atomic_long_read(&s->slabs_freed);
	return 0;
}

USLAB_API const char *uslab_dwcas_path(void)
{
	return dwcas_path_name();
}

USLAB_API size_t uslab_mapped_bytes(void)
{
	return segment_mapped_bytes();
}

/* ---- validation --------------------------------------------------------------------- */

struct validate {
	struct uslab_cache *s;
	long problems;
	size_t slabs, on_list;
};

#define VPROBLEM(v, slab, ...)                                                      \
	do {                                                                        \
		fprintf(stderr, "uslab: validate %s: slab %p: ", (v)->s->name,      \
			(void *)(slab)->base);                                      \
		fprintf(stderr, __VA_ARGS__);                                       \
		fputc('\n', stderr);                                                \
		(v)->problems++;                                                    \
	} while (0)

/* Walk one chain, marking objects in seen[]; returns its length. A cpu
 * freelist (foreign_ok) may hold other slabs' objects: those are skipped. */
static unsigned walk_chain(struct validate *v, struct slab *slab, void *p, uint64_t *seen,
			   const char *which, bool foreign_ok)
{
	struct uslab_cache *s = v->s;
	unsigned n = 0, steps = 0, built = READ_ONCE(slab->built);

	for (; p; p = fp_get(s, p)) {
		uintptr_t off = (uintptr_t)p - slab->base;

		if (foreign_ok && off >= (uintptr_t)s->objects * s->stride) {
			if (++steps > 1u << 24) {
				VPROBLEM(v, slab, "%s freelist does not end", which);
				break;
			}
			continue;
		}
		if (off >= (uintptr_t)s->objects * s->stride || off % s->stride) {
			VPROBLEM(v, slab, "%s freelist leaves the slab at %p", which, p);
			break;
		}
		size_t i = off / s->stride;
		if (i >= built) {
			VPROBLEM(v, slab, "%s freelist holds %p, not built yet", which, p);
			break;
		}
		if (seen[i / 64] & (1ull << (i % 64))) {
			VPROBLEM(v, slab, "object %p is on a freelist twice (%s)", p, which);
			break;
		}
		seen[i / 64] |= 1ull << (i % 64);
		n++;
	}
	return n;
}

static void validate_slab(struct slab *slab, void *arg)
{
	struct validate *v = arg;
	struct uslab_cache *s = v->s;
	uint64_t seen[(CTR_OBJ_MASK + 64) / 64];
	bool active = false;

	if (slab->cache != s)
		return;
	v->slabs++;
	memset(seen, 0, sizeof(seen));
	dword_t w = dwcas_read_stable(&slab->xword);
	unsigned inuse = ctr_inuse(w.hi), objects = ctr_objects(w.hi);
	bool frozen = ctr_frozen(w.hi);

	if (objects != s->objects)
		VPROBLEM(v, slab, "objects %u, the cache says %u", objects, s->objects);
	unsigned shared = walk_chain(v, slab, (void *)w.lo, seen, "shared", false);
	if (inuse + shared != objects)
		VPROBLEM(v, slab, "inuse %u + free %u != objects %u", inuse, shared, objects);

	struct thread_heap *owner = READ_ONCE(slab->owner);
	if (frozen && !owner)
		VPROBLEM(v, slab, "frozen but no thread owns it");
	if (!frozen && owner)
		VPROBLEM(v, slab, "owned by a thread but not frozen");
	if (!frozen && slab->local_free)
		VPROBLEM(v, slab, "unfrozen with an owner-local freelist");
	unsigned priv = walk_chain(v, slab, slab->local_free, seen, "owner-local", false);
	if (owner && heap_has_chunk(owner, s)) {
		struct cpu_slab *c = heap_cpu_slab(owner, s);
		active = c->slab == slab;
		if (active)
			priv += walk_chain(v, slab, c->freelist, seen, "private", true);
		if (!active) {
			bool listed = false;
			for (struct slab *p = c->partial; p; p = p->next)
				listed |= p == slab;
			if (!listed)
				VPROBLEM(v, slab, "owner holds it neither active nor cpu-partial");
		}
	} else if (owner) {
		VPROBLEM(v, slab, "owner heap has no cpu slab for this cache");
	}
	unsigned built = READ_ONCE(slab->built);
	if (built > objects)
		VPROBLEM(v, slab, "built %u of %u objects", built, objects);
	else if (built < objects && !active)
		VPROBLEM(v, slab, "%u of %u objects built, but no thread's active slab", built,
			 objects);
	else if (priv + (objects - built) > inuse)
		VPROBLEM(v, slab, "private %u + unbuilt %u objects exceed inuse %u", priv,
			 objects - built, inuse);
	if (slab->on_partial)
		v->on_list++;
	if (frozen && slab->on_partial)
		VPROBLEM(v, slab, "frozen and on the partial list");
	if (!frozen && inuse == objects && slab->on_partial)
		VPROBLEM(v, slab, "full and on the partial list");
	if (!frozen && inuse < objects && inuse > 0 && !slab->on_partial)
		VPROBLEM(v, slab, "partial (inuse %u of %u) but not on the partial list", inuse,
			 objects);
	if (!frozen && inuse == 0 && !slab->on_partial)
		VPROBLEM(v, slab, "empty, unfrozen and on no list (leaked)");
}

USLAB_API long uslab_cache_validate(struct uslab_cache *s)
{
	struct validate v = { .s = s };
	size_t listed = 0;

	if (!s)
		return 1;
	spin_lock(&heaps_lock);
	heaps_lock_each();   /* no thread flushes while its cpu slabs are read */
	spin_lock(&s->list_lock);
	for (struct slab *p = s->partial; p; p = p->next) {
		if (!p->on_partial) {
			fprintf(stderr, "uslab: validate %s: slab %p on the list without on_partial\n",
				s->name, (void *)p->base);
			v.problems++;
		}
		if (++listed > s->nr_partial + 1)
			break;
	}
	if (listed != s->nr_partial) {
		fprintf(stderr, "uslab: validate %s: partial list has %zu slabs, nr_partial %lu\n",
			s->name, listed, s->nr_partial);
		v.problems++;
	}
	segment_for_each_slab(validate_slab, &v);
	if (v.on_list != listed) {
		fprintf(stderr, "uslab: validate %s: %zu slabs marked on_partial, %zu listed\n",
			s->name, v.on_list, listed);
		v.problems++;
	}
	if ((long)v.slabs != atomic_long_read(&s->nr_slabs)) {
		fprintf(stderr, "uslab: validate %s: found %zu slabs, nr_slabs %ld\n", s->name,
			v.slabs, atomic_long_read(&s->nr_slabs));
		v.problems++;
	}
	spin_unlock(&s->list_lock);
	heaps_unlock_each(false);
	spin_unlock(&heaps_lock);
	return v.problems;
}

/* ---- fork: this layer's locks (process.c orders all layers) ---------------------- */

static void fork_unlock(spinlock_t *l, bool child)
{
	if (child)
		spin_unlock_after_fork_child(l);
	else
		spin_unlock(l);
}

/* heaps_lock held: every heap's own lock (validate, fork) */
static void heaps_lock_each(void)
{
	for (struct thread_heap *h = heaps; h; h = h->next)
		spin_lock(&h->lock);
}

static void heaps_unlock_each(bool child)
{
	for (struct thread_heap *h = heaps; h; h = h->next)
		fork_unlock(&h->lock, child);
}

void caches_lock_all(void)
{
	qrw_write_lock(&cache_registry);
	spin_lock(&heaps_lock);
	heaps_lock_each();
	for (struct uslab_cache *s = caches; s; s = s->next)
		spin_lock(&s->list_lock);
}

void caches_unlock_all(bool child)
{
	for (struct uslab_cache *s = caches; s; s = s->next)
		fork_unlock(&s->list_lock, child);
	/* the threads that did not survive: what was sent to them stays lost
	 * with the rest of what they cached */
	if (child)
		for (struct thread_heap *h = heaps; h; h = h->next)
			if (h->live && h != tls_heap)
				for_each_heap_id(h, id)
					mailbox_close(heap_inbox(h, id));
	heaps_unlock_each(child);
	fork_unlock(&heaps_lock, child);
	if (child)
		qrwlock_init(&cache_registry);
	else
		qrw_write_unlock(&cache_registry);
}


/* ---- statistics: one cache's numbers, for stats.c ----------------------------- */

struct report_walk {
	struct uslab_cache *s;
	struct cache_report *r;
};

static void report_slab(struct slab *slab, void *arg)
{
	struct report_walk *w = arg;

	if (READ_ONCE(slab->cache) != w->s)
		return;
	w->r->slabs++;
	w->r->live_objects += ctr_inuse(dwcas_read(&slab->xword).hi) - slab_unbuilt(w->s, slab);
	if (READ_ONCE(slab->owner) == tls_heap) {   /* only the owner may look */
		w->r->live_objects -= (long)slab->local_count;
		w->r->stat[STAT_FREE_LOCAL] += (long)slab->local_count;
	}
}

/*
 * Counters plus what the calling thread has not folded in yet. Other live
 * threads fold theirs at their next refill, flush or exit (their private
 * lists and owner-local frees count as live until then, as SLUB counts
 * objects in cpu slabs as active).
 */
static void cache_report(struct uslab_cache *s, struct cache_report *r)
{
	struct report_walk w = { s, r };

	own_inbox_drain(s);   /* first: it moves counts between statistics */
	memset(r, 0, sizeof(*r));
	r->name = s->name;
	r->size = s->size;
	r->object_size = s->stride;
	r->objects_per_slab = s->objects;
	r->slab_bytes = (size_t)s->units << UNIT_SHIFT;
	r->partial_slabs = READ_ONCE(s->nr_partial);
	for (int i = 0; i < NR_CACHE_STATS; i++)
		r->stat[i] = atomic_long_read(&s->stat[i]);
	spin_lock(&heaps_lock);
	for (struct thread_heap *h = heaps; h; h = h->next)
		for (int i = 0; i < NR_CACHE_STATS; i++)
			r->stat[i] += __atomic_load_n(&heap_stat(h, s)[i], __ATOMIC_RELAXED);
	spin_unlock(&heaps_lock);
	segment_for_each_slab(report_slab, &w);
	struct thread_heap *h = tls_heap;
	if (heap_has_chunk(h, s)) {
		struct cpu_slab *c = heap_cpu_slab(h, s);
		long left = own_private_objects(s);

		r->live_objects -= left;
		struct remote_msg *m = *heap_outbox(h, s->id);

		if (m)   /* freed, not counted yet */
			r->stat[STAT_FREE_REMOTE] += (long)m->count;
		r->stat[STAT_ALLOC_FAST] += (long)c->supplied + (long)c->fast_frees - left;
		r->stat[STAT_FREE_FAST] += (long)c->fast_frees;
	}
}

/*
 * Visit every cache that has slabs or has served an allocation. The registry
 * is read-locked only to take a reference on each cache; the reports are
 * made, and fn (which may allocate: it prints) called, with no lock held.
 */
void caches_for_each_report(void (*fn)(const struct cache_report *, void *), void *arg)
{
	struct cache_report r;
	struct uslab_cache **list;
	size_t n = 0, cap = MAX_CACHES;

	list = meta_alloc(cap * sizeof(*list));
	if (!list)
		return;
	qrw_read_lock(&cache_registry);
	for (struct uslab_cache *s = caches; s && n < cap; s = s->next)
		if (s->objects && kref_get_unless_zero(&s->ref))
			list[n++] = s;
	qrw_read_unlock(&cache_registry);
	for (size_t i = 0; i < n; i++) {
		struct uslab_cache *s = list[i];

		if (!READ_ONCE(s->dead)) {
			cache_report(s, &r);
			if (r.slabs || r.stat[STAT_ALLOC_FAST] || r.stat[STAT_ALLOC_SLOW])
				fn(&r, arg);
		}
		kref_put(&s->ref, cache_release);
	}
	meta_free(list, cap * sizeof(*list));
}
