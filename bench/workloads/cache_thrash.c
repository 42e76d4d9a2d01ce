/* SPDX-License-Identifier: MIT */
/*
 * cache_thrash.c - active false sharing (after Hoard's cache-thrash).
 *
 * Every thread allocates a small object (8 bytes), writes every byte of it
 * REPS times, checks it and frees it, over and over. An allocator that
 * hands concurrently running threads objects from the same cache line makes
 * those writes ping-pong the line between cores and the run slows down many
 * times; one that keeps each thread's small objects apart costs nothing here.
 * At 1 thread nothing can be shared: that row is the baseline.
 * One op = one malloc + REPS x 8 byte writes + one free.
 */
#include "workload.h"

#define OBJ  8
#define REPS 2000

struct worker { uint64_t iters; };

static void *worker(void *arg)
{
	struct worker *w = arg;
	for (uint64_t i = 0; i < w->iters; i++) {
		volatile unsigned char *p = wl_malloc(OBJ);
		for (unsigned k = 0; k < OBJ; k++)
			p[k] = (unsigned char)k;
		for (unsigned j = 0; j < REPS; j++)
			for (unsigned k = 0; k < OBJ; k++)
				p[k]++;
		for (unsigned k = 0; k < OBJ; k++)
			if (p[k] != (unsigned char)(k + REPS))
				wl_fail("byte written by this thread changed", (void *)p, OBJ, k);
		free((void *)p);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"active false sharing: threads write their own small objects", 40000);
	struct worker *w = calloc(o.threads, sizeof(*w));
	for (unsigned i = 0; i < o.threads; i++)
		w[i].iters = wl_share(o.work, o.threads, i);
	double secs = wl_run_threads(o.threads, worker, w, sizeof(*w));
	free(w);
	wl_report(o.work, secs, o.threads);
	return 0;
}
