/* SPDX-License-Identifier: MIT */
/*
 * arena.c - the start-up arena: a short-lived program's first blocks, packed
 * densely in one static region instead of spread over a slab per class.
 *
 * Why. A program that runs for a few milliseconds (md5sum, sort on a small
 * file, each command of a shell pipeline) allocates a few hundred blocks of
 * a dozen sizes. In slabs, every size costs the first page of its own slab,
 * and the first block of all costs a thread heap, a segment (three system
 * calls), its header page and a page of the segment registry: some 15 first
 * touches of pages more than glibc's dense heap, and first touches are what
 * a short program's time goes to (docs/malloc.md). Until the arena is used up, malloc's slow path serves
 * requests of classes up to ARENA_BLOCK_MAX (64 KiB) here instead: blocks
 * of the class size cut one after another from ARENA_SIZE bytes of .bss
 * (zero pages; only what is cut is ever touched). A freed
 * block goes on a free list of its code, from which the next request of
 * that code - or of one of the three below it, if the block is at most
 * twice their size - takes it; the last block cut is uncut instead, so a
 * temporary block costs nothing. The arena ends, for good, at the first
 * request of its sizes it cannot serve, after ARENA_ALLOCS_MAX blocks (a program
 * cycling a few blocks would otherwise stay on the slow path), or at the
 * first request of a second thread; from then on
 * requests go to the classes, and blocks still in the arena are freed into
 * its map (never to be reused), and every page of it that holds no live
 * block any more goes back to the system (return_idle_locked): a program
 * that filled the arena at start-up and freed most of it does not keep
 * 256 KiB for the rest of its life.
 *
 * Blocks start on 16-byte granules; arena_map holds a byte per granule: 0,
 * or for a block's first granule its code, with ARENA_LIVE while the block
 * is allocated. So free() tells a block start from an interior pointer and
 * a live block from a freed one exactly, as it does for slabs. An uncut
 * block keeps its code too (below arena_stale, past arena_cut), so a second
 * free of it is a double free as well; cutting clears those codes again.
 *
 * Everything is under arena_lock (a leaf lock; elided while the process has
 * one thread, see arena_lock_take; after that only free, realloc and
 * malloc_usable_size of the blocks it holds take it): the arena is only on
 * slow paths. The fast paths never see it: a malloc reaches it only when its
 * class's cpu freelist is empty (while the arena lasts, classes get slabs
 * only through aligned requests and the cache API), and the free fast
 * path's region test fails for a .bss address.
 */
#include "local.h"
#include "options.h"

#include <string.h>

#define ARENA_ALLOCS_MAX 16384
#define ARENA_REUSE_UP   3      /* a freed block serves up to 3 codes below it */
#define ARENA_LIVE       0x80u
#define ARENA_BLOCK_MAX  (64u << 10)   /* its largest class: a quarter of it */
#define ARENA_PAGE        4096u

/* arena[] and arena_map[] are in layout.c, with the other big arrays. A
 * block's code is its class + 1 (0: no block starts at the granule). */
static void *arena_free_list[NR_CLASSES + 1];   /* by block code */
static uint32_t arena_cut;          /* bytes cut so far: blocks are below */
static uint32_t arena_stale;        /* past arena_cut, below it: codes of uncut blocks */
static uint32_t arena_allocs;       /* blocks handed out, reuse included */
static size_t arena_live;           /* bytes in live blocks */
static uintptr_t arena_thread;      /* thread_self() of the one thread it serves */
static uint64_t arena_gone;         /* bit i: the arena's i-th whole page went back */
static uint32_t arena_returned;     /* bytes of [0, arena_cut) in those pages */
static mutex_t arena_lock = MUTEX_INIT;
FORK_LOCK(arena_lock, RANK_ARENA);
bool kmalloc_arena_on = true;       /* read without the lock: it only goes off */

_Static_assert(NR_CLASSES < ARENA_LIVE, "codes fit beside the live bit");

static uint32_t code_size(unsigned code)
{
	return kmalloc_class_size[code - 1];
}

bool arena_owns(const void *p)
{
	return (uintptr_t)p - (uintptr_t)arena < ARENA_SIZE;
}

/* arena_lock, elided while the process has one thread: glibc's
 * __libc_single_threaded goes false, for good, before a second thread
 * starts, and while it is true no other thread can be in here (nor at
 * fork: api/process.c takes no lock then either). Returns whether it is held. */
static bool arena_lock_take(void)
{
	if (process_single_threaded())
		return false;
	lock_ranked(&arena_lock, RANK_ARENA);
	return true;
}

static void arena_lock_drop(bool held)
{
	if (held)
		unlock_ranked(&arena_lock, RANK_ARENA);
}

/* Bytes a block of the given code is cut to. */
static uint32_t code_take(unsigned code)
{
	return (code_size(code) + ARENA_GRAN - 1) & ~(ARENA_GRAN - 1);
}

/* arena_lock held: a freed block for a request of code, taken off a free
 * list: its own, else one of the next ARENA_REUSE_UP codes whose blocks are
 * at most twice the size (their usable size is theirs).
 * *bcode is the block's code; NULL if none. */
static void *reuse_locked(unsigned code, unsigned *bcode)
{
	unsigned last = code + ARENA_REUSE_UP;

	if (last > NR_CLASSES)   /* codes 1..NR_CLASSES */
		last = NR_CLASSES;
	for (unsigned c = code; c <= last && code_size(c) <= 2 * code_size(code); c++) {
		void *p = arena_free_list[c];

		if (p) {
			arena_free_list[c] = *(void **)p;
			*bcode = c;
			return p;
		}
	}
	return NULL;
}

/*
 * arena_lock held: whether no live block has a byte in [off, end), offsets
 * below arena_cut. The blocks cut tile [0, arena_cut), one after another,
 * each with its code at its first granule (a reused block keeps its own),
 * so the block that holds off starts at the last code at or below it.
 */
static bool span_idle_locked(uint32_t off, uint32_t end)
{
	uint32_t g = off / ARENA_GRAN;

	while (g && !arena_map[g])
		g--;
	for (uint32_t at = g * ARENA_GRAN; at < end && at < arena_cut;) {
		uint8_t m = arena_map[at / ARENA_GRAN];

		if (m & ARENA_LIVE)
			return false;
		at += m ? code_take(m) : ARENA_GRAN;
	}
	return true;
}

/*
 * arena_lock held, the arena ended: give back every whole page of the
 * arena that meets [lo, hi) and holds no live block (its freed blocks are
 * never handed out again, and os_decommit leaves the range mapped, reading
 * zero). The map keeps every block's code, so frees still tell a block
 * from a double free. The part pages at the arena's two ends stay.
 */
static void return_idle_locked(uint32_t lo, uint32_t hi)
{
	uint32_t first = (uint32_t)(round_up((uintptr_t)arena, ARENA_PAGE) - (uintptr_t)arena);
	uint32_t off = lo <= first ? first : first + (lo - first) / ARENA_PAGE * ARENA_PAGE;

	for (; off < hi && off < arena_cut && off + ARENA_PAGE <= ARENA_SIZE; off += ARENA_PAGE) {
		unsigned i = (off - first) / ARENA_PAGE;
		uint32_t end = off + ARENA_PAGE;

		if (arena_gone >> i & 1 || !span_idle_locked(off, end))
			continue;
		os_decommit(arena + off, ARENA_PAGE);
		arena_gone |= 1ull << i;
		WRITE_ONCE(arena_returned, arena_returned + (end < arena_cut ? end : arena_cut) - off);
	}
}

/* arena_lock held (or elided). Nothing is cut or reused from then on, so
 * the pages that hold no live block go back now, and the others as the
 * frees of their last live blocks leave them idle (arena_free). */
static void arena_end_locked(void)
{
	WRITE_ONCE(kmalloc_arena_on, false);
	return_idle_locked(0, arena_cut);
}

/* A block of the given code (or a freed one a little larger), or NULL once
 * the arena has ended. */
static void *arena_take(unsigned code)
{
	unsigned bcode = code;
	void *p = NULL;

	options_init();
	bool held = arena_lock_take();
	if (!kmalloc_arena_on)
		goto out;
	/* Serves one thread: it ends at the first request of another. The
	 * blocks of two threads packed side by side would share cache lines,
	 * each thread's writes evicting the other's (false sharing), which a
	 * slab per thread avoids - cache_thrash at 2 threads ran 0.15 -> 0.86 s.
	 * (Not "once the process has two threads": a sanitizer's runtime
	 * thread, or a thread that never allocates, leaves it serving.) */
	uintptr_t me = thread_self();
	if (!arena_thread)
		arena_thread = me;
	if (me != arena_thread || !option(OPT_STARTUP_ARENA)) {
		arena_end_locked();
		goto out;
	}
	p = reuse_locked(code, &bcode);
	if (!p) {
		uint32_t take = code_take(code);

		if (take > ARENA_SIZE - arena_cut) {
			arena_end_locked();
			goto out;
		}
		p = arena + arena_cut;
		if (arena_cut < arena_stale) {   /* uncut blocks' codes inside it go */
			uint32_t end = arena_cut + take;

			if (end > arena_stale)
				end = arena_stale;
			memset(&arena_map[arena_cut / ARENA_GRAN], 0,
			       (end - arena_cut) / ARENA_GRAN);
		}
		WRITE_ONCE(arena_cut, arena_cut + take);
	}
	arena_map[((char *)p - arena) / ARENA_GRAN] = (uint8_t)(bcode | ARENA_LIVE);
	WRITE_ONCE(arena_live, arena_live + code_size(bcode));
	if (++arena_allocs >= ARENA_ALLOCS_MAX)
		arena_end_locked();
out:
	arena_lock_drop(held);
	return p;
}

/* A block of small class cls, or NULL once the arena has ended or for a
 * class above ARENA_BLOCK_MAX (the caller then uses the class). */
void *arena_alloc(unsigned cls)
{
	if (kmalloc_class_size[cls] > ARENA_BLOCK_MAX)
		return NULL;
	return arena_take(cls + 1);
}

/* arena_lock held: p's block code, after checking that p is a block's start
 * and that the block is allocated; aborts with call's message otherwise (a
 * freed block: "double free" when freeing it again, else "invalid
 * pointer"). */
static unsigned arena_block(const void *p, const char *call, bool freeing, bool held)
{
	uintptr_t off = (uintptr_t)p - (uintptr_t)arena;
	uint8_t m = off % ARENA_GRAN || (off >= arena_cut && off >= arena_stale) ? 0 :
		    arena_map[off / ARENA_GRAN];

	if (!m) {
		arena_lock_drop(held);
		free_invalid(p, call);
	}
	if (!(m & ARENA_LIVE)) {
		arena_lock_drop(held);
		if (!freeing)
			free_invalid(p, call);
		uslab_fatal(call, p, "double free");
	}
	return m & ~ARENA_LIVE;
}

void arena_free(void *p, const char *call)
{
	bool held = arena_lock_take();
	unsigned code = arena_block(p, call, true, held);
	uint32_t off = (uint32_t)((char *)p - arena);

	WRITE_ONCE(arena_live, arena_live - code_size(code));
	arena_map[off / ARENA_GRAN] = (uint8_t)code;   /* free; its code stays, for a second free to find */
	if (!kmalloc_arena_on) {
		/* never handed out again: the pages it leaves without a live
		 * block go back */
		return_idle_locked(off, off + code_take(code));
	} else if (off + code_take(code) == arena_cut) {
		/* the last block cut: uncut it (a temporary block costs nothing) */
		if (arena_stale < arena_cut)
			arena_stale = arena_cut;
		WRITE_ONCE(arena_cut, arena_cut - code_take(code));
	} else {
		*(void **)p = arena_free_list[code];
		arena_free_list[code] = p;
	}
	arena_lock_drop(held);
}

size_t arena_usable_size(const void *p, const char *call)
{
	bool held = arena_lock_take();
	unsigned code = arena_block(p, call, false, held);
	arena_lock_drop(held);
	return code_size(code);
}

/* Bytes in live blocks, and bytes the arena has touched (cut): read without
 * the lock (a statistics signal may ask), so their writers store them whole
 * (WRITE_ONCE) under it. */
size_t arena_live_bytes(void)
{
	return READ_ONCE(arena_live);
}

size_t arena_cut_bytes(void)
{
	return READ_ONCE(arena_cut);
}

/* What of that it still holds: the bytes cut, less those in pages an ended
 * arena has given back. */
size_t arena_held_bytes(void)
{
	return READ_ONCE(arena_cut) - READ_ONCE(arena_returned);
}

