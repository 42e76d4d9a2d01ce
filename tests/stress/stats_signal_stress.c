/* SPDX-License-Identifier: MIT */
/*
 * stats_signal_stress - the statistics signal's handler interrupts threads
 * anywhere in the allocator (fast paths, slow paths with their locks held,
 * segment and metadata calls) and must neither crash, deadlock, nor damage
 * what it interrupted.
 *
 * USLAB_STATS_SIGNAL=USR2 and USLAB_STATS_FILE are set through the option
 * parser, and the handler installed (stats_init). Four workers malloc and
 * free blocks of every kind (small, large, the odd huge one) and objects of
 * a uslab cache, a third of them freed by another worker (remote frees);
 * every block is filled with a pattern derived from its address and checked
 * before it is freed. Meanwhile the main thread sends the signal to a
 * random worker (and now and then to itself) every few hundred
 * microseconds; after each burst it reads the report file: complete JSON
 * each time (it is renamed into place), from the handler or - when the
 * segment lock stayed busy - from the next slow path. At the end: every
 * kmalloc cache and the uslab cache validate, and the snapshot of an idle
 * process (all workers joined, every thread's counts folded) counts exactly
 * the objects left live, and its counters the cache's allocations and frees.
 * USLAB_STRESS_SECONDS sets the run time (default 2).
 */
#define _GNU_SOURCE
#include "test.h"
#include "kmalloc_check.h"
#include "stats_json.h"
#include "stats_signal.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#define THREADS 4
#define KEEP    512
#define MAILBOX 1024

struct post_box {
	pthread_mutex_t lock;
	size_t n;
	void *slot[MAILBOX];
	size_t size[MAILBOX];   /* 0: a cache object */
};

static struct uslab_cache *cache;
static struct post_box box[THREADS];
static pthread_t tid[THREADS];
static atomic_int stop;
static atomic_long damaged;
static atomic_long cache_allocs, cache_frees;   /* of the uslab cache, by every thread */

static size_t pick_size(uint64_t *rng)
{
	uint64_t r = test_rand(rng) % 1000;

	if (r < 2)
		return (3u << 20) + (size_t)(test_rand(rng) % 4096);   /* huge */
	if (r < 40)
		return 40000 + (size_t)(test_rand(rng) % 200000);      /* large */
	if (r < 400)
		return 0;                                               /* cache object */
	return 8 + (size_t)(test_rand(rng) % 4000);                 /* small */
}

static void release(void *p, size_t n)
{
	size_t len = n ? n : uslab_cache_object_size(cache);

	if (!test_intact(p, len < 256 ? len : 256)) {
		fprintf(stderr, "block %p of %zu bytes damaged\n", p, len);
		atomic_fetch_add(&damaged, 1);
	}
	if (n) {
		uslab_free(p);
	} else {
		uslab_cache_free(cache, p);
		atomic_fetch_add_explicit(&cache_frees, 1, memory_order_relaxed);
	}
}

static void post(int to, void *p, size_t n)
{
	struct post_box *b = &box[to];

	pthread_mutex_lock(&b->lock);
	if (b->n < MAILBOX) {
		b->slot[b->n] = p;
		b->size[b->n++] = n;
		p = NULL;
	}
	pthread_mutex_unlock(&b->lock);
	if (p)
		release(p, n);
}

static void drain(int me)
{
	struct post_box *b = &box[me];
	void *slot[MAILBOX];
	size_t size[MAILBOX], n;

	pthread_mutex_lock(&b->lock);
	n = b->n;
	memcpy(slot, b->slot, n * sizeof(void *));
	memcpy(size, b->size, n * sizeof(size_t));
	b->n = 0;
	pthread_mutex_unlock(&b->lock);
	for (size_t i = 0; i < n; i++)
		release(slot[i], size[i]);
}

static void *worker(void *arg)
{
	int me = (int)(intptr_t)arg;
	uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
	void *keep[KEEP] = { 0 };
	size_t size[KEEP] = { 0 };

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		unsigned i = (unsigned)(test_rand(&rng) % KEEP);

		if (keep[i]) {
			if (test_rand(&rng) % 3 == 0)
				post((me + 1) % THREADS, keep[i], size[i]);
			else
				release(keep[i], size[i]);
		}
		size_t n = pick_size(&rng);
		void *p = n ? uslab_malloc(n) : uslab_cache_alloc(cache);

		if (!p) {
			fprintf(stderr, "worker %d: allocation of %zu failed\n", me, n);
			atomic_fetch_add(&damaged, 1);
			keep[i] = NULL;
			continue;
		}
		size_t len = n ? n : uslab_cache_object_size(cache);
		if (!n)
			atomic_fetch_add_explicit(&cache_allocs, 1, memory_order_relaxed);
		test_fill(p, len < 256 ? len : 256);
		keep[i] = p;
		size[i] = n;
		if ((test_rand(&rng) & 63) == 0)
			drain(me);
	}
	for (unsigned i = 0; i < KEEP; i++)
		if (keep[i])
			release(keep[i], size[i]);
	drain(me);
	uslab_thread_flush();
	return NULL;
}

/* The report at path is whole: it opens and closes as the JSON does. */
static bool report_whole(const char *path, const char *want_report)
{
	char *text = test_read_file(path);
	char want[64];
	bool ok;

	snprintf(want, sizeof(want), "\"report\": \"%s\"", want_report);
	ok = text && strncmp(text, "{\n  \"uslab_version\"", 19) == 0 &&
	     strstr(text, "\n  ]\n}\n") && strstr(text, want);
	if (!ok)
		fprintf(stderr, "report %s: not a whole %s report: %.200s\n", path, want_report,
			text ? text : "(unreadable)");
	free(text);
	return ok;
}

/* Which file is at path now: its inode and modification time (a new
 * report is a new file renamed into place, whose inode may be the old
 * one's, freed by that rename, used again). */
static uint64_t version_of(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return 0;
	return (uint64_t)st.st_ino * 1000003u ^ (uint64_t)st.st_mtim.tv_sec * 1000000000u ^
	       (uint64_t)st.st_mtim.tv_nsec;
}

int main(void)
{
	struct stats_signal sig;
	const char *path = sig.path;
	double seconds = test_stress_seconds(2);
	uint64_t rng = 12345;
	long bursts = 0, answered = 0;

	alarm((unsigned)(60 + seconds * 4));   /* a deadlock fails the test */
	stats_signal_setup(&sig, "uslab-signal-stress");
	cache = uslab_cache_create("signal-stress", 136, 0, 0, NULL);
	REQUIRE(cache);
	for (int i = 0; i < THREADS; i++)   /* all first: a worker posts to the next */
		pthread_mutex_init(&box[i].lock, NULL);
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_create(&tid[i], NULL, worker, (void *)(intptr_t)i) == 0);
	for (double end = test_now() + seconds; test_now() < end; bursts++) {
		uint64_t before = version_of(path);

		for (int k = 0; k < 20; k++) {
			if (test_rand(&rng) % 8 == 0)
				raise(SIGUSR2);
			else
				pthread_kill(tid[test_rand(&rng) % THREADS], SIGUSR2);
			usleep(200 + (useconds_t)(test_rand(&rng) % 300));
		}
		/* the answer: from a handler, or from the next slow path when
		 * seg_lock stayed busy (a busy machine may take its time) */
		for (int wait = 0; wait < 400 && version_of(path) == before; wait++)
			usleep(5000);
		if (version_of(path) != before) {
			answered++;
			if (!report_whole(path, "signal"))
				test_failures++;
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < THREADS; i++)
		pthread_join(tid[i], NULL);
	for (int i = 0; i < THREADS; i++)   /* posted to a worker that had left */
		drain(i);
	if (!bursts || answered != bursts) {
		fprintf(stderr, "%ld of %ld bursts of signals got no report\n", bursts - answered,
			bursts);
		test_failures++;
	}
	CHECK_EQ(atomic_load(&damaged), 0);
	CHECK_EQ(uslab_cache_validate(cache), 0);
	CHECK_EQ(kmalloc_validate_all(), 0);

	/* idle now, and the snapshot exact: 300 objects of the cache live */
	void *live[300];
	for (int i = 0; i < 300; i++)
		REQUIRE((live[i] = uslab_cache_alloc(cache)) != NULL);
	uslab_thread_flush();
	uint64_t before = version_of(path);
	raise(SIGUSR2);
	CHECK(version_of(path) != before);   /* written by the handler, before raise returned */
	char *text = test_read_file(path);
	REQUIRE(text);
	struct stats_obj row = { 0 };
	CHECK(stats_json_cache(text, "signal-stress", &row));
	if (row.begin) {
		CHECK_EQ(stats_obj_get(&row, "live_objects"), 300);
		CHECK_EQ(stats_obj_allocs(&row), atomic_load(&cache_allocs) + 300);
		CHECK_EQ(stats_obj_frees(&row), atomic_load(&cache_frees));
	}
	CHECK(strstr(text, "\"report\": \"signal\"") != NULL);
	free(text);
	for (int i = 0; i < 300; i++)
		uslab_cache_free(cache, live[i]);
	CHECK_EQ(uslab_cache_destroy(cache), 0);
	printf("%ld bursts of 20 signals, each answered; %.1f s\n", bursts, seconds);
	stats_signal_teardown(&sig);
	return test_done("stats_signal_stress");
}
