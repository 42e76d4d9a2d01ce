/* SPDX-License-Identifier: MIT */
/*
 * layout.c - the library's big zero-initialised arrays, defined here, in
 * this order (compiled with -fno-toplevel-reorder), and linked after every
 * other object of the library but atomic/dwcas.c (allocator/CMakeLists.txt).
 *
 * A short-lived program pays for each page it touches first, a read of a
 * zero page included (docs/malloc.md has the measurements). Defined where they are used, these
 * arrays cut the small variables of the files around them (locks, counters,
 * options, the arena's free lists) apart into pages of their own; here they
 * come last, so all the small variables are packed together right after
 * .data (whose last page the dynamic loader writes anyway), and nothing in
 * .bss asks for page alignment, which would start .bss on a fresh page.
 * dwcas.c is linked after this file: its lock-path stripes (4 KiB, which
 * nobody touches while cmpxchg16b serves) come after these arrays, and its
 * two small variables are placed in .data.
 *
 * Keep the small variables within the page .data ends in: `nm -n` on
 * libuslab.so shows where each lands (docs/malloc.md, "Where the variables
 * live"). Cold arrays that are small but not tiny (the purge's in-flight
 * record) live here too.
 *
 * The order: the segment registry first, so that its entry 0 shares the
 * small variables' page (with the dwcas stripes between, nearly every
 * process touched one page more when free(NULL) read it);
 * then the empty heap, whose first lines every malloc reads before the
 * thread has a heap, close to the registry's entries for high addresses
 * (where libraries and mappings are), so that both tend to share a page
 * table; then the kmalloc caches, and the start-up arena with its granule
 * map; last the cold ones (the purge's in-flight record, the segment
 * region's map of slots given back).
 *
 * Besides, the one datum a lower layer takes from this one at load (in
 * .data, not among the arrays): malloc's divert starts at this layer's
 * hooks, so that the first malloc-family call, from whatever constructor,
 * reads the debug option first (kmalloc.h, debug.c).
 */
#include "api.h"

struct kmalloc_divert kdiv = {
	.small_lim = 0, .mid_lim = 0, .beyond = debug_malloc_call, .free = debug_free_call,
};

uint8_t seg_registry[REG_SEGMENTS];
struct thread_heap empty_heap;
struct kmalloc_statics kmalloc_statics;
uint8_t arena_map[ARENA_SIZE / ARENA_GRAN];
char arena[ARENA_SIZE] __attribute__((aligned(CACHE_LINE)));
struct purge_range purge_inflight[PURGE_BATCH];   /* small, but only purges use it */
uint64_t region_freed_map[REGION_SLOTS_MAX / 64];  /* only a segment given back writes it */
