/* SPDX-License-Identifier: MIT */
/*
 * mailbox.h - a stack of nodes that any thread may post to and one owner
 * takes whole, with a "closed" flag in the same word, so that posting and
 * closing cannot cross.
 *
 *   struct mailbox (one atomic_long_t)
 *    63                                       1   0
 *   +------------------------------------------+---+
 *   |      top node (8-aligned), or 0           | C |
 *   +------------------------------------------+---+
 *   C = MAILBOX_CLOSED. Invariant: C set => the stack is empty.
 *
 * uslab's remote-free messages use it (docs/slab.md): senders post a message
 * to the owning thread's inbox, the owner takes the whole stack in its slow
 * path, and closes the inbox as it exits. Because the flag and the top share
 * the word, a post either lands before the close (and the close takes it) or
 * fails (and the poster keeps its node): no node is ever left in a box that
 * nobody will take. The owner only ever takes the whole stack, never pops one
 * node, so the CAS of a post cannot be fooled by a node that left and came
 * back (no ABA).
 *
 *   mailbox_post   push n; false (n untouched) if the box is closed.
 *   mailbox_take   take every node, keeping the flag as it is (the owner;
 *                  or anyone the owner cannot race with).
 *   mailbox_close  take every node and set the flag, in one exchange.
 *   mailbox_open   clear the flag of a closed box (nobody may take or close
 *                  it meanwhile; posts may start at once).
 *   mailbox_peek   a relaxed look: 0 if empty and open.
 *
 * Ordering contract: a successful post is a release and take/close are
 * acquires, so the taker sees everything the poster wrote before posting
 * (the node's next pointer and its payload). Failed posts order nothing.
 */
#ifndef USLAB_MAILBOX_H
#define USLAB_MAILBOX_H

#include <stdbool.h>
#include <stdint.h>

#include "atomic.h"

#define MAILBOX_CLOSED 1ul

struct mailbox_node {
	struct mailbox_node *next;
};

struct mailbox {
	atomic_long_t xword;   /* read only through the helpers below */
};

#define MAILBOX_INIT { .xword = ATOMIC_INIT(0) }

static inline bool mailbox_post(struct mailbox *mb, struct mailbox_node *n)
{
	long old = atomic_long_read(&mb->xword);

	do {
		if (old & MAILBOX_CLOSED)
			return false;
		n->next = (struct mailbox_node *)old;
	} while (!atomic_long_try_cmpxchg_release(&mb->xword, &old, (long)(uintptr_t)n));
	return true;
}

static inline struct mailbox_node *mailbox_take(struct mailbox *mb)
{
	long old = atomic_long_read(&mb->xword);

	while (old & ~(long)MAILBOX_CLOSED) {
		if (atomic_long_try_cmpxchg_acquire(&mb->xword, &old, old & (long)MAILBOX_CLOSED))
			return (struct mailbox_node *)(uintptr_t)old;
	}
	return NULL;
}

static inline struct mailbox_node *mailbox_close(struct mailbox *mb)
{
	long old = atomic_long_xchg_val_acquire((long)MAILBOX_CLOSED, &mb->xword);

	return (struct mailbox_node *)(uintptr_t)(old & ~(long)MAILBOX_CLOSED);
}

static inline void mailbox_open(struct mailbox *mb)
{
	atomic_long_set(&mb->xword, 0);
}

static inline uintptr_t mailbox_peek(const struct mailbox *mb)
{
	return (uintptr_t)atomic_long_read(&mb->xword);
}

static inline bool mailbox_closed(const struct mailbox *mb)
{
	return mailbox_peek(mb) & MAILBOX_CLOSED;
}

#endif /* USLAB_MAILBOX_H */
