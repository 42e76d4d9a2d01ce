/* SPDX-License-Identifier: MIT */
/*
 * meta.c - metadata memory: thread heaps, remote messages, caches, lists.
 * Size-segregated free lists over 64 KiB mapped blocks; never given back.
 */
#include "local.h"

#include <string.h>

static mutex_t meta_lock = MUTEX_INIT;
atomic_long_t meta_mapped;   /* for the report: every mapping made below, less those unmapped */
FORK_LOCK(meta_lock, RANK_META);

#define META_BLOCK   (64ul << 10)
#define META_CLASSES 64            /* 64-byte steps up to 4 KiB */

static void *meta_free_list[META_CLASSES + 1];
static char *meta_bump, *meta_end;

void *meta_alloc(size_t size)
{
	size_t cls = round_up(size, CACHE_LINE) / CACHE_LINE;
	void *p;

	if (cls > META_CLASSES) {
		p = os_map_aligned(round_up(size, os_page_size()), os_page_size());
		if (p)
			atomic_long_add((long)round_up(size, os_page_size()), &meta_mapped);
		return p;   /* fresh mappings read as zero */
	}
	lock_ranked(&meta_lock, RANK_META);
	p = meta_free_list[cls];
	if (p) {
		meta_free_list[cls] = *(void **)p;
	} else {
		if (!meta_bump || meta_bump + cls * CACHE_LINE > meta_end) {
			char *blk = os_map_aligned(META_BLOCK, os_page_size());
			if (!blk) {
				unlock_ranked(&meta_lock, RANK_META);
				return NULL;
			}
			atomic_long_add((long)META_BLOCK, &meta_mapped);
			meta_bump = blk;
			meta_end = blk + META_BLOCK;
		}
		p = meta_bump;
		meta_bump += cls * CACHE_LINE;
	}
	unlock_ranked(&meta_lock, RANK_META);
	memset(p, 0, cls * CACHE_LINE);
	return p;
}

void meta_free(void *p, size_t size)
{
	size_t cls = round_up(size, CACHE_LINE) / CACHE_LINE;

	if (!p)
		return;
	if (cls > META_CLASSES) {
		os_unmap(p, round_up(size, os_page_size()));
		atomic_long_sub((long)round_up(size, os_page_size()), &meta_mapped);
		return;
	}
	lock_ranked(&meta_lock, RANK_META);
	*(void **)p = meta_free_list[cls];
	meta_free_list[cls] = p;
	unlock_ranked(&meta_lock, RANK_META);
}