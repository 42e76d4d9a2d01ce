/*
 * atomic_kref_stress - many threads get and put one kref, round after round.
 *
 * Each round a fresh object starts with one reference per worker. Workers do
 * random get/put and get_unless_zero/put pairs on top of their own reference
 * (these must never release), then drop it, then keep looking the object up
 * with get_unless_zero until that fails. Checked:
 *   - release() runs exactly once per round, with the count at 0, and sees
 *     every worker's last write (plain stores: TSan checks the ordering);
 *   - exactly one kref_put per round returns 1;
 *   - a get_unless_zero that succeeds finds the object not released, and once
 *     one fails (count reached 0) every later one fails too.
 * The object is freed only after the round, so late lookups are memory-safe.
 */
#include "test.h"
#include "kref.h"

#include <pthread.h>

#define NTHREADS 4
#define ITERS    200
#define LATE_LOOKUPS 64

struct obj {
	struct kref ref;
	atomic_t released;
	unsigned long round;
	unsigned long last[NTHREADS];    /* plain: each worker's final write */
	unsigned long scratch[NTHREADS]; /* plain: written under a reference */
};

#define to_obj(k) ((struct obj *)((char *)(k) - offsetof(struct obj, ref)))

static pthread_barrier_t start_bar, end_bar;
static struct obj *shared;
static atomic_t stop;
static atomic_t puts_released;       /* kref_put calls that returned 1, per round */
static atomic_long_t lookups_ok, lookups_late_ok, gets, released_by_lookup;

static unsigned long pattern(unsigned long round, int t)
{
	return (round * 0x9E3779B97F4A7C15ul) ^ ((unsigned long)t << 56) ^ 0xA5A5;
}

static void obj_release(struct kref *k)
{
	struct obj *o = to_obj(k);

	REQUIRE(atomic_inc_return(&o->released) == 1);     /* exactly once */
	REQUIRE(kref_read(&o->ref) == 0);
	for (int t = 0; t < NTHREADS; t++) {
		if (o->last[t] != pattern(o->round, t)) {
			fprintf(stderr, "release: worker %d's last write not visible "
				"(round %lu)\n", t, o->round);
			exit(1);
		}
	}
}

static void *worker(void *arg)
{
	int me = (int)(intptr_t)arg;
	uint64_t seed = 0x1234567ull * (me + 1);

	for (;;) {
		pthread_barrier_wait(&start_bar);
		if (atomic_read_acquire(&stop))
			return NULL;
		struct obj *o = shared;

		/* phase 1: we hold our own reference, nothing may release */
		for (int i = 0; i < ITERS; i++) {
			if (test_rand(&seed) & 1) {
				kref_get(&o->ref);
			} else {
				REQUIRE(kref_get_unless_zero(&o->ref));
				atomic_long_inc(&lookups_ok);
			}
			o->scratch[me] = (unsigned long)i;
			REQUIRE(kref_read(&o->ref) >= 2);
			REQUIRE(kref_put(&o->ref, obj_release) == 0);
			atomic_long_inc(&gets);
		}

		/* phase 2: drop our reference, then look the object up until gone */
		o->last[me] = pattern(o->round, me);
		if (kref_put(&o->ref, obj_release))
			atomic_inc(&puts_released);
		for (int i = 0; i < LATE_LOOKUPS; i++) {
			if (!kref_get_unless_zero(&o->ref)) {
				/* the count reached 0: it must stay there */
				for (int j = 0; j < 16; j++)
					REQUIRE(!kref_get_unless_zero(&o->ref));
				break;
			}
			REQUIRE(atomic_read(&o->released) == 0);
			atomic_long_inc(&lookups_late_ok);
			if (kref_put(&o->ref, obj_release)) {
				atomic_inc(&puts_released);
				atomic_long_inc(&released_by_lookup);
			}
		}

		pthread_barrier_wait(&end_bar);
	}
}

int main(void)
{
	pthread_t th[NTHREADS];
	double end = test_now() + test_stress_seconds(1.5);
	unsigned long rounds = 0;

	REQUIRE(pthread_barrier_init(&start_bar, NULL, NTHREADS + 1) == 0);
	REQUIRE(pthread_barrier_init(&end_bar, NULL, NTHREADS + 1) == 0);
	for (int t = 0; t < NTHREADS; t++)
		REQUIRE(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0);

	do {
		struct obj *o = calloc(1, sizeof(*o));

		REQUIRE(o);
		o->round = rounds;
		kref_init(&o->ref);
		for (int t = 1; t < NTHREADS; t++)
			kref_get(&o->ref);           /* one reference per worker */
		atomic_set(&puts_released, 0);
		shared = o;
		pthread_barrier_wait(&start_bar);
		pthread_barrier_wait(&end_bar);

		CHECK_EQ(atomic_read(&o->released), 1);
		CHECK_EQ(atomic_read(&puts_released), 1);
		CHECK_EQ(kref_read(&o->ref), 0);
		CHECK(!kref_get_unless_zero(&o->ref));
		free(o);
		rounds++;
	} while (!test_failures && test_now() < end);

	atomic_set_release(&stop, 1);
	pthread_barrier_wait(&start_bar);
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);

	printf("rounds %lu (released by a late lookup's put: %ld), get/put pairs %ld, "
	       "lookups %ld, late lookups %ld\n", rounds,
	       atomic_long_read(&released_by_lookup), atomic_long_read(&gets),
	       atomic_long_read(&lookups_ok), atomic_long_read(&lookups_late_ok));
	CHECK(rounds > 0);
	return test_done("atomic_kref_stress");
}
