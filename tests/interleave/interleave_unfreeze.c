/* SPDX-License-Identifier: MIT */
/*
 * interleave_unfreeze - a remote free racing an unfreeze (docs/model.md,
 * "Interleaving points"), each interleaving driven through the points:
 *
 *   unfreeze_first   the owner reads its slab's word (nothing free: it
 *                    would go FULL), a remote free pushes onto the still
 *                    frozen slab, the owner's dwcas fails and its retry
 *                    makes the slab PARTIAL, listed
 *   free_first       a remote free reads the frozen word (no lock needed),
 *                    the owner unfreezes the slab FULL, the free's dwcas
 *                    fails and its retry freezes the slab for the freer
 *   list_add         the owner's dwcas has made the slab PARTIAL; until it
 *                    has listed it (list_lock held across both) a free that
 *                    empties it must wait for the lock
 *
 * and each again with a fork() taken while the thread is parked (for
 * list_add, which parks under list_lock, from a third thread, whose fork
 * must wait for the lock). The owner's unfreeze is its cpu-partial drain
 * (cache_drain_cpu_partial), which holds no lock; the caches free remotely
 * by dwcas (USLAB_REMOTE_IMMEDIATE), so every free is one __slab_free.
 */
#include "interleave.h"

static struct actor owner, freer, forker;
static struct actor *const actors[] = { &owner, &freer, &forker };

static struct ilv_ctx *start(struct ilv_ctx *x, const char *name)
{
	memset(x, 0, sizeof(*x));
	x->s = ilv_cache(name, USLAB_REMOTE_IMMEDIATE);
	ilv_clear_hits(actors, 3);
	return x;
}

static void unfreeze_first(bool fork_too)
{
	struct ilv_ctx x;

	start(&x, "unfreeze-first");
	void *a = NULL;

	actor_run(&owner, job_fill, &x);
	a = x.objs[0];
	ilv_park_at(&owner, "unfreeze:cas");
	actor_start(&owner, job_drain, &x);
	REQUIRE(ilv_wait_parked());
	CHECK(ilv_frozen(a) && ilv_inuse(a) == PER);   /* read as FULL-to-be */
	x.one = x.objs[5];
	actor_run(&freer, job_free_one, &x);
	CHECK(ilv_frozen(a) && ilv_inuse(a) == PER - 1);   /* pushed, still frozen */
	CHECK_EQ(x.retries, 0);
	if (fork_too) {
		/* slab_release has cleared the owner fields: frozen, owned by
		 * nobody, for good in the child (docs/slab.md) */
		x.child_problems = 1;
		printf("the child's validate is to report that slab as frozen but owned by nobody:\n");
		fflush(stdout);
		ilv_fork(ilv_child_check, &x, "with the owner parked in slab_unfreeze");
	}
	ilv_release();
	actor_join(&owner);
	CHECK_EQ(ilv_hits(&owner, "unfreeze:cas"), 2);   /* the retry ran */
	CHECK_EQ(x.retries, 1);
	CHECK(!ilv_frozen(a) && ilv_inuse(a) == PER - 1 && ilv_listed(a));   /* PARTIAL */
	CHECK_EQ(uslab_cache_validate(x.s), 0);

	x.lo = 0;
	x.hi = PER + 1;
	x.objs[5] = NULL;   /* freed already */
	actor_run(&freer, job_free_range, &x);
	actor_run(&owner, job_flush, &x);
	actor_run(&freer, job_flush, &x);
	ilv_settle(x.s, x.set, 2 * PER);
}

static void free_first(bool fork_too)
{
	struct ilv_ctx x;

	start(&x, "free-first");
	void *a;

	actor_run(&owner, job_fill, &x);
	a = x.objs[0];
	x.one = x.objs[5];
	ilv_park_at(&freer, "free:cas");
	actor_start(&freer, job_free_one, &x);
	REQUIRE(ilv_wait_parked());
	actor_run(&owner, job_drain, &x);
	CHECK(!ilv_frozen(a) && ilv_inuse(a) == PER && !ilv_listed(a));   /* FULL */
	if (fork_too) {
		x.child_problems = 0;
		ilv_fork(ilv_child_check, &x, "with a remote free parked in __slab_free");
	}
	ilv_release();
	actor_join(&freer);
	CHECK_EQ(ilv_hits(&freer, "free:cas"), 2);
	CHECK_EQ(x.retries, 1);
	/* FULL -> FROZEN for the freer, onto its cpu-partial list */
	CHECK(ilv_frozen(a) && ilv_inuse(a) == PER - 1 && !ilv_listed(a));
	CHECK(ilv_slab(a)->owner == freer.heap);
	CHECK_EQ(uslab_cache_validate(x.s), 0);
	actor_run(&freer, job_alloc_one, &x);   /* its next allocation takes it back */
	CHECK(x.one == x.objs[5]);

	x.lo = 0;
	x.hi = PER + 1;
	actor_run(&freer, job_free_range, &x);
	actor_run(&owner, job_flush, &x);
	actor_run(&freer, job_flush, &x);
	ilv_settle(x.s, x.set, 2 * PER);
}

static void list_add(bool fork_too)
{
	struct ilv_ctx x, y;

	start(&x, "list-add");
	void *a;

	actor_run(&owner, job_fill, &x);
	a = x.objs[0];
	x.lo = 1;   /* the owner frees all of A but objs[0]: owner-local */
	x.hi = PER;
	actor_run(&owner, job_free_range, &x);
	ilv_park_at(&owner, "unfreeze:after_cas");
	actor_start(&owner, job_drain, &x);
	REQUIRE(ilv_wait_parked());
	/* the dwcas made it PARTIAL (one live), not listed yet, lock held */
	CHECK(!ilv_frozen(a) && ilv_inuse(a) == 1 && !ilv_listed(a));
	CHECK(mutex_is_locked(&x.s->list_lock));
	if (fork_too) {
		x.child_problems = 0;
		actor_start(&forker, job_fork, &x);
		if (!ilv_wait_sleeper(&x.s->list_lock, &forker)) {
			fprintf(stderr, "list_add: a fork went through while the owner held list_lock\n");
			test_failures++;
		}
	} else {
		y = x;   /* its own: it ends while the owner's job does */
		y.one = a;   /* the last live object: this free empties the slab */
		actor_start(&freer, job_free_one, &y);
		if (!ilv_wait_sleeper(&x.s->list_lock, &freer)) {
			fprintf(stderr, "list_add: the emptying free went through between the owner's "
					"dwcas and its add_partial (list_lock not held across them)\n");
			test_failures++;
		}
	}
	ilv_release();
	actor_join(&owner);
	actor_join(fork_too ? &forker : &freer);
	if (fork_too) {
		CHECK(!ilv_frozen(a) && ilv_inuse(a) == 1 && ilv_listed(a));   /* PARTIAL */
		x.one = a;
		actor_run(&freer, job_free_one, &x);
	}
	CHECK(!ilv_frozen(a) && ilv_inuse(a) == 0 && ilv_listed(a));   /* EMPTY, kept */
	CHECK_EQ(x.s->nr_partial, 1);
	CHECK_EQ(uslab_cache_validate(x.s), 0);

	x.one = x.objs[PER];
	actor_run(&freer, job_free_one, &x);
	actor_run(&owner, job_flush, &x);
	actor_run(&freer, job_flush, &x);
	ilv_settle(x.s, x.set, 2 * PER);
}

int main(void)
{
	ilv_init();
	actor_spawn(&owner, "owner");
	actor_spawn(&freer, "freer");
	actor_spawn(&forker, "forker");
	for (int f = 0; f < 2; f++) {
		unfreeze_first(f);
		free_first(f);
		list_add(f);
	}
	actor_exit(&owner);
	actor_exit(&freer);
	actor_exit(&forker);
	return test_done("interleave_unfreeze");
}
