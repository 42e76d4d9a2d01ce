/* SPDX-License-Identifier: MIT */
/*
 * combined.h - two counters in one 64-bit word that always move together:
 * units in flight and units completed.
 *
 *   struct combined (one atomic_long_t)
 *    63                    32 31                     0
 *   +------------------------+------------------------+
 *   |  completed (u32, wraps)|  inflight (u32)        |
 *   +------------------------+------------------------+
 *
 *   start   adds 1                    (inflight + 1)
 *   finish  adds (1 << 32) - 1        (inflight - 1, completed + 1, in ONE add:
 *                                      inflight + 0xffffffff is inflight - 1
 *                                      with a carry into completed; inflight
 *                                      >= 1 guarantees that carry)
 *
 * Because both halves live in one word, a single load gives a consistent pair:
 * at every instant inflight + completed == the number of starts so far
 * (mod 2^32). Two separate counters read one after the other could show a
 * unit as neither, or as both.
 *
 * Mirrors the kernel's habit of packing related counters into one atomic
 * (qrwlock's reader count above its writer byte): one RMW keeps them
 * coupled, one load reads them coupled.
 *
 * Rules: each finish matches an earlier start by the same actor (so inflight
 * never underflows); at most 2^32 - 1 units are in flight at once; completed
 * counts modulo 2^32.
 *
 * Ordering contract:
 *   combined_start, combined_finish   release: whatever the caller did before
 *                                     starting (finishing) a unit is visible to
 *                                     a reader that counts it started
 *                                     (completed).
 *   combined_read                     acquire: pairs with both.
 */
#ifndef USLAB_COMBINED_H
#define USLAB_COMBINED_H

#include "atomic.h"

_Static_assert(sizeof(long) == 8, "combined counters need a 64-bit long");

#define COMBINED_INFLIGHT_ONE  1L
#define COMBINED_FINISH_DELTA  ((long)((1UL << 32) - 1))   /* -1 low, +1 high */

struct combined {
	atomic_long_t xword;   /* read only through combined_read */
};

#define COMBINED_INIT { .xword = ATOMIC_INIT(0) }

/* Not for a word other threads can already see. */
static inline void combined_init(struct combined *c)
{
	atomic_long_set(&c->xword, 0);
}

static inline void combined_start(struct combined *c)
{
	/* release: pairs with the acquire in combined_read */
	(void)atomic_long_fetch_add_release(COMBINED_INFLIGHT_ONE, &c->xword);
}

static inline void combined_finish(struct combined *c)
{
	/* release: pairs with the acquire in combined_read */
	(void)atomic_long_fetch_add_release(COMBINED_FINISH_DELTA, &c->xword);
}

/* Both counters from one load: inflight + completed == starts (mod 2^32). */
static inline void combined_read(const struct combined *c, uint32_t *inflight,
				 uint32_t *completed)
{
	/* acquire: pairs with the release in combined_start / combined_finish */
	unsigned long w = (unsigned long)atomic_long_read_acquire(&c->xword);

	*inflight = (uint32_t)w;
	*completed = (uint32_t)(w >> 32);
}

#endif /* USLAB_COMBINED_H */
