/* SPDX-License-Identifier: MIT */
/*
 * malloc.c - the standard malloc API only, so that one binary compares
 * allocators: run it as it is (glibc) and under LD_PRELOAD (tools/bench does,
 * for jemalloc, mimalloc, tcmalloc and uslab). It links no part of uslab.
 *
 *   BM_malloc_pair/size:N        malloc(N) then free, one thread, N = 16 B..32 KiB
 *   BM_malloc_lifo/size:64       1,000 mallocs, then frees newest first
 *   BM_malloc_fifo/size:64       1,000 mallocs, then frees oldest first
 *                                (one iteration is the whole batch; items/s per pair)
 *   BM_malloc_random/window:4096 4,096 live blocks; free a random one, malloc a
 *                                random size in its place (15/16: 8 B..1 KiB,
 *                                1/16: 1..32 KiB, log-uniform), write its first byte
 *   BM_realloc_double/max:N      one buffer 16 B -> N by doubling, the new tail
 *                                written each step, freed and restarted at N
 *   BM_realloc_step64/max:N      the same growing by 64 B from 64 B
 *                                (one iteration is one realloc; the restart's
 *                                free + malloc is spread over the cycle)
 *   BM_posix_memalign/size:S/align:A, BM_aligned_alloc/size:S/align:A
 *                                an aligned block, its first byte written, freed
 *
 * The PRNG and the size distribution are the workloads' (bench/workloads/
 * workload.h), seeded the same for every allocator.
 */
#include "bench.h"

#include "../workloads/workload.h"

#include <stdlib.h>
#include <string.h>

#define BATCH 1000
#define WINDOW 4096          /* power of two */

static void *checked(bench_state *state, void *p)
{
	if (!p)
		bench_skip_with_error(state, "the allocator returned NULL");
	return p;
}

/* ---- pairs and batches ---------------------------------------------------------- */

BENCH(BM_malloc_pair, BENCH_ARGS(16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
      .arg_name = "size")
{
	size_t size = (size_t)bench_range(state, 0);

	while (bench_keep_running(state)) {
		void *p = malloc(size);
		bench_do_not_optimize(p);
		free(p);
	}
	bench_set_items_processed(state, bench_iterations(state));
}

static void batch(bench_state *state, bool lifo)
{
	size_t size = (size_t)bench_range(state, 0);
	void *v[BATCH];

	while (bench_keep_running(state)) {
		for (int i = 0; i < BATCH; i++) {
			v[i] = malloc(size);
			bench_do_not_optimize(v[i]);
		}
		for (int i = 0; i < BATCH; i++)
			free(v[lifo ? BATCH - 1 - i : i]);
	}
	bench_set_items_processed(state, bench_iterations(state) * BATCH);
}

BENCH(BM_malloc_lifo, BENCH_ARGS(64), .arg_name = "size") { batch(state, true); }
BENCH(BM_malloc_fifo, BENCH_ARGS(64), .arg_name = "size") { batch(state, false); }

/* ---- random sizes in a window of live blocks ------------------------------------ */

static size_t random_size(struct wl_rng *r)
{
	if (wl_below(r, 16) == 0)
		return wl_logsize(r, 1025, 32 * 1024 + 1);
	return wl_logsize(r, 8, 1025);
}

static void *random_block(bench_state *state, struct wl_rng *r)
{
	char *p = checked(state, malloc(random_size(r)));

	if (p)
		*p = (char)(uintptr_t)p;
	return p;
}

BENCH(BM_malloc_random, BENCH_ARGS(WINDOW), .arg_name = "window")
{
	static void *slot[WINDOW];
	struct wl_rng r = wl_rng_init(1, 0);

	for (int i = 0; i < WINDOW; i++)
		slot[i] = random_block(state, &r);
	while (bench_keep_running(state)) {
		size_t i = wl_rand(&r) & (WINDOW - 1);

		free(slot[i]);
		slot[i] = random_block(state, &r);
	}
	for (int i = 0; i < WINDOW; i++)
		free(slot[i]);
	bench_set_items_processed(state, bench_iterations(state));
}

/* ---- realloc growth ----------------------------------------------------------- */

/* One realloc per iteration: from `from` bytes to `max` by next(size). */
static void grow(bench_state *state, size_t from, size_t max, size_t (*next)(size_t))
{
	char *p = NULL;
	size_t size = max;

	while (bench_keep_running(state)) {
		if (size == max) {
			free(p);
			size = from;
			p = checked(state, malloc(size));
			if (!p)
				continue;       /* the loop ends: skipped with an error */
			p[0] = 1;
		}
		size_t n = next(size);
		char *q = checked(state, realloc(p, n));
		if (!q)
			continue;
		p = q;
		memset(p + size, (int)(n & 0xff), n - size);
		size = n;
	}
	free(p);
	bench_set_items_processed(state, bench_iterations(state));
}

static size_t twice(size_t n) { return 2 * n; }
static size_t plus64(size_t n) { return n + 64; }

BENCH(BM_realloc_double, BENCH_ARGS(1 << 20), .arg_name = "max") { grow(state, 16, 1 << 20, twice); }
BENCH(BM_realloc_step64, BENCH_ARGS(64 << 10), .arg_name = "max") { grow(state, 64, 64 << 10, plus64); }

/* ---- aligned allocation ------------------------------------------------------- */

static void *by_posix_memalign(size_t align, size_t size)
{
	void *p;

	return posix_memalign(&p, align, size) == 0 ? p : NULL;
}

static void aligned(bench_state *state, void *(*alloc)(size_t align, size_t size))
{
	size_t size = (size_t)bench_range(state, 0), align = (size_t)bench_range(state, 1);

	while (bench_keep_running(state)) {
		char *p = checked(state, alloc(align, size));
		if (!p)
			continue;       /* the loop ends: skipped with an error */
		if ((uintptr_t)p & (align - 1))
			bench_skip_with_error(state, "the block is not aligned");
		*p = 1;
		bench_do_not_optimize(p);
		free(p);
	}
	bench_set_items_processed(state, bench_iterations(state));
}

static void BM_posix_memalign(bench_state *state) { aligned(state, by_posix_memalign); }
static void BM_aligned_alloc(bench_state *state) { aligned(state, aligned_alloc); }

/* (size, alignment): 64 B at small to page alignment, and a 2 MiB block at 64 KiB. */
__attribute__((constructor)) static void register_aligned(void)
{
	static const int64_t cases[][2] = {
		{ 64, 16 }, { 64, 64 }, { 64, 256 }, { 64, 4096 }, { 2 << 20, 64 << 10 },
	};
	static const char *const names[] = { "size", "align" };
	static const struct bench_opts none;
	static const struct { const char *name; bench_fn fn; } fns[] = {
		{ "BM_posix_memalign", BM_posix_memalign },
		{ "BM_aligned_alloc", BM_aligned_alloc },
	};

	for (size_t f = 0; f < sizeof(fns) / sizeof(fns[0]); f++) {
		bench_handle *b = bench_register(fns[f].name, fns[f].fn, &none);

		bench_handle_arg_names(b, names, 2);
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			bench_handle_args(b, cases[i], 2);
	}
}
