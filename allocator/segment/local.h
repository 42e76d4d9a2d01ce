/* SPDX-License-Identifier: MIT */
/*
 * local.h - what the files of the segment layer share among themselves
 * (segment.c: segments and runs; decay.c: giving free units back). Nothing
 * outside segment/ includes it.
 */
#ifndef USLAB_SEGMENT_LOCAL_H
#define USLAB_SEGMENT_LOCAL_H

#include "segment.h"

#pragma GCC visibility push(hidden)

/* seg_lock protects the segment list, every segment's unit maps and counts,
 * and the totals below (written under it, peeked at without it). */
extern mutex_t seg_lock;
extern struct segment *seg_list;
extern size_t clean_free_units;    /* free units that hold no memory */
extern size_t dirty_free_units;    /* free units still committed */
extern unsigned long seg_lock_taken;   /* times seg_lock was taken (segment_lock_count) */

/* seg_lock, counted: tests hold the paths that must not take it to that. */
static inline void seg_lock_take(void)
{
	lock_ranked(&seg_lock, RANK_SEG);
	WRITE_ONCE(seg_lock_taken, seg_lock_taken + 1);
}

static inline void seg_unlock(void)
{
	unlock_ranked(&seg_lock, RANK_SEG);
}

bool bit(const uint64_t *map, unsigned i);
unsigned next_bit(const uint64_t *map, unsigned i, bool want);
void units_take(struct segment *seg, unsigned first, unsigned n, bool *zeroed);
void units_give(struct segment *seg, unsigned first, unsigned n, bool dirty);
void purge_fork_child(void);       /* decay.c: a purge the fork left half done */
/* meta.c, for the report (account.c reads them): bytes it has mapped, the
 * pages of its blocks handed out, and a record of each mapping of its own
 * (len 0: free; list and records are only added to, see meta.c) */
extern atomic_long_t meta_mapped;
extern atomic_long_t meta_touched;
struct meta_map {
	void *addr;
	size_t len;
	struct meta_map *next;
};
extern struct meta_map *meta_maps;

#pragma GCC visibility pop

#endif
