/* large_runs_stress - large and huge blocks churned by four threads that keep
 * the runs they free (cut and joined without seg_lock), grow some with
 * realloc, and hand half of them to the next thread, which checks and frees
 * them (so kept runs, runs given back and runs of a segment being emptied
 * meet). Every block carries a pattern from a seed that travels with it and
 * is checked before it is freed or after it moved; at the end every
 * descriptor is validated and, after a trim, every segment must be empty. */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>

enum { THREADS = 4, SLOTS = 6, HAND = 4 };
#define KiB 1024ul

struct block {
	unsigned char *p;
	size_t n;
	uint64_t seed;
};

/* hand[t]: blocks left for thread t by thread t - 1 */
static struct block hand[THREADS][HAND];
static pthread_mutex_t hand_lock[THREADS];
static double stop_at;

static bool intact(const unsigned char *p, size_t len, size_t n, uint64_t seed)
{
	return test_check_with(p, len, n, seed, TEST_FILL_SPARSE) == len;
}

static void check_free(struct block *b)
{
	if (!b->p)
		return;
	if (!intact(b->p, b->n, b->n, b->seed)) {
		fprintf(stderr, "large block %p (%zu bytes) corrupt\n", (void *)b->p, b->n);
		test_failures++;
	}
	uslab_free(b->p);
	b->p = NULL;
}

/* 16 KiB - 3 MiB, log-uniform-ish: mostly large runs, some huge. */
static size_t pick_size(uint64_t *rng)
{
	unsigned shift = 14 + (unsigned)(test_rand(rng) % 8);

	return (1ul << shift) + test_rand(rng) % (1ul << shift) / 2;
}

static void *worker(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg, to = (t + 1) % THREADS;
	uint64_t rng = t * 0x9E3779B97F4A7C15ull + 1;
	struct block mine[SLOTS] = { { 0 } };
	unsigned long ops = 0;

	while (ops < 2000 || test_now() < stop_at) {
		struct block *b = &mine[test_rand(&rng) % SLOTS];
		unsigned what = (unsigned)(test_rand(&rng) % 8);

		ops++;
		if (b->p && what == 0) {   /* grow it */
			size_t m = b->n + b->n / 8 + test_rand(&rng) % (64 * KiB);
			unsigned char *q = uslab_realloc(b->p, m);

			REQUIRE(q != NULL);
			/* the sparse fill of n bytes, as far as it went */
			if (!intact(q, b->n, b->n, b->seed)) {
				fprintf(stderr, "realloc %zu -> %zu lost content\n", b->n, m);
				test_failures++;
			}
			b->p = q;
			b->n = m;
			test_fill_with(q, m, b->seed, TEST_FILL_SPARSE);
			continue;
		}
		if (b->p && what < 4) {   /* to the next thread, whose old one we free */
			struct block old;
			unsigned k = (unsigned)(test_rand(&rng) % HAND);

			pthread_mutex_lock(&hand_lock[to]);
			old = hand[to][k];
			hand[to][k] = *b;
			pthread_mutex_unlock(&hand_lock[to]);
			b->p = NULL;
			check_free(&old);
		}
		check_free(b);
		b->n = pick_size(&rng);
		b->seed = test_rand(&rng);
		b->p = uslab_malloc(b->n);
		REQUIRE(b->p != NULL);
		test_fill_with(b->p, b->n, b->seed, TEST_FILL_SPARSE);
		if (what == 7) {   /* a block handed to this thread */
			struct block got;
			unsigned k = (unsigned)(test_rand(&rng) % HAND);

			pthread_mutex_lock(&hand_lock[t]);
			got = hand[t][k];
			hand[t][k].p = NULL;
			pthread_mutex_unlock(&hand_lock[t]);
			check_free(&got);
		}
	}
	for (unsigned i = 0; i < SLOTS; i++)
		check_free(&mine[i]);
	return NULL;
}

int main(void)
{
	pthread_t th[THREADS];

	stop_at = test_now() + test_stress_seconds(2.0);
	for (unsigned t = 0; t < THREADS; t++)
		pthread_mutex_init(&hand_lock[t], NULL);
	for (unsigned t = 0; t < THREADS; t++)
		REQUIRE(pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t) == 0);
	for (unsigned t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	for (unsigned t = 0; t < THREADS; t++)
		for (unsigned k = 0; k < HAND; k++)
			check_free(&hand[t][k]);
	CHECK_EQ(kmalloc_validate_all(), 0);
	/* every thread's kept runs went back when it exited: nothing is out */
	uslab_trim();
	CHECK_EQ(kmalloc_validate_all(), 0);
	CHECK_EQ(segment_mapped_bytes(), 0);
	return test_done("large_runs_stress");
}
