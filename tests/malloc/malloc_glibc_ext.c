/* SPDX-License-Identifier: MIT */
/*
 * malloc_glibc_ext.c - glibc's extensions under LD_PRELOAD=libuslab-malloc.so,
 * and the run-time control that backs one of them:
 *   - mallopt(M_TRIM_THRESHOLD, n) returns 1 and sets how much free memory
 *     stays committed (uslab_ctl "dirty_max" reads n back); parameters of
 *     glibc's own heaps (M_ARENA_MAX, M_MMAP_THRESHOLD, ...) return 0;
 *   - malloc_info(0, f) writes glibc's XML shape, with a <size> line for a
 *     cache that has free objects and the huge blocks' total; options != 0
 *     is -1 with EINVAL;
 *   - uslab_ctl reads and sets the live options by name (any case), and
 *     refuses unknown names, options read only at start-up and values out of
 *     range with -EINVAL, changing nothing.
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <string.h>

static int (*ctl)(const char *, long *, const long *);

static long ctl_get(const char *name)
{
	long v = -1;

	REQUIRE(ctl(name, &v, NULL) == 0);
	return v;
}

static void test_ctl(void)
{
	long old = -1, v;

	CHECK_EQ(ctl_get("decay_ms"), 500);      /* the default */
	v = 250;
	CHECK_EQ(ctl("DECAY_MS", &old, &v), 0);   /* any case; old value out */
	CHECK_EQ(old, 500);
	CHECK_EQ(ctl_get("decay_ms"), 250);
	v = 0;
	CHECK_EQ(ctl("huge_pages", NULL, &v), 0);
	CHECK_EQ(ctl_get("huge_pages"), 0);

	/* refused, and nothing changes */
	v = 2;
	CHECK_EQ(ctl("huge_pages", NULL, &v), -EINVAL);    /* a boolean */
	v = -1;
	CHECK_EQ(ctl("dirty_max", NULL, &v), -EINVAL);
	v = 1l << 40;
	CHECK_EQ(ctl("decay_ms", NULL, &v), -EINVAL);      /* above INT_MAX */
	v = 0;
	CHECK_EQ(ctl("startup_arena", NULL, &v), -EINVAL); /* read once, at start-up */
	CHECK_EQ(ctl("cpu_partial", NULL, &v), -EINVAL);
	CHECK_EQ(ctl("no_such_option", &old, NULL), -EINVAL);
	CHECK_EQ(ctl(NULL, &old, NULL), -EINVAL);
	CHECK_EQ(ctl_get("decay_ms"), 250);
	CHECK_EQ(ctl_get("huge_pages"), 0);
}

static void test_mallopt(void)
{
	CHECK_EQ(mallopt(M_TRIM_THRESHOLD, 3 << 20), 1);
	CHECK_EQ(ctl_get("dirty_max"), 3l << 20);
	CHECK_EQ(mallopt(M_TRIM_THRESHOLD, -5), 0);
	CHECK_EQ(ctl_get("dirty_max"), 3l << 20);
	CHECK_EQ(mallopt(M_ARENA_MAX, 1), 0);
	CHECK_EQ(mallopt(M_MMAP_THRESHOLD, 1 << 20), 0);
	CHECK_EQ(mallopt(M_MXFAST, 0), 0);
}

static void test_malloc_info(void)
{
	enum { N = 1000 };
	static void *p[N];
	char *text = NULL;
	size_t len = 0;

	test_end_startup_arena();   /* the blocks below in slabs */
	for (int i = 0; i < N; i++)
		REQUIRE((p[i] = malloc(96)) != NULL);
	for (int i = 0; i < N; i += 2)   /* free objects in the 96-byte cache */
		free(p[i]);
	void *huge = malloc(8 << 20);
	REQUIRE(huge != NULL);

	FILE *f = open_memstream(&text, &len);
	REQUIRE(f != NULL);
	CHECK_EQ(malloc_info(0, f), 0);
	fclose(f);
	CHECK(strncmp(text, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n", 41) == 0);
	CHECK(strstr(text, "<size from=\"96\" to=\"96\" total=\"") != NULL);
	CHECK(strstr(text, "<total type=\"mmap\" count=\"1\" size=\"") != NULL);
	CHECK(len > 10 && strcmp(text + len - 10, "</malloc>\n") == 0);
	if (test_failures)
		fprintf(stderr, "malloc_info wrote:\n%s", text);
	free(text);

	errno = 0;
	CHECK_EQ(malloc_info(1, stderr), -1);
	CHECK_EQ(errno, EINVAL);
	free(huge);
	for (int i = 1; i < N; i += 2)
		free(p[i]);
}

int main(void)
{
	if (!test_require_uslab())
		return test_done("malloc_glibc_ext");
	ctl = (int (*)(const char *, long *, const long *))dlsym(RTLD_DEFAULT, "uslab_ctl");
	REQUIRE(ctl != NULL);
	test_ctl();
	test_mallopt();
	test_malloc_info();
	return test_done("malloc_glibc_ext");
}
