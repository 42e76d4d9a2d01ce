/* SPDX-License-Identifier: MIT */
/*
 * malloc_two_copies.c - a program that links libuslab.a for the object-cache
 * API, exports its symbols (-rdynamic, as programs with plugins are linked),
 * and runs with LD_PRELOAD=libuslab-malloc.so for malloc: two copies of uslab in one
 * process. Each must keep its own per-thread heap pointer and its own
 * functions. Before the library bound its own references (-Bsymbolic), the
 * preloaded copy resolved uslab_tls_heap_ and the uslab_ functions that
 * realloc, calloc, posix_memalign... call to this program's copy: its malloc
 * then ran on the static copy's heaps (or aborted with "invalid pointer"),
 * and the static copy's inline cache paths read the preloaded copy's heap.
 *
 * 4 threads, each several rounds of: cache objects (static copy) and blocks
 * from every malloc-family call (preloaded copy), all filled with a pattern
 * from their address and checked before they are freed; every thread exits
 * with objects and blocks live, which main frees afterwards. Then both
 * copies' own checks: the cache validates clean and can be destroyed.
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include "uslab.h"

#include <malloc.h>
#include <pthread.h>

/* C23; glibc 2.36 does not declare it, the preloaded uslab defines it. */
extern void free_sized(void *ptr, size_t size) __attribute__((weak));

#define THREADS 4
#define ROUNDS 200
#define PER_ROUND 64

static struct uslab_cache *cache;

struct live {
	void *obj[PER_ROUND];        /* from the cache (static copy) */
	void *blk[PER_ROUND];        /* from the malloc family (preloaded copy) */
	size_t len[PER_ROUND];
};

static struct live leftovers[THREADS];

/* One block from the malloc-family call chosen by k, of about n bytes. */
static void *family_alloc(unsigned k, size_t n, size_t *len)
{
	void *p = NULL;

	*len = n;
	switch (k % 6) {
	case 0: p = malloc(n); break;
	case 1: p = calloc(1, n); if (p) REQUIRE(((unsigned char *)p)[n - 1] == 0); break;
	case 2: REQUIRE(posix_memalign(&p, 64, n) == 0); REQUIRE((uintptr_t)p % 64 == 0); break;
	case 3: p = aligned_alloc(256, n); REQUIRE((uintptr_t)p % 256 == 0); break;
	case 4: p = memalign(32, n); break;
	case 5:  /* grown through realloc: content kept */
		p = malloc(n / 2 + 1);
		REQUIRE(p);
		memset(p, 0x5a, n / 2 + 1);
		p = realloc(p, n);
		REQUIRE(p);
		for (size_t i = 0; i <= n / 2; i++)
			REQUIRE(((unsigned char *)p)[i] == 0x5a);
		break;
	}
	REQUIRE(p);
	REQUIRE(malloc_usable_size(p) >= n);
	return p;
}

/* the copy's per-thread heap pointer (uslab.h declares it only for its
 * inline paths, in optimised builds) */
extern __thread char *uslab_tls_heap_ __asm__("uslab_tls_heap_v4_");

static void *worker(void *arg)
{
	struct live *mine = arg;
	unsigned seed = (unsigned)(mine - leftovers) * 7919u + 1;
	/* This thread's instance of the preloaded copy's pointer. Read through
	 * volatile: the compiler may assume malloc changes no memory it knows. */
	char *volatile *so_heap = dlsym(RTLD_NEXT, "uslab_tls_heap_v4_");
	char *volatile *my_heap = &uslab_tls_heap_;
	char *mine0 = *my_heap, *so0, *so1;
	void *first[PER_ROUND];

	/* Each copy's first use in this thread sets its own heap pointer and
	 * only its own. */
	REQUIRE(so_heap && so_heap != my_heap);
	so0 = *so_heap;
	for (int i = 0; i < PER_ROUND; i++) {
		first[i] = malloc(100);
		REQUIRE(first[i]);
		*(volatile char *)first[i] = 1;
	}
	so1 = *so_heap;
	CHECK(so1 != so0);
	CHECK(*my_heap == mine0);
	for (int i = 0; i < PER_ROUND; i++)
		free(first[i]);
	uslab_cache_free(cache, uslab_cache_alloc(cache));
	CHECK(*my_heap != mine0);
	CHECK(*so_heap == so1);

	for (int r = 0; r < ROUNDS; r++) {
		struct live cur;

		for (int i = 0; i < PER_ROUND; i++) {
			seed = seed * 1103515245u + 12345u;
			cur.obj[i] = uslab_cache_alloc(cache);
			REQUIRE(cur.obj[i]);
			test_fill(cur.obj[i], 48);
			cur.blk[i] = family_alloc(seed >> 8, 16 + (seed >> 16) % 3000, &cur.len[i]);
			test_fill(cur.blk[i], cur.len[i]);
		}
		for (int i = 0; i < PER_ROUND; i++) {
			REQUIRE(test_intact(cur.obj[i], 48));
			REQUIRE(test_intact(cur.blk[i], cur.len[i]));
		}
		if (r == ROUNDS - 1) {   /* leave the last round live */
			*mine = cur;
			break;
		}
		for (int i = 0; i < PER_ROUND; i++) {
			uslab_cache_free(cache, cur.obj[i]);
			if (i % 3 == 0)
				free_sized(cur.blk[i], cur.len[i]);
			else
				free(cur.blk[i]);
		}
	}
	return NULL;
}

int main(void)
{
	void *(*so_malloc)(size_t);
	pthread_t t[THREADS];

	test_require_uslab();
	REQUIRE(free_sized != NULL);
	/* Two copies: this program's uslab_malloc (exported) and the preloaded one. */
	*(void **)&so_malloc = dlsym(RTLD_NEXT, "uslab_malloc");
	REQUIRE(so_malloc != NULL);
	CHECK(so_malloc != uslab_malloc);

	/* past the preloaded copy's start-up arena: each thread's first malloc
	 * below then makes that copy's heap for the thread */
	test_end_startup_arena();
	cache = uslab_cache_create("two_copies", 48, 0, 0, NULL);
	REQUIRE(cache);
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_create(&t[i], NULL, worker, &leftovers[i]) == 0);
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_join(t[i], NULL) == 0);

	/* Objects and blocks of dead threads, freed by main. */
	for (int i = 0; i < THREADS; i++)
		for (int j = 0; j < PER_ROUND; j++) {
			CHECK(test_intact(leftovers[i].obj[j], 48));
			CHECK(test_intact(leftovers[i].blk[j], leftovers[i].len[j]));
			uslab_cache_free(cache, leftovers[i].obj[j]);
			free(leftovers[i].blk[j]);
		}
	CHECK_EQ(uslab_cache_validate(cache), 0);
	CHECK_EQ(uslab_cache_destroy(cache), 0);
	return test_done("malloc_two_copies");
}
