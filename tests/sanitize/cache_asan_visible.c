/* SPDX-License-Identifier: MIT */
/*
 * cache_asan_visible - a program built with AddressSanitizer sees misuse of
 * uslab_cache objects: this file is compiled with -fsanitize=address and
 * linked with the release library (not itself instrumented), which then
 * poisons free objects and a slot's padding (platform.h: san_active;
 * cache/api.c). Each misuse runs in a child, which must end with ASan's
 * report; the clean run must end with none. Compiled optimising, so
 * uslab.h's inline fast paths would serve these caches if the library did
 * not route them through itself.
 */
#define _GNU_SOURCE
#include "test.h"

#include <uslab.h>

static void read_after_free(void *unused)
{
	struct uslab_cache *c = uslab_cache_create("asan-uaf", 48, 0, 0, NULL);
	char *p = uslab_cache_alloc(c);

	(void)unused;
	uslab_cache_free(c, p);
	printf("%d\n", ((volatile char *)p)[8]);   /* a read of a free object */
	exit(0);
}

static void write_after_free_remote(void *unused)
{
	struct uslab_cache *c = uslab_cache_create("asan-uaf2", 64, 0, 0, NULL);
	void *objs[100];

	(void)unused;
	REQUIRE(uslab_cache_alloc_bulk(c, 100, objs) == 100);
	uslab_cache_free_bulk(c, 100, objs);
	((volatile char *)objs[50])[63] = 1;   /* a write into one freed in bulk */
	exit(0);
}

static void write_into_padding(void *unused)
{
	/* 40 bytes in 64-byte slots: bytes 40..63 are no object's (ASan sees
	 * whole 8-byte granules: padding within the object's last one is not) */
	struct uslab_cache *c = uslab_cache_create("asan-pad", 40, 64, 0, NULL);
	char *p = uslab_cache_alloc(c);

	(void)unused;
	REQUIRE(uslab_cache_object_size(c) == 64);
	((volatile char *)p)[48] = 1;
	exit(0);
}

/* Everything used as it should be: no report. Objects written whole, freed
 * singly and in bulk, the cache shrunk and destroyed, and its memory then
 * reused by the malloc family (nothing of it may stay poisoned). */
static void clean_run(void *unused)
{
	struct uslab_cache *c = uslab_cache_create("asan-clean", 200, 0, 0, NULL);
	static void *objs[5000];

	(void)unused;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 5000; i++) {
			objs[i] = uslab_cache_alloc(c);
			REQUIRE(objs[i]);
			memset(objs[i], round + i, 200);
		}
		for (int i = 0; i < 5000; i += 2)
			uslab_cache_free(c, objs[i]);
		for (int i = 0; i < 5000; i += 2)
			objs[i / 2] = objs[i + 1];
		uslab_cache_free_bulk(c, 2500, objs);
	}
	uslab_cache_shrink(c);
	REQUIRE(uslab_cache_destroy(c) == 0);
	for (int i = 0; i < 64; i++) {
		char *b = uslab_malloc(100000);

		REQUIRE(b);
		memset(b, i, 100000);
		objs[i] = b;
	}
	for (int i = 0; i < 64; i++)
		uslab_free(objs[i]);
	exit(0);
}

static void expect_report(void (*fn)(void *), const char *what)
{
	struct test_child ch;

	test_run_child(fn, NULL, &ch);
	if (WIFEXITED(ch.status) && WEXITSTATUS(ch.status) == 0) {
		fprintf(stderr, "%s: no report from AddressSanitizer\n", what);
		test_failures++;
	} else if (!strstr(ch.err, "AddressSanitizer: use-after-poison")) {
		fprintf(stderr, "%s: want ASan's use-after-poison report, got: %s\n", what, ch.err);
		test_failures++;
	} else {
		printf("%-24s reported\n", what);
	}
}

int main(void)
{
	struct test_child ch;

	expect_report(read_after_free, "read after free");
	expect_report(write_after_free_remote, "write after bulk free");
	expect_report(write_into_padding, "write into padding");
	test_run_child(clean_run, NULL, &ch);
	if (!WIFEXITED(ch.status) || WEXITSTATUS(ch.status) != 0) {
		fprintf(stderr, "clean run: did not exit 0: %s\n", ch.err);
		test_failures++;
	} else {
		printf("%-24s no report\n", "clean run");
	}
	return test_done("cache_asan_visible");
}
