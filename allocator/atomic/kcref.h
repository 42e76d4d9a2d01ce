/* SPDX-License-Identifier: MIT */
/*
 * kcref.h - "decrement, and if that reaches zero, hold this lock": a count
 * whose last reference must be dropped under a lock (the object is on a list
 * that lookups walk under that lock).
 *
 *   atomic_t count                 spinlock_t lock (separate word)
 *  +---------------------+        +-----------------+
 *  |  count (32 bit)     |        |  ticket lock    |   count 1 -> 0 only
 *  +---------------------+        +-----------------+   while lock is held
 *
 * Mirrors the kernel's atomic_dec_and_lock (lib/dec_and_lock.c) and
 * kref_put_lock. The invariant both sides rely on: the count only ever moves
 * from 1 to 0 with the lock held. So a lookup that finds the object under
 * the lock may kref_get it (count >= 1 there), and the last putter can unlink
 * the object before anyone else can find it.
 *
 *   fast path  atomic_add_unless(count, -1, 1): one CAS, no lock, taken
 *              whenever the count is above 1 (the decrement cannot reach 0).
 *   slow path  count was 1: take the lock, then decrement. Someone may have
 *              found and re-got the object meanwhile, so the decrement may
 *              still not reach 0; then the lock is dropped again.
 *
 * Ordering contract: a decrement on either path is fully ordered (so it is
 * a release of the caller's accesses); the lock is an acquire. When true is
 * returned, everything every other putter did before its put happens before
 * the caller's next access.
 */
#ifndef USLAB_KCREF_H
#define USLAB_KCREF_H

#include "atomic.h"
#include "kref.h"
#include "spinlock.h"

/* Caller holds nothing. The rare part of atomic_dec_and_lock. */
static inline bool atomic_dec_and_lock_slow(atomic_t *cnt, spinlock_t *lock)
{
	spin_lock(lock);
	/* fully ordered: acquire of every earlier put if this reaches 0 */
	if (atomic_dec_and_test(cnt))
		return true;
	spin_unlock(lock);
	return false;
}

/*
 * Drop one count. true: it reached 0 and *lock is now HELD by the caller.
 * false: it did not reach 0 and the lock is not held (it may have been taken
 * and dropped on the way).
 */
static inline bool atomic_dec_and_lock(atomic_t *cnt, spinlock_t *lock)
{
	/* fully ordered CAS: pairs with the decrement that reaches 0 */
	if (atomic_add_unless(cnt, -1, 1))
		return false;
	return atomic_dec_and_lock_slow(cnt, lock);
}

/*
 * kref_put for objects that lookups find under *lock. Returns 1 if this was
 * the last reference: release() was called with *lock held, and release()
 * must drop it (typically: unlink, spin_unlock, then free). Returns 0 with
 * the lock not held otherwise.
 */
static inline int kref_put_lock(struct kref *kref, void (*release)(struct kref *kref),
				spinlock_t *lock)
{
	if (atomic_dec_and_lock(&kref->refcount, lock)) {
		release(kref);
		return 1;
	}
	return 0;
}

#endif /* USLAB_KCREF_H */
