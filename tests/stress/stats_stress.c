/* SPDX-License-Identifier: MIT */
/*
 * stats_stress - the statistics count exactly what 4 threads did, with
 * cross-thread frees.
 *
 * Each worker allocates batches from a uslab cache (96-byte objects) and
 * from malloc's kmalloc-224 (uslab_malloc(200)), keeps some objects, frees
 * some itself in random order and posts about a third to another worker's
 * mailbox, which that worker frees (remote frees, full slabs frozen by a
 * remote free, owner-local frees all happen). Every object carries a
 * pattern derived from its address, checked before it is freed. Meanwhile
 * the main thread keeps writing the JSON report (it must be safe to read
 * while others allocate). After the join - each thread flushes its cpu
 * slabs at exit - the JSON must say, for both caches:
 *   alloc_fast + alloc_slow == allocations, free_fast + free_local +
 *   free_remote == frees == allocations, live_objects == 0,
 *   new_slab / slab_freed / slabs == uslab_cache_info's (for the cache).
 * USLAB_STRESS_SECONDS scales the number of rounds (default 2 = 1500).
 */
#define _GNU_SOURCE
#include "test.h"
#include "stats_json.h"
#include "uslab.h"

#include <pthread.h>
#include <stdatomic.h>

void kmalloc_startup_end(void);   /* internal.h (whose names this test reuses) */

#define THREADS  4
#define BATCH    256
#define OBJ_SIZE 96
#define KM_SIZE  200
#define MAILBOX  (BATCH * THREADS * 2)

struct mailbox {
	pthread_mutex_t lock;
	size_t n;
	void *slot[MAILBOX];
	unsigned char kind[MAILBOX];   /* 0 = cache object, 1 = malloc block */
};

struct worker {
	pthread_t tid;
	int id;
	long allocs[2], frees[2];
};

static struct uslab_cache *cache;
static struct mailbox box[THREADS];
static struct worker workers[THREADS];
static pthread_barrier_t done_sending;
static long rounds;
static atomic_int finished;   /* workers done with their rounds */

static void *obj_alloc(struct worker *w, int kind)
{
	void *p = kind ? uslab_malloc(KM_SIZE) : uslab_cache_alloc(cache);

	REQUIRE(p);
	test_fill(p, kind ? KM_SIZE : OBJ_SIZE);
	w->allocs[kind]++;
	return p;
}

static void obj_free(struct worker *w, void *p, int kind)
{
	REQUIRE(test_intact(p, kind ? KM_SIZE : OBJ_SIZE));
	if (kind)
		uslab_free(p);
	else
		uslab_cache_free(cache, p);
	w->frees[kind]++;
}

/* Free everything posted to us. */
static void drain(struct worker *w)
{
	static __thread void *slot[MAILBOX];
	static __thread unsigned char kind[MAILBOX];
	struct mailbox *b = &box[w->id];
	size_t n;

	pthread_mutex_lock(&b->lock);
	n = b->n;
	memcpy(slot, b->slot, n * sizeof(void *));
	memcpy(kind, b->kind, n);
	b->n = 0;
	pthread_mutex_unlock(&b->lock);
	for (size_t i = 0; i < n; i++)
		obj_free(w, slot[i], kind[i]);
}

/* Post p to another worker; false if its mailbox is full. */
static bool post(int to, void *p, int kind)
{
	struct mailbox *b = &box[to];
	bool ok;

	pthread_mutex_lock(&b->lock);
	ok = b->n < MAILBOX;
	if (ok) {
		b->slot[b->n] = p;
		b->kind[b->n++] = (unsigned char)kind;
	}
	pthread_mutex_unlock(&b->lock);
	return ok;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(w->id + 1);
	void *keep[BATCH * 2];
	unsigned char keep_kind[BATCH * 2];
	size_t nkeep = 0;

	for (long r = 0; r < rounds; r++) {
		size_t n = 1 + test_rand(&rng) % BATCH;

		for (size_t i = 0; i < n; i++) {
			int kind = (int)(test_rand(&rng) % 3 == 0);
			void *p = obj_alloc(w, kind);
			int to = (w->id + 1 + (int)(test_rand(&rng) % (THREADS - 1))) % THREADS;

			if (test_rand(&rng) % 3 == 0 && post(to, p, kind))
				continue;
			if (nkeep == BATCH * 2) {   /* full: free a random kept one */
				size_t k = test_rand(&rng) % nkeep;
				obj_free(w, keep[k], keep_kind[k]);
				keep[k] = keep[--nkeep];
				keep_kind[k] = keep_kind[nkeep];
			}
			keep[nkeep] = p;
			keep_kind[nkeep++] = (unsigned char)kind;
		}
		/* free a random part of what we keep, in random order */
		for (size_t m = test_rand(&rng) % (nkeep + 1); m > 0; m--) {
			size_t k = test_rand(&rng) % nkeep;
			obj_free(w, keep[k], keep_kind[k]);
			keep[k] = keep[--nkeep];
			keep_kind[k] = keep_kind[nkeep];
		}
		drain(w);
	}
	while (nkeep > 0) {
		nkeep--;
		obj_free(w, keep[nkeep], keep_kind[nkeep]);
	}
	atomic_fetch_add(&finished, 1);
	pthread_barrier_wait(&done_sending);   /* nobody posts any more */
	drain(w);
	return NULL;
}

static void check_totals(const char *name, int kind)
{
	char *json = stats_json_dump();
	struct stats_obj o;
	long allocs = 0, frees = 0;
	int before = test_failures;

	for (int i = 0; i < THREADS; i++) {
		allocs += workers[i].allocs[kind];
		frees += workers[i].frees[kind];
	}
	CHECK_EQ(allocs, frees);
	REQUIRE(json);
	if (!stats_json_cache(json, name, &o)) {
		fprintf(stderr, "cache %s is not in the JSON\n", name);
		test_failures++;
		free(json);
		return;
	}
	CHECK_EQ(stats_obj_allocs(&o), allocs);
	CHECK_EQ(stats_obj_frees(&o), frees);
	CHECK_EQ(stats_obj_get(&o, "live_objects"), allocs - frees);
	CHECK_EQ(stats_obj_get(&o, "slabs"),
		 stats_obj_get(&o, "new_slab") - stats_obj_get(&o, "slab_freed"));
	if (kind == 0) {
		/* other threads' objects went home: by message to a thread
		 * that keeps their slab, or cached by the freeing thread and
		 * given back in batches (which of the two depends on how many
		 * slabs each thread keeps, and on timing) */
		CHECK(stats_obj_get(&o, "free_remote") + stats_obj_get(&o, "foreign_flushed") > 0);
		struct uslab_cache_info info;

		CHECK_EQ(uslab_cache_info(cache, &info), 0);
		CHECK_EQ(stats_obj_get(&o, "new_slab"), info.slabs_allocated);
		CHECK_EQ(stats_obj_get(&o, "slab_freed"), info.slabs_freed);
		CHECK_EQ(stats_obj_get(&o, "slabs"), info.slabs);
		CHECK_EQ(info.live_objects, 0);
	}
	printf("  %-14s %ld allocs (fast %ld, slow %ld), frees: fast %ld, local %ld, remote %ld; "
	       "slabs new %ld, freed %ld\n", name, allocs, stats_obj_get(&o, "alloc_fast"),
	       stats_obj_get(&o, "alloc_slow"), stats_obj_get(&o, "free_fast"),
	       stats_obj_get(&o, "free_local"), stats_obj_get(&o, "free_remote"),
	       stats_obj_get(&o, "new_slab"), stats_obj_get(&o, "slab_freed"));
	if (test_failures != before)
		fprintf(stderr, "  the JSON for %s: %.*s\n", name, (int)(o.end - o.begin + 1),
			o.begin);
	free(json);
}

int main(void)
{
	long reports = 0;

	/* exact classes: the per-class counts below assume each size has its own */
	kmalloc_startup_end();
	rounds = (long)(750 * test_stress_seconds(2));
	if (rounds < 10)
		rounds = 10;
	cache = uslab_cache_create("stats-stress", OBJ_SIZE, 0, 0, NULL);
	REQUIRE(cache);
	for (int i = 0; i < THREADS; i++)
		pthread_mutex_init(&box[i].lock, NULL);
	pthread_barrier_init(&done_sending, NULL, THREADS);
	for (int i = 0; i < THREADS; i++) {
		workers[i].id = i;
		REQUIRE(pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]) == 0);
	}
	/* reports while the workers run: numbers are moving, must not crash */
	while (atomic_load(&finished) < THREADS) {
		char *json = stats_json_dump();

		REQUIRE(json);
		CHECK(strstr(json, "\"caches\": [") != NULL);
		free(json);
		reports++;
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(workers[i].tid, NULL);
	printf("stats_stress: %d threads x %ld rounds, %ld reports taken meanwhile\n", THREADS,
	       rounds, reports);
	check_totals("stats-stress", 0);
	check_totals("kmalloc-224", 1);
	CHECK(uslab_cache_validate(cache) == 0);
	CHECK_EQ(uslab_cache_destroy(cache), 0);
	return test_done("stats_stress");
}
