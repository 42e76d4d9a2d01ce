/* SPDX-License-Identifier: MIT */
/*
 * big_heap.c - a big heap of mid-size records, replaced at random.
 *
 * The threads keep SLOTS blocks live between them (split over the threads),
 * each 1 KiB ... 128 KiB (uniform), about 1 GiB of address space in all. An
 * op visits a random slot of the thread's: checks and frees the block there
 * and allocates a new one of a new size, writing only its first and its last
 * word - a record's header and trailer, the way a cache of documents, a
 * table of buffers or a message store touches what it keeps. So the heap is
 * hundreds of segments, spans or pages wide while the pages written are few:
 * an allocator whose search for room grows with the heap shows it, and one
 * that puts a new block where its first page is one no block wrote before
 * pays a page fault for it (and the peak RSS shows that too).
 * One op = one free + one malloc + the two writes.
 */
#include "workload.h"

#define SLOTS    16384u
#define MIN_SIZE (1u << 10)
#define MAX_SIZE (128u << 10)

struct worker {
	uint64_t ops;
	uint64_t seed;
	unsigned idx, nslots;
};

static void record_stamp(void *p, size_t n)
{
	uint64_t t = wl_tag(p, n);

	wl_put(p, 0, t);
	wl_put(p, n - 8, ~t);
}

static void record_check(const void *p, size_t n)
{
	uint64_t t = wl_tag(p, n);

	if (wl_get(p, 0) != t)
		wl_fail("first word", p, n, 0);
	if (wl_get(p, n - 8) != ~t)
		wl_fail("last word", p, n, n - 8);
}

static void *worker(void *arg)
{
	struct worker *w = arg;
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	void **p = wl_malloc(w->nslots * sizeof(*p));
	uint32_t *n = wl_malloc(w->nslots * sizeof(*n));

	memset(p, 0, w->nslots * sizeof(*p));
	for (uint64_t i = 0; i < w->ops; i++) {
		unsigned k = (unsigned)wl_below(&r, w->nslots);

		if (p[k]) {
			record_check(p[k], n[k]);
			free(p[k]);
		}
		n[k] = (uint32_t)(MIN_SIZE + wl_below(&r, MAX_SIZE - MIN_SIZE + 1));
		p[k] = wl_malloc(n[k]);
		record_stamp(p[k], n[k]);
	}
	for (unsigned k = 0; k < w->nslots; k++)
		if (p[k]) {
			record_check(p[k], n[k]);
			free(p[k]);
		}
	free(n);
	free(p);
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"big heap: 16,384 live records of 1 - 128 KiB, replaced at random, header and trailer written",
		500000);
	struct worker *w = wl_malloc(o.threads * sizeof(*w));

	for (unsigned t = 0; t < o.threads; t++)
		w[t] = (struct worker){ wl_share(o.work, o.threads, t), o.seed, t,
					(unsigned)wl_share(SLOTS, o.threads, t) };
	double secs = wl_run_threads(o.threads, worker, w, sizeof(*w));
	wl_report(o.work, secs, o.threads);
	free(w);
	return 0;
}
