/* SPDX-License-Identifier: MIT */
/*
 * test.h - the tiny harness every test program uses. A test is a program: it
 * exits 0 when every check held, and otherwise prints what broke and exits 1.
 */
#ifndef USLAB_TEST_H
#define USLAB_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static int test_failures;

#define CHECK(cond)                                                             \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,  \
				__LINE__, #cond);                               \
			test_failures++;                                        \
		}                                                               \
	} while (0)

#define CHECK_EQ(a, b)                                                          \
	do {                                                                    \
		long long _a = (long long)(a), _b = (long long)(b);             \
		if (_a != _b) {                                                 \
			fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", \
				__FILE__, __LINE__, #a, _a, #b, _b);            \
			test_failures++;                                        \
		}                                                               \
	} while (0)

/* Abort the whole test at once (for checks inside worker threads). */
#define REQUIRE(cond)                                                           \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, \
				__LINE__, #cond);                               \
			exit(1);                                                \
		}                                                               \
	} while (0)

static inline int test_done(const char *name)
{
	if (test_failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}

static inline double test_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Stress duration in seconds: USLAB_STRESS_SECONDS overrides the default. */
static inline double test_stress_seconds(double dflt)
{
	const char *s = getenv("USLAB_STRESS_SECONDS");

	return s ? atof(s) : dflt;
}

/* Deterministic per-thread PRNG (xorshift64*). */
static inline uint64_t test_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* The mapping (VMA) that holds p, from /proc/self/smaps: its bounds, its
 * transparent-huge-page flags (VmFlags "hg" = MADV_HUGEPAGE, "nh" =
 * MADV_NOHUGEPAGE), THPeligible and AnonHugePages (KiB). False if no
 * mapping holds p. Reads the file with stdio: call it where stdio may
 * allocate. */
struct test_vma {
	uintptr_t start, end;
	int hg, nh, thp_eligible;
	long anon_huge_kb;
};

/* The kernel's transparent-huge-page mode: -1 when it has none at all (it
 * then refuses MADV_HUGEPAGE, and VmFlags never show "hg" or "nh"), 0 when
 * it is "never" (marks are kept, no huge page is given), 1 otherwise. */
static inline int test_thp_mode(void)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	char buf[128] = "";

	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return buf[0] && !strstr(buf, "[never]");
}

static inline int test_thp_supported(void)
{
	return test_thp_mode() >= 0;
}

static inline int test_vma_of(const void *p, struct test_vma *v)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, found = 0;

	*v = (struct test_vma){ 0, 0, 0, 0, -1, -1 };
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char c;

		if (sscanf(line, "%lx-%lx %c", &lo, &hi, &c) == 3) {   /* a mapping's line */
			if (found)
				break;
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
			if (in) {
				found = 1;
				v->start = lo;
				v->end = hi;
			}
			continue;
		}
		if (!in)
			continue;
		if (!strncmp(line, "THPeligible:", 12))
			v->thp_eligible = atoi(line + 12);
		else if (!strncmp(line, "AnonHugePages:", 14))
			v->anon_huge_kb = atol(line + 14);
		else if (!strncmp(line, "VmFlags:", 8)) {
			v->hg = strstr(line, " hg") != NULL;
			v->nh = strstr(line, " nh") != NULL;
		}
	}
	fclose(f);
	return found;
}

#endif

#ifdef USLAB_TEST_PRELOAD
#include <dlfcn.h>
/*
 * Drop-in tests must really run on uslab: fail loudly if the preload is
 * missing. USLAB_TEST_ALLOW_GLIBC=1 lets a test run on glibc instead (to check
 * the test itself); the result says whether uslab is underneath, so checks of
 * uslab-only behaviour can be skipped there.
 */
static inline int test_require_uslab(void)
{
	const char *g = getenv("USLAB_TEST_ALLOW_GLIBC");
	int on = dlsym(RTLD_DEFAULT, "uslab_malloc") != NULL;

	if (g && *g && strcmp(g, "0"))
		return on;
	if (!on) {
		fprintf(stderr, "this test must run with LD_PRELOAD=libuslab.so\n");
		exit(1);
	}
	return 1;
}

/* Preloaded tests: end uslab's start-up arena (a program's first small
 * blocks, packed outside any slab; allocator/arena.c), so that what follows
 * is served by slabs, heaps and segments. It ends after 16,384 blocks. */
static inline void test_end_startup_arena(void)
{
	for (int i = 0; i < 20000; i++) {
		void *volatile p = malloc(64);
		free(p);
	}
}
#endif
