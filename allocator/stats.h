/* SPDX-License-Identifier: MIT */
/*
 * stats.h - the statistics, defined once. The X-macro expands into the
 * counter enum, the report's column names and the JSON keys.
 *
 * Slow-path events are counted with a relaxed atomic add on the cache's
 * counters. The fast paths count nothing per operation except where the
 * count is needed anyway (an owner-local free bumps slab->local_count, which
 * the slow path also uses); fast allocations and cache-API fast frees are
 * derived: the slow path notes how many objects it put on a cpu freelist and
 * folds "supplied + fast frees - left over" into the cache at each refill.
 */
#ifndef USLAB_STATS_H
#define USLAB_STATS_H

#define USLAB_CACHE_STATS(X)                                                            \
	X(ALLOC_FAST, "alloc_fast", "allocations from the thread's private freelist")      \
	X(ALLOC_SLOW, "alloc_slow", "allocations through the slow path")                   \
	X(FREE_FAST, "free_fast", "frees onto the thread's private list (cache API: active "  \
	  "slab; malloc: objects of slabs the thread does not own)")                         \
	X(FREE_LOCAL, "free_local", "frees into a slab the thread froze (no atomic)")      \
	X(FREE_REMOTE, "free_remote", "frees by dwcas into a slab of another thread/none") \
	X(FOREIGN_FLUSHED, "foreign_flushed", "cached frees given back to their slabs (dwcas)") \
	X(REFILL_LOCAL, "refill_local", "refills from a slab's owner-local list")           \
	X(REFILL_REMOTE, "refill_remote", "refills taking the active slab's remote frees") \
	X(REFILL_CPU_PARTIAL, "refill_cpu_partial", "refills from the cpu-partial list")   \
	X(REFILL_PARTIAL, "refill_partial", "slabs taken from the cache's partial list")   \
	X(NEW_SLAB, "new_slab", "slabs created")                                           \
	X(SLAB_FREED, "slab_freed", "empty slabs given back to their segment")             \
	X(CPU_PARTIAL_PUT, "cpu_partial_put", "full slabs frozen by a remote free")         \
	X(CPU_PARTIAL_DRAIN, "cpu_partial_drain", "cpu-partial lists drained")             \
	X(DEACTIVATE_FULL, "deactivate_full", "slabs given up with no free object")        \
	X(DEACTIVATE_PARTIAL, "deactivate_partial", "slabs given up onto the partial list") \
	X(DEACTIVATE_EMPTY, "deactivate_empty", "slabs given up with every object free")   \
	X(DWCAS_RETRY, "dwcas_retry", "double-width CAS attempts that failed and retried")

enum cache_stat {
#define X(id, name, doc) STAT_##id,
	USLAB_CACHE_STATS(X)
#undef X
	NR_CACHE_STATS
};

#endif
