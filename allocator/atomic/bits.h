/* SPDX-License-Identifier: MIT */
/*
 * bits.h - state bits in one atomic word, changed together and, where one
 * bit guards another, changed only while the guard reads clear.
 *
 *   atomic_long_t word, used as an unsigned long of flags
 *    63                                     0
 *   +---------------------------------------+
 *   | . . . . | b | . . | a | . . . . . . . |   e.g. a = "on partial list",
 *   +---------------------------------------+        b = "frozen"
 *
 *   Every mask argument is a set of bits (1UL << n | ...), never a bit index.
 *
 * Mirrors the kernel's set_bit / clear_bit / test_and_clear_bit family, widened
 * from one bit to a mask, plus the coupled update the slab and segment state
 * needs: "clear A only while B is clear" as one CAS, so no other thread can set
 * B between the test and the clear (the test and the change are one step).
 *
 * try_ failures: bits_try_clear_unless / bits_try_set_unless return false when
 * a bit of guard was set; then nothing changed.
 *
 * Ordering contract (the kernel's):
 *   bits_set, bits_clear, bits_test, bits_read         relaxed.
 *   bits_fetch_or, bits_fetch_andnot                   fully ordered.
 *   bits_try_clear_unless, bits_try_set_unless         fully ordered on
 *                                                      success; a failure
 *                                                      orders nothing.
 */
#ifndef USLAB_BITS_H
#define USLAB_BITS_H

#include "atomic.h"

static inline unsigned long bits_read(const atomic_long_t *word)
{
	return (unsigned long)atomic_long_read(word);
}

/* true if any bit of mask is set. */
static inline bool bits_test(const atomic_long_t *word, unsigned long mask)
{
	return (bits_read(word) & mask) != 0;
}

static inline void bits_set(atomic_long_t *word, unsigned long mask)
{
	atomic_long_or((long)mask, word);
}

static inline void bits_clear(atomic_long_t *word, unsigned long mask)
{
	atomic_long_andnot((long)mask, word);
}

/* Set mask; returns which of its bits were already set (old & mask). */
static inline unsigned long bits_fetch_or(atomic_long_t *word, unsigned long mask)
{
	return (unsigned long)atomic_long_fetch_or((long)mask, word) & mask;
}

/* Clear mask; returns which of its bits were set before (old & mask). */
static inline unsigned long bits_fetch_andnot(atomic_long_t *word, unsigned long mask)
{
	return (unsigned long)atomic_long_fetch_andnot((long)mask, word) & mask;
}

/*
 * Clear the bits of clr if no bit of guard is set, in one CAS.
 * true: at that instant guard was clear and clr is now clear (bits of clr
 * that were already clear count as success). false: a guard bit was set.
 */
static inline bool bits_try_clear_unless(atomic_long_t *word, unsigned long clr,
					 unsigned long guard)
{
	long old = atomic_long_read(word);

	do {
		if ((unsigned long)old & guard)
			return false;
	} while (!atomic_long_try_cmpxchg(word, &old, (long)((unsigned long)old & ~clr)));
	return true;
}

/*
 * Set the bits of set if no bit of guard is set, in one CAS.
 * true: at that instant guard was clear and set is now set. false: a guard
 * bit was set. With set == guard this is a try-lock bit: only one caller
 * succeeds until the bit is cleared again.
 */
static inline bool bits_try_set_unless(atomic_long_t *word, unsigned long set,
				       unsigned long guard)
{
	long old = atomic_long_read(word);

	do {
		if ((unsigned long)old & guard)
			return false;
	} while (!atomic_long_try_cmpxchg(word, &old, (long)((unsigned long)old | set)));
	return true;
}

#endif /* USLAB_BITS_H */
