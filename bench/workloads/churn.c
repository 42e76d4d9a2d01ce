/* SPDX-License-Identifier: MIT */
/*
 * churn.c - mixed-size churn with random lifetimes.
 *
 * Each thread owns a working set of SLOTS/threads slots. An op visits a random
 * slot: frees the block there (after checking it), then allocates a new one
 * with probability p. Sizes are log-uniform over 8 B ... 4 KiB (most blocks are
 * small) with a 5 % tail log-uniform over 4 ... 64 KiB. Random replacement
 * gives exponentially distributed lifetimes, so the heap fragments the way a
 * long-running program's does. p alternates between 0.8 and 0.2 every
 * PHASE visits per slot, so the live set breathes between about 80 % and 20 %
 * of the slots — an allocator that never gives memory back shows it in peak
 * RSS only as much as it fails to reuse the freed space.
 * One op = one slot visit (a free and/or a malloc).
 */
#include "workload.h"

#define SLOTS 20000
#define PHASE 2

struct slot {
	void *p;
	size_t n;
};

struct worker {
	uint64_t ops;
	uint64_t seed;
	unsigned idx, nslots;
};

static size_t churn_size(struct wl_rng *r)
{
	if (wl_below(r, 100) < 5)
		return wl_logsize(r, 4096, 65536 + 1);
	return wl_logsize(r, 8, 4096 + 1);
}

static void *worker(void *arg)
{
	struct worker *w = arg;
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	struct slot *s = calloc(w->nslots, sizeof(*s));
	uint64_t phase_len = (uint64_t)PHASE * w->nslots;
	for (uint64_t i = 0; i < w->ops; i++) {
		struct slot *x = &s[wl_below(&r, w->nslots)];
		if (x->p) {
			wl_check(x->p, x->n);
			free(x->p);
			x->p = NULL;
		}
		unsigned p_alloc = (i / phase_len) % 2 ? 20 : 80;
		if (wl_below(&r, 100) < p_alloc) {
			x->n = churn_size(&r);
			x->p = wl_malloc(x->n);
			wl_stamp(x->p, x->n);
		}
	}
	for (unsigned i = 0; i < w->nslots; i++)
		if (s[i].p) {
			wl_check(s[i].p, s[i].n);
			free(s[i].p);
		}
	free(s);
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"mixed-size churn (8 B - 4 KiB, tail to 64 KiB) with random lifetimes", 4000000);
	struct worker *w = calloc(o.threads, sizeof(*w));
	for (unsigned i = 0; i < o.threads; i++)
		w[i] = (struct worker){ wl_share(o.work, o.threads, i), o.seed, i,
					(unsigned)wl_share(SLOTS, o.threads, i) };
	double secs = wl_run_threads(o.threads, worker, w, sizeof(*w));
	free(w);
	wl_report(o.work, secs, o.threads);
	return 0;
}
