/* SPDX-License-Identifier: MIT */
/*
 * interleave.h - driving one race of the slab protocol through the
 * INTERLEAVE() points of the uslab_interleave library (docs/model.md,
 * "Interleaving points").
 *
 * Actors are long-lived threads that run one job at a time (actor_start,
 * actor_join), so each keeps its heap, and its slabs, between jobs. A test
 * parks an actor at a point (ilv_park_at before starting its job, then
 * ilv_wait_parked), has another actor take the racing step, and lets the
 * first go (ilv_release). The hook counts each actor's hits of each point,
 * so a test can tell that a retry ran. A thread waiting for an allocator
 * lock is seen on the lock word itself (ilv_wait_sleeper: mutex.h's 2, "a
 * waiter may be asleep"). Nothing depends on timing: the tests wait for a
 * state, never for a while (the 20 s bounds only turn a hang into a
 * message).
 *
 * The caches serve 256-byte objects: 64 to a one-unit slab, handed out in
 * address order by a fresh slab.
 */
#ifndef USLAB_INTERLEAVE_TEST_H
#define USLAB_INTERLEAVE_TEST_H

#include "test.h"
#include "uslab.h"
#include "api.h"
#include "cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#define OBJ_SIZE 256
#define PER      64   /* objects per slab at OBJ_SIZE */

/* The points of the library, in the order of docs/model.md's table. */
static const char *const ilv_points[] = {
	"unfreeze:cas", "unfreeze:after_cas", "free:cas", "free:after_cas",
	"msg:post", "flush:slabs", "destroy:drop",
};
#define NR_POINTS (int)(sizeof(ilv_points) / sizeof(ilv_points[0]))

struct actor {
	const char *name;
	pthread_t tid;
	void (*fn)(struct actor *);
	void *arg;
	bool posted, busy, quit;
	struct thread_heap *heap;   /* its heap, as its last job left it */
	long hits[NR_POINTS];
};

static pthread_mutex_t ilv_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ilv_cv = PTHREAD_COND_INITIALIZER;
static __thread struct actor *ilv_self;
static struct actor ilv_main = { .name = "main" };
static struct {
	struct actor *who;   /* parks at its next hit of point */
	int point, skip;   /* hits to let pass first */
	bool parked, go;
} ilv_park;

static inline int ilv_point_index(const char *point)
{
	for (int i = 0; i < NR_POINTS; i++)
		if (!strcmp(ilv_points[i], point))
			return i;
	fprintf(stderr, "interleave.h: point \"%s\" is not in ilv_points\n", point);
	abort();
}

/* ilv_mu held: wait on ilv_cv, failing the test after 20 s. */
static inline void ilv_wait_locked(const char *what)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	if (pthread_cond_timedwait(&ilv_cv, &ilv_mu, &until)) {
		fprintf(stderr, "interleave: stuck for 20 s waiting for %s\n", what);
		exit(1);
	}
}

static inline void ilv_hook(const char *point)
{
	int i = ilv_point_index(point);
	struct actor *a = ilv_self;

	if (!a)
		return;
	pthread_mutex_lock(&ilv_mu);
	a->hits[i]++;
	pthread_cond_broadcast(&ilv_cv);   /* ilv_wait_hits */
	if (ilv_park.who == a && ilv_park.point == i && !ilv_park.parked && ilv_park.skip-- == 0) {
		ilv_park.parked = true;
		pthread_cond_broadcast(&ilv_cv);
		while (!ilv_park.go)
			ilv_wait_locked("a release");
		ilv_park.who = NULL;
		pthread_cond_broadcast(&ilv_cv);
	}
	pthread_mutex_unlock(&ilv_mu);
}

static inline void *actor_main(void *arg)
{
	struct actor *a = arg;

	ilv_self = a;
	pthread_mutex_lock(&ilv_mu);
	for (;;) {
		while (!a->posted && !a->quit)
			pthread_cond_wait(&ilv_cv, &ilv_mu);
		if (!a->posted)
			break;
		a->posted = false;
		pthread_mutex_unlock(&ilv_mu);
		a->fn(a);
		pthread_mutex_lock(&ilv_mu);
		a->heap = tls_heap;
		a->busy = false;
		pthread_cond_broadcast(&ilv_cv);
	}
	pthread_mutex_unlock(&ilv_mu);
	return NULL;
}

static inline void ilv_init(void)
{
	ilv_self = &ilv_main;
	WRITE_ONCE(uslab_interleave_hook, ilv_hook);
}

static inline void actor_spawn(struct actor *a, const char *name)
{
	memset(a, 0, sizeof(*a));
	a->name = name;
	REQUIRE(pthread_create(&a->tid, NULL, actor_main, a) == 0);
}

/* Run fn(a) on a, without waiting for it. */
static inline void actor_start(struct actor *a, void (*fn)(struct actor *), void *arg)
{
	pthread_mutex_lock(&ilv_mu);
	REQUIRE(!a->busy);
	a->fn = fn;
	a->arg = arg;
	a->posted = a->busy = true;
	pthread_cond_broadcast(&ilv_cv);
	pthread_mutex_unlock(&ilv_mu);
}

static inline bool actor_busy(struct actor *a)
{
	pthread_mutex_lock(&ilv_mu);
	bool busy = a->busy;
	pthread_mutex_unlock(&ilv_mu);
	return busy;
}

static inline void actor_join(struct actor *a)
{
	pthread_mutex_lock(&ilv_mu);
	while (a->busy)
		ilv_wait_locked(a->name);
	pthread_mutex_unlock(&ilv_mu);
}

static inline void actor_run(struct actor *a, void (*fn)(struct actor *), void *arg)
{
	actor_start(a, fn, arg);
	actor_join(a);
}

/* The thread ends (actor_reap joins it): its heap's exit flush runs, in a
 * pthread key destructor, and may be parked at a point. */
static inline void actor_quit(struct actor *a)
{
	pthread_mutex_lock(&ilv_mu);
	a->quit = true;
	pthread_cond_broadcast(&ilv_cv);
	pthread_mutex_unlock(&ilv_mu);
}

static inline void actor_reap(struct actor *a)
{
	pthread_join(a->tid, NULL);
}

static inline void actor_exit(struct actor *a)
{
	actor_quit(a);
	actor_reap(a);
}

static inline long ilv_hits(struct actor *a, const char *point)
{
	pthread_mutex_lock(&ilv_mu);
	long n = a->hits[ilv_point_index(point)];
	pthread_mutex_unlock(&ilv_mu);
	return n;
}

/* A race starts: every actor's hits counted from zero. */
static inline void ilv_clear_hits(struct actor *const *actors, int n)
{
	pthread_mutex_lock(&ilv_mu);
	for (int i = 0; i < n; i++)
		memset(actors[i]->hits, 0, sizeof(actors[i]->hits));
	pthread_mutex_unlock(&ilv_mu);
}

/* a parks at its nth hit of point from now (set before a's job starts). */
static inline void ilv_park_at_nth(struct actor *a, const char *point, int nth)
{
	pthread_mutex_lock(&ilv_mu);
	REQUIRE(!ilv_park.who && nth >= 1);
	ilv_park.who = a;
	ilv_park.point = ilv_point_index(point);
	ilv_park.skip = nth - 1;
	ilv_park.parked = ilv_park.go = false;
	pthread_mutex_unlock(&ilv_mu);
}

static inline void ilv_park_at(struct actor *a, const char *point)
{
	ilv_park_at_nth(a, point, 1);
}

/* Until the actor ilv_park_at named is parked (true), or its job ended
 * without reaching the point (false: the test then says what it expected). */
static inline bool ilv_wait_parked(void)
{
	pthread_mutex_lock(&ilv_mu);
	struct actor *a = ilv_park.who;
	while (!ilv_park.parked && (a->busy || a->quit))   /* (an exit: until parked) */
		ilv_wait_locked(ilv_points[ilv_park.point]);
	bool parked = ilv_park.parked;
	if (!parked)
		ilv_park.who = NULL;
	pthread_mutex_unlock(&ilv_mu);
	return parked;
}

/* Until a has hit point n times (counting from ilv_clear_hits). */
static inline void ilv_wait_hits(struct actor *a, const char *point, long n)
{
	int i = ilv_point_index(point);

	pthread_mutex_lock(&ilv_mu);
	while (a->hits[i] < n)
		ilv_wait_locked(point);
	pthread_mutex_unlock(&ilv_mu);
}

static inline void ilv_release(void)
{
	pthread_mutex_lock(&ilv_mu);
	ilv_park.go = true;
	pthread_cond_broadcast(&ilv_cv);
	pthread_mutex_unlock(&ilv_mu);
}

/* Until a thread sleeps waiting for m (true), or racer's job ends (false:
 * m did not keep it out). */
static inline bool ilv_wait_sleeper(const mutex_t *m, struct actor *racer)
{
	for (int ms = 0; ms < 20000; ms++) {
		if (READ_ONCE(m->val) == 2)
			return true;
		if (!actor_busy(racer))
			return false;
		test_sleep_ms(1);
	}
	fprintf(stderr, "interleave: %s neither waits for the lock nor ends\n", racer->name);
	exit(1);
}

/* ---- fork while a thread is parked --------------------------------------------------- */

/*
 * fork() here; the child (this thread alone, the hook off) runs fn(arg)
 * and exits 0 when its checks held. The parent checks that it did. what
 * names the moment, for the message.
 */
static inline void ilv_fork(void (*fn)(void *), void *arg, const char *what)
{
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		WRITE_ONCE(uslab_interleave_hook, NULL);
		test_failures = 0;   /* the child's own checks */
		alarm(20);
		fn(arg);
		_exit(test_failures ? 1 : 0);
	}
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	/* (this call also links api/process.c, whose constructor registers the
	 * fork handlers: nothing else of a test's needs pulls it out of the
	 * static library) */
	if (!uslab_fork_took_locks_()) {
		fprintf(stderr, "fork %s: the fork handlers took no lock\n", what);
		test_failures++;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "fork %s: the child %s %d\n", what,
			WIFEXITED(status) ? "exited" : "was killed by signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		test_failures++;
	}
}

/* ---- caches, slabs, objects ------------------------------------------------------------ */

static inline struct uslab_cache *ilv_cache(const char *name, unsigned flags)
{
	struct uslab_cache *s = uslab_cache_create(name, OBJ_SIZE, 0, flags, NULL);

	REQUIRE(s && s->objects == PER);
	return s;
}

static inline struct slab *ilv_slab(const void *obj)
{
	struct slab *slab = ptr_to_slab(obj);

	REQUIRE(slab);
	return slab;
}

static inline dword_t ilv_word(void *obj)
{
	return dwcas_read(&ilv_slab(obj)->xword);
}

static inline unsigned ilv_inuse(void *obj)
{
	return ctr_inuse(ilv_word(obj).hi);
}

static inline bool ilv_frozen(void *obj)
{
	return ctr_frozen(ilv_word(obj).hi);
}

static inline bool ilv_listed(void *obj)
{
	return ilv_slab(obj)->on_partial;
}

/* The calling thread's failed-and-retried dwcas count for s. */
static inline long ilv_retries(struct uslab_cache *s)
{
	return tls_heap == &empty_heap ? 0 : heap_stat(tls_heap, s)[STAT_DWCAS_RETRY];
}

static inline int ilv_cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;

	return x < y ? -1 : x > y;
}

/*
 * Every object of set[0..n) is free: the calling thread allocates n
 * objects and each must be one of set, none twice (an object lost would
 * make room for one of a new slab; one freed twice would come back twice);
 * then frees them again.
 */
static inline void ilv_all_back(struct uslab_cache *s, void *const *set, size_t n)
{
	void **want = malloc(n * sizeof(*want)), **got = malloc(n * sizeof(*got));

	REQUIRE(want && got);
	memcpy(want, set, n * sizeof(*want));
	qsort(want, n, sizeof(*want), ilv_cmp_ptr);
	for (size_t i = 0; i < n; i++) {
		got[i] = uslab_cache_alloc(s);
		REQUIRE(got[i]);
	}
	qsort(got, n, sizeof(*got), ilv_cmp_ptr);
	size_t strangers = 0, twice = 0;
	for (size_t i = 0; i < n; i++) {
		if (i && got[i] == got[i - 1])
			twice++;
		else if (!bsearch(&got[i], want, n, sizeof(*want), ilv_cmp_ptr))
			strangers++;
	}
	if (strangers || twice) {
		fprintf(stderr, "allocating the %zu objects back: %zu from elsewhere (objects lost), "
				"%zu twice\n", n, strangers, twice);
		test_failures++;
	}
	for (size_t i = 0; i < n; i++)
		uslab_cache_free(s, got[i]);
	free(want);
	free(got);
}

/* The end of a race: consistent, nothing live, every object back once,
 * and the cache destroyed. Every actor has flushed or exited. */
static inline void ilv_settle(struct uslab_cache *s, void *const *set, size_t n)
{
	struct uslab_cache_info info;

	CHECK_EQ(uslab_cache_validate(s), 0);
	REQUIRE(uslab_cache_info(s, &info) == 0);
	CHECK_EQ(info.live_objects, 0);
	ilv_all_back(s, set, n);
	uslab_thread_flush();
	CHECK_EQ(uslab_cache_validate(s), 0);
	CHECK_EQ(uslab_cache_destroy(s), 0);
}

/* ---- what a race works on, and the jobs the tests share -------------------------------- */

struct ilv_ctx {
	struct uslab_cache *s;
	void *objs[PER + 1];    /* job_fill: slab A whole, then B's first object */
	void *set[2 * PER];     /* every object of slabs A and B (ilv_slabs_set) */
	void *one;              /* job_free_one frees it, job_alloc_one sets it */
	unsigned lo, hi;        /* job_free_range: objs[lo..hi) */
	long retries;           /* the job's failed-and-retried dwcas */
	int child_problems;     /* what validate may find in a fork child */
	bool child_no_cache;    /* the child leaves the cache alone (being destroyed) */
	long result;            /* job_destroy's */
};

/* Slab A all allocated, then one object of a new slab B: A ran dry and is
 * on the thread's cpu-partial list (FROZEN, every object live), B active. */
static inline void job_fill(struct actor *a)
{
	struct ilv_ctx *x = a->arg;

	for (unsigned i = 0; i <= PER; i++)
		REQUIRE((x->objs[i] = uslab_cache_alloc(x->s)) != NULL);
	for (unsigned i = 1; i < PER; i++)
		REQUIRE(ptr_to_slab(x->objs[i]) == ptr_to_slab(x->objs[0]));
	REQUIRE(ptr_to_slab(x->objs[PER]) != ptr_to_slab(x->objs[0]));
	for (unsigned s = 0; s < 2; s++) {
		struct slab *slab = ilv_slab(x->objs[s * PER]);

		for (unsigned i = 0; i < PER; i++)
			x->set[s * PER + i] = (char *)slab->base + (size_t)i * x->s->stride;
	}
}

/* Give up the thread's cpu-partial slabs (the owner's unfreeze of A),
 * holding no lock: cache_drain_cpu_partial. */
static inline void job_drain(struct actor *a)
{
	struct ilv_ctx *x = a->arg;
	long before = ilv_retries(x->s);

	cache_drain_cpu_partial(x->s);
	x->retries = ilv_retries(x->s) - before;
}

static inline void job_free_one(struct actor *a)
{
	struct ilv_ctx *x = a->arg;
	long before = ilv_retries(x->s);

	uslab_cache_free(x->s, x->one);
	x->retries = ilv_retries(x->s) - before;
}

static inline void job_free_range(struct actor *a)
{
	struct ilv_ctx *x = a->arg;

	for (unsigned i = x->lo; i < x->hi; i++)
		uslab_cache_free(x->s, x->objs[i]);
}

static inline void job_alloc_one(struct actor *a)
{
	struct ilv_ctx *x = a->arg;

	x->one = uslab_cache_alloc(x->s);
}

static inline void job_flush(struct actor *a)
{
	uslab_thread_flush();
}

/* What a fork child checks (the hook is off, its one thread is the forking
 * one): x's cache holds no more problems than the parked thread's half-done
 * step explains, and the allocator works: x's cache, a new cache, malloc. */
static inline void ilv_child_check(void *arg)
{
	struct ilv_ctx *x = arg;
	void *p[2 * PER];

	if (!x->child_no_cache) {
		for (unsigned i = 0; i < 2 * PER; i++)
			REQUIRE((p[i] = uslab_cache_alloc(x->s)) != NULL);
		for (unsigned i = 0; i < 2 * PER; i++)
			uslab_cache_free(x->s, p[i]);
		uslab_thread_flush();
		CHECK_EQ(uslab_cache_validate(x->s), x->child_problems);
	}
	struct uslab_cache *c = ilv_cache("fork-child", 0);
	for (unsigned i = 0; i < 2 * PER; i++)
		REQUIRE((p[i] = uslab_cache_alloc(c)) != NULL);
	for (unsigned i = 0; i < 2 * PER; i++)
		uslab_cache_free(c, p[i]);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_destroy(c), 0);
	for (unsigned i = 0; i < 2 * PER; i++) {
		REQUIRE((p[i] = uslab_malloc(16 + i * 97)) != NULL);
		test_fill(p[i], 16 + i * 97);
	}
	for (unsigned i = 0; i < 2 * PER; i++) {
		CHECK(test_intact(p[i], 16 + i * 97));
		uslab_free(p[i]);
	}
}

static inline void job_fork(struct actor *a)
{
	ilv_fork(ilv_child_check, a->arg, "from a thread waiting for a lock");
}

#endif /* USLAB_INTERLEAVE_TEST_H */
