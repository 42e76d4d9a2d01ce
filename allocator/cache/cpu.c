/* SPDX-License-Identifier: MIT */
/*
 * cpu.c - the cpu slab's slow paths: refilling the cpu freelist, giving
 * frozen slabs up (deactivate, cpu-partial), and frees outside the active
 * slab (owner-local, by message, cached as foreign, or by dwcas).
 *
 * Call tree of an allocation (uslab.h and malloc/kmalloc.h have the fast
 * paths, which end in cache_alloc_slow when the freelist is empty):
 *   cache_alloc_slow -> cpu_refill -> inbox_take (remote.c)
 *                                  -> refill_from_active -> slab_take_private, slab_build_more
 *                                  -> refill_slab -> cpu-partial, partial_take,
 *                                                 release_foreign + slab_new
 * and of a free outside the active slab:
 *   cache_free_slow / slab_free_slow -> free_local_or_remote
 *       -> cpu_local_push (this thread owns it) | free_by_message (another does)
 *       | slab_free_cached (nobody does: foreign, flush_foreign later)
 */
#define _GNU_SOURCE
#include "local.h"

#include <errno.h>


static void cpu_slab_activate(struct cpu_slab *c, struct uslab_cache *s, struct slab *slab,
			      void *freelist)
{
	ASSERT(!c->slab && ctr_frozen(dwcas_read(&slab->xword).hi) && slab->owner == tls_heap);
	c->slab = slab;
	c->freelist = freelist;
	c->base = slab->base;
	c->limit = s->stride <= STRIDE_EXACT_MAX ? s->obj_limit : 0;
}

/* The slab is frozen for the calling thread's heap, whose cpu slab of the
 * cache is c: from now on that thread's frees of its objects are local -
 * malloc's onto c's freelist (slab->owner_cpu), the cache API's onto the
 * slab's owner-local list. */
static void slab_set_owner(struct slab *slab, struct cpu_slab *c)
{
	WRITE_ONCE(slab->owner, tls_heap);
	for (unsigned i = 0, n = slab_owner_units(slab); i < n; i++) {
		WRITE_ONCE(slab[i].owner_cpu, c);
		WRITE_ONCE(slab[i].owner_tp, thread_self());
	}
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
 * `chain` .. `tail`, n objects (the cpu freelist, for the active slab;
 * NULL, NULL, 0 for another), its owner-local list and its objects not
 * built yet (an active slab's); all are spliced back by one dwcas in
 * slab_unfreeze. owner is cleared first, so no later free by this thread
 * goes to the slab's lists.
 */
static void slab_release(struct uslab_cache *s, struct slab *slab, void *chain, void *tail,
			 unsigned n)
{
	void *head = chain;
	unsigned k;

	slab_clear_owner(slab);
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
		if (slab_release_unbuilt(s, slab, n))
			return;
		head = slab_build(s, slab, head, BUILD_REST, &k);
		n += k;
		if (!tail)
			tail = (char *)slab->base + (size_t)(s->objects - 1) * s->stride;
	}
	slab_unfreeze(s, slab, head, tail, n);
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
 * Publish c's cached objects (cache.h, cpu_cached_set): on_freelist, which
 * the caller knows, and the owner-local lists of the slabs c holds frozen
 * (the active one and at most cpu_partial others). Owner only.
 */
static void cpu_cached_publish(const struct uslab_cache *s, struct cpu_slab *c,
			       uint64_t on_freelist)
{
	uint64_t n = on_freelist + c->parked;

	if (c->slab)
		n += c->slab->local_count;
	cpu_cached_set(c, n);
}

/*
 * The cpu-partial list: the slabs a thread holds frozen besides its active
 * one, at most cpu_partial_bound of them (local.h) - slabs a free froze for
 * it (their words hold objects) and its own active slabs that ran dry.
 * Owner only.
 * Linked through next (NULL-terminated) and prev (the head's prev is the
 * tail), so both ends are reached at once. Slabs with objects to give are
 * kept in front of dry ones: a slab a free froze joins at the head, a dry
 * one at the tail, and a listed slab whose owner-local list gets its first
 * object (cpu_local_push: the owner's frees parked by flush_foreign, a
 * message's, the cache API's owner-local free) moves to the head. A refill
 * then looks at the head, not at every slab (refill_slab), and puts a dry
 * slab it finds there at the tail, so that one whose word got objects by
 * dwcas is seen in its turn. c->parked counts the listed slabs'
 * owner-local objects.
 */
static void partial_link(struct cpu_slab *c, struct slab *slab, bool at_head)
{
	struct slab *head = c->partial;

	c->nr_partial++;
	c->parked += (uint32_t)slab->local_count;
	if (!head) {
		slab->next = NULL;
		slab->prev = slab;
		c->partial = slab;
	} else if (at_head) {
		slab->next = head;
		slab->prev = head->prev;
		head->prev = slab;
		c->partial = slab;
	} else {
		slab->next = NULL;
		slab->prev = head->prev;
		head->prev->next = slab;
		head->prev = slab;
	}
}

static void partial_unlink(struct cpu_slab *c, struct slab *slab)
{
	struct slab *head = c->partial;

	if (slab == head)
		c->partial = slab->next;
	else
		slab->prev->next = slab->next;
	if (slab->next)
		slab->next->prev = slab->prev;
	else if (slab != head)
		head->prev = slab->prev;   /* it was the tail */
	slab->next = slab->prev = NULL;
	c->nr_partial--;
	c->parked -= (uint32_t)slab->local_count;
}

/* Owner only: the chain head..tail, n objects (the caller has checked that
 * they are free and not free already), onto the owner-local list of slab,
 * which c holds frozen (see above). */
void cpu_local_push(struct uslab_cache *s, struct cpu_slab *c, struct slab *slab, void *head,
		    void *tail, unsigned n)
{
	fp_set(s, tail, slab->local_free);
	slab->local_free = head;
	if (slab != c->slab) {
		if (!slab->local_count && slab != c->partial) {
			partial_unlink(c, slab);
			partial_link(c, slab, true);
		}
		c->parked += n;
	}
	slab->local_count += n;
}

/* s's objects in a page, at most COLD_REFILL_MAX: 0 above a page. */
static unsigned page_objects(const struct uslab_cache *s)
{
	unsigned n = (unsigned)(os_page_size() / s->stride);

	return n > COLD_REFILL_MAX ? COLD_REFILL_MAX : n;
}

/* What a thread that has just come (refill_ordered, below) takes from a
 * partial slab: COLD_REFILL_MAX objects, or a page's worth if that is
 * fewer (at least 1). A new slab's first refill builds a page's worth;
 * taken from a chain, each one is a link walked now and, if the thread
 * exits without it, again then. */
static unsigned cold_refill_objects(const struct uslab_cache *s)
{
	return page_objects(s) ?: 1;
}

/* The foreign objects a thread may keep for reuse: a page's worth until it
 * has refilled the class, none of a class whose objects are bigger (a
 * thread that only frees it, a consumer, reuses none: a full budget in each
 * of 40 classes held megabytes per thread in `oversubscribed`, and one
 * object of each class above 32 KiB still 30 MiB in all at 128 threads),
 * then foreign_max. */
static uint16_t foreign_budget(const struct uslab_cache *s)
{
	if (s->id < STATIC_IDS && !tls_heap->k_refilled[s->id])
		return (uint16_t)page_objects(s);
	return s->foreign_max;
}

/*
 * malloc's frees go on the freeing thread's cpu freelist for the class (no
 * atomic), to be allocated again here while their lines are warm: the
 * owner's frees into every slab it owns, and frees into slabs nobody owns
 * ("foreign"), at most foreign_max of those since the list was last empty.
 * The list then holds objects of other slabs than the active one; a slab
 * this thread gives up (cpu_partial_drain) may leave some, foreign from
 * then on. This sorts the list, when the budget is spent and before the
 * active slab is given up (whose chain the list must then be): the active
 * slab's objects stay; the thread's other slabs' go onto their owner-local
 * lists (no atomic), where a refill takes each slab's whole; foreign ones
 * back to their slabs, in runs of neighbours from one slab with one dwcas
 * each. Parked rather than kept, the owned ones are handed out again slab
 * by slab, not in the order they were freed: a pool freed in random order
 * is allocated again with the locality of a slab's list (and the list does
 * not carry them from one flush to the next). One walk, which rewrites a kept
 * object's link only where objects left after it. Returns how many stay,
 * the last in *last.
 */
static unsigned flush_foreign(struct uslab_cache *s, struct cpu_slab *c, void **last)
{
	void *keep = NULL, *keep_tail = NULL;
	struct slab *run = NULL;
	void *head = NULL, *tail = NULL;
	unsigned cnt = 0, kept = 0, gone = 0, local = 0;
	bool cut = false;   /* objects left the list since keep_tail */
	/* the active slab's objects (most, at a thread's exit): one compare */
	uintptr_t base = c->base, span = c->slab ? (uintptr_t)s->objects * s->stride : 0;

	for (void *p = c->freelist, *next; p; p = next) {
		if ((uintptr_t)p - base < span) {
			/* a run of the active slab's objects: kept as linked */
			if (!keep_tail)
				keep = p;
			else if (cut)
				fp_set(s, keep_tail, p);
			cut = false;
			do {   /* (NULL ends it too: it is below base) */
				keep_tail = p;
				kept++;
				p = fp_get(s, p);
			} while ((uintptr_t)p - base < span);
			next = p;
			continue;
		}
		next = fp_get(s, p);
		/* (a freelist holds objects of our segments only) */
		struct slab *slab = segment_desc_head((uintptr_t)p & ~(SEG_SIZE - 1), p);
		/* c's heap froze it (only that heap's thread stores this c:
		 * another slab's owner may be changing it meanwhile) */
		bool own = READ_ONCE(slab->owner_cpu) == c;

		cut = true;
		if (own) {   /* onto its own list, for a refill to take whole */
			cpu_local_push(s, c, slab, p, p, 1);
			local++;
			continue;
		}
		if (slab != run && run) {
			slab_free_chain(s, c, run, head, tail, cnt);
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
	if (keep_tail && cut)
		fp_set(s, keep_tail, NULL);
	if (run) {
		slab_free_chain(s, c, run, head, tail, cnt);
		gone += cnt;
	}
	stat_add(s, STAT_FOREIGN_FLUSHED, gone);   /* counted as frees when pushed */
	stat_add(s, STAT_FREE_LOCAL, -(long)local);   /* ... and as local ones when taken */
	cpu_stats_fold(s, c, gone + local, kept);
	c->freelist = keep;
	c->foreign_left = foreign_budget(s);
	cpu_cached_publish(s, c, kept);
	if (last)
		*last = keep_tail;
	return kept;
}

/* Give up the active slab: splice the private chain back and unfreeze. */
static void cpu_slab_deactivate(struct uslab_cache *s, struct cpu_slab *c)
{
	struct slab *slab = c->slab;
	void *tail;
	/* one walk of the list (at thread exit, a cache miss per object) */
	unsigned n = flush_foreign(s, c, &tail);
	void *chain = c->freelist;   /* only the active slab's objects now: none without one */

	c->slab = NULL;
	c->freelist = NULL;
	c->base = c->limit = 0;
	if (slab)
		slab_release(s, slab, chain, tail, n);
	cpu_stats_fold(s, c, n, 0);
}

static void cpu_partial_drain(struct uslab_cache *s, struct cpu_slab *c)
{
	struct slab *slab = c->partial, *next;
	long gone = c->parked;

	c->partial = NULL;
	c->nr_partial = 0;
	c->parked = 0;
	if (slab)
		stat_add(s, STAT_CPU_PARTIAL_DRAIN, 1);
	for (; slab; slab = next) {
		next = slab->next;
		slab->next = slab->prev = NULL;
		slab_release(s, slab, NULL, NULL, 0);
	}
	if (gone)
		cpu_cached_add(c, -gone);
}

void cpu_slab_flush(struct uslab_cache *s, struct cpu_slab *c)
{
	cpu_slab_deactivate(s, c);
	cpu_partial_drain(s, c);
	cpu_cached_set(c, 0);
}

/* Tests: give up the calling thread's cpu-partial slabs of s (dry ones go
 * FULL), leaving its active slab alone. */
void cache_drain_cpu_partial(struct uslab_cache *s)
{
	if (heap_has_chunk(tls_heap, s))
		cpu_partial_drain(s, heap_cpu_slab(tls_heap, s));
}

/* A slab a free of ours has just frozen for us joins our cpu-partial list. */
void cpu_partial_put(struct uslab_cache *s, struct cpu_slab *c, struct slab *slab)
{
	ASSERT(ctr_frozen(dwcas_read(&slab->xword).hi) && !slab->on_partial);
	if (c->nr_partial >= cpu_partial_bound(s, tls_heap)) {
		/* we allocate from s, and our frees land in more slabs than
		 * the list holds: keep twice as many from now on (local.h). A
		 * thread that only frees s's objects does not. */
		uint8_t *doubled = heap_partial_doubled(tls_heap, s->id);

		if (c->slab && !*doubled)
			*doubled = 1;
		else
			cpu_partial_drain(s, c);
	}
	slab_set_owner(slab, c);
	partial_link(c, slab, true);
	stat_add(s, STAT_CPU_PARTIAL_PUT, 1);
}

/*
 * The active slab ran dry: keep it frozen, at the tail of the cpu-partial
 * list, rather than let it go FULL. This thread's frees into it then stay
 * owner-local (no dwcas to re-freeze it), and the first one parked on its
 * list brings it to the head, where the next refill looks.
 */
static void cpu_partial_put_tail(struct uslab_cache *s, struct cpu_slab *c, struct slab *slab)
{
	if (c->nr_partial >= cpu_partial_bound(s, tls_heap))
		cpu_partial_drain(s, c);
	partial_link(c, slab, false);
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
	chain = slab_take_freelist(s, slab, false, UINT_MAX, count);
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
 * first time (some hundred refills' worth; docs/slab.md); a short process that cycles one buffer of a
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

/*
 * The active slab's own frees first (owner-local, then remote), then, while
 * it is not fully built, more objects after them: the chain for the cpu
 * freelist, NULL when the slab is dry, or, with objects other threads sent
 * back (reused of them, on their way to the freelist), when reuse comes
 * first (slab_build_more).
 */
static void *refill_from_active(struct uslab_cache *s, struct slab *slab, unsigned reused,
				unsigned *count)
{
	void *freelist = slab_take_private(s, slab, count);

	if (slab->built < s->objects) {
		unsigned more, back = 0;
		void *built = slab_build_more(s, slab, *count + reused, &more);

		/* after the objects freed back: they are the warm ones */
		if (built && freelist)
			fp_set(s, chain_last(s, freelist, &back), built);
		else if (built)
			freelist = built;
		*count += more;
	}
	return freelist;
}

/*
 * A chain of count free objects of slab, just taken for the cpu freelist,
 * relinked in address order when it holds at least half of the slab's
 * objects: the slab then hands them out as it would new ones, not in the
 * order they were freed, and a structure freed in random order and built
 * again lies - and is walked - in memory order (jemalloc's slabs, which
 * allocate the lowest free region, do so always). The walk reads each
 * object's link and the relink writes it: lines the allocations that
 * follow touch anyway - for a thread that allocates by the slab
 * (refill_ordered, the caller's test). A chain already in address order,
 * rising or falling (a run of objects allocated together and freed in the
 * order they came, or the reverse), is left as it is: the walk writes
 * nothing. So is a chain that is not count distinct objects of the slab (a
 * free object written to), for the pops' checks.
 * Not for a debug cache, whose free objects carry checks of their own.
 */
#define ORDER_MAX_OBJECTS 1024

/* Whether chain, count objects of slab, is in address order already,
 * rising or falling: a walk that stops at the first turn, so a chain in
 * the order of random frees costs a few links. */
static bool chain_monotonic(const struct uslab_cache *s, const struct slab *slab, void *chain,
			   unsigned count)
{
	uintptr_t span = (uintptr_t)s->objects * s->stride, prev = (uintptr_t)chain;
	bool up = true, down = true;
	unsigned n = 1;

	if (prev - slab->base >= span)
		return false;
	for (void *p = fp_get(s, chain); p; p = fp_get(s, p), n++) {
		uintptr_t q = (uintptr_t)p;

		/* (the slab's own memory only: the pops check the rest) */
		if (q - slab->base >= span || n >= count)
			return false;
		up &= q > prev;
		down &= q < prev;
		if (!up && !down)
			return false;
		prev = q;
	}
	return n == count;
}

static void *chain_in_order(struct uslab_cache *s, struct slab *slab, void *chain, unsigned count)
{
	uint64_t map[ORDER_MAX_OBJECTS / 64] = { 0 };
	unsigned n = 0;

	if (count < s->objects / 2 || count < 16 || s->objects > ORDER_MAX_OBJECTS ||
	    (s->flags & CACHE_DEBUG) || chain_monotonic(s, slab, chain, count))
		return chain;
	for (void *p = chain; p && n <= count; p = fp_get(s, p), n++) {
		uintptr_t off = (uintptr_t)p - slab->base;

		if (!object_offset_valid(s->obj_magic, s->obj_limit, off))
			return chain;
		unsigned k = object_index(s, off);

		if (map[k / 64] >> (k % 64) & 1)
			return chain;
		map[k / 64] |= 1ull << (k % 64);
	}
	if (n != count)
		return chain;
	char *prev = NULL, *first = NULL;

	for (unsigned w = 0; w < ORDER_MAX_OBJECTS / 64; w++) {
		for (uint64_t bits = map[w]; bits; bits &= bits - 1) {
			char *obj = (char *)slab->base +
				    (size_t)(w * 64 + (unsigned)__builtin_ctzll(bits)) * s->stride;

			if (prev)
				fp_set(s, prev, obj);
			else
				first = obj;
			prev = obj;
		}
	}
	fp_set(s, prev, NULL);
	stat_add(s, STAT_CHAIN_ORDERED, 1);
	return first;
}

/*
 * Shared refills. A thread owns the slabs it allocates from: its frees into
 * them need no atomic, and the next malloc takes them back warm. The price
 * is a slab per class per thread, most of it free (the rest of the active
 * slab, and what comes back to it), held while the thread is not running:
 * with many more threads than CPUs, most of them. A producer among 64 in
 * `oversubscribed` (128 threads on 2 CPUs) held some 55 slabs of 40
 * classes, 800 KiB of their objects free, allocating about a hundred
 * blocks of each class in its life. So while the process has more than
 * SHARED_THREADS_PER_CPU running threads per CPU, a thread refills a
 * malloc class from slabs that stay shared: under list_lock, a few objects
 * of a partial slab (cold_refill_objects), which stays unfrozen on the list
 * for the next thread (partial_take_shared), or of a new slab whose rest
 * goes on the list (slab_new_shared). The objects are foreign to the
 * thread: its frees of them go onto its freelist while its foreign budget
 * lasts (64 KiB of the class), so what it allocates and frees in turn is
 * reused warm, and back to their slabs by dwcas when it is spent; a FULL
 * slab it frees into is not frozen for it, it goes back on the list. What
 * a thread holds is then that budget, not a slab per class. Back at or
 * below the bound, its next refill freezes a slab for it.
 * shared_threads_over: the running threads above which refills share;
 * -1 (default): SHARED_THREADS_PER_CPU x the CPUs (tests set it).
 */
#define SHARED_THREADS_PER_CPU 2
int shared_threads_over = -1;

bool cpu_shares(const struct uslab_cache *s)
{
	int over = READ_ONCE(shared_threads_over);

	if (!(s->flags & CACHE_MALLOC) || s->id >= STATIC_IDS)
		return false;
	if (over < 0)
		over = (int)(SHARED_THREADS_PER_CPU * os_ncpus());
	return READ_ONCE(live_heaps) > (unsigned)over;
}

/* A shared refill of c's empty freelist (no slab held): *count objects. */
static bool cpu_refill_shared(struct uslab_cache *s, struct cpu_slab *c, unsigned *count)
{
	unsigned max = cold_refill_objects(s);
	void *chain = partial_take_shared(s, max, count);

	if (chain) {
		stat_add(s, STAT_REFILL_PARTIAL, 1);
	} else if (!(chain = slab_new_shared(s, max, count))) {
		errno = ENOMEM;
		return false;
	}
	c->freelist = chain;
	return true;
}

/*
 * Whether a refill's chain is worth ordering (chain_in_order): the calling
 * thread has refilled ORDER_AFTER_REFILLS times, so it allocates by the
 * slab and will use what the refill gives it. A thread that has just come
 * (a short-lived one above all) may use a handful and give the rest back
 * when it exits: it takes only a few of a partial slab's objects
 * (cold_refill_objects), and the relink of a whole slab's would touch
 * objects it never uses (thread_churn spent over half its instructions so).
 */
static bool refill_ordered(void)
{
	return tls_heap->refills >= ORDER_AFTER_REFILLS;
}

/*
 * Before this thread takes a new slab for s, once every RELEASE_UNITS
 * units of new slabs: the foreign objects its other malloc classes hold
 * go back to their slabs. Freed in random order (a structure torn down),
 * such objects lie one per slab, and each keeps its slab from emptying:
 * 1,024 objects of 64 bytes, a foreign budget's worth, can hold 16 MiB of
 * slabs that a thread now allocating other sizes would otherwise leave
 * aside for fresh memory. Given back, the slabs that empty return their
 * units, which the new slabs can then be (docs/ownership.md). Once every
 * 16 units (256 KiB) rather than at every new slab: the walks of the
 * lists then cost `churn` 0.7 % more instructions, not 3 %.
 */
#define RELEASE_UNITS 16
static void release_foreign(struct uslab_cache *s)
{
	struct thread_heap *h = tls_heap;

	h->fresh_units += s->units;
	if (h->fresh_units < RELEASE_UNITS)
		return;
	h->fresh_units = 0;
	for_each_heap_id(h, id) {
		struct cpu_slab *o = &h->cpu[id];
		struct slab *any = id != s->id && o->freelist ? cpu_any_slab(o) : NULL;

		if (!any)
			continue;
		struct uslab_cache *os = any->cache;

		/* foreign objects went on the list since it was last sorted or
		 * ran dry (refilled, it has its whole budget again) */
		if ((os->flags & CACHE_MALLOC) && o->foreign_left < os->foreign_max)
			flush_foreign(os, o, NULL);
	}
}

/*
 * A slab to make active, frozen for this thread, and its objects: the
 * cpu-partial list's head if it has something to give (the slabs that do
 * come first; a dry head goes to the tail, to be looked at again in its
 * turn), else a slab off the cache's partial list, else a new one. NULL
 * with errno = ENOMEM.
 */
static struct slab *refill_slab(struct uslab_cache *s, struct cpu_slab *c, void **freelist,
				unsigned *count)
{
	struct slab *slab = c->partial;
	bool order = refill_ordered();

	if (slab) {
		partial_unlink(c, slab);
		*freelist = slab_take_private(s, slab, count);
		if (*freelist) {
			stat_add(s, STAT_REFILL_CPU_PARTIAL, 1);
			if (order)
				*freelist = chain_in_order(s, slab, *freelist, *count);
			return slab;
		}
		partial_link(c, slab, false);
	}
	/* a thread that has just come takes a few (see refill_ordered): the
	 * rest stay in the slab's word, where its next refill from the slab
	 * finds them, and its exit has few to give back */
	slab = partial_take(s, freelist, order ? UINT_MAX : cold_refill_objects(s), count);
	if (slab) {
		stat_add(s, STAT_REFILL_PARTIAL, 1);
		if (order)
			*freelist = chain_in_order(s, slab, *freelist, *count);
	} else {
		release_foreign(s);
		slab = slab_new(s);
		if (!slab) {
			errno = ENOMEM;
			return NULL;
		}
		*freelist = slab_build(s, slab, NULL, BUILD_GROW, count);
	}
	slab_set_owner(slab, c);
	return slab;
}

/* Objects from c's slabs onto its empty freelist, *count of them: the
 * active slab's, else another slab made active; false (ENOMEM) when there
 * are none. With reused objects sent back by other threads to go on the
 * freelist too, none is fine. */
static bool cpu_refill_slabs(struct uslab_cache *s, struct cpu_slab *c, unsigned reused,
			     unsigned *count)
{
	void *freelist = NULL;

	if (reused && !c->slab)
		return true;
	if (!c->slab && !c->partial && cpu_shares(s))
		return cpu_refill_shared(s, c, count);
	if (c->slab) {
		freelist = refill_from_active(s, c->slab, reused, count);
		if (!freelist && reused)
			return true;
		if (!freelist) {
			struct slab *dry = c->slab;

			c->slab = NULL;
			c->base = c->limit = 0;
			cpu_partial_put_tail(s, c, dry);
		}
	}
	if (freelist) {
		c->freelist = freelist;
		return true;
	}
	struct slab *slab = refill_slab(s, c, &freelist, count);

	if (!slab)
		return false;
	cpu_slab_activate(c, s, slab, freelist);
	return true;
}

/*
 * Put objects on c's empty freelist; false (ENOMEM) when there are none.
 * The warm ones come first: the objects other threads' messages sent back
 * to its slabs, all of them whatever slabs they are of (on their slabs'
 * owner-local lists, a refill would take one slab's few). Then the slabs',
 * while those are fewer than half a slab's objects: with objects sent
 * back, what the active slab has freed, building more of it only as reuse
 * allows (slab_build_more).
 */
static bool cpu_refill(struct uslab_cache *s, struct cpu_slab *c)
{
	unsigned sent = 0, more = 0;
	void *back = NULL, *back_tail = NULL;

	tls_heap->refills++;
	if (s->id < STATIC_IDS)
		tls_heap->k_refilled[s->id] = 1;
	if (mailbox_peek(heap_inbox(tls_heap, s->id)))
		back = inbox_take(tls_heap, s->id, &back_tail, &sent);
	c->foreign_left = foreign_budget(s);   /* every foreign object has been reused */
	cpu_stats_fold(s, c, 0, 0);
	bool enough = back && sent >= s->objects / 2;

	if (!enough && !cpu_refill_slabs(s, c, sent, &more) && !back) {
		cpu_cached_publish(s, c, 0);
		return false;
	}
	if (back) {
		if (c->freelist)
			fp_set(s, back_tail, c->freelist);
		c->freelist = back;
	}
	c->supplied = sent + more - 1;   /* all but the one popped next */
	cpu_cached_publish(s, c, c->supplied);
	return true;
}

/* A free pointer that decodes to no address: the word of a free object was
 * overwritten (a write after free, an overflow from the object before). */
static noinline cold __attribute__((noreturn)) void freelist_corrupt(const struct uslab_cache *s,
								     const void *next)
{
	char what[128];

	snprintf(what, sizeof(what), "corrupted free list (a free block written to?) of cache %s: "
		 "next pointer", s->name);
	uslab_fatal(s->flags & CACHE_MALLOC ? "malloc" : "uslab_cache_alloc", next, what);
}

/* The fast path found the cpu freelist empty (or the thread has no heap),
 * or refused its head. */
void *cache_alloc_slow(struct uslab_cache *s)
{
	struct cpu_slab *c;

	if (unlikely(READ_ONCE(deferred_pending)))
		deferred_run();
	c = cpu_slab_get(s);
	if (unlikely(!c)) {
		errno = ENOMEM;
		return NULL;
	}
	stat_add(s, STAT_ALLOC_SLOW, 1);
	if (!c->freelist && !cpu_refill(s, c))
		return NULL;
	void *obj = uslab_cpu_pop_(cpu_fast(c), s->fp_offset, fp_key_get());
	if (unlikely(!obj))   /* the head is no address: the pop refused it */
		freelist_corrupt(s, c->freelist);
	return obj;
}

struct slab *object_slab(struct uslab_cache *s, void *obj, const char *call)
{
	struct slab *slab = ptr_to_slab(obj);

	if (unlikely(!slab || slab->kind != SLAB_KIND_SLAB))
		uslab_fatal(call, obj, "invalid pointer");
	if (unlikely(slab->cache != s))
		uslab_fatal(call, obj, "pointer from another cache");
	if (unlikely(!object_offset_valid(s->obj_magic, s->obj_limit, (uintptr_t)obj - slab->base)))
		uslab_fatal(call, obj, "misaligned pointer");
	return slab;
}

static noinline void free_remote(struct uslab_cache *s, struct slab *slab, void *obj)
{
	struct cpu_slab *c = cpu_slab_get(s);

	stat_add(s, STAT_FREE_REMOTE, 1);
	slab_free_chain(s, c, slab, obj, obj, 1);
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
		struct cpu_slab *c = this_cpu_slab(s);

		if (unlikely(obj == slab->local_free))
			uslab_fatal(cache_free_call(s), obj, "double free");
		cpu_local_push(s, c, slab, obj, obj, 1);
		cpu_cached_add(c, 1);
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
		slab_free_chain(s, NULL, slab, obj, obj, 1);
		return;
	}
	if (unlikely(obj == c->freelist))
		uslab_fatal(cache_free_call(s), obj, "double free");
	if (!c->foreign_left) {   /* budget spent, or a new cpu slab */
		flush_foreign(s, c, NULL);
		if (!c->foreign_left) {   /* this thread keeps none of s's */
			stat_add(s, STAT_FREE_REMOTE, 1);
			slab_free_chain(s, c, slab, obj, obj, 1);
			return;
		}
	}
	c->foreign_left--;
	uslab_cpu_link_(cpu_fast(c), obj, s->fp_offset, fp_key_get());
	cpu_cached_add(c, 1);
}

/*
 * Cache-API free outside the active slab: the checks object_slab makes, in
 * their cheap form, then an owner-local push or the dwcas path. NULL lands
 * here too (the fast path's range test fails for it).
 */
noinline void cache_free_slow(struct uslab_cache *s, struct cpu_slab *c, void *obj)
{
	if (unlikely(!obj))
		return;
	/* the fast path refuses an object of the active slab only when it is
	 * the freelist's head: freed already */
	if (unlikely(obj == c->freelist))
		uslab_fatal(cache_free_call(s), obj, "double free");
	struct slab *slab = ptr_to_slab(obj);
	if (likely(slab && slab->cache == s &&
		   object_offset_valid(s->obj_magic, s->obj_limit, (uintptr_t)obj - slab->base))) {
		free_local_or_remote(s, slab, obj);
		return;
	}
	object_slab(s, obj, "uslab_cache_free");   /* reports what is wrong */
	__builtin_unreachable();
}
