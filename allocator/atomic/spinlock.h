/* SPDX-License-Identifier: MIT */
/*
 * spinlock.h - ticket spinlock: "next ticket" and "now serving" in one word.
 *
 *   31            16 15             0
 *  +----------------+----------------+
 *  |      next      |     owner      |     locked  <=>  next != owner
 *  +----------------+----------------+
 *
 * lock:   take a ticket with one fetch_add(1 << 16) (acquire), then wait until
 *         owner equals the ticket. FIFO: waiters are served in arrival order.
 * unlock: owner + 1 with a release store to the owner half only, so a full
 *         owner never carries into next (65536 waiters would be needed to wrap).
 * trylock: succeeds only if the lock was free, by one acquire cmpxchg.
 *
 * Ordering: lock is an acquire, unlock a release; everything written inside
 * the critical section is visible to the next owner.
 */
#ifndef USLAB_SPINLOCK_H
#define USLAB_SPINLOCK_H

#include "atomic.h"

#include <sched.h>

/* Spins before a waiter yields its CPU: with more threads than CPUs a FIFO
 * lock must not burn the time slice of the preempted thread it waits for. */
#define SPIN_YIELD_AFTER 128

typedef union {
	uint32_t val;
	struct {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		uint16_t owner, next;
#else
		uint16_t next, owner;
#endif
	};
} spinlock_t;

#define SPINLOCK_INIT { .val = 0 }
#define TICKET_SHIFT 16

static inline void spin_lock_init(spinlock_t *l) { WRITE_ONCE(l->val, 0); }

static inline void spin_lock(spinlock_t *l)
{
	/* acquire: pairs with the release in spin_unlock of the previous owner */
	uint32_t t = __atomic_fetch_add(&l->val, 1u << TICKET_SHIFT, __ATOMIC_ACQUIRE);
	uint16_t me = (uint16_t)(t >> TICKET_SHIFT);

	if (likely((uint16_t)t == me))
		return;
	for (unsigned spins = 0; smp_load_acquire(&l->owner) != me; spins++) {
		if (spins < SPIN_YIELD_AFTER)
			cpu_relax();
		else
			sched_yield();
	}
}

/* true if the lock was free and is now ours; false leaves it untouched. */
static inline bool spin_trylock(spinlock_t *l)
{
	uint32_t old = READ_ONCE(l->val);

	if ((uint16_t)old != (uint16_t)(old >> TICKET_SHIFT))
		return false;
	return __atomic_compare_exchange_n(&l->val, &old, old + (1u << TICKET_SHIFT), false,
					   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static inline void spin_unlock(spinlock_t *l)
{
	/* release: pairs with the acquire in spin_lock of the next owner */
	smp_store_release(&l->owner, (uint16_t)(READ_ONCE(l->owner) + 1));
}

/*
 * After fork(), in the child: a ticket lock may have waiters queued behind
 * the holder, and those threads do not exist here. Unlocking would hand the
 * lock to a ghost; the child must re-initialise every lock instead.
 */
static inline void spin_unlock_after_fork_child(spinlock_t *l)
{
	spin_lock_init(l);
}

/* The one way a fork handler lets go of a lock it took in prepare: the
 * parent unlocks, the child re-initialises (see above). */
static inline void spin_unlock_fork(spinlock_t *l, bool child)
{
	if (child)
		spin_unlock_after_fork_child(l);
	else
		spin_unlock(l);
}

static inline bool spin_is_locked(const spinlock_t *l)
{
	uint32_t v = READ_ONCE(l->val);

	return (uint16_t)v != (uint16_t)(v >> TICKET_SHIFT);
}

/* More than one holder-or-waiter: someone is queued behind the owner. */
static inline bool spin_is_contended(const spinlock_t *l)
{
	uint32_t v = READ_ONCE(l->val);

	return (uint16_t)((v >> TICKET_SHIFT) - v) > 1;
}

#endif /* USLAB_SPINLOCK_H */
