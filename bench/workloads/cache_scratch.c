/* SPDX-License-Identifier: MIT */
/*
 * cache_scratch.c - passive false sharing (after Hoard's cache-scratch).
 *
 * The main thread allocates one small object (8 bytes) per worker, back to
 * back, so they most likely share a cache line, and hands object i to worker
 * i. Each worker frees the object it was given — a remote free — and then
 * allocates, writes every byte REPS times, checks and frees small objects
 * over and over. An allocator that recycles a remotely freed object into the
 * freeing thread's cache gives every worker a piece of that one cache line,
 * and the workers' writes then ping-pong it between cores.
 * At 1 thread nothing can be shared: that row is the baseline.
 * One op = one malloc + REPS x 8 byte writes + one free.
 */
#include "workload.h"

#define OBJ  8
#define REPS 2000

struct worker {
	uint64_t iters;
	void *given;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	wl_check(w->given, OBJ);
	free(w->given);
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
		"passive false sharing: threads free objects the main thread allocated together",
		40000);
	struct worker *w = calloc(o.threads, sizeof(*w));
	for (unsigned i = 0; i < o.threads; i++) {
		w[i].iters = wl_share(o.work, o.threads, i);
		w[i].given = wl_malloc(OBJ);
		wl_stamp(w[i].given, OBJ);
	}
	double secs = wl_run_threads(o.threads, worker, w, sizeof(*w));
	free(w);
	wl_report(o.work, secs, o.threads);
	return 0;
}
