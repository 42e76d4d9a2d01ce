/* SPDX-License-Identifier: MIT */
/*
 * interleave_last_free - a free racing the last free that empties a slab
 * (docs/model.md, "Interleaving points"), on a PARTIAL slab A:
 *
 *   second_to_last  two frees of A's last two live objects: the first reads
 *                   the word (it would leave one in use: no lock), the
 *                   second goes through, the first's dwcas fails and its
 *                   retry is now the emptying free (list_lock, EMPTY, kept)
 *   last_then_take  the emptying free reads the word (it will need the
 *                   lock), an allocating thread takes A off the partial list
 *                   and freezes it, the free's retry pushes onto the frozen
 *                   slab without the lock
 *   empty_then_shrink  the emptying free holds list_lock from before its
 *                   dwcas until it has kept or discarded A: a shrink must
 *                   wait for it, or it would discard A under the freer
 *
 * and each again with a fork() taken while the freer is parked (for
 * empty_then_shrink, under list_lock, from a third thread that must wait).
 * The caches free remotely by dwcas (USLAB_REMOTE_IMMEDIATE).
 */
#include "interleave.h"

static struct actor owner, freer, other, forker;
static struct actor *const actors[] = { &owner, &freer, &other, &forker };

/* A PARTIAL slab A (objs[0..PER)) with objs[0..live) live and listed; B
 * (objs[PER]) the owner's active slab. */
static void setup(struct ilv_ctx *x, const char *name, unsigned live)
{
	memset(x, 0, sizeof(*x));
	x->s = ilv_cache(name, USLAB_REMOTE_IMMEDIATE);
	ilv_clear_hits(actors, 4);
	actor_run(&owner, job_fill, x);
	x->lo = live;
	x->hi = PER;
	actor_run(&owner, job_free_range, x);   /* owner-local */
	actor_run(&owner, job_drain, x);        /* unfreeze: PARTIAL */
	REQUIRE(!ilv_frozen(x->objs[0]) && ilv_inuse(x->objs[0]) == live &&
		ilv_listed(x->objs[0]));
}

/* Free what is still live (B's object on the owner: it is its active slab),
 * flush everyone, and check the end. */
static void finish(struct ilv_ctx *x, void *const *set, size_t n)
{
	x->one = x->objs[PER];
	actor_run(&owner, job_free_one, x);
	for (int i = 0; i < 4; i++)
		actor_run(actors[i], job_flush, x);
	ilv_settle(x->s, set, n);
}

static void second_to_last(bool fork_too)
{
	struct ilv_ctx x, y;
	void *a;

	setup(&x, "second-to-last", 2);
	a = x.objs[0];
	y = x;
	x.one = x.objs[0];
	y.one = x.objs[1];
	ilv_park_at(&freer, "free:cas");
	actor_start(&freer, job_free_one, &x);
	REQUIRE(ilv_wait_parked());
	actor_run(&other, job_free_one, &y);   /* PARTIAL -> PARTIAL, no lock */
	CHECK(!ilv_frozen(a) && ilv_inuse(a) == 1 && ilv_listed(a));
	CHECK_EQ(y.retries, 0);
	if (fork_too) {
		x.child_problems = 0;
		ilv_fork(ilv_child_check, &x, "with a free parked before its dwcas");
	}
	ilv_release();
	actor_join(&freer);
	CHECK_EQ(ilv_hits(&freer, "free:cas"), 2);
	CHECK_EQ(x.retries, 1);
	CHECK(!ilv_frozen(a) && ilv_inuse(a) == 0 && ilv_listed(a));   /* EMPTY, kept */
	CHECK_EQ(uslab_cache_validate(x.s), 0);
	finish(&x, x.set, 2 * PER);
}

static void last_then_take(bool fork_too)
{
	struct ilv_ctx x, y;
	void *a;

	setup(&x, "last-then-take", 1);
	a = x.objs[0];
	x.one = a;
	ilv_park_at(&freer, "free:cas");
	actor_start(&freer, job_free_one, &x);
	REQUIRE(ilv_wait_parked());
	CHECK(!mutex_is_locked(&x.s->list_lock));   /* parked before taking it */
	y = x;
	actor_run(&other, job_alloc_one, &y);   /* PARTIAL -> FROZEN for other */
	CHECK(ilv_slab(y.one) == ilv_slab(a));
	CHECK(ilv_frozen(a) && !ilv_listed(a) && ilv_slab(a)->owner == other.heap);
	/* what other took: every free object, or a few while it has made few
	 * refills (the rest stays in A's word: cpu.c, cold_refill_objects) */
	unsigned held = ilv_inuse(a) - 1;
	CHECK(held == PER - 1 || (held >= 1 && held <= COLD_REFILL_MAX));
	if (fork_too) {
		x.child_problems = 0;
		ilv_fork(ilv_child_check, &x, "with the emptying free parked before its dwcas");
	}
	ilv_release();
	actor_join(&freer);
	CHECK_EQ(ilv_hits(&freer, "free:cas"), 2);
	CHECK_EQ(x.retries, 1);
	/* pushed onto the frozen slab: what other holds is all that is in use */
	CHECK(ilv_frozen(a) && ilv_inuse(a) == held && !ilv_listed(a));
	CHECK_EQ(uslab_cache_validate(x.s), 0);
	actor_run(&other, job_free_one, &y);
	finish(&x, x.set, 2 * PER);
}

static void job_shrink(struct actor *a)
{
	struct ilv_ctx *x = a->arg;

	uslab_cache_shrink(x->s);
}

static void empty_then_shrink(bool fork_too)
{
	struct ilv_ctx x;
	void *a;

	setup(&x, "empty-then-shrink", 1);
	a = x.objs[0];
	x.one = a;
	ilv_park_at(&freer, "free:after_cas");
	actor_start(&freer, job_free_one, &x);
	REQUIRE(ilv_wait_parked());
	/* EMPTY by its dwcas, still listed, list_lock held */
	CHECK(!ilv_frozen(a) && ilv_inuse(a) == 0 && ilv_listed(a));
	CHECK(mutex_is_locked(&x.s->list_lock));
	struct actor *racer = fork_too ? &forker : &other;
	actor_start(racer, fork_too ? job_fork : job_shrink, &x);
	if (!ilv_wait_sleeper(&x.s->list_lock, racer)) {
		fprintf(stderr, "empty_then_shrink: %s went through while the emptying free held "
				"list_lock (or had not taken it before its dwcas)\n",
			fork_too ? "a fork" : "a shrink");
		test_failures++;
	}
	ilv_release();
	actor_join(&freer);
	actor_join(racer);
	CHECK_EQ(ilv_hits(&freer, "free:cas"), 1);
	if (fork_too) {
		CHECK(!ilv_frozen(a) && ilv_inuse(a) == 0 && ilv_listed(a));   /* kept */
		actor_run(&other, job_shrink, &x);
	}
	CHECK_EQ(x.s->nr_partial, 0);   /* the shrink discarded it */
	CHECK_EQ(atomic_long_read(&x.s->nr_slabs), 1);
	CHECK_EQ(uslab_cache_validate(x.s), 0);
	finish(&x, x.set + PER, PER);   /* A is gone: B's objects only */
}

int main(void)
{
	ilv_init();
	for (int i = 0; i < 4; i++)
		actor_spawn(actors[i], i == 0 ? "owner" : i == 1 ? "freer" : i == 2 ? "other" : "forker");
	for (int f = 0; f < 2; f++) {
		second_to_last(f);
		last_then_take(f);
		empty_then_shrink(f);
	}
	for (int i = 0; i < 4; i++)
		actor_exit(actors[i]);
	return test_done("interleave_last_free");
}
