/* SPDX-License-Identifier: MIT */
/*
 * lockref.h - a spinlock and a reference count packed in one 64-bit word, so
 * that the count can change by one CAS while nobody holds the lock, and under
 * the lock when somebody does.
 *
 *   struct lockref (8 bytes, 8-aligned; the u64 view is lock_count)
 *
 *   byte 0        2        4                 8     (little-endian; on a
 *       +--------+--------+-----------------+      big-endian CPU owner and
 *       | owner  |  next  |      count      |      next swap, see spinlock.h)
 *       +--------+--------+-----------------+
 *       \__ spinlock_t __/ \__ int32_t ____/
 *
 *   as a little-endian u64:   63         32 31     16 15      0
 *                            +-------------+---------+---------+
 *                            |    count    |  next   |  owner  |
 *                            +-------------+---------+---------+
 *
 *   count >= 0      live, that many references
 *   count < 0       dead (lockref_mark_dead sets LOCKREF_DEAD = -128)
 *   owner != next   the lock is held (spinlock.h's ticket encoding)
 *
 * Mirrors the kernel's include/linux/lockref.h and lib/lockref.c. The lock is
 * at offset 0 so that the ticket lock's own atomics and the whole-word CAS
 * start at the same address (ThreadSanitizer keys synchronisation by address).
 * Mixing 32-bit lock atomics with a 64-bit CAS on the same bytes is outside
 * the C11 model; like the kernel, this relies on x86-64 and arm64 keeping
 * such overlapping atomics coherent.
 *
 * Lockless updates: read the word; while its lock half reads unlocked, CAS the
 * whole word with only the count changed. A CAS cannot succeed while anyone
 * holds the lock, because taking the lock changes the lock half the CAS
 * compares. After LOCKREF_CMPXCHG_RETRIES failed CASes, or as soon as the
 * lock is seen held, the operation takes the lock instead (except
 * lockref_put_return, which then reports -1 and leaves the choice to the
 * caller). Under the lock the count is written with single 32-bit relaxed
 * stores, never an RMW: no lockless CAS can succeed meanwhile.
 *
 * Ordering contract:
 *   gets (lockref_get, _get_not_zero, _get_not_dead)   relaxed when lockless:
 *       the caller already has a reason the object is live (a reference, the
 *       lock, a lookup structure); nothing needs publishing.
 *   puts (lockref_put_return, _put_or_lock)            release: the putter's
 *       accesses happen before whoever sees the count drop. The lockless put
 *       that reaches 0 is also an acquire; the slow path's lock is one.
 *   lockref_lock / lockref_unlock                      acquire / release.
 */
#ifndef USLAB_LOCKREF_H
#define USLAB_LOCKREF_H

#include "atomic.h"
#include "spinlock.h"

#define LOCKREF_CMPXCHG_RETRIES 100
#define LOCKREF_DEAD            (-128)

struct lockref {
	union {
		_Alignas(8) uint64_t lock_count;      /* the whole word, for the CAS */
		struct {
			spinlock_t lock;
			int32_t count;
		};
	};
};

_Static_assert(sizeof(spinlock_t) == 4, "lockref needs a 32-bit spinlock");
_Static_assert(sizeof(struct lockref) == 8, "lockref is one 64-bit word");
_Static_assert(_Alignof(struct lockref) == 8, "lockref's CAS needs 8-byte alignment");
_Static_assert(offsetof(struct lockref, lock) == 0, "lock half at offset 0");
_Static_assert(offsetof(struct lockref, count) == 4, "count half at offset 4");

#define LOCKREF_INIT(n) { .lock = SPINLOCK_INIT, .count = (n) }

/* Not for an object other threads can already see. */
static inline void lockref_init(struct lockref *lr, int32_t count)
{
	struct lockref v = LOCKREF_INIT(count);

	__atomic_store_n(&lr->lock_count, v.lock_count, __ATOMIC_RELAXED);
}

static inline void lockref_lock(struct lockref *lr)   { spin_lock(&lr->lock); }
static inline void lockref_unlock(struct lockref *lr) { spin_unlock(&lr->lock); }

/* A snapshot of the count: exact only while the caller holds the lock. */
static inline int32_t lockref_read_count(const struct lockref *lr)
{
	return READ_ONCE(lr->count);
}

/* Caller holds the lock. */
static inline void __lockref_add(struct lockref *lr, int32_t delta)
{
	WRITE_ONCE(lr->count, READ_ONCE(lr->count) + delta);
}

/* Caller holds the lock. */
static inline bool __lockref_is_dead(const struct lockref *lr)
{
	return READ_ONCE(lr->count) < 0;
}

/*
 * Caller holds the lock. From now on lockref_get_not_dead fails and
 * lockref_get_not_zero fails; plain lockref_get must no longer be used.
 */
static inline void lockref_mark_dead(struct lockref *lr)
{
	WRITE_ONCE(lr->count, LOCKREF_DEAD);
}

/* ---- the lockless attempt --------------------------------------------- */

enum lockref_cas {
	LOCKREF_CAS_DONE,       /* the count changed by delta, lock never taken */
	LOCKREF_CAS_REFUSED,    /* seen unlocked with count < min: no change */
	LOCKREF_CAS_LOCKED,     /* seen locked, or out of retries: no change */
};

static inline bool lockref_word_unlocked(const struct lockref *snap)
{
	return snap->lock.owner == snap->lock.next;
}

/*
 * Add delta to the count with one CAS on the whole word if the lock half reads
 * unlocked and the count is at least min. *newcount gets the result on DONE.
 * release: the CAS is a release (an acquire too if it brings the count to 0).
 */
static inline enum lockref_cas __lockref_cas_add(struct lockref *lr, int32_t delta,
						 int32_t min, bool release, int32_t *newcount)
{
	struct lockref old, upd;
	int retry = LOCKREF_CMPXCHG_RETRIES;
	bool ok;

	old.lock_count = __atomic_load_n(&lr->lock_count, __ATOMIC_RELAXED);
	while (lockref_word_unlocked(&old)) {
		if (old.count < min)
			return LOCKREF_CAS_REFUSED;
		upd = old;
		upd.count += delta;
		if (!release)
			ok = __atomic_compare_exchange_n(&lr->lock_count, &old.lock_count,
							 upd.lock_count, false,
							 __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		else if (upd.count != 0)
			/* release: pairs with the acquire of the put that reaches 0 */
			ok = __atomic_compare_exchange_n(&lr->lock_count, &old.lock_count,
							 upd.lock_count, false,
							 __ATOMIC_RELEASE, __ATOMIC_RELAXED);
		else
			/* acq_rel: the last put acquires every earlier release put */
			ok = __atomic_compare_exchange_n(&lr->lock_count, &old.lock_count,
							 upd.lock_count, false,
							 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		if (ok) {
			*newcount = upd.count;
			return LOCKREF_CAS_DONE;
		}
		if (--retry == 0)
			break;
	}
	return LOCKREF_CAS_LOCKED;
}

/* The count read right after taking the lock: sees every earlier put. */
static inline int32_t __lockref_count_after_lock(struct lockref *lr)
{
	struct lockref v;

	/* acquire: pairs with the release CAS of lockless puts (same word) */
	v.lock_count = __atomic_load_n(&lr->lock_count, __ATOMIC_ACQUIRE);
	return v.count;
}

/* ---- the verbs ---------------------------------------------------------- */

/* Take a reference; the caller must know the lockref is not dead. */
static inline void lockref_get(struct lockref *lr)
{
	int32_t n;

	if (__lockref_cas_add(lr, 1, INT32_MIN, false, &n) == LOCKREF_CAS_DONE)
		return;
	lockref_lock(lr);
	__lockref_add(lr, 1);
	lockref_unlock(lr);
}

/* Take a reference if the count is at least min; true if one was taken.
 * Lockless while unlocked, else under the lock (the two get_ below). */
static inline bool __lockref_get_if_at_least(struct lockref *lr, int32_t min)
{
	int32_t n;
	bool ok = false;

	switch (__lockref_cas_add(lr, 1, min, false, &n)) {
	case LOCKREF_CAS_DONE:
		return true;
	case LOCKREF_CAS_REFUSED:
		return false;
	case LOCKREF_CAS_LOCKED:
		break;
	}
	lockref_lock(lr);
	if (lockref_read_count(lr) >= min) {
		__lockref_add(lr, 1);
		ok = true;
	}
	lockref_unlock(lr);
	return ok;
}

/* true: a reference was taken. false: the count was <= 0 (zero or dead). */
static inline bool lockref_get_not_zero(struct lockref *lr)
{
	return __lockref_get_if_at_least(lr, 1);
}

/* true: a reference was taken. false: the lockref is dead (count < 0). */
static inline bool lockref_get_not_dead(struct lockref *lr)
{
	return __lockref_get_if_at_least(lr, 0);
}

/*
 * Lockless put only: returns the new count (>= 0), or -1 if nothing changed
 * because the lock is held, the CAS kept failing, or the count was <= 0.
 * On -1 the caller takes the lock and decides itself. A return of 0 is an
 * acquire of every earlier put.
 */
static inline int32_t lockref_put_return(struct lockref *lr)
{
	int32_t n;

	if (__lockref_cas_add(lr, -1, 1, true, &n) == LOCKREF_CAS_DONE)
		return n;
	return -1;
}

/*
 * true: the count was > 1 and is now one less; the lock is not held.
 * false: the count was <= 1 and nothing changed; the lock is now HELD, and
 * the caller (the last holder) decides what dying means.
 */
static inline bool lockref_put_or_lock(struct lockref *lr)
{
	int32_t n;

	if (__lockref_cas_add(lr, -1, 2, true, &n) == LOCKREF_CAS_DONE)
		return true;
	lockref_lock(lr);
	if (__lockref_count_after_lock(lr) <= 1)
		return false;
	__lockref_add(lr, -1);
	lockref_unlock(lr);  /* release: pairs with the next lock's acquire */
	return true;
}

#endif /* USLAB_LOCKREF_H */
