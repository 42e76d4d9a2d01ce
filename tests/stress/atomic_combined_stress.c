/*
 * atomic_combined_stress - workers start and finish units (up to DEPTH in
 * flight each) on one combined counter while a reader checks every single
 * read of it against per-thread progress counters.
 *
 * Each worker publishes, with release stores: pre_start (bumped before each
 * combined_start), post_start (after it) and post_finish (after each
 * combined_finish). The reader loads post_finish and post_start sums, then
 * the combined word (one acquire load), then pre_start sums. For every read:
 *     completed            >= sum(post_finish) read before
 *     inflight + completed >= sum(post_start)  read before
 *     inflight + completed <= sum(pre_start)   read after
 *     inflight             <= WORKERS * DEPTH  (never "negative")
 * At the end: inflight == 0 and completed == total starts exactly.
 */
#include "test.h"
#include "combined.h"

#include <pthread.h>

#define WORKERS 4
#define DEPTH   4
#define MAX_STARTS_PER_WORKER (1L << 28)   /* keeps sums below 2^32 */

static struct combined c = COMBINED_INIT;
static atomic_t stop;

static struct progress {
	atomic_long_t pre_start, post_start, post_finish;
} __attribute__((aligned(64))) prog[WORKERS];

static void *worker(void *arg)
{
	struct progress *p = &prog[(intptr_t)arg];
	uint64_t seed = 0xc0ffeeull * ((uintptr_t)arg + 1);
	long started = 0, finished = 0;

	while (!atomic_read(&stop) && started < MAX_STARTS_PER_WORKER - DEPTH) {
		int depth = 1 + (int)(test_rand(&seed) % DEPTH);

		for (int i = 0; i < depth; i++) {
			/* release: pairs with the reader's acquire loads */
			atomic_long_set_release(&p->pre_start, started + 1);
			combined_start(&c);
			atomic_long_set_release(&p->post_start, ++started);
		}
		for (int i = 0; i < depth; i++) {
			combined_finish(&c);
			atomic_long_set_release(&p->post_finish, ++finished);
		}
	}
	return NULL;
}

static long sum(size_t field)
{
	long s = 0;

	for (int t = 0; t < WORKERS; t++)
		s += atomic_long_read_acquire((atomic_long_t *)((char *)&prog[t] + field));
	return s;
}

static void *reader(void *arg)
{
	long reads = 0;

	while (!atomic_read(&stop)) {
		long fin = sum(offsetof(struct progress, post_finish));
		long post = sum(offsetof(struct progress, post_start));
		uint32_t in, done;

		combined_read(&c, &in, &done);
		long pre = sum(offsetof(struct progress, pre_start));
		long started = (long)in + (long)done;

		if (done < fin || started < post || started > pre || in > WORKERS * DEPTH) {
			fprintf(stderr, "inconsistent read: inflight %u completed %u; "
				"finished before >= %ld, started before >= %ld, "
				"started after <= %ld\n", in, done, fin, post, pre);
			exit(1);
		}
		reads++;
	}
	printf("reader: %ld consistent reads\n", reads);
	return NULL;
}

int main(void)
{
	pthread_t w[WORKERS], r;

	for (int t = 0; t < WORKERS; t++)
		REQUIRE(pthread_create(&w[t], NULL, worker, (void *)(intptr_t)t) == 0);
	REQUIRE(pthread_create(&r, NULL, reader, NULL) == 0);

	test_sleep_ms((long)(test_stress_seconds(1.5) * 1000));
	atomic_set(&stop, 1);
	for (int t = 0; t < WORKERS; t++)
		pthread_join(w[t], NULL);
	pthread_join(r, NULL);

	uint32_t in, done;
	long starts = sum(offsetof(struct progress, pre_start));

	combined_read(&c, &in, &done);
	CHECK_EQ(in, 0);
	CHECK_EQ(done, starts);
	CHECK_EQ(sum(offsetof(struct progress, post_finish)), starts);
	printf("units %ld\n", starts);
	CHECK(starts > 0);
	return test_done("atomic_combined_stress");
}
