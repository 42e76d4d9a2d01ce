/* SPDX-License-Identifier: MIT */
/*
 * pool_random_free.c - build a big pool, walk it, free it in random order.
 *
 * Each thread allocates a pool of small blocks (500,000 in all, split over
 * the threads), links them into a list in allocation order, walks the list
 * reading every block, then frees the blocks in the order of a random
 * permutation computed once up front — and does it again, round after round.
 * Even rounds use 64-byte blocks only, odd rounds sizes 24 ... 128 bytes.
 *
 * This is what a program that builds a large structure and tears it down
 * (a parser's tree, a graph, a cache being dropped) does to an allocator.
 * The frees touch the allocator's metadata in random order, one cache miss
 * each unless it is compact; and the next round's blocks come off freelists
 * that the random frees have shuffled, so the walk of round 2 is sequential in
 * memory only if the allocator hands blocks out in address order again.
 * One op = one malloc + one free (the walk comes with it).
 */
#include "workload.h"

#define POOL     500000u   /* blocks live at the peak, over all threads */
#define MIN_SIZE 24        /* room for the stamp's two words and the link */
#define MAX_SIZE 128
#define LINK     8         /* offset of the next pointer inside a block */

struct worker {
	uint64_t ops;
	uint64_t seed;
	unsigned idx, pool;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	unsigned pool = w->pool;
	void **blk = wl_malloc(pool * sizeof(*blk));
	uint8_t *size = wl_malloc(pool);
	uint32_t *perm = wl_malloc(pool * sizeof(*perm));

	for (unsigned i = 0; i < pool; i++)         /* Fisher-Yates */
		perm[i] = i;
	for (unsigned i = pool - 1; i > 0; i--) {
		unsigned j = (unsigned)wl_below(&r, i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}

	uint64_t sum = 0;
	for (unsigned round = 0; w->ops; round++) {
		unsigned n = w->ops < pool ? (unsigned)w->ops : pool;
		w->ops -= n;
		void *head = NULL, **tail = &head;
		for (unsigned i = 0; i < n; i++) {
			size_t sz = round % 2 ? MIN_SIZE + wl_below(&r, MAX_SIZE - MIN_SIZE + 1) : 64;
			void *p = wl_malloc(sz);
			wl_stamp(p, sz);
			wl_put(p, LINK, 0);
			*tail = p;
			tail = (void **)((char *)p + LINK);
			blk[i] = p;
			size[i] = (uint8_t)sz;
		}
		unsigned seen = 0;
		for (void *p = head; p; p = (void *)(uintptr_t)wl_get(p, LINK)) {
			sum += wl_get(p, 0);
			seen++;
		}
		if (seen != n) {
			fprintf(stderr, "workload: a list of %u blocks had %u when walked\n", n, seen);
			fflush(stderr);
			_exit(1);
		}
		/* perm is a permutation of [0, pool); a short last round skips
		 * the indices it did not fill */
		for (unsigned i = 0; i < pool; i++) {
			unsigned k = perm[i];
			if (k >= n)
				continue;
			wl_check(blk[k], size[k]);
			free(blk[k]);
		}
	}
	free(perm);
	free(size);
	free(blk);
	return (void *)(uintptr_t)(sum & 1);   /* keeps the walk's reads */
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"allocate a pool of small blocks, link and walk it, free it in random order", 1500000);
	struct worker *w = calloc(o.threads, sizeof(*w));
	for (unsigned i = 0; i < o.threads; i++) {
		uint64_t ops = wl_share(o.work, o.threads, i);
		unsigned pool = POOL / o.threads;
		w[i] = (struct worker){ ops, o.seed, i, ops < pool ? (unsigned)ops : pool };
		if (!w[i].pool)
			w[i].pool = 1;
	}
	double secs = wl_run_threads(o.threads, worker, w, sizeof(*w));
	free(w);
	wl_report(o.work, secs, o.threads);
	return 0;
}
