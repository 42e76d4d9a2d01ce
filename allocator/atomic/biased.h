/* SPDX-License-Identifier: MIT */
/*
 * biased.h - a use count and a "being released" flag in one 32-bit word,
 * with the rule that the flag may only be set while the count is zero.
 *
 *   struct biased (one atomic_t)
 *    31  30                                   0
 *   +---+--------------------------------------+
 *   | F |            count (31 bits)           |
 *   +---+--------------------------------------+
 *   F = BIASED_FLAG = 1u << 31: the word is biased by INT_MIN, so as an int a
 *   flagged word is negative and an unflagged word is its own count.
 *
 *   Invariant: F set  =>  count == 0.   (valid words: 0..INT_MAX, INT_MIN)
 *
 * The pattern is the kernel's "nmi_running" / "count with a bias" idiom, used
 * by uslab for segments: users take a use with biased_try_get (fails once the
 * segment is being released); the releaser wins only if it finds no users,
 * by one CAS from 0 to F, and from then on no new user can get in.
 *
 * Every increment must respect the invariant, so there is no plain "inc":
 *   biased_try_get      increments only if F is clear (a CAS loop).
 *   biased_inc_return   raw increment, ONLY for a caller that already holds
 *                       a use (count >= 1 keeps F clear) or that is the only
 *                       thread that ever sets F. Anyone else: biased_try_get.
 *
 * try_ failures change nothing: biased_try_get fails when F is set or the
 * count is saturated at INT_MAX; biased_try_set_flag fails when the count is
 * non-zero or F is already set.
 *
 * Ordering contract:
 *   biased_try_get      acquire on success: pairs with biased_clear_flag's
 *                       release (a user sees the re-initialised object).
 *   biased_dec_return   release: pairs with biased_try_set_flag's acquire (the
 *                       releaser sees everything the last users did).
 *   biased_try_set_flag acquire on success.
 *   biased_clear_flag   release.
 *   biased_inc_return, reads   relaxed.
 *   Failed try_ operations order nothing.
 */
#ifndef USLAB_BIASED_H
#define USLAB_BIASED_H

#include <limits.h>

#include "atomic.h"

#define BIASED_FLAG       0x80000000u
#define BIASED_COUNT_MASK 0x7fffffffu

struct biased {
	atomic_t xword;        /* read only through the helpers below */
};

#define BIASED_INIT { .xword = ATOMIC_INIT(0) }

/* Not for a word other threads can already see. */
static inline void biased_init(struct biased *b)
{
	atomic_set(&b->xword, 0);
}

/* One relaxed load of the whole word: split it with the two helpers below. */
static inline unsigned int biased_read(const struct biased *b)
{
	return (unsigned int)atomic_read(&b->xword);
}

static inline unsigned int biased_word_count(unsigned int w) { return w & BIASED_COUNT_MASK; }
static inline bool biased_word_flag(unsigned int w) { return (w & BIASED_FLAG) != 0; }

static inline unsigned int biased_count(const struct biased *b)
{
	return biased_word_count(biased_read(b));
}

static inline bool biased_flag(const struct biased *b)
{
	return biased_word_flag(biased_read(b));
}

/* true: a use was taken. false: F is set (being released) or count == INT_MAX. */
static inline bool biased_try_get(struct biased *b)
{
	int c = atomic_read(&b->xword);

	do {
		if (c < 0 || c == INT_MAX)     /* F set, or one more would reach F */
			return false;
		/* acquire: pairs with the release in biased_clear_flag */
	} while (!atomic_try_cmpxchg_acquire(&b->xword, &c, c + 1));
	return true;
}

/* Raw increment: see the header comment for who may call it. New count. */
static inline int biased_inc_return(struct biased *b)
{
	return atomic_inc_return_relaxed(&b->xword);
}

/*
 * Drop a use. Returns the new count; a negative value (or INT_MAX) means
 * there was no use to drop, and the word is now corrupt.
 */
static inline int biased_dec_return(struct biased *b)
{
	/* release: pairs with the acquire in biased_try_set_flag */
	return atomic_dec_return_release(&b->xword);
}

/* true: F was clear with count 0 and is now set. false: nothing changed. */
static inline bool biased_try_set_flag(struct biased *b)
{
	int old = 0;

	/* acquire: pairs with the release of the last biased_dec_return */
	return atomic_try_cmpxchg_acquire(&b->xword, &old, INT_MIN);
}

/* Caller set F with biased_try_set_flag; users may get in again after this. */
static inline void biased_clear_flag(struct biased *b)
{
	/* release: pairs with the acquire in biased_try_get */
	(void)atomic_fetch_andnot_release(INT_MIN, &b->xword);
}

#endif /* USLAB_BIASED_H */
