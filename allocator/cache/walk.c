/* SPDX-License-Identifier: MIT */
/*
 * walk.c - walks over a cache's slabs: live counts (destroy, info, the
 * statistics report) and validation.
 *
 * uslab_cache_validate reads other threads' cpu slabs and owner-local
 * lists' lengths: its result is exact only while no other thread uses the
 * cache (it holds every heap's lock, so none flushes meanwhile).
 */
#define _GNU_SOURCE
#include "local.h"
#include "debug.h"

#include <stdio.h>
#include <string.h>

/* Objects of a slab not built yet: counted in use by its word, never live.
 * Racy for another thread's active slab (the count only falls). */
static unsigned slab_unbuilt(const struct uslab_cache *s, const struct slab *slab)
{
	return s->objects - READ_ONCE(slab->built);
}

/* Before counting: objects other threads sent this one are free, not live. */
void own_inbox_drain(struct uslab_cache *s)
{
	if (heap_has_chunk(tls_heap, s) && mailbox_peek(heap_inbox(tls_heap, s->id)))
		inbox_drain(tls_heap, s->id, false);
}

/* ---- the one slab walker for live counts ------------------------------------------ */

struct live_walk {
	struct uslab_cache *s;
	size_t slabs;
	long live;          /* counted in use by the words, less what is known free */
	long own_local;     /* the calling thread's owner-local frees */
};

static void live_walk_slab(struct slab *slab, void *arg)
{
	struct live_walk *w = arg;
	long local = 0;

	if (READ_ONCE(slab->cache) != w->s)
		return;
	/* owner-local frees are counted in use in the word; only the owner may
	 * read its list, so another thread's count as live until it flushes */
	if (READ_ONCE(slab->owner) == tls_heap)
		local = (long)slab->local_count;
	w->slabs++;
	w->own_local += local;
	w->live += (long)ctr_inuse(dwcas_read(&slab->xword).hi) - slab_unbuilt(w->s, slab) - local;
}

static struct live_walk cache_walk_live(struct uslab_cache *s)
{
	struct live_walk w = { .s = s };

	segment_for_each_slab(live_walk_slab, &w);
	return w;
}

/* Objects of s not free on any list the calling thread can see (its own
 * cpu freelist not subtracted: see own_private_objects). */
size_t cache_live_objects(struct uslab_cache *s)
{
	long live = cache_walk_live(s).live;

	return live > 0 ? (size_t)live : 0;
}

/* The calling thread's private objects of cache s: on its cpu freelist. */
long own_private_objects(struct uslab_cache *s)
{
	struct thread_heap *h = tls_heap;
	long n = 0;

	if (!heap_has_chunk(h, s))
		return 0;
	for (void *p = heap_cpu_slab(h, s)->freelist; p; p = fp_get(s, p))
		n++;
	return n;
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

/* The owner's side of a slab: its owner-local list, and, through the
 * owner's cpu slab, its private chain or its place on the cpu-partial list.
 * Returns the objects held privately; *active: it is the owner's active slab. */
static unsigned validate_owner(struct validate *v, struct slab *slab, bool frozen, uint64_t *seen,
			       bool *active)
{
	struct uslab_cache *s = v->s;
	struct thread_heap *owner = READ_ONCE(slab->owner);

	*active = false;
	if (frozen && !owner)
		VPROBLEM(v, slab, "frozen but no thread owns it");
	if (!frozen && owner)
		VPROBLEM(v, slab, "owned by a thread but not frozen");
	if (!frozen && slab->local_free)
		VPROBLEM(v, slab, "unfrozen with an owner-local freelist");
	for (unsigned i = 1; i < slab->nunits; i++) {
		bool copy = i < slab_owner_units(slab);

		if (READ_ONCE(slab[i].owner_tp) != (copy ? READ_ONCE(slab->owner_tp) : 0) ||
		    READ_ONCE(slab[i].owner_cpu) != (copy ? READ_ONCE(slab->owner_cpu) : NULL))
			VPROBLEM(v, slab, "unit %u's owner fields are not %s", i,
				 copy ? "the head's" : "clear");
	}
	unsigned priv = walk_chain(v, slab, slab->local_free, seen, "owner-local", false);
	if (owner && heap_has_chunk(owner, s)) {
		struct cpu_slab *c = heap_cpu_slab(owner, s);
		bool listed = false;

		*active = c->slab == slab;
		if (*active)
			return priv + walk_chain(v, slab, c->freelist, seen, "private", true);
		for (struct slab *p = c->partial; p; p = p->next)
			listed |= p == slab;
		if (!listed)
			VPROBLEM(v, slab, "owner holds it neither active nor cpu-partial");
	} else if (owner) {
		VPROBLEM(v, slab, "owner heap has no cpu slab for this cache");
	}
	return priv;
}

/* A slab's state from its word, against its list membership (docs/slab.md). */
static void validate_lists(struct validate *v, struct slab *slab, unsigned inuse, unsigned objects,
			   bool frozen)
{
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

static void validate_slab(struct slab *slab, void *arg)
{
	struct validate *v = arg;
	struct uslab_cache *s = v->s;
	uint64_t seen[(CTR_OBJ_MASK + 64) / 64];
	bool active;

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
	unsigned priv = validate_owner(v, slab, frozen, seen, &active);
	unsigned built = READ_ONCE(slab->built);
	if (built > objects)
		VPROBLEM(v, slab, "built %u of %u objects", built, objects);
	else if (built < objects && !active)
		VPROBLEM(v, slab, "%u of %u objects built, but no thread's active slab", built,
			 objects);
	else if (priv + (objects - built) > inuse)
		VPROBLEM(v, slab, "private %u + unbuilt %u objects exceed inuse %u", priv,
			 objects - built, inuse);
	validate_lists(v, slab, inuse, objects, frozen);
}

/* A cpu-partial list's links, counts and length (cpu.c, "The cpu-partial
 * list"), c being h's. */
static void validate_cpu_partial(struct validate *v, struct thread_heap *h,
				 const struct cpu_slab *c)
{
	const struct slab *p = c->partial, *last = NULL;
	unsigned n = 0;
	uint64_t parked = 0;

	for (; p && n <= c->nr_partial; last = p, p = p->next, n++) {
		parked += p->local_count;
		if (last && p->prev != last)
			VPROBLEM(v, p, "cpu-partial list: prev does not name the slab before it");
	}
	if (n != c->nr_partial || (c->partial && c->partial->prev != last) || parked != c->parked) {
		fprintf(stderr, "uslab: validate %s: a cpu-partial list of %u slabs (nr_partial %u), "
			"%lu objects on their local lists (parked %u), head's prev %s its tail\n",
			v->s->name, n, c->nr_partial, (unsigned long)parked, c->parked,
			c->partial && c->partial->prev != last ? "is not" : "is");
		v->problems++;
	}
	if (c->nr_partial > cpu_partial_bound(v->s, h)) {
		fprintf(stderr, "uslab: validate %s: a cpu-partial list of %u slabs, over its "
			"bound of %u\n", v->s->name, c->nr_partial, cpu_partial_bound(v->s, h));
		v->problems++;
	}
}

USLAB_API long uslab_cache_validate(struct uslab_cache *s)
{
	struct validate v = { .s = s };
	size_t listed = 0;

	if (!s)
		return 1;
	if (s->flags & CACHE_DEBUG)   /* red zones and quarantine: a report aborts */
		cache_debug_validate(s);
	lock_ranked(&heaps_lock, RANK_HEAPS);
	heaps_lock_each();   /* no thread flushes while its cpu slabs are read */
	lock_ranked(&s->list_lock, RANK_LIST);
	const struct slab *last = NULL;

	for (struct slab *p = s->partial; p; last = p, p = p->next) {
		if (!p->on_partial || p->prev != last) {
			fprintf(stderr, "uslab: validate %s: slab %p on the list %s\n", s->name,
				(void *)p->base, p->on_partial ? "with a wrong prev" : "without on_partial");
			v.problems++;
		}
		if (++listed > s->nr_partial + 1)
			break;
	}
	if (listed != s->nr_partial || s->partial_tail != last) {
		fprintf(stderr, "uslab: validate %s: partial list has %zu slabs, nr_partial %lu, "
			"and its tail %s its last\n", s->name, listed, s->nr_partial,
			s->partial_tail == last ? "is" : "is not");
		v.problems++;
	}
	for (struct thread_heap *h = heaps; h; h = h->next)
		if (heap_has_chunk(h, s))
			validate_cpu_partial(&v, h, heap_cpu_slab(h, s));
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
	unlock_ranked(&s->list_lock, RANK_LIST);
	heaps_unlock_each(false);
	unlock_ranked(&heaps_lock, RANK_HEAPS);
	return v.problems;
}

/* ---- statistics: one cache's numbers, for the report (api/stats.c) --------------- */

/*
 * s's counters as every thread has counted them: the shared atomics (threads
 * without a heap) plus each heap's row. No lock: rows are written only by
 * their thread, with single stores (stat_add), so a read sees each counter
 * whole, if a moment old; and the heap list may be walked without
 * heaps_lock (local.h). A signal handler may call it; s must stay alive
 * meanwhile (a reference, or one of its slabs under seg_lock).
 */
static void cache_counters_read(const struct uslab_cache *s, long stat[NR_CACHE_STATS])
{
	for (int i = 0; i < NR_CACHE_STATS; i++)
		stat[i] = atomic_long_read(&s->stat[i]);
	/* acquire: pairs with heap_get's release, so each heap is whole */
	for (struct thread_heap *h = smp_load_acquire(&heaps); h; h = h->next)
		for (int i = 0; i < NR_CACHE_STATS; i++)
			stat[i] += READ_ONCE(heap_stat(h, s)[i]);
}

/* cache.h. Heaps whose chunk of cpu slabs for s was never used are skipped
 * unread (their pages stay untouched): chunks_used is stored whole under
 * heaps_lock (cpu_slab_get), and a bit set after this read is a cpu slab
 * that had nothing cached when it was read. */
long cache_cached_published(const struct uslab_cache *s, const struct thread_heap *skip)
{
	long n = 0;

	/* acquire: pairs with heap_get's release, so each heap is whole */
	for (struct thread_heap *h = smp_load_acquire(&heaps); h; h = h->next)
		if (h != skip && READ_ONCE(h->chunks_used) >> s->chunk & 1)
			n += (long)cpu_cached_read(heap_cpu_slab(h, s));
	return n;
}

/* s's geometry and counters, without its slabs (slabs and live_objects 0):
 * no lock, nothing changed, so a signal handler may ask (cache.h). */
void cache_report_counters(const struct uslab_cache *s, struct cache_report *r)
{
	memset(r, 0, sizeof(*r));
	r->name = s->name;
	r->size = s->size;
	r->object_size = s->stride;
	r->objects_per_slab = s->objects;
	r->slab_bytes = (size_t)s->units << UNIT_SHIFT;
	r->partial_slabs = READ_ONCE(s->nr_partial);
	cache_counters_read(s, r->stat);
}

/*
 * Counters plus what the calling thread has not folded in yet. Other live
 * threads fold theirs at their next refill, flush or exit. Cached objects:
 * the calling thread's counted on its lists; the others' as they published
 * them (cache.h), which may be a moment old, so at most what is left live
 * (the report's parts still add up).
 */
static void cache_report(struct uslab_cache *s, struct cache_report *r)
{
	own_inbox_drain(s);   /* first: it moves counts between statistics */
	cache_report_counters(s, r);
	struct live_walk w = cache_walk_live(s);
	r->slabs = w.slabs;
	r->live_objects = w.live;
	r->stat[STAT_FREE_LOCAL] += w.own_local;
	struct thread_heap *h = tls_heap;
	if (heap_has_chunk(h, s)) {
		struct cpu_slab *c = heap_cpu_slab(h, s);
		long left = own_private_objects(s);

		r->live_objects -= left;
		r->cached_objects = left + w.own_local;
		struct remote_msg *m = *heap_outbox(h, s->id);

		if (m)   /* freed, not counted yet */
			r->stat[STAT_FREE_REMOTE] += (long)m->count;
		r->stat[STAT_ALLOC_FAST] += (long)c->supplied + (long)c->fast_frees - left;
		r->stat[STAT_FREE_FAST] += (long)c->fast_frees;
	}
	long others = cache_cached_published(s, h);
	if (others > r->live_objects)
		others = r->live_objects > 0 ? r->live_objects : 0;
	r->live_objects -= others;
	r->cached_objects += others;
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
	lock_rank_acquire(RANK_REGISTRY);
	qrw_read_lock(&cache_registry);
	for (struct uslab_cache *s = caches; s && n < cap; s = s->next)
		/* kref.h: the get pairs with the final put's release, after
		 * which cache_release may reuse s */
		if (s->objects && kref_get_unless_zero(&s->ref))
			list[n++] = s;
	qrw_read_unlock(&cache_registry);
	lock_rank_release(RANK_REGISTRY);
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
