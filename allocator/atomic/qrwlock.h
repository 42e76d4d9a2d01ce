/* SPDX-License-Identifier: MIT */
/*
 * qrwlock.h - queued reader-writer lock: reader count and writer state
 * coupled in one 32-bit word, with a ticket lock that queues the waiters.
 *
 *   cnts (atomic_t)
 *   31                                  8 7              0
 *  +-------------------------------------+----------------+
 *  |   readers (in units of QRW_BIAS)    |  writer byte   |
 *  +-------------------------------------+----------------+
 *
 *   writer byte  0x00 no writer
 *                0x01 QRW_WAITING  a writer holds wait_lock and waits for
 *                                  the readers to drain; new readers back off
 *                0xff QRW_LOCKED   a writer holds the lock
 *   readers      cnts >> 8: readers holding the lock, plus for a moment the
 *                ones that added QRW_BIAS (256) and are backing off
 *
 *   wait_lock    spinlock_t beside the word: the queue. Writers that cannot
 *                take the lock at once, and readers that met a writer,
 *                wait here in FIFO order.
 *
 * Mirrors the kernel's include/asm-generic/qrwlock.h and
 * kernel/locking/qrwlock.c (the layout with the writer state in byte 0 and
 * the reader bias 256). A reader adds QRW_BIAS; if the writer byte is
 * non-zero it subtracts it again, queues on wait_lock, then adds it back and
 * waits only for a writer holding the lock (a waiting writer cannot exist
 * then: writers set WAITING and turn it into LOCKED under wait_lock). A
 * writer that finds the lock busy takes wait_lock, sets WAITING, waits for
 * the readers to drain and swaps WAITING for LOCKED. Readers arriving after
 * WAITING was set queue behind the writer, so a stream of readers cannot
 * starve writers; writers among themselves are FIFO through wait_lock.
 *
 * Ordering contract:
 *   qrw_read_lock, qrw_write_lock, successful trylocks   acquire
 *   qrw_read_unlock, qrw_write_unlock                    release
 * so a writer's critical section happens before every later reader's and
 * writer's, and every reader's before the next writer's.
 *
 * The writer byte is at the word's address on little-endian, so the byte
 * store in qrw_write_unlock and the word's RMWs share an address (as
 * ThreadSanitizer keys synchronisation by address).
 */
#ifndef USLAB_QRWLOCK_H
#define USLAB_QRWLOCK_H

#include "atomic.h"
#include "spinlock.h"

#define QRW_WAITING     0x001u   /* writer byte: a writer is waiting */
#define QRW_LOCKED      0x0ffu   /* writer byte: a writer holds the lock */
#define QRW_WMASK       0x0ffu   /* the writer byte */
#define QRW_SHIFT       8
#define QRW_BIAS        (1u << QRW_SHIFT)

typedef struct qrwlock {
	union {
		atomic_t cnts;
		struct {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
			uint8_t wlocked;
			uint8_t rcount_[3];
#else
			uint8_t rcount_[3];
			uint8_t wlocked;
#endif
		};
	};
	spinlock_t wait_lock;
} qrwlock_t;

_Static_assert(sizeof(qrwlock_t) == 8, "qrwlock is the word and its ticket lock");

#define QRWLOCK_INIT { { .cnts = ATOMIC_INIT(0) }, .wait_lock = SPINLOCK_INIT }

static inline void qrwlock_init(qrwlock_t *l)
{
	atomic_set(&l->cnts, 0);
	spin_lock_init(&l->wait_lock);
}

/* Held by a reader or writer, or being acquired: any bit set. */
static inline bool qrwlock_is_locked(const qrwlock_t *l)
{
	return atomic_read(&l->cnts) != 0;
}

static inline void qrw_relax(unsigned int *spins)
{
	if (++*spins < SPIN_YIELD_AFTER)
		cpu_relax();
	else
		sched_yield();
}

/* A reader met a writer (waiting or holding): queue behind it. */
static __attribute__((noinline, unused)) void __qrw_read_lock_slowpath(qrwlock_t *l)
{
	unsigned int spins = 0;

	atomic_sub(QRW_BIAS, &l->cnts);    /* relaxed: we read nothing under it */
	spin_lock(&l->wait_lock);
	atomic_add(QRW_BIAS, &l->cnts);    /* relaxed: the acquire is the wait below */
	/* With wait_lock ours the writer byte is 0 or LOCKED, never WAITING.
	 * acquire: pairs with the release in qrw_write_unlock */
	while (((uint32_t)atomic_read_acquire(&l->cnts) & QRW_WMASK) == QRW_LOCKED)
		qrw_relax(&spins);
	spin_unlock(&l->wait_lock);
}

/* A writer found the lock busy: queue, announce, wait for readers to drain. */
static __attribute__((noinline, unused)) void __qrw_write_lock_slowpath(qrwlock_t *l)
{
	unsigned int spins = 0;
	int c = 0;

	spin_lock(&l->wait_lock);
	/* acquire: pairs with the release in the last read/write unlock */
	if (atomic_try_cmpxchg_acquire(&l->cnts, &c, QRW_LOCKED))
		goto out;

	/* WAITING may only replace 0: a fast-path writer may hold LOCKED.
	 * relaxed: the flag only keeps readers out, it publishes nothing. */
	for (;;) {
		if (!((uint32_t)c & QRW_WMASK)) {
			if (atomic_try_cmpxchg_relaxed(&l->cnts, &c, (int)((uint32_t)c | QRW_WAITING)))
				break;
			continue;
		}
		qrw_relax(&spins);
		c = atomic_read(&l->cnts);
	}

	spins = 0;
	for (;;) {
		c = QRW_WAITING;
		/* acquire: pairs with the release in qrw_read_unlock of the last reader */
		if (atomic_try_cmpxchg_acquire(&l->cnts, &c, QRW_LOCKED))
			break;
		do
			qrw_relax(&spins);
		while ((uint32_t)atomic_read(&l->cnts) != QRW_WAITING);
	}
out:
	spin_unlock(&l->wait_lock);
}

static inline void qrw_read_lock(qrwlock_t *l)
{
	/* acquire: pairs with the release in qrw_write_unlock */
	uint32_t c = (uint32_t)atomic_fetch_add_acquire(QRW_BIAS, &l->cnts);

	if (likely(!(c & QRW_WMASK)))
		return;
	__qrw_read_lock_slowpath(l);
}

/* true if no writer held or waited for the lock and we now read-hold it. */
static inline bool qrw_read_trylock(qrwlock_t *l)
{
	uint32_t c = (uint32_t)atomic_read(&l->cnts);

	if (likely(!(c & QRW_WMASK))) {
		/* acquire: pairs with the release in qrw_write_unlock */
		c = (uint32_t)atomic_fetch_add_acquire(QRW_BIAS, &l->cnts);
		if (likely(!(c & QRW_WMASK)))
			return true;
		atomic_sub(QRW_BIAS, &l->cnts);   /* relaxed: we read nothing */
	}
	return false;
}

static inline void qrw_read_unlock(qrwlock_t *l)
{
	/* release: pairs with the writer's acquire cmpxchg to LOCKED */
	(void)atomic_fetch_sub_release(QRW_BIAS, &l->cnts);
}

static inline void qrw_write_lock(qrwlock_t *l)
{
	int c = 0;

	/* acquire: pairs with the release in the last read/write unlock */
	if (likely(atomic_try_cmpxchg_acquire(&l->cnts, &c, QRW_LOCKED)))
		return;
	__qrw_write_lock_slowpath(l);
}

/* true if the lock was entirely free and we now write-hold it. */
static inline bool qrw_write_trylock(qrwlock_t *l)
{
	int c = atomic_read(&l->cnts);

	if (unlikely(c))
		return false;
	/* acquire: pairs with the release in the last read/write unlock */
	return likely(atomic_try_cmpxchg_acquire(&l->cnts, &c, QRW_LOCKED));
}

static inline void qrw_write_unlock(qrwlock_t *l)
{
	/* release: pairs with the acquires in qrw_read_lock and qrw_write_lock.
	 * A byte store: backing-off readers may be changing the count above it. */
	smp_store_release(&l->wlocked, 0);
}

#endif /* USLAB_QRWLOCK_H */
