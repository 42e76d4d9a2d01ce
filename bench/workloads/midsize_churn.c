/* SPDX-License-Identifier: MIT */
/*
 * midsize_churn.c - a few mid-size buffers per thread, replaced all the time.
 *
 * Each thread keeps SLOTS blocks of 64 KiB ... 8 MiB (log-uniform). An op
 * frees the block in a random slot and allocates a new one, writing a word in
 * every 4 KiB page of it, as a program does with a scratch buffer per request
 * (a decompression window, an image, a response body). Unlike `large`, only a
 * few blocks are live, so the memory in use is small next to the memory that
 * passes through: an allocator that keeps the freed ranges and hands them out
 * again pays nothing per page, one that gives every freed block back to the
 * kernel pays a page fault for each page of each new block (and the system
 * time shows it).
 * One op = one free + one malloc + the page writes.
 */
#include "workload.h"

#define SLOTS    6
#define MIN_SIZE (64u << 10)
#define MAX_SIZE (8u << 20)

static void *worker(void *arg)
{
	struct wl_worker *w = arg;
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	void *p[SLOTS] = { 0 };
	size_t n[SLOTS] = { 0 };
	for (uint64_t i = 0; i < w->ops; i++) {
		unsigned k = (unsigned)wl_below(&r, SLOTS);
		if (p[k]) {
			wl_check(p[k], n[k]);
			free(p[k]);
		}
		n[k] = wl_logsize(&r, MIN_SIZE, MAX_SIZE + 1);
		p[k] = wl_malloc(n[k]);
		wl_stamp(p[k], n[k]);          /* a word in every 4 KiB page */
	}
	for (unsigned k = 0; k < SLOTS; k++)
		if (p[k]) {
			wl_check(p[k], n[k]);
			free(p[k]);
		}
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"mid-size churn: 6 live blocks of 64 KiB - 8 MiB per thread, every page written", 400);
	double secs = wl_run_workers(&o, worker);
	wl_report(o.work, secs, o.threads);
	return 0;
}
