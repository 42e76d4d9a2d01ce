/* SPDX-License-Identifier: MIT */
/*
 * debug.c - USLAB_DEBUG=1 for the cache API, and the pieces the malloc
 * family's debug mode (api/debug.c) shares with it: the record table, the
 * quarantine ring, the one-line reports and the leak report.
 *
 * A cache created while the option is on (not malloc's: their blocks are
 * the malloc debug mode's) is a CACHE_DEBUG cache. Its slots are larger
 * than its objects, as with SLUB's slub_debug:
 *
 *   slot                      user = slot + front                 fp_offset
 *   | front red zone 0xFB      |  the object, size bytes  | back red zone |free |
 *   | >= 16 B (the alignment)  |  new 0xA5, freed 0xDF    | 0xFB, >= 16 B |ptr  |
 *
 * The slab layer deals in slots (the free pointer after the back red zone,
 * as for a constructor's cache, so the object keeps its poison while
 * free); the program sees user pointers. Its free pointer not at offset 0,
 * uslab.h's inline fast paths use the always-empty cpu slab for it, so
 * every allocation and free comes through uslab_cache_alloc/free (api.c),
 * which test the flags word they test anyway and come here.
 *
 * Every object the program holds or freed lately has a record in one table
 * (the allocation and free sites, __builtin_return_address of the cache
 * call): a free looks the pointer up there, so a double free is found
 * however many frees came between, and a pointer from another cache is
 * named. At free both red zones are checked and the object filled with
 * 0xDF; it then waits in its cache's quarantine (FIFO) until
 * USLAB_DEBUG_QUARANTINE bytes of later frees of that cache push it out,
 * its fill checked then and again when a later allocation takes the slot
 * (a new slab's objects are filled as they are built, so every free slot
 * holds the fill). uslab_cache_validate checks the red zones of every
 * object of the cache and the fill of those in quarantine;
 * uslab_cache_destroy first gives the quarantine back, then reports live
 * objects by allocation site; at exit so are those still live.
 *
 * A cache with a constructor keeps its objects' constructed state (the API
 * contract: objects come back as they were freed), so, as slub_debug does,
 * its objects are neither filled when new nor poisoned when freed: the
 * constructor runs once per slot, on the user pointer, when its slab is
 * built; red zones, quarantine and sites stay.
 *
 * One lock (cdebug_lock, of rank RANK_DEBUG, a leaf like the malloc debug
 * mode's, never held with it) guards the table and the quarantines; it is
 * never held across a call into the cache's own allocation or free, nor a
 * constructor. Each cache's quarantine is evicted only by calls on that
 * cache, which the API already serialises against its destroy.
 */
#define _GNU_SOURCE
#include "local.h"
#include "debug.h"
#include "options.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the table --------------------------------------------------------------------- */

static size_t slot_of(const struct debug_table *t, uintptr_t user)
{
	return (size_t)((user >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (t->cap - 1);
}

struct debug_record *debug_lookup(struct debug_table *t, uintptr_t user)
{
	if (!t->slot)
		return NULL;
	for (size_t i = slot_of(t, user);; i = (i + 1) & (t->cap - 1)) {
		if (t->slot[i].user == user)
			return &t->slot[i];
		if (!t->slot[i].user)
			return NULL;
	}
}

static void debug_insert(struct debug_table *t, const struct debug_record *r)
{
	size_t i = slot_of(t, r->user);

	while (t->slot[i].user)
		i = (i + 1) & (t->cap - 1);
	t->slot[i] = *r;
	t->used++;
}

/* room for one more */
static bool debug_table_reserve(struct debug_table *t)
{
	if (t->slot && (t->used + 1) * 2 <= t->cap)
		return true;
	struct debug_table old = *t;
	size_t cap = old.slot ? old.cap * 2 : 4096;
	struct debug_record *slot = os_map_aligned(cap * sizeof(*slot), os_page_size());

	if (!slot)
		return false;
	*t = (struct debug_table){ slot, cap, 0 };
	for (size_t i = 0; i < old.cap; i++)
		if (old.slot[i].user)
			debug_insert(t, &old.slot[i]);
	if (old.slot)
		os_unmap(old.slot, old.cap * sizeof(*old.slot));
	return true;
}

bool debug_table_add(struct debug_table *t, mutex_t *lock, const struct debug_record *r)
{
	lock_ranked(lock, RANK_DEBUG);
	bool room = debug_table_reserve(t);
	if (room)
		debug_insert(t, r);
	unlock_ranked(lock, RANK_DEBUG);
	return room;
}

/* Remove r, shifting the records after it back (no tombstones). */
void debug_erase(struct debug_table *t, struct debug_record *r)
{
	size_t i = (size_t)(r - t->slot), j = i;

	t->slot[i].user = 0;
	for (;;) {
		j = (j + 1) & (t->cap - 1);
		if (!t->slot[j].user)
			break;
		size_t k = slot_of(t, t->slot[j].user);
		/* move j back to i unless its home k lies cyclically in (i, j] */
		if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
			t->slot[i] = t->slot[j];
			t->slot[j].user = 0;
			i = j;
		}
	}
	t->used--;
}

/* ---- the quarantine ring ----------------------------------------------------------- */

bool debug_ring_reserve(struct debug_ring *q)
{
	if (q->len < q->cap)
		return true;
	size_t cap = q->cap ? q->cap * 2 : 4096;
	uintptr_t *item = os_map_aligned(cap * sizeof(*item), os_page_size());

	if (!item)
		return false;
	for (size_t i = 0; i < q->len; i++)
		item[i] = q->item[(q->head + i) % q->cap];
	debug_ring_free(q);
	q->item = item;
	q->cap = cap;
	q->head = 0;
	return true;
}

void debug_ring_push(struct debug_ring *q, uintptr_t user, size_t size)
{
	q->item[(q->head + q->len++) % q->cap] = user;
	q->bytes += size;
}

uintptr_t debug_ring_pop(struct debug_ring *q)
{
	uintptr_t user = q->item[q->head];

	q->head = (q->head + 1) % q->cap;
	q->len--;
	return user;
}

/* Its mapping back; what it held is forgotten (the caller took it out). */
void debug_ring_free(struct debug_ring *q)
{
	if (q->item)
		os_unmap(q->item, q->cap * sizeof(*q->item));
	q->item = NULL;
}

bool debug_mark_freed(struct debug_table *t, struct debug_ring *q, mutex_t *lock,
		      struct debug_record *copy, const void *site, const char *call,
		      const char *what)
{
	lock_ranked(lock, RANK_DEBUG);
	struct debug_record *r = debug_lookup(t, copy->user);
	if (!r || r->state != DEBUG_LIVE) {   /* freed meanwhile by another thread */
		*copy = r ? *r : *copy;
		unlock_ranked(lock, RANK_DEBUG);
		debug_report(call, what, copy, "");
	}
	r->state = DEBUG_FREED;
	r->free_site = site;
	if (!debug_ring_reserve(q)) {
		debug_erase(t, r);
		unlock_ranked(lock, RANK_DEBUG);
		return false;
	}
	debug_ring_push(q, copy->user, copy->size);
	return true;
}

const uint8_t *debug_first_not(const void *p, size_t n, uint8_t c)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i] != c)
			return b + i;
	return NULL;
}

/* ---- reports -------------------------------------------------------------------------- */

/* "prog(function+0x1c)", "libfoo.so+0x1234", or the bare address */
void debug_site_name(const void *site, char *buf, size_t size)
{
	Dl_info info;

	if (!site) {
		snprintf(buf, size, "(unknown)");
		return;
	}
	if (!dladdr(site, &info) || !info.dli_fname) {
		snprintf(buf, size, "%p", site);
		return;
	}
	const char *file = strrchr(info.dli_fname, '/');
	file = file ? file + 1 : info.dli_fname;
	if (info.dli_sname && info.dli_saddr)
		snprintf(buf, size, "%s(%s+0x%lx)", file, info.dli_sname,
			 (unsigned long)((uintptr_t)site - (uintptr_t)info.dli_saddr));
	else
		snprintf(buf, size, "%s+0x%lx", file,
			 (unsigned long)((uintptr_t)site - (uintptr_t)info.dli_fbase));
}

void debug_say(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 1)
		n = (int)sizeof(buf) - 1;
	if (n > 0 && write(2, buf, (size_t)n) < 0)
		return;
}

noinline cold void debug_report(const char *call, const char *what, const struct debug_record *r,
				const char *detail)
{
	char cache[48] = "", sites[360] = "", alloc[160], freed[160];

	if (r->cache)
		snprintf(cache, sizeof(cache), ", cache %s", r->cache->name);
	if (r->site) {   /* none: a slot whose record is gone */
		debug_site_name(r->site, alloc, sizeof(alloc));
		if (r->state == DEBUG_FREED)
			debug_site_name(r->free_site, freed, sizeof(freed));
		snprintf(sites, sizeof(sites), ", allocated at %s%s%s", alloc,
			 r->state == DEBUG_FREED ? ", freed at " : "",
			 r->state == DEBUG_FREED ? freed : "");
	}
	debug_say("uslab: %s(): %s %p%s (%zu bytes%s%s)\n", call, what, (void *)r->user, detail,
		  r->size, cache, sites);
	abort();
}

void debug_check_red_zones(const struct debug_record *r, uintptr_t end, const char *call)
{
	const uint8_t *user = (const uint8_t *)r->user;
	const uint8_t *bad = debug_first_not((void *)r->base, r->front, DEBUG_RZ_BYTE);
	const char *what = r->cache ? "red zone of object" : "red zone of block";
	char detail[64];

	if (bad) {
		snprintf(detail, sizeof(detail), " overwritten %zu bytes before it",
			 (size_t)(user - bad));
		debug_report(call, what, r, detail);
	}
	bad = debug_first_not(user + r->size, end - r->front - r->size, DEBUG_RZ_BYTE);
	if (bad) {
		snprintf(detail, sizeof(detail), " overwritten at offset %zu, past its end",
			 (size_t)(bad - user));
		debug_report(call, what, r, detail);
	}
}

/* ---- the leak report ----------------------------------------------------------------- */

struct site_total {
	const void *site;
	const struct uslab_cache *cache;
	size_t bytes, blocks;
};

void debug_leak_report(struct debug_table *t, mutex_t *lock, const struct uslab_cache *cache,
		       const char *when)
{
	enum { SITES = 1024, TOP = 20 };
	struct site_total *sites = os_map_aligned(SITES * sizeof(*sites), os_page_size());
	size_t nsites = 0, blocks = 0, bytes = 0, other_blocks = 0;
	char name[200];

	if (!sites)
		return;
	lock_ranked(lock, RANK_DEBUG);
	for (size_t i = 0; t->slot && i < t->cap; i++) {
		const struct debug_record *r = &t->slot[i];
		size_t k;

		if (!r->user || r->state != DEBUG_LIVE || (cache && r->cache != cache))
			continue;
		blocks++;
		bytes += r->size;
		for (k = 0; k < nsites; k++)
			if (sites[k].site == r->site && sites[k].cache == r->cache)
				break;
		if (k == nsites) {
			if (nsites == SITES) {
				other_blocks++;
				continue;
			}
			sites[nsites++] = (struct site_total){ r->site, r->cache, 0, 0 };
		}
		sites[k].bytes += r->size;
		sites[k].blocks++;
	}
	unlock_ranked(lock, RANK_DEBUG);
	if (cache && blocks)
		debug_say("uslab: debug: cache %s: %zu object%s (%zu bytes) live %s, "
			  "by allocation site:\n",
			  cache->name, blocks, blocks == 1 ? "" : "s", bytes, when);
	else if (blocks)   /* a table holds either malloc's blocks or caches' objects */
		debug_say("uslab: debug: %zu %s%s (%zu bytes) live %s, by allocation site:\n",
			  blocks, sites[0].cache ? "cache object" : "block", blocks == 1 ? "" : "s",
			  bytes, when);
	for (size_t shown = 0; shown < TOP && shown < nsites; shown++) {
		size_t best = shown;   /* selection: the next largest to the front */
		for (size_t k = shown + 1; k < nsites; k++)
			if (sites[k].bytes > sites[best].bytes)
				best = k;
		struct site_total t = sites[best];
		sites[best] = sites[shown];
		sites[shown] = t;
		debug_site_name(t.site, name, sizeof(name));
		if (t.cache)
			debug_say("uslab:   %zu bytes in %zu object%s of cache %s "
				  "allocated at %s\n", t.bytes, t.blocks, t.blocks == 1 ? "" : "s", t.cache->name, name);
		else
			debug_say("uslab:   %zu bytes in %zu block%s allocated at %s\n", t.bytes,
				  t.blocks, t.blocks == 1 ? "" : "s", name);
	}
	if (nsites > TOP || other_blocks)
		debug_say("uslab:   (and more, from %zu other sites)\n",
			  nsites > TOP ? nsites - TOP : 0);
	os_unmap(sites, SITES * sizeof(*sites));
}

/* ---- the cache API's debug mode -------------------------------------------------------- */

/* What a CACHE_DEBUG cache has beside struct uslab_cache, by cache id. */
struct cache_debug {
	void (*ctor)(void *);          /* the program's constructor, or NULL */
	struct debug_ring q;           /* its quarantine */
};

static mutex_t cdebug_lock = MUTEX_INIT;
FORK_LOCK(cdebug_lock, RANK_DEBUG);
static struct debug_table table;         /* every debug cache's objects */
static struct cache_debug *cdebug;       /* [MAX_CACHES], mapped by the first debug cache */

static size_t front_of(const struct uslab_cache *s)
{
	return s->align > DEBUG_RZ_MIN ? s->align : DEBUG_RZ_MIN;
}

static struct cache_debug *debug_of(const struct uslab_cache *s)
{
	return &cdebug[s->id];
}

/*
 * Every slot of a debug cache, as its slab is built (the slab layer's
 * constructor call): the program's constructor on the object, or the
 * freed fill, which an allocation then finds intact.
 */
static void debug_construct(void *slot)
{
	struct uslab_cache *s = ptr_to_slab(slot)->cache;
	char *user = (char *)slot + front_of(s);
	void (*ctor)(void *) = debug_of(s)->ctor;

	if (ctor)
		ctor(user);
	else
		memset(user, DEBUG_FREE_BYTE, s->size);
}

size_t cache_debug_layout(struct uslab_cache *s)
{
	lock_ranked(&cdebug_lock, RANK_DEBUG);
	if (!cdebug)
		cdebug = os_map_aligned(MAX_CACHES * sizeof(*cdebug), os_page_size());
	unlock_ranked(&cdebug_lock, RANK_DEBUG);
	if (!cdebug)
		return 0;
	s->ctor = debug_construct;
	s->fp_offset = (uint32_t)round_up(front_of(s) + s->size + DEBUG_RZ_MIN, sizeof(void *));
	return s->fp_offset + sizeof(void *);
}

void cache_debug_attach(struct uslab_cache *s, void (*ctor)(void *))
{
	*debug_of(s) = (struct cache_debug){ .ctor = ctor };
}

/* A pointer with no record: what object_slab says of it, or of the slot
 * it would be the object of; else a slot of s nobody holds. */
noinline cold __attribute__((noreturn))
static void no_record(struct uslab_cache *s, void *obj, const char *call)
{
	struct slab *slab = ptr_to_slab(obj);
	uintptr_t front = front_of(s), off;
	struct debug_record r = { .user = (uintptr_t)obj, .size = s->size, .cache = s };

	if (slab && slab->kind == SLAB_KIND_SLAB && slab->cache == s) {
		off = (uintptr_t)obj - slab->base;
		if (off < front || !object_offset_valid(s->obj_magic, s->obj_limit, off - front))
			uslab_fatal(call, obj, "misaligned pointer");
	} else {
		object_slab(s, obj, call);   /* says what it is */
	}
	debug_report(call, "pointer to no live object", &r, "");
}

/* A slot's object should hold the freed fill; reported as call's. */
static void check_fill(const struct debug_record *r, const char *call, const char *when)
{
	const uint8_t *bad = debug_first_not((void *)r->user, r->size, DEBUG_FREE_BYTE);
	char detail[80];

	if (bad) {
		snprintf(detail, sizeof(detail), " at offset %zu%s",
			 (size_t)(bad - (uint8_t *)r->user), when);
		debug_report(call, "write after free to object", r, detail);
	}
}

void *cache_debug_alloc(struct uslab_cache *s, const void *site)
{
	struct cache_debug *d = debug_of(s);
	uint8_t *slot = cache_alloc_fast(s);

	if (!slot)
		return NULL;
	size_t front = front_of(s);
	struct debug_record r = { (uintptr_t)slot + front, (uintptr_t)slot, s->size, site, NULL, s,
				  (uint32_t)front, DEBUG_LIVE };
	uint8_t *user = slot + front;

	if (!d->ctor) {   /* since its free (or its slab's build): untouched? */
		struct debug_record gone = r;
		gone.site = NULL;
		check_fill(&gone, "uslab_cache_alloc", ", found when it was handed out again");
	}
	memset(slot, DEBUG_RZ_BYTE, front);
	if (!d->ctor)
		memset(user, DEBUG_NEW_BYTE, s->size);
	memset(user + s->size, DEBUG_RZ_BYTE, s->fp_offset - front - s->size);

	if (!debug_table_add(&table, &cdebug_lock, &r)) {
		if (!d->ctor)
			memset(user, DEBUG_FREE_BYTE, s->size);
		cache_free_fast(s, slot);
		errno = ENOMEM;
		return NULL;
	}
	return user;
}

/*
 * cdebug_lock held: take s's oldest objects out of its quarantine while it
 * holds more than budget bytes, each checked for writes since its free and
 * its slot put in out[] (up to max) for the caller to give back once the
 * lock is let go.
 */
static size_t evict(struct uslab_cache *s, size_t budget, void **out, size_t max,
		    const char *call)
{
	struct cache_debug *d = debug_of(s);
	size_t n = 0;

	while (d->q.len && d->q.bytes > budget && n < max) {
		struct debug_record *r = debug_lookup(&table, debug_ring_pop(&d->q));

		d->q.bytes -= s->size;
		if (!d->ctor) {
			struct debug_record copy = *r;
			const uint8_t *bad = debug_first_not((void *)copy.user, copy.size,
							     DEBUG_FREE_BYTE);
			if (bad) {
				unlock_ranked(&cdebug_lock, RANK_DEBUG);
				check_fill(&copy, call, "");
			}
		}
		out[n++] = (void *)r->base;
		debug_erase(&table, r);
	}
	return n;
}

/* Take s's objects out of the quarantine down to budget, and give them back. */
static void quarantine_trim(struct uslab_cache *s, size_t budget, const char *call)
{
	enum { BATCH = 32 };
	void *out[BATCH];
	size_t n;

	do {
		lock_ranked(&cdebug_lock, RANK_DEBUG);
		n = evict(s, budget, out, BATCH, call);
		unlock_ranked(&cdebug_lock, RANK_DEBUG);
		for (size_t i = 0; i < n; i++)
			cache_free_fast(s, out[i]);
	} while (n == BATCH);
}

void cache_debug_free(struct uslab_cache *s, void *obj, const char *call, const void *site)
{
	struct cache_debug *d = debug_of(s);

	if (!obj)
		return;
	lock_ranked(&cdebug_lock, RANK_DEBUG);
	struct debug_record *r = debug_lookup(&table, (uintptr_t)obj);
	struct debug_record copy = r ? *r : (struct debug_record){ 0 };
	unlock_ranked(&cdebug_lock, RANK_DEBUG);
	if (!r)
		no_record(s, obj, call);
	if (copy.cache != s)
		debug_report(call, "pointer from another cache", &copy, "");
	if (copy.state != DEBUG_LIVE)
		debug_report(call, "double free of object", &copy, "");
	debug_check_red_zones(&copy, s->fp_offset, call);
	if (!d->ctor)
		memset(obj, DEBUG_FREE_BYTE, s->size);

	if (!debug_mark_freed(&table, &d->q, &cdebug_lock, &copy, site, call,
			      "double free of object")) {
		cache_free_fast(s, (void *)copy.base);   /* no room to keep it */
		return;
	}
	unlock_ranked(&cdebug_lock, RANK_DEBUG);
	quarantine_trim(s, (size_t)option(OPT_DEBUG_QUARANTINE), call);
}

void cache_debug_drain(struct uslab_cache *s)
{
	quarantine_trim(s, 0, "uslab_cache_destroy");
}

size_t cache_debug_quarantined(const struct uslab_cache *s)
{
	return READ_ONCE(debug_of(s)->q.len);
}

void cache_debug_leaks(struct uslab_cache *s)
{
	debug_leak_report(&table, &cdebug_lock, s, "at uslab_cache_destroy");
}

void cache_debug_validate(struct uslab_cache *s)
{
	bool fill = !debug_of(s)->ctor;

	lock_ranked(&cdebug_lock, RANK_DEBUG);
	for (size_t i = 0; table.slot && i < table.cap; i++) {
		struct debug_record r = table.slot[i];

		if (!r.user || r.cache != s)
			continue;
		/* a report aborts: the lock need not be let go */
		debug_check_red_zones(&r, s->fp_offset, "uslab_cache_validate");
		if (fill && r.state == DEBUG_FREED)
			check_fill(&r, "uslab_cache_validate", "");
	}
	unlock_ranked(&cdebug_lock, RANK_DEBUG);
}

void cache_debug_forget(struct uslab_cache *s)
{
	lock_ranked(&cdebug_lock, RANK_DEBUG);
	debug_ring_free(&debug_of(s)->q);
	*debug_of(s) = (struct cache_debug){ 0 };
	unlock_ranked(&cdebug_lock, RANK_DEBUG);
}

/* At exit: the objects of every debug cache still live, by allocation site. */
every_process __attribute__((destructor)) static void cache_debug_leak_report(void)
{
	if (READ_ONCE(table.used))
		debug_leak_report(&table, &cdebug_lock, NULL, "at exit");
}
