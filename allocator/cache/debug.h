/* SPDX-License-Identifier: MIT */
/*
 * debug.h - USLAB_DEBUG=1's pieces: the record table, the quarantine ring,
 * reports and the leak report, shared by the cache API's debug mode
 * (cache/debug.c) and the malloc family's (api/debug.c); and the cache
 * API's debug mode itself.
 *
 * A record says what the debug mode knows of a block or object the program
 * holds or freed lately, keyed by the pointer the program got (`user`):
 *
 *   base             user = base + front          user + size
 *   | front red zone  |  the program's size bytes   | back red zone ...
 *   | 0xFB            |  new: 0xA5, freed: 0xDF     | 0xFB
 *
 * `base` is what lies under it: kmalloc's block (malloc), the cache's slot
 * (caches). A table and its quarantine belong to their user, which holds
 * its own lock around every call here but the reports (which abort) and
 * debug_leak_report (which takes the lock itself).
 */
#ifndef USLAB_CACHE_DEBUG_H
#define USLAB_CACHE_DEBUG_H

#include "cache.h"

#pragma GCC visibility push(hidden)

#define DEBUG_RZ_BYTE   0xFB   /* red zones */
#define DEBUG_NEW_BYTE  0xA5   /* a new block (not calloc's) */
#define DEBUG_FREE_BYTE 0xDF   /* a freed block, in quarantine */
#define DEBUG_RZ_MIN    16     /* bytes of red zone at least, each side */

enum { DEBUG_LIVE = 1, DEBUG_FREED = 2 };

struct debug_record {
	uintptr_t user;                /* the key; 0: an empty slot */
	uintptr_t base;
	size_t size;                   /* what the program asked for */
	const void *site;              /* who allocated it */
	const void *free_site;         /* who freed it (DEBUG_FREED) */
	struct uslab_cache *cache;     /* a cache's object; NULL: a malloc block */
	uint32_t front;                /* user - base */
	uint32_t state;                /* DEBUG_LIVE or DEBUG_FREED */
};

/* Open addressing, linear probing, at most half full; in its own mappings. */
struct debug_table {
	struct debug_record *slot;
	size_t cap, used;
};
struct debug_record *debug_lookup(struct debug_table *t, uintptr_t user);
/* r into t under lock (RANK_DEBUG); false: no memory for the room */
bool debug_table_add(struct debug_table *t, mutex_t *lock, const struct debug_record *r);
void debug_erase(struct debug_table *t, struct debug_record *r);

/* The quarantine: a FIFO of user pointers and the bytes they stand for. */
struct debug_ring {
	uintptr_t *item;
	size_t cap, head, len, bytes;
};
bool debug_ring_reserve(struct debug_ring *q);        /* room for one more */
void debug_ring_push(struct debug_ring *q, uintptr_t user, size_t size);
uintptr_t debug_ring_pop(struct debug_ring *q);       /* the oldest; bytes are the caller's */
void debug_ring_free(struct debug_ring *q);

/*
 * The second half of a free, after the checks made without lock: takes
 * lock; the record of user (copy: the caller's copy of it, live then)
 * becomes freed at site and user joins q, and it returns true with lock
 * still held. A record freed meanwhile by another thread is reported as
 * what. false: no room in q, the record is gone and lock let go; the
 * caller gives copy->base back at once.
 */
bool debug_mark_freed(struct debug_table *t, struct debug_ring *q, mutex_t *lock,
		      struct debug_record *copy, const void *site, const char *call,
		      const char *what);

/* The first byte of [p, p + n) that is not c, or NULL. */
const uint8_t *debug_first_not(const void *p, size_t n, uint8_t c);

/* A line on stderr, formatted on the stack and written with write(2): the
 * heap may be what is broken. At most 511 bytes. */
__attribute__((format(printf, 1, 2))) void debug_say(const char *fmt, ...);
/* A call site as "file(function+0x1c)", "file+0x1234" (no exported symbol),
 * the bare address (dladdr knows nothing), or "(unknown)" for NULL. */
void debug_site_name(const void *site, char *buf, size_t size);

/*
 * One line about r, then abort(): "uslab: call(): what <user>detail (size
 * bytes[, cache name], allocated at site[, freed at site])", the sites
 * symbolised with dladdr. detail may be "".
 */
noinline cold __attribute__((noreturn)) void debug_report(const char *call, const char *what,
							   const struct debug_record *r,
							   const char *detail);
/* The red zones of r, both sides, up to base + end (exclusive); reported as call's. */
void debug_check_red_zones(const struct debug_record *r, uintptr_t end, const char *call);

/*
 * The live records of t (of one cache, or all: cache NULL), by allocation
 * site, the 20 that hold the most bytes first; `when` ends the title ("at
 * exit"). Takes lock around its walk of t; prints nothing if none is live.
 */
void debug_leak_report(struct debug_table *t, mutex_t *lock, const struct uslab_cache *cache,
		       const char *when);

/* ---- the cache API's debug mode (cache/debug.c) --------------------------------- */

/* cache_setup: the slot of a CACHE_DEBUG cache (red zones, the free pointer
 * after the back one); sets fp_offset and ctor, returns the slot's size (0:
 * no memory for the debug mode's state). attach: once it has its id. */
size_t cache_debug_layout(struct uslab_cache *s);
void cache_debug_attach(struct uslab_cache *s, void (*ctor)(void *));
void *cache_debug_alloc(struct uslab_cache *s, const void *site);
void cache_debug_free(struct uslab_cache *s, void *obj, const char *call, const void *site);
void cache_debug_drain(struct uslab_cache *s);   /* its quarantine back to it (destroy) */
size_t cache_debug_quarantined(const struct uslab_cache *s);
void cache_debug_leaks(struct uslab_cache *s);   /* destroy with live objects */
void cache_debug_validate(struct uslab_cache *s);
void cache_debug_forget(struct uslab_cache *s);  /* destroyed */

#pragma GCC visibility pop

#endif
