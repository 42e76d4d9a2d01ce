/* SPDX-License-Identifier: MIT */
/*
 * dwcas_path_unit - the double-width CAS path this process runs is the one
 * the test run expects, and the processor agrees.
 *
 * USLAB_TEST_DWCAS_PATH names the path (a USLAB_TEST_ variable, which the
 * allocator's option parser leaves alone), as uslab_dwcas_path() spells it:
 *   cmpxchg16b    x86-64: cpuid reports CX16
 *   casp          arm64: HWCAP_ATOMICS (LSE) set, and a caspal run here works
 *   ldaxp/stlxp   arm64: HWCAP_ATOMICS clear, and a caspal run here raises
 *                 SIGILL, so the library cannot have used it
 *   locked        USLAB_DWCAS forces the lock path, or the processor lacks
 *                 the instruction
 * Every other test of the run sees the same environment and processor, so it
 * runs the same path. The test then drives that path itself: two threads
 * free each other's blocks, which reach their slabs by dwcas on the slabs'
 * coupled words (the statistics free_remote + foreign_flushed count them),
 * and the path must not change underneath.
 *
 * Without USLAB_TEST_DWCAS_PATH it checks nothing, says so, and ends
 * skipped. tests/arm64/check sets it for each of its runs.
 */
#define _GNU_SOURCE
#include "test.h"
#include "dwcas.h"
#include "stats_json.h"
#include <uslab.h>

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ATOMICS
#define HWCAP_ATOMICS (1 << 8)
#endif
#endif

/* ---- what the processor offers ------------------------------------------- */

#if defined(__aarch64__)
static sigjmp_buf probe_jmp;

static void probe_sigill(int sig)
{
	siglongjmp(probe_jmp, 1);
}

/*
 * Run one caspal on a private pair. Returns 1 if it swapped as it should,
 * 0 if the processor refused it (SIGILL), -1 if it ran but got it wrong.
 */
static int probe_casp(void)
{
	static dword_t w = { 5, 6 };
	struct sigaction sa = { .sa_handler = probe_sigill }, old;
	volatile int ran = 0;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGILL, &sa, &old);
	if (sigsetjmp(probe_jmp, 1) == 0) {
		register uint64_t x0 __asm__("x0") = 5;
		register uint64_t x1 __asm__("x1") = 6;
		register uint64_t x2 __asm__("x2") = 7;
		register uint64_t x3 __asm__("x3") = 8;

		__asm__ __volatile__(".arch_extension lse\n\t"
				     "caspal %[a0], %[a1], %[n0], %[n1], %[m]"
				     : [a0] "+r"(x0), [a1] "+r"(x1), [m] "+Q"(w)
				     : [n0] "r"(x2), [n1] "r"(x3)
				     : "memory");
		ran = (x0 == 5 && x1 == 6 && w.lo == 7 && w.hi == 8) ? 1 : -1;
	}
	sigaction(SIGILL, &old, NULL);
	return ran;
}
#endif

static bool env_forces_lock(void)
{
	const char *v = getenv("USLAB_DWCAS");

	return v && (!strcmp(v, "0") || !strcmp(v, "lock") || !strcmp(v, "locked"));
}

/* The processor's side of the expected path; false with a message if not. */
static bool processor_agrees(const char *want)
{
	if (!strcmp(want, "locked")) {
		if (env_forces_lock() || !dwcas_native_available())
			return true;
		fprintf(stderr, "dwcas_path_unit: expected the locked path, but USLAB_DWCAS "
			"does not force it and the processor has a native dwcas\n");
		return false;
	}
#if defined(__aarch64__)
	unsigned long hwcap = getauxval(AT_HWCAP);
	bool lse = hwcap & HWCAP_ATOMICS;
	int casp = probe_casp();

	printf("  AT_HWCAP %#lx: LSE atomics %s; caspal here: %s\n", hwcap,
	       lse ? "yes" : "no", casp > 0 ? "works" : casp == 0 ? "SIGILL" : "WRONG RESULT");
	if (casp < 0) {
		fprintf(stderr, "dwcas_path_unit: caspal ran but did not swap the pair\n");
		return false;
	}
	if (!strcmp(want, "casp")) {
		if (lse && casp > 0)
			return true;
		fprintf(stderr, "dwcas_path_unit: expected casp, but the processor %s\n",
			!lse ? "reports no LSE atomics (HWCAP_ATOMICS clear)"
			     : "reports LSE yet refuses caspal");
		return false;
	}
	if (!strcmp(want, "ldaxp/stlxp")) {
		if (!lse && casp == 0)
			return true;
		fprintf(stderr, "dwcas_path_unit: expected ldaxp/stlxp, but the processor %s\n",
			lse ? "reports LSE atomics (HWCAP_ATOMICS set): casp would be used"
			    : "runs caspal although HWCAP_ATOMICS is clear");
		return false;
	}
#elif defined(__x86_64__)
	unsigned int a, b, c = 0, d;

	if (!strcmp(want, "cmpxchg16b")) {
		if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_CMPXCHG16B))
			return true;
		fprintf(stderr, "dwcas_path_unit: expected cmpxchg16b, but cpuid reports no CX16\n");
		return false;
	}
#endif
	fprintf(stderr, "dwcas_path_unit: '%s' is not a path this build can have "
		"(cmpxchg16b on x86-64; casp, ldaxp/stlxp on arm64; locked anywhere)\n", want);
	return false;
}

/* ---- driving the path ------------------------------------------------------ */

enum { ROUNDS = 200, BATCH = 256, SIZE = 64 };
#define SIZE_CACHE "kmalloc-64"

struct pass {
	void *blocks[BATCH];
	atomic_t full;   /* 1: the batch is the receiver's */
};

static struct pass passes[2];

/* Thread t allocates into passes[t] and frees what arrives in passes[1 - t]. */
static void *swap_thread(void *arg)
{
	int t = (int)(intptr_t)arg;
	struct pass *out = &passes[t], *in = &passes[1 - t];

	for (int r = 0; r < ROUNDS; r++) {
		while (atomic_read_acquire(&out->full))
			cpu_relax();
		for (int i = 0; i < BATCH; i++) {
			unsigned char *p = uslab_malloc(SIZE);

			if (!p) {
				CHECK(p != NULL);
				return NULL;
			}
			test_fill(p, SIZE);
			out->blocks[i] = p;
		}
		atomic_set_release(&out->full, 1);   /* pairs with the receiver's acquire */
		while (!atomic_read_acquire(&in->full))
			cpu_relax();
		for (int i = 0; i < BATCH; i++) {
			unsigned char *p = in->blocks[i];

			if (!test_intact(p, SIZE))
				CHECK(!"a block passed between threads lost its pattern");
			uslab_free(p);
		}
		atomic_set_release(&in->full, 0);   /* pairs with the sender's acquire */
	}
	return NULL;
}

int main(void)
{
	const char *want = getenv("USLAB_TEST_DWCAS_PATH");
	const char *have = uslab_dwcas_path();

	printf("  uslab_dwcas_path() = \"%s\"\n", have);
	if (!want || !*want) {
		test_skip("USLAB_TEST_DWCAS_PATH is not set: nothing was checked");
		return test_done("dwcas_path_unit");
	}
	if (strcmp(have, want) != 0) {
		fprintf(stderr, "dwcas_path_unit: expected dwcas path \"%s\" "
			"(USLAB_TEST_DWCAS_PATH), but uslab runs \"%s\"\n", want, have);
		test_failures++;
	}
	if (!processor_agrees(want))
		test_failures++;
	if (test_failures)
		return test_done("dwcas_path_unit");

	pthread_t th[2];
	for (int t = 0; t < 2; t++)
		CHECK(pthread_create(&th[t], NULL, swap_thread, (void *)(intptr_t)t) == 0);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	if (strcmp(uslab_dwcas_path(), want) != 0) {
		fprintf(stderr, "dwcas_path_unit: the path changed to \"%s\" while in use\n",
			uslab_dwcas_path());
		test_failures++;
	}

	char *j = stats_json_dump();
	struct stats_obj c;
	long remote = STATS_MISSING, flushed = STATS_MISSING;

	if (j && stats_json_cache(j, SIZE_CACHE, &c)) {
		remote = stats_obj_get(&c, "free_remote");
		flushed = stats_obj_get(&c, "foreign_flushed");
	}
	free(j);
	printf("  %d blocks freed by the other thread; %s: free_remote %ld, "
	       "foreign_flushed %ld, on the \"%s\" path\n",
	       2 * ROUNDS * BATCH, SIZE_CACHE, remote, flushed, want);
	CHECK(remote != STATS_MISSING && flushed != STATS_MISSING);
	CHECK(remote + flushed > 0);   /* the dwcas ran */
	return test_done("dwcas_path_unit");
}
