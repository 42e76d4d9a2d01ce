/*
 * cache_remote_stress - objects allocated by one thread and freed by another.
 *
 * For each object size (8, 48 with a constructor, 1024, 5000) four phases run,
 * each on a fresh cache:
 *   pc     2 producers hand objects to 2 consumers through a ring; >= 90 % of
 *          all frees are remote (counted and checked).
 *   mixed  4 threads allocate, free their own objects, pass objects to each
 *          other and free what they are passed, at random.
 *   exit   rounds of 8 short-lived threads that each allocate 1000 objects,
 *          hand them over and exit with them live; 2 other threads free them
 *          while the next round allocates.
 *   race   owners repeatedly run their active slab dry, refill and flush
 *          (uslab_thread_flush) while freers hammer remote frees into the
 *          very slabs they are refilling from.
 * Every object is filled after allocation with a pattern derived from its
 * address and size and checked before it is freed; objects of the constructor
 * cache are also checked to be in their constructed state when allocated.
 * After each phase: uslab_cache_validate == 0, no live object, only empty
 * slabs left (at most min_partial), and uslab_cache_destroy == 0.
 * Last, once: uslab_cache_info() called while other threads allocate.
 *
 * Duration: USLAB_STRESS_SECONDS (default 2) per object size, shared by the
 * four phases. Every loop is bounded by time, not by count, so sanitizer
 * builds take about as long as release builds.
 */
#include "test.h"
#include "uslab.h"
#include "kmalloc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- the content pattern ------------------------------------------------------------- */

struct kind {
	const char *name;
	size_t size;               /* a multiple of 8 */
	bool ctor;
	unsigned flags;            /* uslab_cache_create's */
};

#define CTOR_SIZE  48
#define CTOR_MAGIC 0xC0115EEDC0115EEDull
#define CTOR_FILL  0x6363636363636363ull

static const struct kind kinds[] = {
	{ "8", 8, false, 0 },
	{ "48+ctor", CTOR_SIZE, true, 0 },
	{ "1024", 1024, false, 0 },
	{ "5000", 5000, false, 0 },
	/* every remote free is one dwcas at once; the kinds above cache other
	 * threads' objects of a cache line or more and flush them in runs */
	{ "256+immediate", 256, false, USLAB_REMOTE_IMMEDIATE },
};

static void obj_ctor(void *p)
{
	uint64_t *w = p;

	w[0] = CTOR_MAGIC ^ (uintptr_t)p;
	for (size_t i = 1; i < CTOR_SIZE / 8; i++)
		w[i] = CTOR_FILL;
}

static bool is_constructed(const void *p)
{
	const uint64_t *w = p;

	if (w[0] != (CTOR_MAGIC ^ (uintptr_t)p))
		return false;
	for (size_t i = 1; i < CTOR_SIZE / 8; i++)
		if (w[i] != CTOR_FILL)
			return false;
	return true;
}

/* ---- per-thread context: alloc + fill, check + free ------------------------------------- */

struct ctx {
	struct uslab_cache *c;
	const struct kind *k;
	double deadline;
	uint64_t rng;
	unsigned long allocs, frees, remote_frees, errors;
};

static void report(struct ctx *x, const void *p, const char *what, long at)
{
	if (x->errors++ < 5)
		fprintf(stderr, "cache_remote_stress: size %s: object %p: %s (at byte %ld)\n",
			x->k->name, p, what, at);
}

static void *t_alloc(struct ctx *x)
{
	void *p = uslab_cache_alloc(x->c);

	REQUIRE(p != NULL);
	if (((uintptr_t)p & 7) != 0)
		report(x, p, "misaligned", 0);
	if (x->k->ctor && !is_constructed(p))
		report(x, p, "not in its constructed state at allocation", 0);
	test_fill(p, x->k->size);
	x->allocs++;
	return p;
}

/* remote: the object was allocated by another thread */
static void t_free(struct ctx *x, void *p, bool remote)
{
	size_t bad = test_first_bad(p, x->k->size);

	if (bad < x->k->size)
		report(x, p, "pattern damaged while live", (long)bad);
	if (x->k->ctor)
		obj_ctor(p);          /* give it back constructed */
	uslab_cache_free(x->c, p);
	x->frees++;
	x->remote_frees += remote;
}

static void ctx_add(struct ctx *sum, const struct ctx *x)
{
	sum->allocs += x->allocs;
	sum->frees += x->frees;
	sum->remote_frees += x->remote_frees;
	sum->errors += x->errors;
}

/* ---- a ring of pointers: mutex, two condition variables, batch push/pop ------------------- */

#define RING_CAP 1024

struct ring {
	pthread_mutex_t mu;
	pthread_cond_t not_empty, not_full;
	void *slot[RING_CAP];
	size_t head, tail;         /* count = tail - head */
	int producers;             /* still pushing */
};

static void ring_init(struct ring *r, int producers)
{
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->not_empty, NULL);
	pthread_cond_init(&r->not_full, NULL);
	r->head = r->tail = 0;
	r->producers = producers;
}

static void ring_destroy(struct ring *r)
{
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->not_empty);
	pthread_cond_destroy(&r->not_full);
}

static void ring_push(struct ring *r, void *const *v, size_t n)
{
	pthread_mutex_lock(&r->mu);
	for (size_t i = 0; i < n; i++) {
		while (r->tail - r->head == RING_CAP)
			pthread_cond_wait(&r->not_full, &r->mu);
		r->slot[r->tail++ % RING_CAP] = v[i];
		pthread_cond_signal(&r->not_empty);
	}
	pthread_mutex_unlock(&r->mu);
}

/* Up to max pointers; 0 only when the ring is empty and every producer is done. */
static size_t ring_pop(struct ring *r, void **v, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&r->mu);
	while (r->tail == r->head && r->producers > 0)
		pthread_cond_wait(&r->not_empty, &r->mu);
	while (n < max && r->head != r->tail)
		v[n++] = r->slot[r->head++ % RING_CAP];
	pthread_cond_broadcast(&r->not_full);
	pthread_mutex_unlock(&r->mu);
	return n;
}

static void ring_producer_done(struct ring *r)
{
	pthread_mutex_lock(&r->mu);
	r->producers--;
	pthread_cond_broadcast(&r->not_empty);
	pthread_mutex_unlock(&r->mu);
}

/* ---- phase checks ---------------------------------------------------------------------- */

static struct uslab_cache *phase_cache(const struct kind *k)
{
	struct uslab_cache *c = uslab_cache_create(k->name, k->size, 0, k->flags,
						   k->ctor ? obj_ctor : NULL);

	REQUIRE(c != NULL);
	return c;
}

/* Everything is freed and every thread but this one has exited or flushed. */
static void phase_end(struct uslab_cache *c, const struct kind *k, const char *phase,
		      const struct ctx *sum, double secs)
{
	struct uslab_cache_info info;

	uslab_thread_flush();
	printf("  size %-8s %-6s %5.2fs  %9lu allocs  %9lu frees  %5.1f%% remote\n", k->name,
	       phase, secs, sum->allocs, sum->frees,
	       sum->frees ? 100.0 * sum->remote_frees / sum->frees : 0.0);
	fflush(stdout);
	CHECK_EQ(sum->errors, 0);
	CHECK_EQ(sum->allocs, sum->frees);
	CHECK(sum->allocs > 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_info(c, &info), 0);
	CHECK_EQ(info.live_objects, 0);
	CHECK_EQ(info.slabs, info.partial_slabs);       /* only EMPTY slabs, all listed */
	CHECK(info.partial_slabs <= c->min_partial);
	CHECK_EQ(info.slabs_allocated - info.slabs_freed, info.slabs);
	CHECK_EQ(uslab_cache_destroy(c), 0);
	if (test_failures)
		fprintf(stderr, "  (after size %s, phase %s)\n", k->name, phase);
}

/* ---- phase pc: producers -> consumers ------------------------------------------------------ */

#define BATCH 16

struct pc_arg {
	struct ctx x;
	struct ring *ring;
	pthread_t tid;
};

static void *pc_producer(void *arg)
{
	struct pc_arg *a = arg;
	struct ctx *x = &a->x;
	void *batch[BATCH];

	while (test_now() < x->deadline) {
		size_t n = 0;

		for (int i = 0; i < BATCH; i++) {
			void *p = t_alloc(x);
			if (i == 0)
				t_free(x, p, false);   /* one in BATCH stays local */
			else
				batch[n++] = p;
		}
		ring_push(a->ring, batch, n);
	}
	ring_producer_done(a->ring);
	return NULL;
}

static void *pc_consumer(void *arg)
{
	struct pc_arg *a = arg;
	void *batch[BATCH];
	size_t n;

	while ((n = ring_pop(a->ring, batch, BATCH)) > 0)
		for (size_t i = 0; i < n; i++)
			t_free(&a->x, batch[i], true);
	return NULL;
}

static void phase_pc(const struct kind *k, double secs)
{
	struct uslab_cache *c = phase_cache(k);
	struct ring ring;
	struct pc_arg a[4];
	struct ctx sum = { 0 };
	double t0 = test_now();

	ring_init(&ring, 2);
	for (int i = 0; i < 4; i++) {
		a[i] = (struct pc_arg){ .x = { .c = c, .k = k, .deadline = t0 + secs }, .ring = &ring };
		REQUIRE(pthread_create(&a[i].tid, NULL, i < 2 ? pc_producer : pc_consumer, &a[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(a[i].tid, NULL);
		ctx_add(&sum, &a[i].x);
	}
	ring_destroy(&ring);
	CHECK(sum.remote_frees * 10 >= sum.frees * 9);
	phase_end(c, k, "pc", &sum, test_now() - t0);
}

/* ---- phase mixed: everyone allocates, frees and passes objects around ----------------------- */

#define MIX_THREADS 4
#define MIX_LIVE    256
#define INBOX_CAP   4096

struct inbox {
	pthread_mutex_t mu;
	size_t n;
	void *obj[INBOX_CAP];
};

struct mix_arg {
	struct ctx x;
	int id;
	struct inbox *boxes;
	pthread_barrier_t *stop;
	pthread_t tid;
};

static bool inbox_put(struct inbox *b, void *p)
{
	bool ok;

	pthread_mutex_lock(&b->mu);
	ok = b->n < INBOX_CAP;
	if (ok)
		b->obj[b->n++] = p;
	pthread_mutex_unlock(&b->mu);
	return ok;
}

static size_t inbox_take(struct inbox *b, void **out)
{
	size_t n;

	pthread_mutex_lock(&b->mu);
	n = b->n;
	memcpy(out, b->obj, n * sizeof(void *));
	b->n = 0;
	pthread_mutex_unlock(&b->mu);
	return n;
}

static void *mix_thread(void *arg)
{
	struct mix_arg *a = arg;
	struct ctx *x = &a->x;
	void *live[MIX_LIVE];
	bool foreign[MIX_LIVE];       /* passed to us by another thread */
	void *got[INBOX_CAP];
	size_t nlive = 0;
	unsigned iter = 0;

	while ((iter++ & 63) || test_now() < x->deadline) {
		unsigned r = (unsigned)(test_rand(&x->rng) % 16);
		size_t i = nlive ? (size_t)(test_rand(&x->rng) % nlive) : 0;

		if (r < 6) {                               /* allocate */
			if (nlive < MIX_LIVE) {
				foreign[nlive] = false;
				live[nlive++] = t_alloc(x);
			}
		} else if (r < 10) {                       /* free one we hold */
			if (nlive) {
				t_free(x, live[i], foreign[i]);
				live[i] = live[--nlive];
				foreign[i] = foreign[nlive];
			}
		} else if (r < 13) {                       /* pass one on */
			int to = (a->id + 1 + (int)(test_rand(&x->rng) % (MIX_THREADS - 1))) %
				 MIX_THREADS;
			if (nlive && inbox_put(&a->boxes[to], live[i])) {
				live[i] = live[--nlive];
				foreign[i] = foreign[nlive];
			}
		} else {                                   /* take what we were passed */
			size_t n = inbox_take(&a->boxes[a->id], got);

			for (size_t j = 0; j < n; j++) {
				if (nlive < MIX_LIVE && (test_rand(&x->rng) & 1)) {
					foreign[nlive] = true;
					live[nlive++] = got[j];
				} else {
					t_free(x, got[j], true);
				}
			}
		}
	}
	/* nobody passes anything once everyone is past the barrier */
	pthread_barrier_wait(a->stop);
	size_t n = inbox_take(&a->boxes[a->id], got);
	for (size_t j = 0; j < n; j++)
		t_free(x, got[j], true);
	while (nlive) {
		nlive--;
		t_free(x, live[nlive], foreign[nlive]);
	}
	return NULL;
}

static void phase_mixed(const struct kind *k, double secs)
{
	struct uslab_cache *c = phase_cache(k);
	struct inbox boxes[MIX_THREADS];
	struct mix_arg a[MIX_THREADS];
	pthread_barrier_t stop;
	struct ctx sum = { 0 };
	double t0 = test_now();

	pthread_barrier_init(&stop, NULL, MIX_THREADS);
	for (int i = 0; i < MIX_THREADS; i++) {
		pthread_mutex_init(&boxes[i].mu, NULL);
		boxes[i].n = 0;
	}
	for (int i = 0; i < MIX_THREADS; i++) {
		a[i] = (struct mix_arg){
			.x = { .c = c, .k = k, .deadline = t0 + secs, .rng = 0x1234567ull * (i + 1) },
			.id = i, .boxes = boxes, .stop = &stop,
		};
		REQUIRE(pthread_create(&a[i].tid, NULL, mix_thread, &a[i]) == 0);
	}
	for (int i = 0; i < MIX_THREADS; i++) {
		pthread_join(a[i].tid, NULL);
		ctx_add(&sum, &a[i].x);
	}
	for (int i = 0; i < MIX_THREADS; i++)
		pthread_mutex_destroy(&boxes[i].mu);
	pthread_barrier_destroy(&stop);
	CHECK(sum.remote_frees > 0);
	phase_end(c, k, "mixed", &sum, test_now() - t0);
}

/* ---- phase exit: threads exit with live objects, others free them --------------------------- */

#define EXIT_THREADS 8
#define EXIT_OBJS    1000
#define EXIT_FREERS  2

struct exit_arg {
	struct ctx x;
	void **objs;               /* EXIT_OBJS for an allocator; a whole batch for a freer */
	int id;                    /* freer: frees objs[i] for i % EXIT_FREERS == id */
	pthread_t tid;
};

/* Up to EXIT_OBJS objects: it stops early at the phase deadline, so that a
 * slow round (10 threads on 2 cores, sanitizers) keeps the phase bounded. */
static void *exit_allocator(void *arg)
{
	struct exit_arg *a = arg;
	int i;

	for (i = 0; i < EXIT_OBJS; i++) {
		if (i % 32 == 31 && test_now() > a->x.deadline)
			break;
		a->objs[i] = t_alloc(&a->x);
	}
	for (; i < EXIT_OBJS; i++)
		a->objs[i] = NULL;
	return NULL;                 /* exits with all of them live */
}

static void *exit_freer(void *arg)
{
	struct exit_arg *a = arg;

	for (size_t i = a->id; i < EXIT_THREADS * EXIT_OBJS; i += EXIT_FREERS)
		if (a->objs[i])
			t_free(&a->x, a->objs[i], true);
	return NULL;
}

static void phase_exit(const struct kind *k, double secs)
{
	struct uslab_cache *c = phase_cache(k);
	static void *batch[2][EXIT_THREADS * EXIT_OBJS];
	struct exit_arg al[EXIT_THREADS], fr[EXIT_FREERS];
	struct ctx sum = { 0 };
	double t0 = test_now();
	unsigned long allocated = 0;
	int round = 0;

	/* round r allocates batch r % 2 while the freers empty batch (r - 1) % 2 */
	for (;; round++) {
		bool last = round >= 2 && test_now() >= t0 + secs;
		int cur = round % 2, prev = !cur;

		for (int t = 0; t < EXIT_THREADS && !last; t++) {
			al[t] = (struct exit_arg){ .x = { .c = c, .k = k, .deadline = t0 + secs },
						   .objs = &batch[cur][t * EXIT_OBJS] };
			REQUIRE(pthread_create(&al[t].tid, NULL, exit_allocator, &al[t]) == 0);
		}
		for (int f = 0; f < EXIT_FREERS && round > 0; f++) {
			fr[f] = (struct exit_arg){ .x = { .c = c, .k = k }, .objs = batch[prev], .id = f };
			REQUIRE(pthread_create(&fr[f].tid, NULL, exit_freer, &fr[f]) == 0);
		}
		for (int t = 0; t < EXIT_THREADS && !last; t++) {
			pthread_join(al[t].tid, NULL);
			ctx_add(&sum, &al[t].x);
		}
		unsigned long round_allocs = sum.allocs - allocated;
		allocated = sum.allocs;
		for (int f = 0; f < EXIT_FREERS && round > 0; f++) {
			pthread_join(fr[f].tid, NULL);
			ctx_add(&sum, &fr[f].x);
		}
		if (last)
			break;
		if (round == 0) {
			/* the allocators have exited: their slabs are unfrozen, the
			 * objects all live and owned by nobody */
			struct uslab_cache_info info;
			CHECK_EQ(uslab_cache_validate(c), 0);
			CHECK_EQ(uslab_cache_info(c, &info), 0);
			CHECK_EQ(info.live_objects, round_allocs);
		}
	}
	phase_end(c, k, "exit", &sum, test_now() - t0);
}

/* ---- phase race: remote frees into slabs their owner keeps refilling and flushing ------------ */

#define RACE_OWNERS 2
#define RACE_FREERS 3
#define RACE_HANDOFF 4

struct race_arg {
	struct ctx x;
	struct ring *ring;
	pthread_t tid;
	unsigned long flushes;
};

static void *race_owner(void *arg)
{
	struct race_arg *a = arg;
	struct ctx *x = &a->x;
	unsigned per = x->c->objects;
	size_t keep_max = per / 4 + 1, nkeep;
	void **keep = malloc(keep_max * sizeof(void *));
	void *hand[RACE_HANDOFF];
	unsigned burst = 0;

	REQUIRE(keep != NULL);
	while (test_now() < x->deadline) {
		size_t n = 0;

		/* one and a half slabs' worth: the private list runs dry and
		 * refills mid-burst, while the freers free the early objects */
		nkeep = 0;
		for (unsigned i = 0; i < per + per / 2 + 1; i++) {
			void *p = t_alloc(x);

			if (test_rand(&x->rng) % 8 == 0 && nkeep < keep_max) {
				keep[nkeep++] = p;
				continue;
			}
			hand[n++] = p;
			if (n == RACE_HANDOFF) {
				ring_push(a->ring, hand, n);
				n = 0;
			}
		}
		ring_push(a->ring, hand, n);
		while (nkeep)
			t_free(x, keep[--nkeep], false);
		if (++burst % 3 == 0) {
			uslab_thread_flush();   /* deactivate with remote frees in flight */
			a->flushes++;
		}
	}
	ring_producer_done(a->ring);
	free(keep);
	return NULL;
}

static void *race_freer(void *arg)
{
	struct race_arg *a = arg;
	void *got[RACE_HANDOFF];
	size_t n;

	while ((n = ring_pop(a->ring, got, RACE_HANDOFF)) > 0) {
		for (size_t i = 0; i < n; i++)
			t_free(&a->x, got[i], true);
		/* now and then unfreeze whatever our frees froze for us */
		if (test_rand(&a->x.rng) % 64 == 0) {
			uslab_thread_flush();
			a->flushes++;
		}
	}
	return NULL;
}

static void phase_race(const struct kind *k, double secs)
{
	struct uslab_cache *c = phase_cache(k);
	struct ring ring;
	struct race_arg a[RACE_OWNERS + RACE_FREERS];
	struct ctx sum = { 0 };
	unsigned long flushes = 0;
	double t0 = test_now();

	ring_init(&ring, RACE_OWNERS);
	for (int i = 0; i < RACE_OWNERS + RACE_FREERS; i++) {
		a[i] = (struct race_arg){
			.x = { .c = c, .k = k, .deadline = t0 + secs, .rng = 0xfeedull * (i + 7) },
			.ring = &ring,
		};
		REQUIRE(pthread_create(&a[i].tid, NULL, i < RACE_OWNERS ? race_owner : race_freer,
				       &a[i]) == 0);
	}
	for (int i = 0; i < RACE_OWNERS + RACE_FREERS; i++) {
		pthread_join(a[i].tid, NULL);
		ctx_add(&sum, &a[i].x);
		flushes += a[i].flushes;
	}
	ring_destroy(&ring);
	CHECK(flushes > 0);
	phase_end(c, k, "race", &sum, test_now() - t0);
}

/* ---- phase info: counters read while other threads allocate ---------------------------------
 *
 * uslab.h promises uslab_cache_info() a snapshot that is "exact when no thread
 * is allocating", so it must be safe (if inexact) while threads are. */

struct info_arg {
	struct ctx x;
	pthread_t tid;
};

static void *info_worker(void *arg)
{
	struct info_arg *a = arg;
	void *objs[1024];

	/* long runs of allocations: the head of the private list moves on
	 * faster than a reader that started at it can follow */
	while (test_now() < a->x.deadline) {
		for (int i = 0; i < 1024; i++)
			objs[i] = t_alloc(&a->x);
		for (int i = 0; i < 1024; i++)
			t_free(&a->x, objs[i], false);
	}
	return NULL;
}

static void phase_info(const struct kind *k, double secs)
{
	struct uslab_cache *c = phase_cache(k);
	struct info_arg a[2];
	struct ctx sum = { 0 };
	double t0 = test_now();
	unsigned long calls = 0, bad = 0;

	printf("  size %-8s info   uslab_cache_info() while 2 threads allocate\n", k->name);
	fflush(stdout);
	for (int i = 0; i < 2; i++) {
		a[i] = (struct info_arg){ .x = { .c = c, .k = k, .deadline = t0 + secs } };
		REQUIRE(pthread_create(&a[i].tid, NULL, info_worker, &a[i]) == 0);
	}
	while (test_now() < t0 + secs) {
		struct uslab_cache_info info;

		if (uslab_cache_info(c, &info) != 0 ||
		    info.live_objects > info.slabs_allocated * info.objects_per_slab)
			bad++;
		calls++;
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(a[i].tid, NULL);
		ctx_add(&sum, &a[i].x);
	}
	CHECK(calls > 0);
	CHECK_EQ(bad, 0);
	phase_end(c, k, "info", &sum, test_now() - t0);
}

int main(void)
{
	double per_size = test_stress_seconds(2.0);
	double t0 = test_now();

	printf("cache_remote_stress: dwcas path %s, %.1f s per object size\n", uslab_dwcas_path(),
	       per_size);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		const struct kind *k = &kinds[i];

		REQUIRE(k->size % 8 == 0);
		phase_pc(k, per_size * 0.3);
		phase_mixed(k, per_size * 0.3);
		phase_exit(k, per_size * 0.15);
		phase_race(k, per_size * 0.25);
	}
	/* last, so that a crash here cannot hide what the phases above found */
	phase_info(&kinds[0], per_size * 0.25);
	printf("cache_remote_stress: %.1f s\n", test_now() - t0);
	return test_done("cache_remote_stress");
}
