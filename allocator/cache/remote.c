/* SPDX-License-Identifier: MIT */
/*
 * remote.c - remote frees by message (struct remote_msg in cache.h).
 *
 * A thread that frees objects of slabs another thread's heap owns collects
 * the pointers, per cache, in a message addressed to that heap (outbox_add
 * inline, free_by_message here), and posts the message to the heap's inbox
 * for the cache when it is full, when the next object has another owner,
 * or at flush. The owner takes its inbox in its allocation slow path and
 * puts the objects on its cpu freelist (inbox_take; other drains put them
 * on their slabs' owner-local lists): only the owner writes its objects,
 * and the freeing thread touches none.
 *
 * Invariants. An object in a message is counted in use by its slab's word
 * and is on no freelist: between its free and the owner's drain it is the
 * message's. A message is in exactly one place: a heap's outbox (its
 * sender's, owner-only), one inbox, or being drained by one thread (taken
 * with one exchange). An inbox is a mailbox (atomic/mailbox.h): a sender's
 * post never succeeds on a closed one, and its thread closes it (with the
 * exchange that takes it) before giving its slabs up at exit, so every message posted is
 * drained by that thread, or, after its exit, never pushed (the sender frees
 * the objects through their slabs' words instead). The drain trusts no
 * routing: an object whose slab the heap no longer owns goes home by dwcas.
 * Only an allocation of cache s drains s's inboxes, so a destroy, which no
 * thread may race with uses of s, may take them all.
 */
#include "local.h"

static struct remote_msg *msg_next(const struct remote_msg *m)
{
	return (struct remote_msg *)m->node.next;
}

/* A message for h to fill: a spare one, one its receivers gave back, or new. */
static struct remote_msg *msg_get(struct thread_heap *h)
{
	struct remote_msg *m = h->msg_pool;

	/* acquire (mailbox_take): pairs with the release of msg_put's post,
	 * so the receiver's last reads of m are done */
	if (!m && mailbox_peek(&h->msg_returns))
		m = (struct remote_msg *)mailbox_take(&h->msg_returns);
	if (!m)
		return meta_alloc(sizeof(*m));
	h->msg_pool = msg_next(m);
	return m;
}

/* Done with m (h: the calling thread's heap): back to its sender, so that a
 * thread that only receives keeps none and one that only sends makes few.
 * A returns box is never closed, so the post always succeeds. */
static void msg_put(struct thread_heap *h, struct remote_msg *m)
{
	if (m->from == h) {
		m->node.next = h->msg_pool ? &h->msg_pool->node : NULL;
		h->msg_pool = m;
		return;
	}
	mailbox_post(&m->from->msg_returns, &m->node);   /* release: see msg_get */
}

/* A chain of objects, linked through their free pointers, and its length. */
struct chain {
	void *head, *tail;
	unsigned n;
};

/*
 * Objects of m not taken by owner (NULL: none) go home by dwcas, runs of
 * one slab together; c (if not NULL) may freeze FULL slabs onto its list.
 * The owner's go on their slabs' owner-local lists, or, with to, onto that
 * chain (for the cpu freelist).
 */
static void msg_free_objects(struct uslab_cache *s, struct remote_msg *m, struct thread_heap *owner,
			     struct cpu_slab *c, struct chain *to)
{
	long local = 0;

	for (unsigned i = 0, j; i < m->count; i = j) {
		void *head = m->obj[i], *tail = head;
		struct slab *slab = ptr_to_slab(head);

		/* a run of one slab's objects, linked through themselves: the
		 * slab's descriptor, which the freeing thread keeps reading, is
		 * written once per run, not once per object */
		for (j = i + 1; j < m->count && ptr_to_slab(m->obj[j]) == slab; j++) {
			fp_set(s, m->obj[j], head);
			head = m->obj[j];
		}
		if (!owner || READ_ONCE(slab->owner) != owner) {
			slab_free_chain(s, c, slab, head, tail, j - i);
		} else if (to) {
			fp_set(s, tail, to->head);
			if (!to->head)
				to->tail = tail;
			to->head = head;
			to->n += j - i;
		} else {
			void *top = slab->local_free;

			if (unlikely(top && (top == head || top == tail)))
				uslab_fatal(cache_free_call(s), top, "double free");
			cpu_local_push(s, c, slab, head, tail, j - i);
			local += j - i;
		}
	}
	if (local) {   /* counted as remote frees when freed */
		stat_add(s, STAT_FREE_LOCAL, -local);
		cpu_cached_add(c, local);   /* owner's lists: c is its cpu slab */
	}
}

/* Post m to its heap's inbox, or, if that thread has exited, free its
 * objects here. The outbox slot is the caller's to clear. */
static void msg_send(struct thread_heap *h, struct remote_msg *m)
{
	struct uslab_cache *s = m->cache;

	stat_add(s, STAT_FREE_REMOTE, (long)m->count);   /* counted as they leave */
	INTERLEAVE("msg:post");
	/* release: the owner's acquiring take sees the message filled */
	if (!mailbox_post(heap_inbox(m->to, s->id), &m->node)) {
		msg_free_objects(s, m, NULL, cpu_slab_get(s), NULL);
		msg_put(h, m);
	}
}

void outbox_send(struct thread_heap *h, unsigned id)
{
	struct remote_msg **box = heap_outbox(h, id), *m = *box;

	if (m) {
		*box = NULL;
		msg_send(h, m);
	}
}

/* A list of messages done with: their objects onto owner's slabs (owner:
 * the calling thread's heap; with to, onto that chain) or, with none, home
 * by dwcas; each message back to its sender. */
static void msgs_free(struct remote_msg *m, struct thread_heap *owner, struct chain *to)
{
	for (struct remote_msg *next; m; m = next) {
		next = msg_next(m);
		msg_free_objects(m->cache, m, owner, owner ? heap_cpu_slab(owner, m->cache) : NULL,
				 to);
		msg_put(tls_heap, m);
	}
}

/* Owner h: take its messages for cache id (closing the inbox at exit) and
 * put their objects on its slabs' owner-local lists. */
void inbox_drain(struct thread_heap *h, unsigned id, bool close)
{
	struct mailbox *box = heap_inbox(h, id);

	/* acquire (take or close): pairs with each sender's release in msg_send */
	msgs_free((struct remote_msg *)(close ? mailbox_close(box) : mailbox_take(box)), h, NULL);
}

/*
 * Owner h, refilling cache id: take its messages and hand back their
 * objects of slabs it still owns as one chain, *n of them, its last in
 * *tail (NULL if none), for the cpu freelist: the next allocations take
 * them all, rather than one slab's owner-local list a refill.
 */
void *inbox_take(struct thread_heap *h, unsigned id, void **tail, unsigned *n)
{
	struct chain to = { NULL, NULL, 0 };

	/* acquire: pairs with each sender's release in msg_send */
	msgs_free((struct remote_msg *)mailbox_take(heap_inbox(h, id)), h, &to);
	*tail = to.tail;
	*n = to.n;
	return to.head;
}

/*
 * Owner (its heap's lock held): send every outbox, then drain every inbox,
 * of the caches whose slow paths the heap's thread has come to (the others
 * have none: thread_heap.ids_used). At exit each of those inboxes is closed
 * by the same exchange that takes it, before the caller gives the slabs up:
 * a later sender frees through the slabs' words, which a frozen slab's
 * release then takes. A recycled heap opens them again (heap_inboxes_open),
 * and keeps them among its ids: a message filled for the heap's earlier
 * life may still be sent to it, and its next exit drains it.
 */
void heap_messages_flush(struct thread_heap *h, bool exiting)
{
	for_each_heap_id(h, id)
		outbox_send(h, id);
	for_each_heap_id(h, id)
		if (exiting || mailbox_peek(heap_inbox(h, id)))
			inbox_drain(h, id, exiting);
}

/* heaps_lock held, h not live: a recycled heap's inboxes open again. */
void heap_inboxes_open(struct thread_heap *h)
{
	for_each_heap_id(h, id)
		mailbox_open(heap_inbox(h, id));
}

/* Fork child, for each heap whose thread did not survive the fork: what is
 * sent to it from now on goes home by dwcas; what was sent stays lost with
 * the rest of what that thread cached. */
void heap_inboxes_close(struct thread_heap *h)
{
	for_each_heap_id(h, id)
		mailbox_close(heap_inbox(h, id));
}

/* Destroy, for each heap (heaps_lock and its lock held, no thread using s):
 * its message for s being filled and those sent to it go home by dwcas. */
void heap_messages_drop(struct thread_heap *h, struct uslab_cache *s)
{
	struct remote_msg **box = heap_outbox(h, s->id), *m = *box;

	*box = NULL;
	if (m) {
		m->node.next = NULL;
		msgs_free(m, NULL, NULL);
	}
	/* a closed inbox stays closed */
	msgs_free((struct remote_msg *)mailbox_take(heap_inbox(h, s->id)), NULL, NULL);
}

/* Objects a message of s's takes: MSG_BYTES of them, 1 to MSG_OBJS. */
static unsigned msg_objects(const struct uslab_cache *s)
{
	unsigned n = MSG_BYTES / s->stride;

	return n < 1 ? 1 : n > MSG_OBJS ? MSG_OBJS : n;
}

/* Free obj, of a slab heap `to` owns, by message (see above). */
noinline void free_by_message(struct uslab_cache *s, struct slab *slab, void *obj,
				     struct thread_heap *to)
{
	struct thread_heap *h = cpu_slab_get(s) ? tls_heap : NULL;   /* makes the heap */
	struct remote_msg **box, *m;

	if (unlikely(!h)) {   /* no heap to send from: home at once */
		stat_add(s, STAT_FREE_REMOTE, 1);
		slab_free_chain(s, NULL, slab, obj, obj, 1);
		return;
	}
	box = heap_outbox(h, s->id);
	m = *box;
	if (unlikely(m && m->count && m->obj[m->count - 1] == obj))
		uslab_fatal(cache_free_call(s), obj, "double free");
	if (m && m->to != to) {
		*box = NULL;
		msg_send(h, m);
		m = NULL;
	}
	if (!m) {
		m = msg_get(h);
		if (unlikely(!m)) {
			stat_add(s, STAT_FREE_REMOTE, 1);
			slab_free_chain(s, heap_cpu_slab(h, s), slab, obj, obj, 1);
			return;
		}
		m->cache = s;
		m->to = to;
		m->from = h;
		m->count = 0;
		m->fast_max = msg_objects(s) - 1;
		*box = m;
	}
	m->obj[m->count++] = obj;
	if (m->count > m->fast_max) {
		*box = NULL;
		msg_send(h, m);
	}
}
