/* SPDX-License-Identifier: MIT */
/*
 * debug.c - USLAB_DEBUG=1: the malloc family with the checks that cost
 * memory and time on every call, to find the bug rather than to survive it.
 *
 * Each block the program gets sits inside an ordinary block of kmalloc's,
 * between two red zones:
 *
 *   base            user = base + front          user + size       base + usable
 *   | front red zone |  the program's size bytes   | back red zone     |
 *   | 0xFB, >= 16 B  |  new: 0xA5 (calloc: 0)      | 0xFB, >= 16 B     |
 *   |                |  freed: 0xDF                |                   |
 *
 * front is 16 bytes, or the alignment asked for when that is more (so user
 * keeps it). Both red zones are checked when the block is freed or
 * reallocated. A freed block is filled with 0xDF and waits in a FIFO
 * quarantine until USLAB_DEBUG_QUARANTINE bytes of later frees push it
 * out; its fill is checked then ("write after free"), and only then does
 * kmalloc get it back, so a stale pointer keeps pointing at poison.
 *
 * Every block, live or in quarantine, has a record in one table keyed by
 * its user pointer: size, base, the call site that allocated it and the one
 * that freed it (__builtin_return_address of the malloc-family call). The
 * table, not the block, says what a pointer is: nothing is read at a
 * pointer the table does not know (an invalid pointer), and a second free
 * of a block in quarantine is a double free however many frees came
 * between. Every report is one line naming the call, the problem, the
 * block, its size and its sites (symbolised with dladdr), then abort(). At
 * exit, the blocks still live are reported by allocation site, the 20 that
 * hold the most bytes first.
 *
 * One lock (RANK_DEBUG, a leaf) guards the table and the quarantine; it is
 * never held across a call into kmalloc or kfree. The table and the
 * quarantine live in their own mappings (os_map), not in the heap they
 * watch. The table, the quarantine ring and the reports are the cache
 * layer's (cache/debug.h), which gives the uslab_cache_* API the same mode.
 */
#define _GNU_SOURCE
#include "api.h"
#include "debug.h"
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RZ_BYTE   DEBUG_RZ_BYTE
#define NEW_BYTE  DEBUG_NEW_BYTE
#define FREE_BYTE DEBUG_FREE_BYTE
#define RZ_MIN    DEBUG_RZ_MIN

/* debug_mode: -1 until the first call reads USLAB_DEBUG, then 0 or 1 */
signed char debug_mode = -1;

static mutex_t debug_lock = MUTEX_INIT;
FORK_LOCK(debug_lock, RANK_DEBUG);

static struct debug_table table;
static struct debug_ring quarantine;

/* ---- reports ------------------------------------------------------------------------ */

noinline cold __attribute__((noreturn))
static void report_pointer(const char *call, const void *p)
{
	debug_say("uslab: %s(): invalid pointer %p (no block of the debug mode's starts there)\n",
		  call, p);
	abort();
}

/* ---- the quarantine ------------------------------------------------------------------------- */

/*
 * Take the oldest blocks out of the quarantine while it holds more than its
 * budget: each is checked for writes since its free and its kmalloc block
 * put in out[] (up to max) for the caller to free once the lock is let go.
 */
static size_t quarantine_evict(uintptr_t *out, size_t max, size_t budget)
{
	size_t n = 0;

	while (quarantine.len && quarantine.bytes > budget && n < max) {
		uintptr_t user = debug_ring_pop(&quarantine);
		struct debug_record *r = debug_lookup(&table, user);

		if (!r || r->state != DEBUG_FREED)
			continue;   /* cannot happen: only free() quarantines */
		const uint8_t *bad = debug_first_not((void *)user, r->size, FREE_BYTE);
		if (bad) {
			char detail[64];
			snprintf(detail, sizeof(detail), " at offset %zu", (size_t)(bad - (uint8_t *)user));
			debug_report("free", "write after free to block", r, detail);
		}
		quarantine.bytes -= r->size;
		out[n++] = r->base;
		debug_erase(&table, r);
	}
	return n;
}

/* ---- the calls ---------------------------------------------------------------------------------- */

/* Decides debug_mode on the first call; true when the debug mode is on. */
every_process bool debug_resolve(void)
{
	int mode = READ_ONCE(debug_mode);

	if (mode < 0) {
		options_init();
		mode = option(OPT_DEBUG) ? 1 : 0;
		if (mode)
			kmalloc_divert(debug_malloc_call, debug_free_call);
		else
			kmalloc_divert(NULL, NULL);
		WRITE_ONCE(debug_mode, mode);
	}
	return mode > 0;
}

/* Before the program's threads: kmalloc's and kfree's plain loads of kdiv
 * (and the other entry points' of debug_mode) then race with no write. */
every_process __attribute__((constructor)) static void debug_at_load(void)
{
	debug_resolve();
}

void *debug_alloc(size_t size, size_t align, bool zero, const char *call, const void *site)
{
	size_t front = align > RZ_MIN ? align : RZ_MIN, total;

	if (__builtin_add_overflow(size, front + RZ_MIN, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t *base = align > RZ_MIN ? kmalloc_aligned(align, total) : kmalloc_direct(total);
	if (!base)
		return NULL;
	size_t usable = kmalloc_usable_size(base, call);
	uint8_t *user = base + front;

	memset(base, RZ_BYTE, front);
	memset(user, zero ? 0 : NEW_BYTE, size);
	memset(user + size, RZ_BYTE, usable - front - size);

	struct debug_record r = { (uintptr_t)user, (uintptr_t)base, size, site, NULL, NULL,
				  (uint32_t)front, DEBUG_LIVE };
	if (!debug_table_add(&table, &debug_lock, &r)) {
		kfree_direct(base, call);
		errno = ENOMEM;
		return NULL;
	}
	return user;
}

/*
 * malloc's and free's way in while the debug mode is on, and before it is
 * known: kmalloc starts diverted to these (kdiv), so the first malloc-family
 * call reads the option (kdiv's first value, api/layout.c); kfree's fast
 * path is open meanwhile, since nothing it could take exists before a
 * malloc. kmalloc_divert then points kdiv here for good, or nowhere.
 */
every_process void *debug_malloc_call(size_t size, const void *site)
{
	if (debug_resolve())
		return debug_alloc(size, 0, false, "malloc", site);
	return kmalloc_direct(size);
}

every_process void debug_free_call(void *p, const char *call, const void *site)
{
	if (debug_resolve())
		debug_free(p, SIZE_MAX, call, site);
	else
		kfree_direct(p, call);
}

/* The red zones of r, up to the end of its kmalloc block; reported as call's. */
static void check_red_zones(const struct debug_record *r, const char *call)
{
	debug_check_red_zones(r, kmalloc_usable_size((void *)r->base, call), call);
}

/* The live record of p, or a report: p is no block, or freed already. */
static struct debug_record *live_record(const void *p, const char *call, const char *freed_what)
{
	struct debug_record *r = debug_lookup(&table, (uintptr_t)p);

	if (!r) {
		unlock_ranked(&debug_lock, RANK_DEBUG);
		report_pointer(call, p);
	}
	if (r->state != DEBUG_LIVE) {
		struct debug_record copy = *r;
		unlock_ranked(&debug_lock, RANK_DEBUG);
		debug_report(call, freed_what, &copy, "");
	}
	return r;
}

/* size: what free_sized says the block's size is (SIZE_MAX: nothing said) */
void debug_free(void *p, size_t size, const char *call, const void *site)
{
	enum { BATCH = 32 };
	uintptr_t out[BATCH];
	size_t n;

	if (!p)
		return;
	lock_ranked(&debug_lock, RANK_DEBUG);
	struct debug_record *r = live_record(p, call, "double free of block");
	struct debug_record copy = *r;
	unlock_ranked(&debug_lock, RANK_DEBUG);

	if (size != SIZE_MAX && size != copy.size) {
		char detail[64];
		snprintf(detail, sizeof(detail), " given as %zu bytes", size);
		debug_report(call, "wrong size for block", &copy, detail);
	}
	check_red_zones(&copy, call);
	memset(p, FREE_BYTE, copy.size);

	size_t budget = (size_t)option(OPT_DEBUG_QUARANTINE);
	if (!debug_mark_freed(&table, &quarantine, &debug_lock, &copy, site, call,
			      "double free of block")) {
		kfree_direct((void *)copy.base, call);   /* no room to keep it */
		return;
	}
	do {
		n = quarantine_evict(out, BATCH, budget);
		unlock_ranked(&debug_lock, RANK_DEBUG);
		for (size_t i = 0; i < n; i++)
			kfree_direct((void *)out[i], call);
		if (n == BATCH)
			lock_ranked(&debug_lock, RANK_DEBUG);
	} while (n == BATCH);
}

void *debug_realloc(void *p, size_t size, const void *site)
{
	if (!p)
		return debug_alloc(size, 0, false, "realloc", site);
	if (size == 0) {
		debug_free(p, SIZE_MAX, "realloc", site);
		return NULL;
	}
	lock_ranked(&debug_lock, RANK_DEBUG);
	struct debug_record copy = *live_record(p, "realloc", "realloc of freed block");
	unlock_ranked(&debug_lock, RANK_DEBUG);
	check_red_zones(&copy, "realloc");

	/* always moved: a stale pointer to the old block then shows */
	void *q = debug_alloc(size, copy.front > RZ_MIN ? copy.front : 0, false, "realloc", site);
	if (!q)
		return NULL;
	memcpy(q, p, copy.size < size ? copy.size : size);
	debug_free(p, SIZE_MAX, "realloc", site);
	return q;
}

size_t debug_usable_size(void *p)
{
	if (!p)
		return 0;
	lock_ranked(&debug_lock, RANK_DEBUG);
	size_t size = live_record(p, "malloc_usable_size", "malloc_usable_size of freed block")->size;
	unlock_ranked(&debug_lock, RANK_DEBUG);
	return size;
}

/* ---- the leak report ---------------------------------------------------------------------------- */

/* At exit: the blocks still live, by allocation site, most bytes first. */
every_process __attribute__((destructor)) static void debug_leak_report_at_exit(void)
{
	if (READ_ONCE(debug_mode) > 0)
		debug_leak_report(&table, &debug_lock, NULL, "at exit");
}
