/* SPDX-License-Identifier: MIT */
/*
 * interleave_exit - thread exit racing a remote free by message
 * (docs/model.md, "Interleaving points"). The owner has slab A on its
 * cpu-partial list, every object live; another thread frees 59 of them (a
 * full message to the owner's heap, posted by the 59th free):
 *
 *   post_after_exit   the freer has addressed the message and is about to
 *                     post it; the owner exits (its exit closes its inbox,
 *                     then gives A up, FULL); the post finds the inbox
 *                     closed and the objects go home by dwcas, freezing A
 *                     for the freer
 *   post_during_exit  the owner's exit has closed its inboxes and not yet
 *                     given its slabs up; the post is refused and the
 *                     objects are pushed onto the still frozen A; the
 *                     owner's release then finds them (A PARTIAL)
 *
 * and each again with a fork() taken while a thread is parked: the freer's
 * point holds no lock, so the test forks there; the exit's point is under
 * the exiting heap's own lock, so a third thread forks and its fork must
 * wait for the exit flush to let go of it.
 */
#include "interleave.h"

static struct actor owner, freer, forker;
static struct actor *const actors[] = { &owner, &freer, &forker };

static void setup(struct ilv_ctx *x, const char *name)
{
	memset(x, 0, sizeof(*x));
	x->s = ilv_cache(name, 0);   /* remote frees by message */
	actor_spawn(&owner, "owner");
	ilv_clear_hits(actors, 3);
	actor_run(&owner, job_fill, x);
	REQUIRE(ilv_frozen(x->objs[0]) && ilv_slab(x->objs[0])->owner == owner.heap);
}

/* The freer frees what is left of A and B, flushes, and the end is checked. */
static void finish(struct ilv_ctx *x)
{
	x->lo = MSG_OBJS;
	x->hi = PER + 1;
	actor_run(&freer, job_free_range, x);
	actor_run(&freer, job_flush, x);
	ilv_settle(x->s, x->set, 2 * PER);
}

static void post_after_exit(bool fork_too)
{
	struct ilv_ctx x;

	setup(&x, "post-after-exit");
	void *a = x.objs[0];
	struct thread_heap *th = owner.heap;
	x.lo = 0;
	x.hi = MSG_OBJS;
	ilv_park_at(&freer, "msg:post");
	actor_start(&freer, job_free_range, &x);
	REQUIRE(ilv_wait_parked());
	CHECK(ilv_frozen(a) && ilv_inuse(a) == PER);   /* the objects are in the message */
	actor_exit(&owner);
	CHECK(mailbox_closed(heap_inbox(th, x.s->id)));
	CHECK(!ilv_frozen(a) && ilv_inuse(a) == PER && !ilv_listed(a));   /* FULL */
	if (fork_too) {
		x.child_problems = 0;
		ilv_fork(ilv_child_check, &x, "with a message about to be posted to an exited heap");
	}
	ilv_release();
	actor_join(&freer);
	CHECK_EQ(ilv_hits(&freer, "msg:post"), 1);
	CHECK(mailbox_peek(heap_inbox(th, x.s->id)) == MAILBOX_CLOSED);   /* nothing landed */
	/* refused: home by dwcas, FULL -> FROZEN for the freer */
	CHECK(ilv_frozen(a) && ilv_inuse(a) == PER - MSG_OBJS);
	CHECK(ilv_slab(a)->owner == freer.heap);
	CHECK_EQ(uslab_cache_validate(x.s), 0);
	finish(&x);
}

static void post_during_exit(bool fork_too)
{
	struct ilv_ctx x;

	setup(&x, "post-during-exit");
	void *a = x.objs[0];
	struct thread_heap *th = owner.heap;
	ilv_park_at(&owner, "flush:slabs");
	actor_quit(&owner);
	REQUIRE(ilv_wait_parked());
	CHECK(mailbox_closed(heap_inbox(th, x.s->id)));
	CHECK(ilv_frozen(a) && ilv_inuse(a) == PER);   /* not given up yet */
	CHECK(mutex_is_locked(&th->lock));
	x.lo = 0;
	x.hi = MSG_OBJS;
	if (fork_too) {
		x.child_problems = 0;
		actor_start(&forker, job_fork, &x);
		if (!ilv_wait_sleeper(&th->lock, &forker)) {
			fprintf(stderr, "post_during_exit: a fork went through during an exit flush\n");
			test_failures++;
		}
	} else {
		actor_run(&freer, job_free_range, &x);
		CHECK_EQ(ilv_hits(&freer, "msg:post"), 1);
		/* refused, pushed onto the frozen slab: FROZEN -> FROZEN */
		CHECK(ilv_frozen(a) && ilv_inuse(a) == PER - MSG_OBJS && !ilv_listed(a));
	}
	ilv_release();
	actor_reap(&owner);
	if (fork_too) {
		actor_join(&forker);
		CHECK(!ilv_frozen(a) && ilv_inuse(a) == PER && !ilv_listed(a));   /* FULL */
		/* nobody owns A now: the frees are cached as foreign by the freer */
		actor_run(&freer, job_free_range, &x);
		CHECK(!ilv_frozen(a) && ilv_inuse(a) == PER);
	} else {
		/* its release took the pushed objects into account: PARTIAL */
		CHECK(!ilv_frozen(a) && ilv_inuse(a) == PER - MSG_OBJS && ilv_listed(a));
	}
	CHECK(mailbox_peek(heap_inbox(th, x.s->id)) == MAILBOX_CLOSED);
	CHECK_EQ(uslab_cache_validate(x.s), 0);
	finish(&x);
}

int main(void)
{
	ilv_init();
	actor_spawn(&freer, "freer");
	actor_spawn(&forker, "forker");
	for (int f = 0; f < 2; f++) {
		post_after_exit(f);
		post_during_exit(f);
	}
	actor_exit(&freer);
	actor_exit(&forker);
	return test_done("interleave_exit");
}
