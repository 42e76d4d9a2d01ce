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
 * watch. The uslab_cache_* API is not covered.
 */
#define _GNU_SOURCE
#include "api.h"
#include "options.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RZ_BYTE   0xFB   /* red zones */
#define NEW_BYTE  0xA5   /* a new block (not calloc's) */
#define FREE_BYTE 0xDF   /* a freed block, in quarantine */
#define RZ_MIN    16

/* debug_mode: -1 until the first call reads USLAB_DEBUG, then 0 or 1 */
signed char debug_mode = -1;

enum { LIVE = 1, FREED = 2 };

struct record {
	uintptr_t user;       /* the key; 0: an empty slot */
	uintptr_t base;       /* kmalloc's block */
	size_t size;          /* what the program asked for */
	const void *site;     /* who allocated it */
	const void *free_site;
	uint32_t front;       /* user - base */
	uint32_t state;       /* LIVE or FREED */
};

static mutex_t debug_lock = MUTEX_INIT;
FORK_LOCK(debug_lock, RANK_DEBUG);

static struct record *table;   /* open addressing, linear probing */
static size_t table_cap, table_used;
static uintptr_t *quarantine;  /* a ring of user pointers, oldest at q_head */
static size_t q_cap, q_head, q_len, q_bytes;

/* ---- reports ------------------------------------------------------------------------ */

/* "prog(function+0x1c)", "libfoo.so+0x1234", or the bare address */
static void site_name(const void *site, char *buf, size_t size)
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

__attribute__((format(printf, 2, 3)))
static void say(char *buf, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(buf, 512, fmt, ap);
	va_end(ap);
	if (n > 511)
		n = 511;
	if (n > 0 && write(2, buf, (size_t)n) < 0)
		return;
}

/* One line about block r, then abort. what: "double free", ... detail:
 * after the block's description (may be ""). */
noinline cold __attribute__((noreturn))
static void report(const char *call, const char *what, const struct record *r, const char *detail)
{
	char line[512], alloc[160], freed[180] = "";

	site_name(r->site, alloc, sizeof(alloc));
	if (r->state == FREED) {
		char s[150];
		site_name(r->free_site, s, sizeof(s));
		snprintf(freed, sizeof(freed), ", freed at %s", s);
	}
	say(line, "uslab: %s(): %s %p%s (%zu bytes, allocated at %s%s)\n", call, what,
	    (void *)r->user, detail, r->size, alloc, freed);
	abort();
}

noinline cold __attribute__((noreturn))
static void report_pointer(const char *call, const void *p)
{
	char line[512];

	say(line, "uslab: %s(): invalid pointer %p (no block of the debug mode's starts there)\n",
	    call, p);
	abort();
}

/* ---- the table ------------------------------------------------------------------------ */

static size_t slot_of(uintptr_t user)
{
	return (size_t)((user >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (table_cap - 1);
}

static struct record *lookup(uintptr_t user)
{
	if (!table)
		return NULL;
	for (size_t i = slot_of(user);; i = (i + 1) & (table_cap - 1)) {
		if (table[i].user == user)
			return &table[i];
		if (!table[i].user)
			return NULL;
	}
}

/* Room for one more record (the table at most half full). */
static bool table_reserve(void)
{
	if (table && (table_used + 1) * 2 <= table_cap)
		return true;
	size_t cap = table ? table_cap * 2 : 4096;
	struct record *old = table, *t = os_map_aligned(cap * sizeof(*t), os_page_size());
	size_t old_cap = table_cap;

	if (!t)
		return false;
	table = t;
	table_cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (!old[i].user)
			continue;
		size_t k = slot_of(old[i].user);
		while (table[k].user)
			k = (k + 1) & (cap - 1);
		table[k] = old[i];
	}
	if (old)
		os_unmap(old, old_cap * sizeof(*old));
	return true;
}

static void insert(const struct record *r)
{
	size_t i = slot_of(r->user);

	while (table[i].user)
		i = (i + 1) & (table_cap - 1);
	table[i] = *r;
	table_used++;
}

/* Remove r, shifting the records after it back (no tombstones). */
static void erase(struct record *r)
{
	size_t i = (size_t)(r - table), j = i;

	table[i].user = 0;
	for (;;) {
		j = (j + 1) & (table_cap - 1);
		if (!table[j].user)
			break;
		size_t k = slot_of(table[j].user);
		/* move j back to i unless its home k lies cyclically in (i, j] */
		if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
			table[i] = table[j];
			table[j].user = 0;
			i = j;
		}
	}
	table_used--;
}

/* ---- the quarantine ------------------------------------------------------------------------- */

static bool quarantine_reserve(void)
{
	if (q_len < q_cap)
		return true;
	size_t cap = q_cap ? q_cap * 2 : 4096;
	uintptr_t *q = os_map_aligned(cap * sizeof(*q), os_page_size());

	if (!q)
		return false;
	for (size_t i = 0; i < q_len; i++)
		q[i] = quarantine[(q_head + i) % q_cap];
	if (quarantine)
		os_unmap(quarantine, q_cap * sizeof(*quarantine));
	quarantine = q;
	q_cap = cap;
	q_head = 0;
	return true;
}

/* The first byte of [p, p + n) that is not c, or NULL. */
static const uint8_t *first_not(const void *p, size_t n, uint8_t c)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i] != c)
			return b + i;
	return NULL;
}

/*
 * Take the oldest blocks out of the quarantine while it holds more than its
 * budget: each is checked for writes since its free and its kmalloc block
 * put in out[] (up to max) for the caller to free once the lock is let go.
 */
static size_t quarantine_evict(uintptr_t *out, size_t max, size_t budget)
{
	size_t n = 0;

	while (q_len && q_bytes > budget && n < max) {
		uintptr_t user = quarantine[q_head];
		struct record *r = lookup(user);

		q_head = (q_head + 1) % q_cap;
		q_len--;
		if (!r || r->state != FREED)
			continue;   /* cannot happen: only free() quarantines */
		const uint8_t *bad = first_not((void *)user, r->size, FREE_BYTE);
		if (bad) {
			char detail[64];
			snprintf(detail, sizeof(detail), " at offset %zu", (size_t)(bad - (uint8_t *)user));
			report("free", "write after free to block", r, detail);
		}
		q_bytes -= r->size;
		out[n++] = r->base;
		erase(r);
	}
	return n;
}

/* ---- the calls ---------------------------------------------------------------------------------- */

/* Decides debug_mode on the first call; true when the debug mode is on. */
bool debug_resolve(void)
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
__attribute__((constructor)) static void debug_at_load(void)
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

	struct record r = { (uintptr_t)user, (uintptr_t)base, size, site, NULL, (uint32_t)front, LIVE };
	lock_ranked(&debug_lock, RANK_DEBUG);
	bool room = table_reserve();
	if (room)
		insert(&r);
	unlock_ranked(&debug_lock, RANK_DEBUG);
	if (!room) {
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
void *debug_malloc_call(size_t size, const void *site)
{
	if (debug_resolve())
		return debug_alloc(size, 0, false, "malloc", site);
	return kmalloc_direct(size);
}

void debug_free_call(void *p, const char *call, const void *site)
{
	if (debug_resolve())
		debug_free(p, SIZE_MAX, call, site);
	else
		kfree_direct(p, call);
}


/* The red zones of r, checked; reported as call's. */
static void check_red_zones(const struct record *r, const char *call)
{
	const uint8_t *user = (const uint8_t *)r->user;
	size_t usable = kmalloc_usable_size((void *)r->base, call);
	const uint8_t *bad = first_not((void *)r->base, r->front, RZ_BYTE);
	char detail[64];

	if (bad) {
		snprintf(detail, sizeof(detail), " overwritten %zu bytes before it",
			 (size_t)(user - bad));
		report(call, "red zone of block", r, detail);
	}
	bad = first_not(user + r->size, usable - r->front - r->size, RZ_BYTE);
	if (bad) {
		snprintf(detail, sizeof(detail), " overwritten at offset %zu, past its end",
			 (size_t)(bad - user));
		report(call, "red zone of block", r, detail);
	}
}

/* The live record of p, or a report: p is no block, or freed already. */
static struct record *live_record(const void *p, const char *call, const char *freed_what)
{
	struct record *r = lookup((uintptr_t)p);

	if (!r) {
		unlock_ranked(&debug_lock, RANK_DEBUG);
		report_pointer(call, p);
	}
	if (r->state != LIVE) {
		struct record copy = *r;
		unlock_ranked(&debug_lock, RANK_DEBUG);
		report(call, freed_what, &copy, "");
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
	struct record *r = live_record(p, call, "double free of block");
	struct record copy = *r;
	unlock_ranked(&debug_lock, RANK_DEBUG);

	if (size != SIZE_MAX && size != copy.size) {
		char detail[64];
		snprintf(detail, sizeof(detail), " given as %zu bytes", size);
		report(call, "wrong size for block", &copy, detail);
	}
	check_red_zones(&copy, call);
	memset(p, FREE_BYTE, copy.size);

	size_t budget = (size_t)option(OPT_DEBUG_QUARANTINE);
	lock_ranked(&debug_lock, RANK_DEBUG);
	r = lookup((uintptr_t)p);
	if (!r || r->state != LIVE) {   /* freed meanwhile by another thread */
		copy = r ? *r : copy;
		unlock_ranked(&debug_lock, RANK_DEBUG);
		report(call, "double free of block", &copy, "");
	}
	r->state = FREED;
	r->free_site = site;
	if (!quarantine_reserve()) {   /* no room to keep it: it goes back at once */
		erase(r);
		unlock_ranked(&debug_lock, RANK_DEBUG);
		kfree_direct((void *)copy.base, call);
		return;
	}
	quarantine[(q_head + q_len++) % q_cap] = (uintptr_t)p;
	q_bytes += copy.size;
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
	struct record copy = *live_record(p, "realloc", "realloc of freed block");
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

struct site_total {
	const void *site;
	size_t bytes, blocks;
};

/* At exit: the blocks still live, by allocation site, most bytes first. */
__attribute__((destructor)) static void debug_leak_report(void)
{
	enum { SITES = 1024, TOP = 20 };
	static struct site_total sites[SITES];
	size_t nsites = 0, blocks = 0, bytes = 0, other_blocks = 0;
	char line[512], name[200];

	if (READ_ONCE(debug_mode) <= 0)
		return;
	lock_ranked(&debug_lock, RANK_DEBUG);
	for (size_t i = 0; table && i < table_cap; i++) {
		const struct record *r = &table[i];
		size_t k;

		if (!r->user || r->state != LIVE)
			continue;
		blocks++;
		bytes += r->size;
		for (k = 0; k < nsites && sites[k].site != r->site; k++)
			;
		if (k == nsites) {
			if (nsites == SITES) {
				other_blocks++;
				continue;
			}
			sites[nsites++] = (struct site_total){ r->site, 0, 0 };
		}
		sites[k].bytes += r->size;
		sites[k].blocks++;
	}
	unlock_ranked(&debug_lock, RANK_DEBUG);
	if (!blocks)
		return;
	say(line, "uslab: debug: %zu block%s (%zu bytes) live at exit, by allocation site:\n", blocks,
	    blocks == 1 ? "" : "s", bytes);
	for (size_t shown = 0; shown < TOP && shown < nsites; shown++) {
		size_t best = shown;   /* selection: the next largest to the front */
		for (size_t k = shown + 1; k < nsites; k++)
			if (sites[k].bytes > sites[best].bytes)
				best = k;
		struct site_total t = sites[best];
		sites[best] = sites[shown];
		sites[shown] = t;
		site_name(t.site, name, sizeof(name));
		say(line, "uslab:   %zu bytes in %zu block%s allocated at %s\n", t.bytes, t.blocks,
		    t.blocks == 1 ? "" : "s", name);
	}
	if (nsites > TOP || other_blocks)
		say(line, "uslab:   (and more, from %zu other sites)\n",
		    nsites > TOP ? nsites - TOP : 0);
}
