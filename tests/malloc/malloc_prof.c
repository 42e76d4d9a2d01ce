/* SPDX-License-Identifier: MIT */
/*
 * malloc_prof.c - the heap profiler under the drop-in library: a program
 * that knows nothing of uslab, its malloc, calloc, realloc and
 * posix_memalign preloaded, started again by this test with USLAB_PROF=1,
 * writes a profile at exit that google-pprof reads (skipped when it is not
 * installed: apt-get install google-perftools).
 *
 *   pprof      two call sites allocating 3:1 in bytes: google-pprof --text
 *              --alloc_space names both, in that proportion within 20 %
 *   standard   the standard names on sampled blocks (USLAB_PROF_SAMPLE=1
 *              samples every one) behave as always, realloc growing a large
 *              block in place included
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <malloc.h>

#define CASE_ENV "USLAB_TEST_PROF_CASE"

/* The call sites pprof must name: exported, called through pointers so
 * that no clone of them has another name. */
__attribute__((noinline)) void *malloc_prof_site_a(size_t n)
{
	void *p = malloc(n);

	REQUIRE(p != NULL);
	__asm__ volatile("" ::: "memory");
	return p;
}

__attribute__((noinline)) void *malloc_prof_site_b(size_t n)
{
	void *p = calloc(1, n);

	REQUIRE(p != NULL);
	__asm__ volatile("" ::: "memory");
	return p;
}

static void *(*volatile site_a)(size_t) = malloc_prof_site_a;
static void *(*volatile site_b)(size_t) = malloc_prof_site_b;

/* 24 MiB in 256-byte blocks from A, 8 MiB in 64 KiB blocks from B (calloc's
 * large path), freed as they come. At 1 sample per 16 KiB, about 1,500
 * and 126 samples (B's blocks are nearly all sampled): the ratio's spread
 * is under 3 %, so 20 % is never reached by chance. */
static void case_pprof(void)
{
	for (int i = 0; i < 128; i++) {
		for (int j = 0; j < 768; j++)
			free(site_a(256));
		free(site_b(64 << 10));
	}
	exit(0);   /* the profile is written at exit */
}

static void case_standard(void)
{
	static const size_t sizes[] = { 0, 8, 100, 4000, 40000, 1 << 20, 5 << 20 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		char *p = malloc(n), *z = calloc(n + 1, 1);
		void *a = NULL;

		REQUIRE(p && z && posix_memalign(&a, 256, n + 1) == 0);
		CHECK(test_all_zero(z, n + 1) && ((uintptr_t)a & 255) == 0);
		CHECK(malloc_usable_size(p) >= n);
		test_fill(p, n);
		uint64_t seed = test_block_seed(p, n);
		p = realloc(p, 3 * n + 1);
		REQUIRE(p != NULL);
		CHECK(test_intact_seed(p, n, seed));
		free(z);
		free(a);
		free(p);
	}
}

static void start_case(void *arg)
{
	const char *const *env = arg;

	for (int i = 0; env[i]; i++)
		putenv((char *)env[i]);
	execl("/proc/self/exe", "malloc_prof", (char *)NULL);
	perror("exec");
	_exit(1);
}

/* The first number of pprof's line for function name: its MB. */
static double pprof_mb(const char *text, const char *name)
{
	for (const char *line = text; line && *line; line = strchr(line, '\n'), line += !!line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		size_t nlen = strlen(name);
		double mb;

		if (len > nlen && !strncmp(line + len - nlen, name, nlen) && line[len - nlen - 1] == ' ' &&
		    sscanf(line, " %lf", &mb) == 1)
			return mb;
	}
	return -1;
}

static void test_pprof(const char *dir)
{
	static char env_file[128];
	const char *env[] = { CASE_ENV "=pprof", "USLAB_PROF=1", "USLAB_PROF_SAMPLE=16k",
			      "USLAB_PROF_TOP=0", env_file, NULL };
	struct test_child c;
	char cmd[512], exe[256], heap[160];

	snprintf(env_file, sizeof(env_file), "USLAB_PROF_FILE=%s/prof.heap", dir);
	snprintf(heap, sizeof(heap), "%s/prof.heap", dir);
	test_run_child(start_case, env, &c);
	if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0 || access(heap, R_OK) != 0) {
		fprintf(stderr, "the profiled child failed or wrote no %s: %s\n", heap, c.err);
		test_failures++;
		return;
	}
	if (system("command -v google-pprof >/dev/null 2>&1") != 0) {
		test_skip("google-pprof is not installed (apt-get install google-perftools)");
		return;
	}
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	REQUIRE(n > 0);
	exe[n] = 0;
	/* pprof itself (perl) need not run under uslab */
	snprintf(cmd, sizeof(cmd), "env -u LD_PRELOAD google-pprof --text --alloc_space %s %s 2>&1",
		 exe, heap);
	FILE *f = popen(cmd, "r");
	REQUIRE(f != NULL);
	static char out[1 << 16];
	size_t len = fread(out, 1, sizeof(out) - 1, f);
	out[len] = 0;
	int rc = pclose(f);
	double a = pprof_mb(out, "malloc_prof_site_a"), b = pprof_mb(out, "malloc_prof_site_b");

	if (rc != 0 || a <= 0 || b <= 0 || a / b < 2.4 || a / b > 3.75 || a < 19 || a > 29) {
		fprintf(stderr, "google-pprof --text: site A %.1f MB, site B %.1f MB (expected about 24 "
				"and 8, in the proportion 3:1 within 20 %%); its output:\n%s\n", a, b, out);
		test_failures++;
	}
	unlink(heap);
}

static void test_standard(const char *dir)
{
	static char env_file[128];
	const char *env[] = { CASE_ENV "=standard", "USLAB_PROF=1", "USLAB_PROF_SAMPLE=1",
			      "USLAB_PROF_TOP=0", env_file, NULL };
	struct test_child c;
	char heap[160];

	snprintf(env_file, sizeof(env_file), "USLAB_PROF_FILE=%s/standard.heap", dir);
	snprintf(heap, sizeof(heap), "%s/standard.heap", dir);

	test_run_child(start_case, env, &c);
	if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
		fprintf(stderr, "the standard names failed on sampled blocks: %s\n", c.err);
		test_failures++;
	}
	unlink(heap);
}

int main(void)
{
	const char *name = getenv(CASE_ENV);

	if (name && !strcmp(name, "pprof"))
		case_pprof();
	if (name && !strcmp(name, "standard")) {
		case_standard();
		return test_done("malloc_prof standard");
	}
	if (!test_require_uslab())
		return test_done("malloc_prof");
	char dir[] = "/tmp/malloc_prof.XXXXXX";
	REQUIRE(mkdtemp(dir) != NULL);
	test_standard(dir);
	test_pprof(dir);
	rmdir(dir);
	return test_done("malloc_prof");
}
