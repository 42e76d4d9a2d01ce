/* SPDX-License-Identifier: MIT */
/*
 * stats_cached_stress - free objects that other live threads keep on their
 * own lists are "cached by threads" in a report, not objects in use.
 *
 * THREADS threads each allocate a slab's worth of objects of one cache and
 * one more: the first slab runs dry and stays frozen for the thread (on its
 * cpu-partial list), the last object comes from a second slab, its active
 * one. Each then frees the first slab's objects - owner-local frees, which
 * the cache API makes in its free slow path, where the thread publishes its
 * count - and waits, alive, holding one object. So every object the threads
 * keep is counted by a slow path (docs/stats.md, "Cached by threads"), and
 * the main thread's reports must say, for the cache:
 *   a call's JSON    live_objects == THREADS (exactly: the one each holds),
 *                    cached_objects >= THREADS x objects_per_slab;
 *   the table        the same live count in the cache's row;
 *   the snapshot     (the signal's JSON) cached_objects as large, and
 *                    live_objects >= THREADS (it counts slots not built yet);
 * and in each, the top-level cached_bytes holds at least those objects and
 * the account's parts add up to the total. After the threads have exited
 * (their lists flushed), nothing of the cache is cached or live.
 */
#define _GNU_SOURCE
#include "test.h"
#include "stats_json.h"
#include "stats_signal.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#define THREADS 4
#define NAME    "stats-cached-mt"

static struct uslab_cache *cache;
static long per_slab, stride;
static pthread_barrier_t freed, done;

static void *worker(void *arg)
{
	void **p = calloc((size_t)per_slab + 1, sizeof(*p));

	(void)arg;
	REQUIRE(p);
	for (long i = 0; i <= per_slab; i++) {
		REQUIRE((p[i] = uslab_cache_alloc(cache)) != NULL);
		test_fill(p[i], (size_t)stride);
	}
	for (long i = 0; i < per_slab; i++) {   /* the dry slab's: owner-local */
		CHECK(test_intact(p[i], (size_t)stride));
		uslab_cache_free(cache, p[i]);
	}
	pthread_barrier_wait(&freed);
	pthread_barrier_wait(&done);   /* alive while the reports are taken */
	CHECK(test_intact(p[per_slab], (size_t)stride));
	uslab_cache_free(cache, p[per_slab]);
	free(p);
	return NULL;
}

/* The cache's live and cached objects in one JSON report, and its account
 * added up; false (and a message) if the cache is missing. */
static bool report_cache(const char *json, const char *which, long *live, long *cached)
{
	struct stats_obj o;
	long sum = stats_account_sum(json), total = stats_json_top(json, "total_committed_bytes");

	if (sum != total) {
		fprintf(stderr, "%s: the account's parts add up to %ld, the total is %ld\n", which,
			sum, total);
		test_failures++;
	}
	if (!stats_json_cache(json, NAME, &o)) {
		fprintf(stderr, "%s: cache %s is not in the report\n", which, NAME);
		test_failures++;
		return false;
	}
	*live = stats_obj_get(&o, "live_objects");
	*cached = stats_obj_get(&o, "cached_objects");
	printf("%s: live %ld, cached %ld objects; cached_bytes %ld, objects_bytes %ld\n", which,
	       *live, *cached, stats_json_top(json, "cached_bytes"),
	       stats_json_top(json, "objects_bytes"));
	return true;
}

/* What the threads keep, in a report taken while they wait. */
static void check_threads_cached(const char *json, const char *which, bool exact_live)
{
	long live, cached, want = THREADS * per_slab;

	if (!report_cache(json, which, &live, &cached))
		return;
	if (exact_live ? live != THREADS : live < THREADS) {
		fprintf(stderr, "%s: %ld live objects, the threads hold %d\n", which, live, THREADS);
		test_failures++;
	}
	if (cached < want) {
		fprintf(stderr, "%s: %ld cached objects, the threads keep at least %ld\n", which,
			cached, want);
		test_failures++;
	}
	CHECK(stats_json_top(json, "cached_bytes") >= want * stride);
}

/* The live column of the cache's row in the table. */
static long table_live(const char *table)
{
	const char *row = strstr(table, "\n" NAME " ");
	long live = -1;

	if (!row || sscanf(row, " %*s %*s %ld", &live) != 1)
		fprintf(stderr, "the table has no row %s:\n%s", NAME, table);
	return live;
}

int main(void)
{
	struct stats_signal sig;
	struct uslab_cache_info info;
	pthread_t tid[THREADS];
	long live, cached;

	alarm(120);
	stats_signal_setup(&sig, "uslab-cached-stress");
	REQUIRE((cache = uslab_cache_create(NAME, 256, 0, 0, NULL)) != NULL);
	REQUIRE(uslab_cache_info(cache, &info) == 0);
	per_slab = (long)info.objects_per_slab;
	stride = (long)info.object_size;

	pthread_barrier_init(&freed, NULL, THREADS + 1);
	pthread_barrier_init(&done, NULL, THREADS + 1);
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_create(&tid[i], NULL, worker, NULL) == 0);
	pthread_barrier_wait(&freed);

	char *json = stats_json_dump();
	REQUIRE(json);
	check_threads_cached(json, "a call's report", true);
	free(json);

	char *table = stats_table_dump();
	REQUIRE(table);
	CHECK_EQ(table_live(table), THREADS);
	free(table);

	json = stats_signal_snapshot(&sig);
	check_threads_cached(json, "the snapshot", false);
	free(json);

	pthread_barrier_wait(&done);
	for (int i = 0; i < THREADS; i++)
		pthread_join(tid[i], NULL);
	json = stats_json_dump();
	REQUIRE(json);
	if (report_cache(json, "after the threads", &live, &cached)) {
		CHECK_EQ(live, 0);
		CHECK_EQ(cached, 0);
	}
	free(json);

	CHECK_EQ(uslab_cache_destroy(cache), 0);
	stats_signal_teardown(&sig);
	return test_done("stats_cached_stress");
}
