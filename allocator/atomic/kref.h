/* SPDX-License-Identifier: MIT */
/*
 * kref.h - a reference count whose last put runs a release callback once.
 *
 *   struct kref
 *  +-------------------------------+
 *  |  refcount (atomic_t, 32 bit)  |   > 0  live, that many references
 *  +-------------------------------+   == 0 released (or being released)
 *
 * Mirrors the kernel's include/linux/kref.h: kref_init sets 1, every holder
 * puts its reference once, and the put that takes the count from 1 to 0 calls
 * release() - exactly one caller ever sees that transition.
 *
 * Ordering contract:
 *   kref_get              relaxed: the caller already holds a reference, so
 *                         the object is live and nothing needs publishing.
 *   kref_get_unless_zero  fully ordered; false means the count was zero (the
 *                         object is being released: do not touch it). The
 *                         caller must itself keep the memory valid while it
 *                         tries (a lock or list that release() also takes).
 *   kref_put              release: everything the putter did to the object
 *                         happens before release(); the final decrement is
 *                         followed by an acquire, so release() sees all of it.
 *
 * Misuse is not detected: a put without a matching reference drives the count
 * negative and release() may then run early or never.
 */
#ifndef USLAB_KREF_H
#define USLAB_KREF_H

#include "atomic.h"

struct kref {
	atomic_t refcount;
};

#define KREF_INIT(n) { .refcount = ATOMIC_INIT(n) }

static inline void kref_init(struct kref *kref)
{
	atomic_set(&kref->refcount, 1);
}

/* A snapshot only: it may be stale by the time the caller looks at it. */
static inline unsigned int kref_read(const struct kref *kref)
{
	return (unsigned int)atomic_read(&kref->refcount);
}

/* Caller must already hold a reference. */
static inline void kref_get(struct kref *kref)
{
	atomic_inc(&kref->refcount);
}

/* true: a reference was taken. false: the count was 0, nothing changed. */
static inline bool kref_get_unless_zero(struct kref *kref)
{
	return atomic_inc_not_zero(&kref->refcount);
}

/*
 * Drop one reference. Returns 1 if this was the last one and release() ran,
 * 0 otherwise. release() runs at most once per kref_init.
 */
static inline int kref_put(struct kref *kref, void (*release)(struct kref *kref))
{
	/* release: pairs with the acquire read below on whichever put is last */
	if (atomic_sub_return_release(1, &kref->refcount) == 0) {
		/*
		 * acquire: pairs with the release decrements of every earlier
		 * put (this 0 lies in each one's release sequence). A load, not
		 * a fence, because ThreadSanitizer does not model fences.
		 */
		(void)atomic_read_acquire(&kref->refcount);
		release(kref);
		return 1;
	}
	return 0;
}

#endif /* USLAB_KREF_H */
