/* SPDX-License-Identifier: MIT */
/*
 * slab.c - struct slab, its coupled word, freeze/unfreeze and the partial
 * lists. The states and the locking rule are at the top of slab.h; the
 * table of every transition, and why no object is lost, in docs/slab.md.
 *
 * Ordering: every change of the word is a dwcas_try_cmpxchg, acquire and
 * release (dwcas.h). A push's release publishes the links it wrote into
 * its chain (fp_set before the CAS) to whoever takes the freelist next: the
 * acquire of slab_take_freelist's or partial_take's CAS, or of a later
 * push's CAS (which links to the chain as its prior). dwcas_read is only a
 * snapshot for the first attempt; the CAS validates it.
 */
#include "slab.h"

#include <errno.h>
#include <stdio.h>

__thread char *tls_stat_rows __attribute__((tls_model("initial-exec")));

uintptr_t fp_key;

/* The key, set on first use: racing first callers agree through the CAS
 * (acq_rel, and a loser acquires the winner's key). Later readers reach
 * fp_key only through a slab or a heap made after it, published with
 * release/acquire of their own. */
uintptr_t free_mark;

uintptr_t fp_key_setup(void)
{
	uintptr_t key = READ_ONCE(fp_key), none = 0, mark = 0;

	if (likely(key))
		return key;
	/* the mark first: a thread that sees the key sees it too */
	uintptr_t r = (uintptr_t)os_random64();

	try_cmpxchg_acq_rel(&free_mark, &mark, (r & ~(uintptr_t)0xff) | FREE_MARK_BYTE(r >> 8));
	key = (uintptr_t)os_random64();
	if (!try_cmpxchg_acq_rel(&fp_key, &none, key))
		key = none;
	return key;
}

__attribute__((constructor)) static void fp_key_at_load(void)
{
	fp_key_setup();
}

/* ---- partial list (list_lock held) ----------------------------------------- */

/*
 * A slab joins the list at its head, where partial_take looks, unless less
 * than a sixteenth of it is free: then at the tail. A refill pays the lock
 * and a freeze for what it takes, so a slab with a handful of free objects
 * waits behind the others while the frees that made it partial go on
 * arriving (a thread freeing a pool whose slabs it gave up). Slabs with
 * more stay newest first: their objects are the warmest, and a refill that
 * prefers the emptiest slabs spreads live objects over more of them.
 */
#define PARTIAL_TAIL_SHARE 16

static void add_partial(struct uslab_cache *s, struct slab *slab, unsigned inuse)
{
	ASSERT(mutex_is_locked(&s->list_lock) && !slab->on_partial);
	ASSERT(!ctr_frozen(dwcas_read(&slab->xword).hi));
	if (s->partial && (s->objects - inuse) * PARTIAL_TAIL_SHARE < s->objects) {
		slab->next = NULL;
		slab->prev = s->partial_tail;
		s->partial_tail->next = slab;
		s->partial_tail = slab;
	} else {
		slab->prev = NULL;
		slab->next = s->partial;
		if (s->partial)
			s->partial->prev = slab;
		else
			s->partial_tail = slab;
		WRITE_ONCE(s->partial, slab);   /* partial_take peeks without the lock */
	}
	slab->on_partial = 1;
	WRITE_ONCE(s->nr_partial, s->nr_partial + 1);   /* info reads it unlocked */
}

static void remove_partial(struct uslab_cache *s, struct slab *slab)
{
	ASSERT(mutex_is_locked(&s->list_lock) && slab->on_partial);
	if (slab->prev)
		slab->prev->next = slab->next;
	else
		WRITE_ONCE(s->partial, slab->next);
	if (slab->next)
		slab->next->prev = slab->prev;
	else
		s->partial_tail = slab->prev;
	slab->next = slab->prev = NULL;
	slab->on_partial = 0;
	WRITE_ONCE(s->nr_partial, s->nr_partial - 1);
}

/*
 * Hold list_lock across the coming dwcas exactly when this attempt makes the
 * slab enter or leave the partial list (the rule at the top of slab.h); a
 * retry, which sees a new word, may change the answer.
 */
static void list_lock_across(struct uslab_cache *s, bool *locked, bool want)
{
	if (want && !*locked)
		lock_ranked(&s->list_lock, RANK_LIST);
	else if (!want && *locked)
		unlock_ranked(&s->list_lock, RANK_LIST);
	*locked = want;
}

/* ---- slab life --------------------------------------------------------------- */

/*
 * A new slab, FROZEN for the caller, every object counted in use and none
 * built yet: the caller links the first ones with slab_build.
 */
struct slab *slab_new(struct uslab_cache *s)
{
	bool fresh;
	struct slab *slab;

	fp_key_setup();   /* before the first link is written */
	/* objects up to a page are written densely: they may lie under huge pages */
	slab = segment_alloc_units(s->units, SLAB_KIND_SLAB, s->stride <= os_page_size(), &fresh);

	if (!slab)
		return NULL;
	ASSERT(slab->head == slab && slab->kind == SLAB_KIND_SLAB && slab->nunits == s->units);
	/* A busy cache will write every page of its next slab soon: fault them
	 * in with one call (docs/slab.md). A cache's first slab is left to
	 * fault page by page, as slab_build reaches it: a program that uses a
	 * class for a few objects then writes one page of it, not four. */
	if (fresh && s->stride <= os_page_size() && atomic_long_read(&s->slabs_allocated))
		os_populate((void *)slab_start(slab), (size_t)s->units << UNIT_SHIFT);
	slab->base = slab_start(slab);
	slab->next = slab->prev = NULL;
	slab->on_partial = 0;
	slab->local_free = NULL;
	slab->local_count = 0;
	WRITE_ONCE(slab->built, 0);   /* statistics walks read it */
	slab->reuse_refills = 0;
	slab_clear_owner(slab);
	slab->span = s->objects * s->stride;
	/* malloc's free fast path accepts only malloc's objects; it reads these
	 * from the descriptor of the pointer's own unit (the tails' were clear) */
	if (s->flags & CACHE_MALLOC) {
		slab->kfree_magic = s->obj_magic;
		slab->kfree_limit = s->obj_limit;
		for (unsigned i = 1; i < s->units; i++) {
			slab[i].base = slab->base;
			slab[i].kfree_magic = slab->kfree_magic;
			slab[i].kfree_limit = slab->kfree_limit;
		}
	}
	/* Not yet visible to any other thread: plain word stores suffice. */
	WRITE_ONCE(slab->xword.lo, 0);
	WRITE_ONCE(slab->xword.hi, ctr_make(s->objects, s->objects, true));
	WRITE_ONCE(slab->cache, s);
	atomic_long_inc(&s->nr_slabs);
	atomic_long_inc(&s->slabs_allocated);
	stat_add(s, STAT_NEW_SLAB, 1);
	return slab;
}

/*
 * Owner only: bring the next objects of a frozen slab into existence, the
 * constructor run on each and their free pointers linked, the last one to
 * `then`. BUILD_GROW links as many as are built already (the first call the
 * objects that start in the slab's first page), so a slab's pages are written
 * about as fast as they are used, in a handful of calls; BUILD_PAGE one
 * page's worth; BUILD_REST all that remain. Unbuilt objects are counted in
 * use by the coupled word and sit on no list: they are the owner's, like its
 * private chain, and slab_release builds them before the slab is unfrozen
 * (or, none of its objects out, discards it: slab_release_unbuilt), so an
 * unfrozen slab is always fully built. Returns the chain; *count its
 * length.
 */
void *slab_build(struct uslab_cache *s, struct slab *slab, void *then, enum build_step step,
		 unsigned *count)
{
	unsigned first = slab->built, n = s->objects - first;
	char *start = (char *)slab->base + (size_t)first * s->stride, *obj = start;

	ASSERT(ctr_frozen(dwcas_read(&slab->xword).hi) && first <= s->objects);
	if (step != BUILD_REST) {
		unsigned want = step == BUILD_GROW && first ? first :
			(unsigned)((os_page_size() + s->stride - 1) / s->stride);

		if (want < n)
			n = want;
	}
	for (unsigned i = 0; i < n; i++, obj += s->stride) {
		if (s->ctor)
			s->ctor(obj);
		fp_set(s, obj, i + 1 < n ? obj + s->stride : then);
	}
	WRITE_ONCE(slab->built, first + n);   /* validate and info read it */
	slab->reuse_refills = 0;
	*count = n;
	return start;
}

/* An EMPTY slab that no list holds goes back to its segment. */
void slab_discard(struct uslab_cache *s, struct slab *slab)
{
	/* EMPTY, unfrozen, on no list: nobody else can reach it */
	ASSERT(dwcas_read(&slab->xword).hi == ctr_make(0, s->objects, false) && !slab->on_partial);
	atomic_long_dec(&s->nr_slabs);
	atomic_long_inc(&s->slabs_freed);
	stat_add(s, STAT_SLAB_FREED, 1);
	/* its memory may serve anything next: nothing of it stays watched */
	mem_unwatch((void *)slab->base, (size_t)s->units << UNIT_SHIFT);
	segment_free_units(slab);
}

/*
 * The max-th object of chain p (1: p itself) when the chain has more than
 * max, each link an object of slab, and in *rest the object after it;
 * NULL otherwise (the caller takes it all, and a link that is no object is
 * left for the pops' checks).
 */
static void *chain_cut_point(const struct uslab_cache *s, const struct slab *slab, void *p,
			     unsigned max, void **rest)
{
	for (unsigned i = 1; p && i < max; i++) {
		p = fp_get(s, p);
		if (p && !object_offset_valid(s->obj_magic, s->obj_limit, (uintptr_t)p - slab->base))
			return NULL;
	}
	*rest = p ? fp_get(s, p) : NULL;
	return *rest ? p : NULL;
}

/*
 * Owner only: take the slab's shared freelist, leaving it frozen, or at
 * most max of its objects from the front (the rest stay in the word, as
 * another thread's frees into a frozen slab do). The objects taken are
 * counted in use. freeze=true also freezes an unfrozen slab (the caller
 * holds list_lock and has just taken it off the partial list). Without
 * freeze, an unfrozen slab stays unfrozen (the caller holds list_lock: a
 * shared refill, partial_take_shared): max of its objects when it has more
 * (it stays PARTIAL, on the list), else none and NULL unless max is
 * UINT_MAX (all of them, off the list: FULL). The walk to the max-th
 * object reads links only the word's takers change - the owner, or the
 * holder of list_lock - and frees push in front of it, so a dwcas that
 * finds the word unchanged finds that chain under it. Returns the chain
 * taken (NULL if there was none and freeze was false) and its length in
 * *count.
 */
void *slab_take_freelist(struct uslab_cache *s, struct slab *slab, bool freeze, unsigned max,
			 unsigned *count)
{
	dword_t old = dwcas_read(&slab->xword), nw;
	void *last, *rest;

	/* the owner's take of its frozen slab, or, under list_lock, a freeze
	 * or a shared take */
	ASSERT((ctr_frozen(old.hi) && !freeze) || mutex_is_locked(&s->list_lock));
	/* acquire: the walk to the cut reads the links the pushers wrote before
	 * their releasing dwcas (a failed dwcas below reloads with acquire) */
	if (max != UINT_MAX)
		old.lo = smp_load_acquire(&slab->xword.lo);
	for (;;) {
		if (!old.lo && !freeze) {
			*count = 0;
			return NULL;
		}
		bool frozen = freeze || ctr_frozen(old.hi);

		last = max < ctr_objects(old.hi) ?
			       chain_cut_point(s, slab, (void *)old.lo, max, &rest) : NULL;
		if (!last && !frozen && max != UINT_MAX) {
			*count = 0;   /* a listed slab keeps a free object */
			return NULL;
		}
		if (last) {   /* max of them; the rest stay in the word */
			*count = max;
			nw.lo = (uintptr_t)rest;
			nw.hi = ctr_make(ctr_inuse(old.hi) + max, ctr_objects(old.hi), frozen);
		} else {
			*count = ctr_objects(old.hi) - ctr_inuse(old.hi);
			nw.lo = 0;
			nw.hi = ctr_make(ctr_objects(old.hi), ctr_objects(old.hi), frozen);
		}
		if (dwcas_try_cmpxchg(&slab->xword, &old, nw))
			break;
		stat_add(s, STAT_DWCAS_RETRY, 1);
	}
	if (last)
		fp_set(s, last, NULL);   /* ours now */
	return (void *)old.lo;
}

/*
 * Under list_lock, from the first partial slab: at most max of its free
 * objects in *freelist, the slab taken off the list and frozen for the
 * caller (partial_take, which returns it), or, shared, left unfrozen and
 * owned by nobody (partial_take_shared: a thread of a process whose threads
 * far outnumber the CPUs, cache/cpu.c "Shared refills"). A shared
 * take leaves the slab listed while it has more than max; with max or
 * fewer it takes it off the list first and then all it has (FULL): no
 * other thread's free may find a listed slab with no free object, which a
 * free that freezes a FULL slab for itself, without the lock, would take
 * for FULL. NULL (*freelist NULL, *count 0) when the list is empty.
 */
static struct slab *partial_take_from(struct uslab_cache *s, void **freelist, unsigned max,
				      unsigned *count, bool shared)
{
	struct slab *slab;

	*freelist = NULL;
	*count = 0;
	if (!READ_ONCE(s->partial))   /* racy peek; the lock decides */
		return NULL;
	lock_ranked(&s->list_lock, RANK_LIST);
	slab = s->partial;
	if (slab && shared)
		*freelist = slab_take_freelist(s, slab, false, max, count);
	if (slab && !*freelist) {
		remove_partial(s, slab);
		*freelist = slab_take_freelist(s, slab, !shared, shared ? UINT_MAX : max, count);
	}
	unlock_ranked(&s->list_lock, RANK_LIST);
	return slab;
}

struct slab *partial_take(struct uslab_cache *s, void **freelist, unsigned max, unsigned *count)
{
	return partial_take_from(s, freelist, max, count, false);
}

void *partial_take_shared(struct uslab_cache *s, unsigned max, unsigned *count)
{
	void *chain;

	partial_take_from(s, &chain, max, count, true);
	return chain;
}

/*
 * A shared refill with no partial slab: a new slab, built whole (an
 * unfrozen slab is), its first max objects the caller's and the rest
 * given to the partial list (slab_unfreeze: PARTIAL; FULL if it has no
 * more than max). NULL when there is no memory for a slab.
 */
void *slab_new_shared(struct uslab_cache *s, unsigned max, unsigned *count)
{
	struct slab *slab = slab_new(s);
	unsigned n;

	if (!slab)
		return NULL;
	char *head = slab_build(s, slab, NULL, BUILD_REST, &n);

	if (n <= max) {
		*count = n;
		slab_unfreeze(s, slab, NULL, NULL, 0);
		return head;
	}
	char *last = head + (size_t)(max - 1) * s->stride;

	fp_set(s, last, NULL);
	slab_unfreeze(s, slab, last + s->stride, head + (size_t)(n - 1) * s->stride, n - max);
	*count = max;
	return head;
}

/*
 * Owner only: give up a frozen slab, splicing back the private chain
 * head..tail of n objects. The slab becomes PARTIAL (list_lock held across
 * the dwcas), FULL (no list), or EMPTY (kept or discarded; nobody else can
 * reach an empty unfrozen slab, so no lock is needed across the dwcas).
 */
void slab_unfreeze(struct uslab_cache *s, struct slab *slab, void *head, void *tail, unsigned n)
{
	dword_t old = dwcas_read(&slab->xword), nw;
	bool locked = false, partial;
	unsigned inuse;

	ASSERT(ctr_frozen(old.hi));   /* the owner's */
	for (;;) {
		/* more objects given back than the word counts in use: one of
		 * them was freed twice (its chain holds it twice) */
		if (unlikely(ctr_inuse(old.hi) < n))
			uslab_fatal(cache_free_call(s), head, "double free");
		if (tail)
			fp_set(s, tail, (void *)old.lo);
		inuse = ctr_inuse(old.hi) - n;
		partial = inuse > 0 && inuse < s->objects;
		INTERLEAVE("unfreeze:cas");
		list_lock_across(s, &locked, partial);
		nw.lo = head ? (uintptr_t)head : old.lo;
		nw.hi = ctr_make(inuse, s->objects, false);
		if (dwcas_try_cmpxchg(&slab->xword, &old, nw))
			break;
		stat_add(s, STAT_DWCAS_RETRY, 1);
	}
	INTERLEAVE("unfreeze:after_cas");
	stat_add(s, partial ? STAT_DEACTIVATE_PARTIAL :
		    inuse ? STAT_DEACTIVATE_FULL : STAT_DEACTIVATE_EMPTY, 1);
	if (partial) {
		add_partial(s, slab, inuse);
		unlock_ranked(&s->list_lock, RANK_LIST);
		return;
	}
	if (inuse)
		return;   /* FULL: a remote free will find it */
	lock_ranked(&s->list_lock, RANK_LIST);
	if (s->nr_partial < s->min_partial) {
		add_partial(s, slab, 0);
		slab = NULL;
	}
	unlock_ranked(&s->list_lock, RANK_LIST);
	if (slab)
		slab_discard(s, slab);
}

/*
 * Owner only: give up a frozen slab whose objects are not all built yet,
 * when none of them is out - every built one is free, on the word's list
 * or among the n the caller holds privately (its chains, dropped with the
 * slab): it goes back to its segment EMPTY, without the build that an
 * unfrozen slab needs otherwise, which would write the pages of objects
 * nobody used (a thread that exits having freed all it allocated). Nothing
 * out means no free can come meanwhile, so the word cannot change under
 * the dwcas (a double free that changed it sends the caller the usual way,
 * which reports it). false, and nothing done, when some object is out.
 */
bool slab_release_unbuilt(struct uslab_cache *s, struct slab *slab, unsigned n)
{
	dword_t old = dwcas_read(&slab->xword), nw;

	ASSERT(ctr_frozen(old.hi) && slab->built < s->objects);
	if (ctr_inuse(old.hi) != n + (s->objects - slab->built))
		return false;
	nw.lo = 0;
	nw.hi = ctr_make(0, s->objects, false);
	if (!dwcas_try_cmpxchg(&slab->xword, &old, nw))
		return false;
	stat_add(s, STAT_DEACTIVATE_EMPTY, 1);
	slab_discard(s, slab);
	return true;
}

/*
 * Free the chain head..tail (cnt objects, tail's free pointer is set here)
 * into a slab the caller does not own: one dwcas pushes the chain, lowers
 * inuse and reads frozen. Transitions:
 *   FROZEN            stays frozen; its owner will take the chain.
 *   FULL -> FROZEN    the freeing thread freezes it onto its cpu-partial
 *                     list (can_freeze), or, if it cannot own slabs,
 *   FULL -> PARTIAL   adds it to the partial list (lock before the dwcas).
 *   PARTIAL -> EMPTY  lock before the dwcas; discard beyond min_partial.
 * Returns true when the slab was frozen for the caller (caller must then put
 * it on its cpu-partial list).
 */
bool __slab_free(struct uslab_cache *s, struct slab *slab, void *head, void *tail,
		 unsigned cnt, bool can_freeze)
{
	dword_t old = dwcas_read(&slab->xword), nw;
	bool locked = false, was_frozen, frozen, need_lock;
	unsigned inuse;

	for (;;) {
		void *prior = (void *)old.lo;

		if (unlikely(ctr_inuse(old.hi) < cnt || prior == head))
			uslab_fatal(cache_free_call(s), head, "double free");
		fp_set(s, tail, prior);
		inuse = ctr_inuse(old.hi) - cnt;
		was_frozen = frozen = ctr_frozen(old.hi);
		need_lock = false;
		if (!was_frozen) {
			if (!prior && can_freeze)
				frozen = true;
			else if (!prior || inuse == 0)
				need_lock = true;
		}
		INTERLEAVE("free:cas");
		list_lock_across(s, &locked, need_lock);
		nw.lo = (uintptr_t)head;
		nw.hi = ctr_make(inuse, ctr_objects(old.hi), frozen);
		if (dwcas_try_cmpxchg(&slab->xword, &old, nw))
			break;
		stat_add(s, STAT_DWCAS_RETRY, 1);
	}
	INTERLEAVE("free:after_cas");
	ASSERT(inuse <= s->objects);
	if (!locked)
		return frozen && !was_frozen;

	/* Unfrozen, lock held: it was FULL (prior NULL) or is now EMPTY. */
	bool was_full = !slab->on_partial;
	if (inuse == 0 && s->nr_partial + was_full > s->min_partial) {
		if (!was_full)
			remove_partial(s, slab);
		unlock_ranked(&s->list_lock, RANK_LIST);
		slab_discard(s, slab);
		return false;
	}
	if (was_full)
		add_partial(s, slab, inuse);
	unlock_ranked(&s->list_lock, RANK_LIST);
	return false;
}

/* Give every empty slab on the partial list back to its segment (shrink,
 * trim, destroy: min_partial does not apply). */
void cache_shrink_partial(struct uslab_cache *s)
{
	struct slab *victims = NULL, *slab, *next;

	lock_ranked(&s->list_lock, RANK_LIST);
	for (slab = s->partial; slab; slab = next) {
		next = slab->next;
		if (ctr_inuse(dwcas_read(&slab->xword).hi) != 0)
			continue;
		/* Empty and unfrozen: no thread can free into it or take it
		 * without list_lock, so it is ours once off the list. */
		remove_partial(s, slab);
		slab->next = victims;
		victims = slab;
	}
	unlock_ranked(&s->list_lock, RANK_LIST);
	for (slab = victims; slab; slab = next) {
		next = slab->next;
		slab_discard(s, slab);
	}
}
