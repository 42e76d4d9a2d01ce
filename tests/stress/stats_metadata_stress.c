/* SPDX-License-Identifier: MIT */
/*
 * stats_metadata_stress - the allocator's metadata outside segments (thread
 * heaps, remote-free messages) is in the committed total.
 *
 * THREADS threads each allocate small blocks (which makes each a heap) and
 * then free the blocks the next thread made (remote frees, by message), and
 * wait, all alive, while the main thread takes reports: a call's
 * (uslab_stats_json) and a live snapshot's (the signal, written by the
 * handler). In both, metadata_bytes has grown since before the threads by at
 * least a page per thread, metadata_mapped_bytes by at least a heap's size
 * per thread, metadata_bytes stays within metadata_mapped_bytes, and the
 * account's parts add up to total_committed_bytes. After the threads have
 * exited, their heaps stay (to be recycled) and are still counted.
 */
#define _GNU_SOURCE
#include "test.h"
#include "stats_json.h"
#include "stats_signal.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#define THREADS 16
#define BLOCKS  300

static void *blocks[THREADS][BLOCKS];
static pthread_barrier_t made, freed, done;

static void *worker(void *arg)
{
	int me = (int)(intptr_t)arg, next = (me + 1) % THREADS;

	for (int i = 0; i < BLOCKS; i++) {
		REQUIRE((blocks[me][i] = uslab_malloc(i % 3 ? 64 : 1000)) != NULL);
		test_fill(blocks[me][i], i % 3 ? 64 : 1000);
	}
	pthread_barrier_wait(&made);
	for (int i = 0; i < BLOCKS; i++) {   /* the next thread's: remote frees */
		CHECK(test_intact(blocks[next][i], i % 3 ? 64 : 1000));
		uslab_free(blocks[next][i]);
	}
	pthread_barrier_wait(&freed);
	pthread_barrier_wait(&done);   /* alive while the reports are taken */
	return NULL;
}

struct meta {
	long bytes, mapped;
};

/* One report's metadata, and its account added up. */
static struct meta check_report(const char *json, const char *which)
{
	struct meta m = { stats_json_top(json, "metadata_bytes"),
			  stats_json_top(json, "metadata_mapped_bytes") };
	long sum = stats_account_sum(json), total = stats_json_top(json, "total_committed_bytes");

	if (sum != total) {
		fprintf(stderr, "%s: the account's parts add up to %ld, the total is %ld\n", which,
			sum, total);
		test_failures++;
	}
	if (m.bytes < 0 || m.bytes > m.mapped) {
		fprintf(stderr, "%s: metadata %ld bytes committed of %ld mapped\n", which, m.bytes,
			m.mapped);
		test_failures++;
	}
	return m;
}

/* Grown by at least a page per thread committed, a heap per thread mapped. */
static void check_growth(struct meta before, struct meta now, const char *which)
{
	long page = sysconf(_SC_PAGESIZE);

	printf("%s: metadata %ld -> %ld bytes committed, %ld -> %ld mapped\n", which,
	       before.bytes, now.bytes, before.mapped, now.mapped);
	if (now.bytes < before.bytes + THREADS * page) {
		fprintf(stderr, "%s: metadata grew by %ld bytes with %d more heaps\n", which,
			now.bytes - before.bytes, THREADS);
		test_failures++;
	}
	if (now.mapped < before.mapped + THREADS * (long)sizeof(struct thread_heap)) {
		fprintf(stderr, "%s: metadata mappings grew by %ld bytes with %d more heaps\n",
			which, now.mapped - before.mapped, THREADS);
		test_failures++;
	}
}

int main(void)
{
	struct stats_signal sig;
	pthread_t tid[THREADS];

	alarm(120);
	stats_signal_setup(&sig, "uslab-meta-stress");

	void *mine = uslab_malloc(64);   /* this thread's heap, before the count */
	char *json = stats_json_dump();
	REQUIRE(json);
	struct meta before = check_report(json, "before the threads");
	free(json);

	pthread_barrier_init(&made, NULL, THREADS);
	pthread_barrier_init(&freed, NULL, THREADS + 1);
	pthread_barrier_init(&done, NULL, THREADS + 1);
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_create(&tid[i], NULL, worker, (void *)(intptr_t)i) == 0);
	pthread_barrier_wait(&freed);

	json = stats_json_dump();
	REQUIRE(json);
	check_growth(before, check_report(json, "a call's report"), "a call's report");
	free(json);

	json = stats_signal_snapshot(&sig);
	check_growth(before, check_report(json, "the snapshot"), "the snapshot");
	free(json);

	pthread_barrier_wait(&done);
	for (int i = 0; i < THREADS; i++)
		pthread_join(tid[i], NULL);
	json = stats_json_dump();
	REQUIRE(json);
	check_growth(before, check_report(json, "after the threads"), "after the threads");
	free(json);

	uslab_free(mine);
	stats_signal_teardown(&sig);
	return test_done("stats_metadata_stress");
}
