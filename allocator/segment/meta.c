/* SPDX-License-Identifier: MIT */
/*
 * meta.c - metadata memory: thread heaps, remote messages, caches, lists.
 * Size-segregated free lists over 64 KiB mapped blocks, and a mapping of its
 * own for anything above 4 KiB; blocks are never given back.
 *
 * For the statistics report it keeps what it has mapped (meta_mapped) and
 * what of it is committed: the blocks' pages it has handed out (meta_touched:
 * a block is carved in order, so those are exactly the pages up to its bump
 * pointer), and a record of each mapping of its own (meta_maps), whose
 * touched pages the report asks the kernel for (account.c). Records are
 * carved from the blocks and never freed: a mapping's free clears its
 * record's len, and a new mapping takes a cleared one or pushes a new one
 * with a release store, so that a reader - a signal handler - walks the
 * list without meta_lock.
 */
#include "local.h"

#include <string.h>

static mutex_t meta_lock = MUTEX_INIT;
atomic_long_t meta_mapped;   /* for the report: every mapping made below, less those unmapped */
atomic_long_t meta_touched;  /* pages of the blocks handed out (written under meta_lock) */
struct meta_map *meta_maps;  /* every record ever made, newest first */
FORK_LOCK(meta_lock, RANK_META);

#define META_BLOCK   (64ul << 10)
#define META_CLASSES 64            /* 64-byte steps up to 4 KiB */

static void *meta_free_list[META_CLASSES + 1];
static char *meta_bump, *meta_end;

/* cls lines from the free list or the current block (meta_lock held). */
static void *meta_carve(size_t cls)
{
	void *p = meta_free_list[cls];
	size_t page = os_page_size();

	if (p) {
		meta_free_list[cls] = *(void **)p;
		return p;
	}
	if (!meta_bump || meta_bump + cls * CACHE_LINE > meta_end) {
		char *blk = os_map_aligned(META_BLOCK, page);

		if (!blk)
			return NULL;
		atomic_long_add((long)META_BLOCK, &meta_mapped);
		meta_bump = blk;
		meta_end = blk + META_BLOCK;
	}
	p = meta_bump;
	meta_bump += cls * CACHE_LINE;
	/* the pages [p, bump) reaches past those already handed out (blocks
	 * are page-aligned, so the last one handed out ends at round_up(p)) */
	atomic_long_add((long)(round_up((uintptr_t)meta_bump, page) - round_up((uintptr_t)p, page)),
			&meta_touched);
	return p;
}

/* Record a mapping of its own for the report (meta_lock held). */
static bool meta_map_record(void *p, size_t len)
{
	struct meta_map *m;

	for (m = meta_maps; m; m = m->next)
		if (!m->len)
			break;
	if (!m) {
		if (!(m = meta_carve(1)))
			return false;
		m->next = meta_maps;
		m->len = 0;
		/* release: m's next before m is on the list; pairs with
		 * meta_committed_bytes' acquire of the head */
		smp_store_release(&meta_maps, m);
	}
	WRITE_ONCE(m->addr, p);
	smp_store_release(&m->len, len);   /* pairs with meta_committed_bytes' acquire */
	return true;
}

void *meta_alloc(size_t size)
{
	size_t cls = round_up(size, CACHE_LINE) / CACHE_LINE;
	void *p;

	if (cls > META_CLASSES) {
		size_t len = round_up(size, os_page_size());

		p = os_map_aligned(len, os_page_size());
		if (!p)
			return NULL;
		lock_ranked(&meta_lock, RANK_META);
		bool recorded = meta_map_record(p, len);
		unlock_ranked(&meta_lock, RANK_META);
		if (!recorded) {
			os_unmap(p, len);
			return NULL;
		}
		atomic_long_add((long)len, &meta_mapped);
		return p;   /* fresh mappings read as zero */
	}
	lock_ranked(&meta_lock, RANK_META);
	p = meta_carve(cls);
	unlock_ranked(&meta_lock, RANK_META);
	if (p)
		memset(p, 0, cls * CACHE_LINE);
	return p;
}

void meta_free(void *p, size_t size)
{
	size_t cls = round_up(size, CACHE_LINE) / CACHE_LINE;

	if (!p)
		return;
	if (cls > META_CLASSES) {
		size_t len = round_up(size, os_page_size());

		lock_ranked(&meta_lock, RANK_META);
		for (struct meta_map *m = meta_maps; m; m = m->next)
			if (m->len && m->addr == p)
				WRITE_ONCE(m->len, 0);   /* before the unmap: readers skip it */
		unlock_ranked(&meta_lock, RANK_META);
		os_unmap(p, len);
		atomic_long_sub((long)len, &meta_mapped);
		return;
	}
	lock_ranked(&meta_lock, RANK_META);
	*(void **)p = meta_free_list[cls];
	meta_free_list[cls] = p;
	unlock_ranked(&meta_lock, RANK_META);
}
