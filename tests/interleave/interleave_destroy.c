/* SPDX-License-Identifier: MIT */
/*
 * interleave_destroy - cache destroy racing a remote free (docs/model.md,
 * "Interleaving points"). The owner's objects of cache s are all free, but
 * three of them sit in another thread's open message to the owner (a remote
 * free not yet posted). uslab_cache_destroy flushes every heap's cpu slab
 * for s, then drops every heap's messages for s (destroy:drop, before each
 * heap's), then counts what is live. The freer's thread exits meanwhile:
 * its exit posts the message, which destroy must still find.
 *
 *   exit_before_drops   the exit posts while destroy is parked after the
 *                       flush, before the first drop: destroy takes the
 *                       message from the owner's inbox and succeeds
 *   exit_between_drops  the exit posts after destroy has dropped the
 *                       owner's heap's messages, before the freer's: the
 *                       message lands in an inbox destroy has passed, and
 *                       destroy reports the three objects live (-EBUSY).
 *                       KNOWN WRONG (docs/model.md): the test holds the code
 *                       to today's answer, and to a second destroy
 *                       succeeding, until it is fixed
 *
 * and the first again with a fork() taken from a third thread while
 * destroy is parked: destroy holds heaps_lock there, so the fork must wait.
 */
#include "interleave.h"

extern struct thread_heap *heaps;   /* cache/heap.c: every heap, newest first */
extern mutex_t heaps_lock;

static struct actor pair[2], destroyer, forker, *owner, *freer;
static struct actor *const actors[] = { &pair[0], &pair[1], &destroyer, &forker };

static void job_touch(struct actor *a)
{
	struct uslab_cache *c = a->arg;

	uslab_cache_free(c, uslab_cache_alloc(c));   /* a heap of its own, chunk used */
}

static void job_destroy(struct actor *a)
{
	struct ilv_ctx *x = a->arg;

	x->result = uslab_cache_destroy(x->s);
}

/* The drop of h is destroy:drop's how-manieth hit (heaps with s's chunk,
 * in list order)? */
static int drop_index(struct uslab_cache *s, struct thread_heap *h)
{
	int n = 0;

	for (struct thread_heap *p = heaps; p; p = p->next) {
		if (p->chunks_used >> s->chunk & 1)
			n++;
		if (p == h)
			return n;
	}
	REQUIRE(!"heap not on the list");
	return 0;
}

/* How many heaps destroy:drop is hit for (those with s's chunk). */
static int drops(struct uslab_cache *s)
{
	int n = 0;

	for (struct thread_heap *p = heaps; p; p = p->next)
		n += p->chunks_used >> s->chunk & 1;
	return n;
}

/* The freer (whose heap is older than the owner's: dropped after it) holds
 * an open message with three of the owner's objects; everything else is
 * free. */
static void setup(struct ilv_ctx *x, const char *name, struct uslab_cache *other)
{
	memset(x, 0, sizeof(*x));
	actor_spawn(&pair[0], "pair0");
	actor_spawn(&pair[1], "pair1");
	actor_run(&pair[0], job_touch, other);
	actor_run(&pair[1], job_touch, other);
	/* the freer is the one whose heap destroy drops second (heaps made
	 * or recycled: the list order decides) */
	owner = drop_index(other, pair[0].heap) < drop_index(other, pair[1].heap) ? &pair[0] : &pair[1];
	freer = owner == &pair[0] ? &pair[1] : &pair[0];
	owner->name = "owner";
	freer->name = "freer";
	x->s = ilv_cache(name, 0);
	ilv_clear_hits(actors, 4);
	actor_run(owner, job_fill, x);
	x->lo = 0;
	x->hi = 3;
	actor_run(freer, job_free_range, x);
	x->lo = 3;
	x->hi = PER + 1;
	actor_run(owner, job_free_range, x);
	REQUIRE(*heap_outbox(freer->heap, x->s->id) != NULL);
	REQUIRE(drop_index(x->s, owner->heap) < drop_index(x->s, freer->heap));
}

static void exit_before_drops(bool fork_too, struct uslab_cache *other)
{
	struct ilv_ctx x;

	setup(&x, "exit-before-drops", other);
	void *a = x.objs[0];
	struct thread_heap *oh = owner->heap;
	int ndrops = drops(x.s);
	ilv_park_at(&destroyer, "destroy:drop");
	actor_start(&destroyer, job_destroy, &x);
	REQUIRE(ilv_wait_parked());
	/* every cpu slab flushed: A holds the three in the message, listed */
	CHECK(!ilv_frozen(a) && ilv_inuse(a) == 3 && ilv_listed(a));
	CHECK(mutex_is_locked(&heaps_lock));
	if (fork_too) {
		x.child_no_cache = true;   /* destroy may be anywhere in the child */
		actor_start(&forker, job_fork, &x);
		if (!ilv_wait_sleeper(&heaps_lock, &forker)) {
			fprintf(stderr, "exit_before_drops: a fork went through during destroy's flush\n");
			test_failures++;
		}
	} else {
		actor_quit(freer);
		ilv_wait_hits(freer, "flush:slabs", 1);   /* its messages are out */
		CHECK(mailbox_peek(heap_inbox(oh, x.s->id)) != 0);
	}
	ilv_release();
	actor_join(&destroyer);
	if (fork_too) {
		actor_join(&forker);
		actor_quit(freer);
	}
	actor_reap(freer);
	CHECK_EQ(x.result, 0);   /* the message's objects found, none live */
	CHECK_EQ(ilv_hits(&destroyer, "destroy:drop"), ndrops);
	actor_exit(owner);
}

static void exit_between_drops(struct uslab_cache *other)
{
	struct ilv_ctx x;

	setup(&x, "exit-between-drops", other);
	struct thread_heap *oh = owner->heap;
	/* parked after the owner's heap's drop, before the next */
	ilv_park_at_nth(&destroyer, "destroy:drop", drop_index(x.s, oh) + 1);
	actor_start(&destroyer, job_destroy, &x);
	REQUIRE(ilv_wait_parked());
	actor_quit(freer);
	ilv_wait_hits(freer, "flush:slabs", 1);
	CHECK(mailbox_peek(heap_inbox(oh, x.s->id)) != 0);   /* posted behind destroy */
	ilv_release();
	actor_join(&destroyer);
	actor_reap(freer);
	if (x.result == -EBUSY) {
		printf("KNOWN WRONG: destroy said -EBUSY for the three objects of a message posted "
		       "to a heap it had dropped already; it should find them\n");
		actor_run(&destroyer, job_destroy, &x);   /* the second drops them */
		CHECK_EQ(x.result, 0);
	} else if (x.result == 0) {
		fprintf(stderr, "exit_between_drops: destroy now finds the late message: expect 0 "
				"from now on (and update docs/model.md)\n");
		test_failures++;
	} else {
		fprintf(stderr, "exit_between_drops: destroy returned %ld\n", x.result);
		test_failures++;
	}
	actor_exit(owner);
}

int main(void)
{
	ilv_init();
	struct uslab_cache *other = ilv_cache("other", 0);   /* in the same heap chunk */

	actor_spawn(&destroyer, "destroyer");
	actor_spawn(&forker, "forker");
	exit_before_drops(false, other);
	exit_before_drops(true, other);
	exit_between_drops(other);
	actor_exit(&destroyer);
	actor_exit(&forker);
	CHECK_EQ(uslab_cache_destroy(other), 0);
	return test_done("interleave_destroy");
}
