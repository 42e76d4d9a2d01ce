/* SPDX-License-Identifier: MIT */
/*
 * pairloop.c - N allocation+free pairs in one of several patterns, for
 * counting instructions per pair with callgrind (tools/bench-instructions):
 *   pairloop N pair        malloc(64) then free, the same block every time
 *   pairloop N batch       1,000 malloc(64), then the 1,000 frees (N/1000 rounds)
 *   pairloop N cache       uslab_cache_alloc then uslab_cache_free (64 B), when
 *                          built with -DWITH_USLAB_CACHE against libuslab.a
 *                          (with -O2 these are uslab.h's inline fast paths)
 *   pairloop N cachebatch  1,000 uslab_cache_alloc, then the 1,000 frees
 *   pairloop N loop        the pair loop with nothing in it: its own instructions
 * The difference between two values of N cancels start-up and exit. KEEP's
 * memory clobber stands for the caller's use of the block: nothing the
 * allocator loaded may be kept in a register across it. Each pattern is its
 * own function, so that one loop's code does not depend on the others'.
 */
#include <stdlib.h>
#include <string.h>
#ifdef WITH_USLAB_CACHE
#include <uslab.h>
#endif

#define KEEP(p) __asm__ __volatile__("" ::"r"(p) : "memory")
#define NOINLINE __attribute__((noinline))

static void *v[1000];

static NOINLINE void run_loop(long n)
{
	for (long i = 0; i < n; i++)
		KEEP(i);
}

static NOINLINE void run_pair(long n)
{
	for (long i = 0; i < n; i++) {
		void *p = malloc(64);
		KEEP(p);
		free(p);
	}
}

static NOINLINE void run_batch(long n)
{
	for (long i = 0; i < n / 1000; i++) {
		for (int j = 0; j < 1000; j++) {
			v[j] = malloc(64);
			KEEP(v[j]);
		}
		for (int j = 0; j < 1000; j++)
			free(v[j]);
	}
}

#ifdef WITH_USLAB_CACHE
static NOINLINE void run_cache(struct uslab_cache *c, long n)
{
	for (long i = 0; i < n; i++) {
		void *p = uslab_cache_alloc(c);
		KEEP(p);
		uslab_cache_free(c, p);
	}
}

static NOINLINE void run_cachebatch(struct uslab_cache *c, long n)
{
	for (long i = 0; i < n / 1000; i++) {
		for (int j = 0; j < 1000; j++) {
			v[j] = uslab_cache_alloc(c);
			KEEP(v[j]);
		}
		for (int j = 0; j < 1000; j++)
			uslab_cache_free(c, v[j]);
	}
}
#endif

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[1]) : 0;

	if (argc < 3)
		return 2;
	if (!strcmp(argv[2], "loop"))
		run_loop(n);
	else if (!strcmp(argv[2], "pair"))
		run_pair(n);
	else if (!strcmp(argv[2], "batch"))
		run_batch(n);
#ifdef WITH_USLAB_CACHE
	else if (!strcmp(argv[2], "cache"))
		run_cache(uslab_cache_create("pairloop", 64, 0, 0, NULL), n);
	else if (!strcmp(argv[2], "cachebatch"))
		run_cachebatch(uslab_cache_create("pairloop", 64, 0, 0, NULL), n);
#endif
	else
		return 2;
	return 0;
}
