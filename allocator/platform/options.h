/* SPDX-License-Identifier: MIT */
/*
 * options.h - every tunable, defined once. The X-macro expands into the
 * option enum, the defaults, the parser's table and docs/options.md's rows.
 *
 *   X(id, ENV_NAME, type, default, meaning)
 *   type: BOOL (0/1, yes/no, on/off, true/false), INT (decimal, >= 0),
 *         SIZE (bytes, with optional k/m/g suffix), STR (kept as a pointer
 *         into the environment: nothing is copied or allocated),
 *         SIGNAL (a name like USR2 or SIGUSR2, or a number; 0 = none)
 */
#ifndef USLAB_OPTIONS_H
#define USLAB_OPTIONS_H

#include "atomic.h"

#include <stdbool.h>
#include <stddef.h>

#define USLAB_OPTIONS(X)                                                                 \
	X(STATS, "USLAB_STATS", BOOL, 0, "print the statistics table on stderr at exit")     \
	X(STATS_VERBOSE, "USLAB_STATS_VERBOSE", BOOL, 0,                                     \
	  "the statistics table also lists every counter of every cache")                   \
	X(VERBOSE, "USLAB_VERBOSE", BOOL, 0,                                                 \
	  "at start-up, print the version, the double-width CAS in use and every option's "  \
	  "value with where it came from (default or environment) on stderr")               \
	X(STATS_FILE, "USLAB_STATS_FILE", STR, 0, "write the statistics as JSON to this path at exit (%p in it: the process id)") \
	X(STATS_SIGNAL, "USLAB_STATS_SIGNAL", SIGNAL, 0,                                     \
	  "on this signal, write the statistics (JSON to USLAB_STATS_FILE, else the table to stderr)") \
	X(DWCAS, "USLAB_DWCAS", BOOL, 1,                                                     \
	  "0 forces the striped-lock path of the double-width CAS (read by the toolkit)")    \
	X(DECAY_MS, "USLAB_DECAY_MS", INT, 500,                                              \
	  "free units unused this long (ms) are given back to the OS with madvise")          \
	X(DIRTY_MAX, "USLAB_DIRTY_MAX", SIZE, 64 << 20,                                      \
	  "free but still committed memory (units; separately, huge mappings kept for "     \
	  "reuse) above this, or above USLAB_DIRTY_PERCENT of the memory in use if that "   \
	  "is more, is given back at once")                                                  \
	X(DIRTY_PERCENT, "USLAB_DIRTY_PERCENT", INT, 300,                                    \
	  "free but still committed memory may grow to this percentage of the memory in "   \
	  "use, when that is more than USLAB_DIRTY_MAX")                                     \
	X(RESERVE_SEGMENTS, "USLAB_RESERVE_SEGMENTS", INT, 1,                                \
	  "wholly empty 4 MiB segments kept mapped for reuse")                               \
	X(REGION, "USLAB_REGION", SIZE, 1l << 40,                                           \
	  "the most address space the segment region grows to (reserved as it fills, "     \
	  "read-only zeros holding no memory; the 4 MiB segments are placed in it while "   \
	  "it has room, so free tells its blocks by one compare; 0 = none: segments "       \
	  "anywhere, every free of a small block by the slow path)")                         \
	X(CPU_PARTIAL, "USLAB_CPU_PARTIAL", INT, 0,                                          \
	  "frozen slabs a thread may hold per cache (0 = 512 KiB of them, 2 to 32; at "     \
	  "most 4096), twice as many of a cache whose frees by the thread outrun them")     \
	X(HUGE_PAGES, "USLAB_HUGE_PAGES", BOOL, 1,                                           \
	  "ask for transparent huge pages (madvise) inside huge blocks of 4 MiB and more, "  \
	  "except calloc's, and under slabs of objects up to a page once 16 MiB of "          \
	  "segments are mapped: one page fault per 2 MiB written instead of 512; about "      \
	  "1 MiB at each end of a huge block stays in 4 KiB pages (0 = 4 KiB pages "         \
	  "throughout, as glibc)")                                                            \
	X(STARTUP_ARENA, "USLAB_STARTUP_ARENA", BOOL, 1,                                     \
	  "serve a program's first blocks up to 64 KiB (until 256 KiB are cut or 16,384 handed "  \
	  "out) packed in one static region, before any slab (fewer pages touched by "     \
	  "short-lived programs; 0 = slabs from the first block)")                         \
	X(STARTUP_CLASSES, "USLAB_STARTUP_CLASSES", BOOL, 1,                                 \
	  "serve malloc from power-of-two classes until some class needs a second slab "     \
	  "(fewer pages touched by short-lived programs; 0 = the fine classes at once)")    \
	X(DEBUG, "USLAB_DEBUG", BOOL, 0,                                                     \
	  "the debug mode of the malloc family and of the caches created while it is on: "   \
	  "red zones around every block checked when it is freed, freed blocks poisoned and " \
	  "held back in a quarantine (checked when they leave it), every report naming the " \
	  "block's allocation and free sites, a report of the blocks live at exit "          \
	  "(docs/security.md)")                                                              \
	X(DEBUG_QUARANTINE, "USLAB_DEBUG_QUARANTINE", SIZE, 16 << 20,                        \
	  "with USLAB_DEBUG=1: bytes of freed blocks held back from reuse, oldest out first " \
	  "(the malloc family's, and each cache's own)")                                      \
	X(PROF, "USLAB_PROF", BOOL, 0,                                                       \
	  "the heap profiler: sample the malloc family's blocks, one per USLAB_PROF_SAMPLE "  \
	  "bytes allocated on average, record their call stacks, and write a heap profile "   \
	  "that google-pprof and jeprof read, at exit, on USLAB_PROF_SIGNAL and on "          \
	  "uslab_prof_dump() (docs/profiling.md); USLAB_DEBUG=1 takes precedence")          \
	X(PROF_SAMPLE, "USLAB_PROF_SAMPLE", SIZE, 512 << 10,                                 \
	  "with USLAB_PROF=1: the mean number of bytes allocated between two samples, "      \
	  "exponentially distributed (1: every block)")                                      \
	X(PROF_FILE, "USLAB_PROF_FILE", STR, 0,                                              \
	  "with USLAB_PROF=1: where the heap profile is written (%p in it: the process id, " \
	  "%n: the dump's number); unset: uslab.%p.heap in the working directory")          \
	X(PROF_SIGNAL, "USLAB_PROF_SIGNAL", SIGNAL, 0,                                       \
	  "with USLAB_PROF=1: on this signal, write the heap profile")                       \
	X(PROF_TOP, "USLAB_PROF_TOP", INT, 10,                                               \
	  "with USLAB_PROF=1: at exit, print on stderr this many allocation sites with the " \
	  "most bytes allocated, and as many holding the most bytes still live (0: none)")

enum option_id {
#define X(id, env, type, dflt, doc) OPT_##id,
	USLAB_OPTIONS(X)
#undef X
	OPT_COUNT
};

#pragma GCC visibility push(hidden)
extern long option_values[OPT_COUNT];
extern const char *option_strings[OPT_COUNT];

void options_init(void);   /* idempotent; the first call reads the environment */
/* After options_init, from the library constructor: if it warned, set
 * USLAB_WARNED so that child processes do not repeat the warnings. */
void options_mark_warned(void);
/* A warning about entry ("USLAB_X=v"), ignored for why, once per process
 * tree like the parser's (call options_mark_warned after). */
void options_warn_ignored(const char *entry, const char *why);
void options_parse_entry(const char *entry);   /* tests: one "USLAB_X=v" */
void options_reset(void);                      /* tests: back to the defaults */
void options_forget(void);                     /* tests: defaults, and read again */
/* Each option's name, value and whether the environment set it, one line
 * each through out(line, arg): USLAB_VERBOSE's report. */
void options_report(void (*out)(const char *line, void *arg), void *arg);
/* uslab_ctl: name is an option's name without USLAB_, in any case. *old
 * (if old) gets the value in effect; *new_value (if given) becomes it.
 * Returns 0, or -EINVAL (no such option, one that cannot change while the
 * program runs, or a value out of range), changing nothing. */
int options_set(const char *name, long *old, const long *new_value);

/* Read on slow paths; a few may change while the program runs (options_set) */
static inline long option(enum option_id id) { return READ_ONCE(option_values[id]); }
static inline const char *option_str(enum option_id id) { return option_strings[id]; }
#pragma GCC visibility pop

#endif
