/* SPDX-License-Identifier: MIT */
/*
 * api.h - the top layer: the malloc family under uslab_ names (malloc.c),
 * the standard names for LD_PRELOAD (override.c), process life - start-up
 * and fork (process.c), the statistics report (stats.c), the debug mode
 * (debug.c), the heap profiler (prof.c), and where the big zero arrays of
 * every layer live (layout.c).
 */
#ifndef USLAB_API_H
#define USLAB_API_H

#include "kmalloc.h"

#pragma GCC visibility push(hidden)

void stats_init(void);                 /* stats.c: the signal, if any */
/* stats.c: bytes with a binary unit and one decimal ("512 B", "3.5 MiB"),
 * from integers only (a signal handler may format them) */
#define HUMAN_LEN 48
const char *human(char buf[HUMAN_LEN], size_t n);

/* debug.c: USLAB_DEBUG=1. debug_mode is -1 until the option is read
 * (debug_resolve: by a constructor, before the program's threads, or by an
 * earlier malloc-family call), then 0 or 1 (a plain load: after the
 * constructor nothing writes it). malloc and free do not test it: kmalloc
 * and kfree are diverted to debug_malloc_call/debug_free_call while it is
 * -1 or 1 (kmalloc.h: kdiv), which costs their fast paths nothing. The
 * other entry points test it with one compare and a branch.
 * site: the caller's return address. */
extern signed char debug_mode;
bool debug_resolve(void);
static inline bool debug_active(void)
{
	return unlikely(debug_mode != 0) && debug_resolve();
}
void *debug_malloc_call(size_t size, const void *site);   /* kmalloc's hook */
void debug_free_call(void *p, const char *call, const void *site);   /* kfree's */
void *debug_alloc(size_t size, size_t align, bool zero, const char *call, const void *site);
void debug_free(void *p, size_t size, const char *call, const void *site);   /* size: SIZE_MAX, or free_sized's */
void *debug_realloc(void *p, size_t size, const void *site);
size_t debug_usable_size(void *p);
#define DEBUG_SITE __builtin_return_address(0)
bool uslab_fork_took_locks_(void);     /* process.c: for tests */

/* prof.c: USLAB_PROF=1, the heap profiler. prof_on is written once, by a
 * constructor before the program's threads, after the debug mode's choice
 * (which wins); plain loads. malloc and free do not test it: kmalloc's slow
 * paths call the profiler's hooks (ksampler for the small classes,
 * kmalloc_beyond's for large and huge blocks), a sampled small block, which
 * no kmalloc block starts at, reaches it through kfree_direct's stray hook,
 * and a large or huge one through free_nonsmall's (kmalloc.h). The other
 * entry points test it with one compare: calloc's large blocks, memalign's
 * large or over-aligned ones (prof_aligned_due) and realloc's growth in
 * place are counted with prof_sample_due (true: make the block with
 * prof_alloc, or record the growth with prof_grown); realloc and
 * malloc_usable_size of a sampled block (prof_owns) go to prof.c. */
extern bool prof_on;
static inline bool prof_active(void)
{
	return unlikely(prof_on);
}
bool prof_sample_due(size_t n);
void *prof_alloc(size_t n, size_t align, bool zero, const void *site);
bool prof_owns(const void *p);
void *prof_realloc(void *p, size_t n, const void *site);
void prof_grown(size_t growth, const void *site);
size_t prof_usable_size(const void *p);

#pragma GCC visibility pop

#endif
