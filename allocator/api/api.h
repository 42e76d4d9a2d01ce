/* SPDX-License-Identifier: MIT */
/*
 * api.h - the top layer: the malloc family under uslab_ names (malloc.c),
 * the standard names for LD_PRELOAD (override.c), process life - start-up
 * and fork (process.c), the statistics report (stats.c), and where the big
 * zero arrays of every layer live (layout.c).
 */
#ifndef USLAB_API_H
#define USLAB_API_H

#include "kmalloc.h"

#pragma GCC visibility push(hidden)

void stats_init(void);                 /* stats.c: the signal, if any */
bool uslab_fork_took_locks_(void);     /* process.c: for tests */

#pragma GCC visibility pop

#endif
