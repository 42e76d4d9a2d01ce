/* SPDX-License-Identifier: MIT */
/*
 * mutex.h - a lock that sleeps: "locked" and "a waiter may be asleep" in one
 * 32-bit word, and a futex on that word for the waiters.
 *
 *   val:  0  free
 *         1  locked, nobody asleep
 *         2  locked, a waiter may be asleep (unlock must wake one)
 *
 * lock:    cmpxchg 0 -> 1 (acquire). Contended: spin a while re-trying the
 *          cmpxchg, then exchange 2 in (acquire) and sleep on the futex
 *          while the word reads 2, until the exchange finds 0.
 * unlock:  exchange 0 (release); if the word was 2, wake one sleeper.
 * trylock: cmpxchg 0 -> 1, true on success; false leaves the word alone.
 *
 * Not FIFO, on purpose: the lock goes to whichever thread is running when it
 * comes free. A ticket lock (spinlock.h) hands it to the next ticket even if
 * that thread is not running, and every thread behind it waits for the
 * scheduler: with more threads than CPUs that is most of the time. Waiters
 * past the spin sleep in the kernel instead of yielding in a loop.
 *
 * Ordering: lock (and a successful trylock) is an acquire, unlock a release;
 * everything written in the critical section is visible to the next holder.
 * Uncontended, lock and unlock are one atomic instruction each.
 */
#ifndef USLAB_MUTEX_H
#define USLAB_MUTEX_H

#include "atomic.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* cmpxchg attempts before a waiter sleeps: the allocator's critical
 * sections are short, so a running holder is usually about to leave */
#define MUTEX_SPINS 100

typedef struct {
	uint32_t val;
} mutex_t;

#define MUTEX_INIT { .val = 0 }

static inline void mutex_init(mutex_t *m)
{
	WRITE_ONCE(m->val, 0);
}

static inline bool mutex_trylock(mutex_t *m)
{
	uint32_t unlocked = 0;

	/* acquire: pairs with the release in mutex_unlock of the last holder */
	return __atomic_compare_exchange_n(&m->val, &unlocked, 1, false, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

static __attribute__((noinline, unused)) void __mutex_lock_slowpath(mutex_t *m)
{
	for (int i = 0; i < MUTEX_SPINS; i++) {
		if (READ_ONCE(m->val) == 0 && mutex_trylock(m))
			return;
		cpu_relax();
	}
	/* acquire: as in trylock. Taken with 2, not 1: another waiter may be
	 * asleep still, and our unlock must wake it. */
	while (__atomic_exchange_n(&m->val, 2, __ATOMIC_ACQUIRE) != 0)
		syscall(SYS_futex, &m->val, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

static inline void mutex_lock(mutex_t *m)
{
	if (likely(mutex_trylock(m)))
		return;
	__mutex_lock_slowpath(m);
}

static inline void mutex_unlock(mutex_t *m)
{
	/* release: pairs with the acquire of the next holder's lock */
	if (unlikely(__atomic_exchange_n(&m->val, 0, __ATOMIC_RELEASE) == 2))
		syscall(SYS_futex, &m->val, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static inline bool mutex_is_locked(const mutex_t *m)
{
	return READ_ONCE(m->val) != 0;
}

/* A fork handler lets go of a mutex it took in prepare: the parent
 * unlocks; the child starts it free again (its holder and sleepers are
 * threads the child does not have). */
static inline void mutex_unlock_fork(mutex_t *m, bool child)
{
	if (child)
		mutex_init(m);
	else
		mutex_unlock(m);
}

#endif /* USLAB_MUTEX_H */
