/* SPDX-License-Identifier: MIT */
/*
 * malloc_debug.c - the debug mode (USLAB_DEBUG=1, allocator/api/debug.c),
 * run with USLAB_DEBUG_QUARANTINE=64k so a freed block leaves the
 * quarantine after 64 KiB of later frees.
 *
 *   works       the malloc family behaves as without it: contents kept,
 *               realloc's prefix, calloc zeroed, alignments, usable size
 *               the size asked for, new blocks filled with 0xA5
 *   detects     each in a forked child, one line naming the call, the
 *               block, its size and its allocation site (a function of
 *               this program, found with dladdr), then SIGABRT:
 *               an overflow by 1 byte and by 16, an underflow, a double
 *               free with other frees between (and where it was freed),
 *               a write after free found when the block leaves the
 *               quarantine, free_sized with a wrong size, an invalid
 *               pointer, realloc and malloc_usable_size of a freed block
 *   quarantine  a freed block is not handed out again before 64 KiB of
 *               later frees
 *   leaks       at exit, the live blocks by allocation site
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <malloc.h>
#include <stdint.h>

extern void free_sized(void *ptr, size_t size) __attribute__((weak));

static void (*volatile vfree)(void *) = free;
static void *(*volatile vrealloc)(void *, size_t) = realloc;
static size_t (*volatile vusable)(void *) = malloc_usable_size;

/* The allocation site the reports must name: exported (the test is linked
 * with -rdynamic), never inlined. */
__attribute__((noinline)) char *debug_test_alloc(size_t n)
{
	char *p = malloc(n);

	REQUIRE(p != NULL);
	__asm__ volatile("" ::: "memory");
	return p;
}

/* ---- works ---------------------------------------------------------------------------- */

static void test_works(void)
{
	uint64_t seed = 7;
	static char *blocks[256];
	static size_t sizes[256];

	for (int round = 0; round < 20000; round++) {
		unsigned i = (unsigned)(test_rand(&seed) % 256);
		size_t n = (size_t)(test_rand(&seed) % 5000);

		if (blocks[i]) {
			CHECK(test_intact(blocks[i], sizes[i]));
			if (round % 3 == 0) {
				uint64_t old_seed = test_block_seed(blocks[i], sizes[i]);
				char *q = realloc(blocks[i], n);
				REQUIRE(q != NULL || n == 0);
				size_t keep = sizes[i] < n ? sizes[i] : n;
				CHECK(test_check_with(q, keep, sizes[i], old_seed, TEST_FILL_ALL) == keep);
				blocks[i] = q;
				sizes[i] = n;
				if (q)
					test_fill(q, n);
				continue;
			}
			free(blocks[i]);
			blocks[i] = NULL;
		}
		switch (round % 4) {
		case 0:
			blocks[i] = calloc(1, n);
			REQUIRE(blocks[i] != NULL);
			CHECK(test_all_zero(blocks[i], n));
			break;
		case 1: {
			size_t align = (size_t)1 << (test_rand(&seed) % 14);
			blocks[i] = aligned_alloc(align, n);
			REQUIRE(blocks[i] != NULL);
			CHECK((uintptr_t)blocks[i] % align == 0);
			break;
		}
		default:
			blocks[i] = malloc(n);
			REQUIRE(blocks[i] != NULL);
			for (size_t k = 0; k < n; k++)
				if ((unsigned char)blocks[i][k] != 0xA5) {
					CHECK(!"a new block is filled with 0xA5");
					break;
				}
			CHECK((uintptr_t)blocks[i] % 16 == 0);
			break;
		}
		CHECK_EQ(malloc_usable_size(blocks[i]), n);
		sizes[i] = n;
		test_fill(blocks[i], n);
	}
	for (int i = 0; i < 256; i++) {
		if (blocks[i])
			CHECK(test_intact(blocks[i], sizes[i]));
		free(blocks[i]);
	}
}

static void test_quarantine(void)
{
	char *p = debug_test_alloc(64);
	void *later[64];

	free(p);
	for (int i = 0; i < 64; i++) {   /* 4 KiB of frees: p is still held back */
		later[i] = malloc(64);
		CHECK(later[i] != p);
	}
	for (int i = 0; i < 64; i++)
		free(later[i]);
}

/* ---- detects ------------------------------------------------------------------------------ */

static void overflow_by(void *arg)
{
	size_t by = (size_t)(uintptr_t)arg;
	char *volatile p = debug_test_alloc(24);

	p[24 + by - 1] = 1;
	vfree(p);
}

static void underflow(void *arg)
{
	char *volatile p = debug_test_alloc(24);

	(void)arg;
	p[-3] = 1;
	vfree(p);
}

static void double_free_between(void *arg)
{
	char *p = debug_test_alloc(40), *q = malloc(40);

	(void)arg;
	vfree(p);
	vfree(q);
	vfree(p);
}

static void write_after_free(void *arg)
{
	char *volatile p = debug_test_alloc(100);

	(void)arg;
	vfree(p);
	p[10] = 0;
	for (int i = 0; i < 64; i++)   /* 128 KiB of frees push p out */
		vfree(malloc(2048));
}

static void wrong_size(void *arg)
{
	char *p = debug_test_alloc(100);

	(void)arg;
	free_sized(p, 64);
}

static void invalid(void *arg)
{
	char *p = debug_test_alloc(100);

	(void)arg;
	vfree(p + 16);
}

/* the start of the block the debug mode carved p from: a valid object to
 * the allocator's fast path, which the debug mode must not let take it */
static void invalid_front(void *arg)
{
	char *p = debug_test_alloc(100);

	(void)arg;
	vfree(p - 16);
}

static void realloc_freed(void *arg)
{
	char *p = debug_test_alloc(100);

	(void)arg;
	vfree(p);
	vrealloc(p, 200);
}

static void usable_freed(void *arg)
{
	char *p = debug_test_alloc(100);

	(void)arg;
	vfree(p);
	vusable(p);
}

/* fn in a child must abort with a line that starts with want and names
 * this program's allocation site */
static void expect(void (*fn)(void *), void *arg, const char *want, bool site)
{
	struct test_child c;

	test_run_child(fn, arg, &c);
	if (!test_aborted_with(&c, want)) {
		test_child_failed(&c, want);
		return;
	}
	if (site && !strstr(c.err, "allocated at malloc_debug(debug_test_alloc+")) {
		fprintf(stderr, "the report does not name the allocation site: %s", c.err);
		test_failures++;
		return;
	}
	/* a block freed before names where: this program, not the library */
	if (strstr(c.err, ", freed at") && !strstr(c.err, ", freed at malloc_debug")) {
		fprintf(stderr, "the report does not name the free site: %s", c.err);
		test_failures++;
		return;
	}
	printf("  ok: %.*s\n", (int)strcspn(c.err, "\n"), c.err);
}

static void test_detects(void)
{
	expect(overflow_by, (void *)1, "uslab: free(): red zone of block 0x", true);
	expect(overflow_by, (void *)16, "uslab: free(): red zone of block 0x", true);
	expect(underflow, NULL, "uslab: free(): red zone of block 0x", true);
	expect(double_free_between, NULL, "uslab: free(): double free of block 0x", true);
	expect(write_after_free, NULL, "uslab: free(): write after free to block 0x", true);
	if (free_sized)
		expect(wrong_size, NULL, "uslab: free_sized(): wrong size for block 0x", true);
	expect(invalid, NULL, "uslab: free(): invalid pointer 0x", false);
	expect(invalid_front, NULL, "uslab: free(): invalid pointer 0x", false);
	expect(realloc_freed, NULL, "uslab: realloc(): realloc of freed block 0x", true);
	expect(usable_freed, NULL, "uslab: malloc_usable_size(): malloc_usable_size of freed block 0x",
	       true);
}

/* ---- leaks ------------------------------------------------------------------------------------ */

static void leak_three(void *arg)
{
	(void)arg;
	debug_test_alloc(1000);
	debug_test_alloc(2000);
	debug_test_alloc(3000);
	exit(0);   /* the report is made at exit */
}

static void test_leaks(void)
{
	struct test_child c;

	test_run_child(leak_three, NULL, &c);
	CHECK(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0);
	if (!strstr(c.err, "live at exit, by allocation site") ||
	    !strstr(c.err, "6000 bytes in 3 blocks allocated at malloc_debug(debug_test_alloc+")) {
		fprintf(stderr, "no leak report naming 6000 bytes in 3 blocks at debug_test_alloc: %s\n",
			c.err);
		test_failures++;
	}
}

int main(void)
{
	test_require_uslab();
	const char *d = getenv("USLAB_DEBUG");
	if (!d || strcmp(d, "1")) {
		fprintf(stderr, "malloc_debug must run with USLAB_DEBUG=1\n");
		return 1;
	}
	test_works();
	test_quarantine();
	test_detects();
	test_leaks();
	return test_done("malloc_debug");
}
