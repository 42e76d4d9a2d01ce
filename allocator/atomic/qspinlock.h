/* SPDX-License-Identifier: MIT */
/*
 * qspinlock.h - queued spinlock: owner, first waiter and MCS queue tail
 * coupled in one 32-bit word.
 *
 *   31                 18 17 16 15          9  8  7            0
 *  +---------------------+-----+-------------+---+--------------+
 *  |     tail slot       | idx |   unused    | P |    locked    |
 *  +---------------------+-----+-------------+---+--------------+
 *  \__________ tail ___________/\_ pending byte _/\_ locked byte/
 *
 *   locked  byte 0: 1 while a thread holds the lock (QSPIN_LOCKED_VAL)
 *   P       bit 8:  the one waiter allowed to spin on the word itself
 *                   (QSPIN_PENDING_VAL); the rest of that byte stays 0
 *   idx     bits 16-17: nesting level of the last queued node (0..3)
 *   slot    bits 18-31: 1 + row in __qspin_slots of the last queued thread;
 *                   0 with idx 0 means "no queue"
 *
 *   (tail, pending, locked):  0,0,0 free   0,0,1 held   0,1,1 held + one
 *   waiter   0,1,0 pending waiter taking over   t,*,* queue of MCS nodes.
 *
 * Mirrors the kernel's kernel/locking/qspinlock.c with NR_CPUS < 16K: a free
 * lock costs one cmpxchg; the first contender spins on the word (pending);
 * from the second contender on, each waiter spins on its own MCS node and
 * only the queue head spins on the word. Waiters are served in arrival
 * order (the pending waiter, then the queue): while anyone is queued the
 * word is never 0, so neither the fast path nor trylock can jump the queue.
 * A signal handler must not take a lock its thread may hold or wait for.
 *
 * Nodes live in per-thread storage, QSPIN_MAX_NODES of them (a signal
 * handler that contends while its thread is already queued takes the next
 * one). There are no CPU numbers in user space, so a thread that must queue
 * first claims a row of the process-wide __qspin_slots table, pointing at
 * its nodes, and gives it back when it leaves the queue; the tail names
 * that row. Every user of one lock must be in one link unit (the table is a
 * weak symbol of each). If no row or node is free, the thread spins on
 * trylock instead (correct, not fair). Waiters yield their CPU after
 * QSPIN_YIELD_AFTER spins so that a preempted owner or predecessor can run.
 *
 * Ordering contract:
 *   qspin_lock, successful qspin_trylock   acquire
 *   qspin_unlock                           release
 * so every critical section happens before the next one. Inside the slow
 * path the queue hand-offs are release/acquire pairs on the MCS nodes (each
 * is commented where it happens).
 *
 * Unlike the kernel, every write to the word is a full-word RMW - unlock
 * too, which costs a locked instruction instead of a byte store. A waiter
 * finds its predecessor's node through the tail it exchanged out of the
 * word, so the predecessor's tail exchange (release) must reach that
 * exchange (acquire) through whatever else wrote the word in between; in
 * the C11 model (and in ThreadSanitizer's) a release sequence continues only
 * through RMWs, and a plain store to the locked byte would cut it. The byte
 * and halfword views in the union are for reading only.
 */
#ifndef USLAB_QSPINLOCK_H
#define USLAB_QSPINLOCK_H

#include "atomic.h"

#include <sched.h>

#define QSPIN_LOCKED_VAL        0x00000001u
#define QSPIN_LOCKED_MASK       0x000000ffu
#define QSPIN_PENDING_VAL       0x00000100u
#define QSPIN_PENDING_MASK      0x0000ff00u
#define QSPIN_LOCKED_PENDING_MASK (QSPIN_LOCKED_MASK | QSPIN_PENDING_MASK)
#define QSPIN_TAIL_IDX_OFFSET   16
#define QSPIN_TAIL_IDX_BITS     2
#define QSPIN_TAIL_SLOT_OFFSET  18
#define QSPIN_TAIL_SLOT_BITS    14
#define QSPIN_TAIL_MASK         0xffff0000u

#define QSPIN_MAX_NODES         4        /* nesting levels (signal handlers) */
#define QSPIN_SLOTS             4096     /* threads queued at once, any lock */
#define QSPIN_PENDING_LOOPS     512      /* wait for a pending->locked hand-off */
#define QSPIN_YIELD_AFTER       128

_Static_assert(QSPIN_MAX_NODES <= 1 << QSPIN_TAIL_IDX_BITS, "idx must fit its field");
_Static_assert(QSPIN_SLOTS < 1 << QSPIN_TAIL_SLOT_BITS, "slot + 1 must fit its field");
_Static_assert((QSPIN_SLOTS & (QSPIN_SLOTS - 1)) == 0, "QSPIN_SLOTS is a power of two");

typedef struct qspinlock {
	union {
		atomic_t val;
		struct {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
			uint8_t locked, pending;
#else
			uint8_t unused_[2], pending, locked;
#endif
		};
		struct {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
			uint16_t locked_pending, tail;
#else
			uint16_t tail, locked_pending;
#endif
		};
	};
} qspinlock_t;

_Static_assert(sizeof(qspinlock_t) == 4, "qspinlock is one 32-bit word");

#define QSPINLOCK_INIT { { .val = ATOMIC_INIT(0) } }

/* A queued waiter. Written by its successor (next) and predecessor (locked). */
struct qspin_node {
	struct qspin_node *next;
	int locked;
};

struct qspin_tls {
	struct qspin_node node[QSPIN_MAX_NODES];
	unsigned int count;     /* nodes in use by this thread (nesting depth) */
	unsigned int slot;      /* row + 1 in __qspin_slots while count > 0, else 0 */
	unsigned int hint;      /* row + 1 of the last successful claim, 0 none */
};

/* Not for direct use. Row -> the nodes of the thread queued under it. */
__attribute__((weak)) struct qspin_node *__qspin_slots[QSPIN_SLOTS];
static __thread struct qspin_tls __qspin_tls __attribute__((aligned(64), unused));

static inline void qspin_lock_init(qspinlock_t *lock)
{
	atomic_set(&lock->val, 0);
}

/* Held, or being handed to a waiter: any bit set. */
static inline bool qspin_is_locked(const qspinlock_t *lock)
{
	return atomic_read(&lock->val) != 0;
}

/* Someone besides the owner is waiting (pending or queued). */
static inline bool qspin_is_contended(const qspinlock_t *lock)
{
	return ((uint32_t)atomic_read(&lock->val) & ~QSPIN_LOCKED_MASK) != 0;
}

/* true if the lock was free and is now ours (acquire); false changes nothing. */
static inline bool qspin_trylock(qspinlock_t *lock)
{
	int val = atomic_read(&lock->val);

	if (unlikely(val))
		return false;
	/* acquire: pairs with the release in qspin_unlock */
	return likely(atomic_try_cmpxchg_acquire(&lock->val, &val, QSPIN_LOCKED_VAL));
}

static inline void qspin_relax(unsigned int *spins)
{
	if (++*spins < QSPIN_YIELD_AFTER)
		cpu_relax();
	else
		sched_yield();
}

/* Claim a free row for this thread's nodes; returns row + 1, or 0 if full. */
static inline unsigned int __qspin_claim_slot(struct qspin_tls *t)
{
	unsigned int s = t->hint ? t->hint - 1
		: (unsigned int)(((uintptr_t)t * 0x9E3779B97F4A7C15ull) >> 40);

	for (unsigned int i = 0; i < QSPIN_SLOTS; i++, s++) {
		struct qspin_node *none = NULL;

		s &= QSPIN_SLOTS - 1;
		if (READ_ONCE(__qspin_slots[s]))
			continue;
		/* relaxed: the row is published only by the tail exchange (release) */
		if (__atomic_compare_exchange_n(&__qspin_slots[s], &none, t->node, false,
						__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
			t->hint = s + 1;
			return s + 1;
		}
	}
	return 0;
}

static inline struct qspin_node *__qspin_decode_tail(uint32_t tail)
{
	unsigned int slot = tail >> QSPIN_TAIL_SLOT_OFFSET;
	unsigned int idx = (tail >> QSPIN_TAIL_IDX_OFFSET) & ((1u << QSPIN_TAIL_IDX_BITS) - 1);

	return READ_ONCE(__qspin_slots[slot - 1]) + idx;
}

/* Put our tail in the word and return the previous word (full-word CAS, so
 * every RMW on the lock is at one address). */
static inline uint32_t __qspin_xchg_tail(qspinlock_t *lock, uint32_t tail)
{
	int old = atomic_read(&lock->val);
	int new;

	do {
		new = (int)(((uint32_t)old & ~QSPIN_TAIL_MASK) | tail);
		/* release: our node is initialised before a successor can find it;
		 * acquire: pairs with the predecessor's publication of its tail */
	} while (!try_cmpxchg_acq_rel(&lock->val.counter, &old, new));
	return (uint32_t)old;
}

/*
 * Contended acquire, first try: the pending bit. val is the word the fast
 * path saw. True when the lock is ours that way; false when others wait
 * already and the caller must queue.
 */
static inline bool __qspin_try_pending(qspinlock_t *lock, uint32_t val)
{
	unsigned int spins = 0;

	/* A pending waiter is taking over (0,1,0 -> 0,0,1): let it finish. */
	for (int loops = QSPIN_PENDING_LOOPS; val == QSPIN_PENDING_VAL && loops; loops--) {
		cpu_relax();
		val = (uint32_t)atomic_read(&lock->val);
	}
	if (val & ~QSPIN_LOCKED_MASK)
		return false;

	/* acquire: pairs with the release in qspin_unlock if the lock was free */
	val = (uint32_t)atomic_fetch_or_acquire(QSPIN_PENDING_VAL, &lock->val);
	if (unlikely(val & ~QSPIN_LOCKED_MASK)) {
		/* someone is pending or queued already: undo our bit if we set it */
		if (!(val & QSPIN_PENDING_MASK))
			atomic_andnot(QSPIN_PENDING_VAL, &lock->val);
		return false;
	}
	/* We are the pending waiter: only the owner is ahead of us. */
	while ((uint32_t)atomic_read_acquire(&lock->val) & QSPIN_LOCKED_MASK)
		qspin_relax(&spins);    /* acquire: pairs with the release in qspin_unlock */
	/* 0,1,0 -> 0,0,1 (P is ours and locked is 0, so nothing borrows) */
	atomic_add((int)QSPIN_LOCKED_VAL - (int)QSPIN_PENDING_VAL, &lock->val);
	return true;
}

/*
 * The queue head (our node, tail code `tail`; next: our successor if we
 * saw one already): wait for the owner and the pending waiter to leave,
 * take the lock, and make the successor the head.
 */
static inline void __qspin_head_take(qspinlock_t *lock, struct qspin_node *node,
				     struct qspin_node *next, uint32_t tail)
{
	unsigned int spins = 0;
	uint32_t val;

	/* acquire: pairs with the release in qspin_unlock */
	while ((val = (uint32_t)atomic_read_acquire(&lock->val)) & QSPIN_LOCKED_PENDING_MASK)
		qspin_relax(&spins);

	if ((val & QSPIN_TAIL_MASK) == tail) {
		int v = (int)val;

		/* Last in the queue: take the lock and clear the tail at once.
		 * relaxed: the acquire load above ordered us after the owner. */
		if (atomic_try_cmpxchg_relaxed(&lock->val, &v, QSPIN_LOCKED_VAL))
			return;
	}
	/* Someone queued behind us (or set P for a moment and will queue):
	 * nobody else can take the locked byte while the tail is non-zero. */
	atomic_or(QSPIN_LOCKED_VAL, &lock->val);

	spins = 0;
	while (!next) {
		/* acquire: pairs with the successor's release store of prev->next */
		next = smp_load_acquire(&node->next);
		if (!next)
			qspin_relax(&spins);
	}
	/* release: pairs with the successor's acquire wait on its node->locked */
	smp_store_release(&next->locked, 1);
}

/* Contended acquire through the MCS queue, on our node with tail code `tail`. */
static inline void __qspin_queue(qspinlock_t *lock, struct qspin_node *node, uint32_t tail)
{
	struct qspin_node *next = NULL;
	unsigned int spins = 0;
	uint32_t old;

	WRITE_ONCE(node->locked, 0);
	WRITE_ONCE(node->next, NULL);

	/* The owner and pending waiter may have left while we set up. */
	if (qspin_trylock(lock))
		return;

	old = __qspin_xchg_tail(lock, tail);
	if (old & QSPIN_TAIL_MASK) {
		struct qspin_node *prev = __qspin_decode_tail(old);

		/* release: our node's init happens before prev hands over to it
		 * (pairs with the acquire load of node->next by prev, in
		 * __qspin_head_take) */
		smp_store_release(&prev->next, node);
		/* acquire: pairs with prev's release store to our node->locked */
		while (!smp_load_acquire(&node->locked))
			qspin_relax(&spins);
		next = smp_load_acquire(&node->next);   /* same pairing as there */
	}
	__qspin_head_take(lock, node, next, tail);
}

/*
 * Contended acquire; val is the word the fast path saw. Pending first (one
 * waiter spins on the word), then the MCS queue. Caller holds nothing.
 */
static __attribute__((noinline, unused)) void __qspin_lock_slowpath(qspinlock_t *lock,
							       uint32_t val)
{
	struct qspin_tls *t = &__qspin_tls;
	unsigned int idx, slot, spins = 0;

	if (__qspin_try_pending(lock, val))
		return;
	idx = t->count++;
	barrier();      /* a signal handler that queues from here on takes node idx + 1 */
	slot = idx ? t->slot : (t->slot = __qspin_claim_slot(t));
	if (unlikely(idx >= QSPIN_MAX_NODES || !slot)) {
		while (!qspin_trylock(lock))
			qspin_relax(&spins);
	} else {
		__qspin_queue(lock, &t->node[idx],
			      (slot << QSPIN_TAIL_SLOT_OFFSET) | (idx << QSPIN_TAIL_IDX_OFFSET));
	}
	/* No one can reach our node any more: the successor, if any, read our
	 * row before it linked itself (which we saw in __qspin_head_take). */
	if (idx == 0 && t->slot) {
		WRITE_ONCE(__qspin_slots[t->slot - 1], NULL);
		t->slot = 0;
	}
	barrier();
	t->count--;
}

static inline void qspin_lock(qspinlock_t *lock)
{
	int val = 0;

	/* acquire: pairs with the release in qspin_unlock */
	if (likely(atomic_try_cmpxchg_acquire(&lock->val, &val, QSPIN_LOCKED_VAL)))
		return;
	__qspin_lock_slowpath(lock, (uint32_t)val);
}

static inline void qspin_unlock(qspinlock_t *lock)
{
	/* release: pairs with the acquires in qspin_lock and its slow path.
	 * An RMW, not a byte store: see the top of this file. */
	(void)atomic_fetch_sub_release(QSPIN_LOCKED_VAL, &lock->val);
}

#endif /* USLAB_QSPINLOCK_H */
