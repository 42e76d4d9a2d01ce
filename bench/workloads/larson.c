/* SPDX-License-Identifier: MIT */
/*
 * larson.c - a larson-style server simulation.
 *
 * A shared table of SLOTS blocks of random sizes (16 ... 1024 bytes) stands
 * for a server's live objects. Every thread repeatedly picks a random slot,
 * allocates a new block, swaps it in with an atomic exchange and frees the
 * block it took out — which another thread allocated about half of the time
 * at 2 threads, so the allocator sees a steady stream of cross-thread frees
 * mixed with local ones, and objects migrate between threads as in a server
 * whose requests are handled by whichever worker is free.
 * One op = one malloc + one free.
 */
#include "workload.h"

#include <stdatomic.h>

#define SLOTS    8192
#define MIN_SIZE 16
#define MAX_SIZE 1024

/* A slot packs a block and its size: pointer in bits 0-47, size above. */
static _Atomic uint64_t slots[SLOTS];

static uint64_t new_block(struct wl_rng *r)
{
	size_t n = MIN_SIZE + wl_below(r, MAX_SIZE - MIN_SIZE + 1);
	void *b = wl_malloc(n);
	wl_stamp(b, n);
	return (uintptr_t)b | (uint64_t)n << 48;
}

static void free_block(uint64_t slot)
{
	void *b = (void *)(uintptr_t)(slot & ((1ull << 48) - 1));
	size_t n = slot >> 48;
	wl_check(b, n);
	free(b);
}

static void *worker(void *arg)
{
	struct wl_worker *w = arg;
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	for (uint64_t i = 0; i < w->ops; i++) {
		uint64_t b = new_block(&r);
		uint64_t old = atomic_exchange_explicit(&slots[wl_below(&r, SLOTS)], b,
							 memory_order_acq_rel);
		free_block(old);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"larson-style server: threads replace random slots of a shared table", 6000000);
	struct wl_rng r = wl_rng_init(o.seed, 0);
	for (unsigned i = 0; i < SLOTS; i++)
		atomic_store_explicit(&slots[i], new_block(&r), memory_order_relaxed);

	double secs = wl_run_workers(&o, worker);

	for (unsigned i = 0; i < SLOTS; i++)
		free_block(atomic_load_explicit(&slots[i], memory_order_relaxed));
	wl_report(o.work, secs, o.threads);
	return 0;
}
