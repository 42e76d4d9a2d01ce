/* SPDX-License-Identifier: MIT */
/*
 * large.c - large-block churn, 64 KiB ... 8 MiB.
 *
 * Each thread owns SLOTS/threads slots; an op replaces the block in a random
 * slot with a new one of a size log-uniform over 64 KiB ... 8 MiB, and
 * touches one word in every 4 KiB page of it, as a program filling a buffer
 * would. The cost is dominated by where the allocator gets these blocks:
 * fresh mmap (a page fault per page touched, munmap on free), or memory it
 * kept (fast, but it counts in peak RSS). Live data averages about 55 MiB.
 * One op = one free + one malloc.
 */
#include "workload.h"

#define SLOTS 32
#define MIN_SIZE (64u << 10)
#define MAX_SIZE (8u << 20)

struct worker {
	uint64_t ops;
	uint64_t seed;
	unsigned idx, nslots;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	void *p[SLOTS] = { 0 };
	size_t n[SLOTS] = { 0 };
	for (uint64_t i = 0; i < w->ops; i++) {
		unsigned k = (unsigned)wl_below(&r, w->nslots);
		if (p[k]) {
			wl_check(p[k], n[k]);
			free(p[k]);
		}
		n[k] = wl_logsize(&r, MIN_SIZE, MAX_SIZE + 1);
		p[k] = wl_malloc(n[k]);
		wl_stamp(p[k], n[k]);
	}
	for (unsigned k = 0; k < w->nslots; k++)
		if (p[k]) {
			wl_check(p[k], n[k]);
			free(p[k]);
		}
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv, "large-block churn, 64 KiB - 8 MiB", 3000);
	if (o.threads > SLOTS)
		o.threads = SLOTS;
	struct worker *w = calloc(o.threads, sizeof(*w));
	for (unsigned i = 0; i < o.threads; i++)
		w[i] = (struct worker){ wl_share(o.work, o.threads, i), o.seed, i,
					(unsigned)wl_share(SLOTS, o.threads, i) };
	double secs = wl_run_threads(o.threads, worker, w, sizeof(*w));
	free(w);
	wl_report(o.work, secs, o.threads);
	return 0;
}
