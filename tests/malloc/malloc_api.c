/* SPDX-License-Identifier: MIT */
/*
 * malloc_api.c - conformance of every malloc-family function under
 * LD_PRELOAD=libuslab-malloc.so: the standard names, C23 free_sized and
 * free_aligned_sized, and glibc's __libc_ names.
 *
 * Edge cases: malloc(0), free(NULL), overflow and too-large sizes (NULL +
 * ENOMEM), bad alignments (EINVAL), alignments 8 B .. 4 MiB with odd sizes,
 * the minimum alignment min(16, largest power of two <= size), content kept
 * by realloc across every block kind, realloc(p, 0), malloc_usable_size
 * bytes all writable, calloc zeroing (also of recycled memory), and no
 * overlap among 100,000 live blocks.
 *
 * USLAB_TEST_ALLOW_GLIBC=1 runs it without the preload (against glibc), to
 * tell a wrong test from a wrong allocator.
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <unistd.h>

/* C23, not in glibc 2.36's headers: weak, so the program links against
 * glibc alone too (they are NULL there). */
extern void free_sized(void *ptr, size_t size) __attribute__((weak));
extern void free_aligned_sized(void *ptr, size_t alignment, size_t size) __attribute__((weak));

/* glibc's internal names, which uslab also overrides. */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static int on_uslab;   /* 0 when run against glibc */

/* Calls through a volatile pointer, so the compiler neither warns about
 * nor folds the deliberately absurd sizes below. */
static void *(*volatile vmalloc)(size_t) = malloc;
static void *(*volatile vcalloc)(size_t, size_t) = calloc;
static void *(*volatile vrealloc)(void *, size_t) = realloc;
static void *(*volatile vreallocarray)(void *, size_t, size_t) = reallocarray;
static void *(*volatile vmemalign)(size_t, size_t) = memalign;
static void *(*volatile valigned_alloc)(size_t, size_t) = aligned_alloc;
static void *(*volatile vvalloc)(size_t) = valloc;
static void *(*volatile vpvalloc)(size_t) = pvalloc;

static size_t min_align(size_t n)
{
	size_t a = 1;

	while (a * 2 <= n && a < 16)
		a *= 2;
	return a;
}

static int aligned(const void *p, size_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

/* ---- malloc / free / malloc(0) --------------------------------------------- */

static void test_malloc_free(void)
{
	enum { N = 256 };
	void *z[N];

	free(NULL);
	for (int i = 0; i < N; i++) {
		z[i] = malloc(0);
		CHECK(z[i] != NULL);
	}
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			if (z[i] == z[j]) {
				fprintf(stderr, "malloc(0) returned %p twice\n", z[i]);
				test_failures++;
			}
	for (int i = 0; i < N; i++)
		free(z[i]);

	for (size_t n = 1; n <= 70000; n = n * 3 / 2 + 1) {
		char *p = malloc(n);
		CHECK(p != NULL);
		if (!p)
			continue;
		test_fill_seed(p, n, n);
		CHECK_EQ(test_first_bad_seed(p, n, n), n);
		CHECK(malloc_usable_size(p) >= n);
		free(p);
	}
}

/* ---- sizes that cannot be served: NULL + ENOMEM --------------------------- */

static void expect_enomem(void *p, const char *what)
{
	if (p != NULL || errno != ENOMEM) {
		fprintf(stderr, "%s: got %p errno %d, want NULL + ENOMEM\n", what, p, errno);
		test_failures++;
	}
	free(p);
}

static void test_too_large(void)
{
	size_t half = SIZE_MAX / 2 + 1;

	errno = 0; expect_enomem(vmalloc(SIZE_MAX), "malloc(SIZE_MAX)");
	errno = 0; expect_enomem(vmalloc((size_t)PTRDIFF_MAX + 1), "malloc(PTRDIFF_MAX+1)");
	errno = 0; expect_enomem(vmalloc(SIZE_MAX - 4096), "malloc(SIZE_MAX-4096)");
	errno = 0; expect_enomem(vmalloc((size_t)PTRDIFF_MAX), "malloc(PTRDIFF_MAX)");
	errno = 0; expect_enomem(vcalloc(half, 2), "calloc(SIZE_MAX/2+1, 2)");
	errno = 0; expect_enomem(vcalloc((size_t)1 << 33, (size_t)1 << 33), "calloc(2^33, 2^33)");
	errno = 0; expect_enomem(vcalloc(1, SIZE_MAX), "calloc(1, SIZE_MAX)");
	errno = 0; expect_enomem(vreallocarray(NULL, SIZE_MAX, 2), "reallocarray(NULL, SIZE_MAX, 2)");
	errno = 0; expect_enomem(vrealloc(NULL, SIZE_MAX), "realloc(NULL, SIZE_MAX)");
	errno = 0; expect_enomem(vmemalign(64, SIZE_MAX), "memalign(64, SIZE_MAX)");
	errno = 0; expect_enomem(vmemalign(4 * MiB, (size_t)PTRDIFF_MAX), "memalign(4 MiB, PTRDIFF_MAX)");
	errno = 0; expect_enomem(valigned_alloc(4096, SIZE_MAX - 4095), "aligned_alloc(4096, SIZE_MAX-4095)");
	errno = 0; expect_enomem(vvalloc(SIZE_MAX), "valloc(SIZE_MAX)");
	errno = 0; expect_enomem(vpvalloc(SIZE_MAX), "pvalloc(SIZE_MAX)");
	errno = 0; expect_enomem(vpvalloc(SIZE_MAX - 100), "pvalloc(SIZE_MAX-100)");

	/* a failed realloc/reallocarray leaves the block untouched */
	size_t sizes[] = { 24, 3000, 100 * KiB, 5 * MiB };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		char *p = malloc(n);
		REQUIRE(p);
		test_fill_seed(p, n, 77 + i);
		errno = 0; expect_enomem(vreallocarray(p, half, 2), "reallocarray(p, overflow)");
		errno = 0; expect_enomem(vrealloc(p, SIZE_MAX), "realloc(p, SIZE_MAX)");
		errno = 0; expect_enomem(vrealloc(p, (size_t)PTRDIFF_MAX + 1), "realloc(p, PTRDIFF_MAX+1)");
		errno = 0; expect_enomem(vrealloc(p, SIZE_MAX - 4000), "realloc(p, SIZE_MAX-4000)");
		CHECK_EQ(test_first_bad_seed(p, n, 77 + i), n);
		CHECK(malloc_usable_size(p) >= n);
		free(p);
	}

	void *q = (void *)0x1234;
	CHECK_EQ(posix_memalign(&q, 64, SIZE_MAX), ENOMEM);
	CHECK(q == (void *)0x1234);
	CHECK(posix_memalign(&q, half, 1) != 0);
	CHECK(q == (void *)0x1234);
}

/* ---- alignment --------------------------------------------------------------- */

static void test_posix_memalign_einval(void)
{
	size_t bad[] = { 0, 1, 2, 3, 4, 5, 12, 24, 48, 96, 100, 4097, 3 * 4096 };

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		void *p = (void *)0x5678;
		int rc = posix_memalign(&p, bad[i], 64);
		if (rc != EINVAL) {
			fprintf(stderr, "posix_memalign(align=%zu) = %d, want EINVAL\n", bad[i], rc);
			test_failures++;
		}
		CHECK(p == (void *)0x5678);   /* not written on failure */
		if (rc == 0)
			free(p);
	}
	/* sizeof(void *) itself is fine */
	void *p = NULL;
	CHECK_EQ(posix_memalign(&p, sizeof(void *), 1), 0);
	CHECK(p && aligned(p, sizeof(void *)));
	free(p);
}

static void check_aligned_block(void *p, size_t align, size_t n, const char *fn)
{
	if (!p) {
		fprintf(stderr, "%s(align=%zu, size=%zu) failed\n", fn, align, n);
		test_failures++;
		return;
	}
	if (!aligned(p, align)) {
		fprintf(stderr, "%s(align=%zu, size=%zu) = %p: misaligned\n", fn, align, n, p);
		test_failures++;
	}
	size_t u = malloc_usable_size(p);
	if (u < n) {
		fprintf(stderr, "%s(align=%zu, size=%zu): usable %zu < size\n", fn, align, n, u);
		test_failures++;
	}
	/* first and last byte of the request, and a pattern over it */
	test_fill(p, n);
	if (!test_intact(p, n)) {
		fprintf(stderr, "%s(align=%zu, size=%zu): content lost\n", fn, align, n);
		test_failures++;
	}
}

static void test_alignments(void)
{
	size_t sizes[] = { 1, 7, 100, 4095, 40000, 3 * MiB };
	enum { NS = sizeof(sizes) / sizeof(sizes[0]) };

	for (size_t a = 8; a <= 4 * MiB; a *= 2) {
		for (unsigned i = 0; i < NS; i++) {
			size_t n = sizes[i];
			void *p[3], *q;

			/* two of each, so a second slot of a class is seen too */
			for (int k = 0; k < 2; k++) {
				p[k] = NULL;
				CHECK_EQ(posix_memalign(&p[k], a, n), 0);
				check_aligned_block(p[k], a, n, "posix_memalign");
			}
			p[2] = aligned_alloc(a, n);
			check_aligned_block(p[2], a, n, "aligned_alloc");
			q = memalign(a, n);
			check_aligned_block(q, a, n, "memalign");
			for (int k = 0; k < 2; k++) {
				if (p[k] && !test_intact(p[k], n)) {
					fprintf(stderr, "posix_memalign(%zu, %zu): overwritten by a neighbour\n", a, n);
					test_failures++;
				}
				free(p[k]);
			}
			if (free_aligned_sized)
				free_aligned_sized(p[2], a, n);
			else
				free(p[2]);
			free(q);
		}
	}

	/* memalign rounds a non-power-of-two alignment up (glibc) */
	size_t odd[] = { 24, 48, 100, 3000, 5000 };
	for (unsigned i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		size_t want = 1;
		while (want < odd[i])
			want *= 2;
		void *p = memalign(odd[i], 100);
		CHECK(p && aligned(p, want));
		free(p);
	}

	/* valloc / pvalloc */
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t vs[] = { 0, 1, 100, 4096, 4097, 40000, 3 * MiB + 1 };
	for (unsigned i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
		void *v = valloc(vs[i]);
		void *pv = pvalloc(vs[i]);
		CHECK(v && aligned(v, page));
		CHECK(pv && aligned(pv, page));
		if (v) {
			CHECK(malloc_usable_size(v) >= vs[i]);
			test_fill_seed(v, vs[i], 3);
		}
		if (pv) {
			/* glibc rounds 0 to 0 (a minimum chunk); uslab to one page */
			size_t r = (vs[i] + page - 1) / page * page;
			size_t u = malloc_usable_size(pv);
			if (u < r) {
				fprintf(stderr, "pvalloc(%zu): usable %zu < %zu\n", vs[i], u, r);
				test_failures++;
			}
			memset(pv, 0x5a, r);
		}
		free(v);
		free(pv);
	}
}

/*
 * Over-aligned huge blocks are reused like any other: a loop of
 * aligned_alloc(64 KiB, 3 MiB) + touch + free takes its memory from the huge
 * cache, so it page-faults at most a few times, not once per round (each
 * fresh mapping faults on the touched page). uslab only: glibc maps afresh.
 */
static void test_aligned_huge_reuse(void)
{
	struct rusage r0, r1;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	enum { ROUNDS = 200 };

	getrusage(RUSAGE_SELF, &r0);
	for (int i = 0; i < ROUNDS; i++) {
		char *volatile p = aligned_alloc(64 << 10, 3 * MiB);

		CHECK(p && aligned(p, 64 << 10));
		if (!p)
			return;
		for (size_t off = 0; off < 4 * page; off += page)
			p[off] = (char)i;
		free(p);
	}
	getrusage(RUSAGE_SELF, &r1);
	long faults = r1.ru_minflt - r0.ru_minflt;
	if (on_uslab && faults > ROUNDS / 4) {
		fprintf(stderr, "aligned huge blocks: %ld page faults in %d rounds (not reused)\n",
			faults, ROUNDS);
		test_failures++;
	}
}

/* Every result aligned to min(16, largest power of two <= size). */
static void check_min_align(void *p, size_t n, const char *fn)
{
	size_t a = min_align(n);

	if (p && !aligned(p, a)) {
		fprintf(stderr, "%s(%zu) = %p: not aligned to %zu\n", fn, n, p, a);
		test_failures++;
	}
}

static void test_min_alignment(void)
{
	enum { K = 6 };
	size_t big[] = { 4095, 4096, 5000, 32767, 32768, 32769, 65535, 100000, 2 * MiB - 1,
			 2 * MiB, 2 * MiB + 1, 5 * MiB + 3 };
	void *keep[K * 6];
	int failures_before = test_failures;

	for (size_t n = 0; n <= 2100 + sizeof(big) / sizeof(big[0]); n++) {
		size_t sz = n <= 2100 ? n : big[n - 2101];
		int k = 0;

		for (int j = 0; j < K; j++) {
			void *r;
			keep[k] = malloc(sz);
			check_min_align(keep[k++], sz, "malloc");
			keep[k] = calloc(1, sz);
			check_min_align(keep[k++], sz, "calloc");
			r = malloc(j & 1 ? 1 : 3000);
			keep[k] = realloc(r, sz);
			if (sz)
				check_min_align(keep[k], sz, "realloc");
			k++;
			if (sz <= 256) {
				/* an explicit 16-byte alignment is at least that */
				keep[k] = memalign(16, sz);
				if (!keep[k] || !aligned(keep[k], 16)) {
					fprintf(stderr, "memalign(16, %zu) = %p: not 16-aligned\n", sz, keep[k]);
					test_failures++;
				}
				k++;
				keep[k] = NULL;
				CHECK_EQ(posix_memalign(&keep[k], 16, sz), 0);
				if (!aligned(keep[k], 16)) {
					fprintf(stderr, "posix_memalign(16, %zu) = %p: not 16-aligned\n", sz, keep[k]);
					test_failures++;
				}
				k++;
				keep[k] = aligned_alloc(16, sz);
				if (!keep[k] || !aligned(keep[k], 16)) {
					fprintf(stderr, "aligned_alloc(16, %zu) = %p: not 16-aligned\n", sz, keep[k]);
					test_failures++;
				}
				k++;
			}
		}
		for (int j = 0; j < k; j++)
			free(keep[j]);
		if (test_failures - failures_before > 40)
			return;   /* enough messages to see the pattern */
	}
}

/* ---- realloc ------------------------------------------------------------------- */

static void test_realloc(void)
{
	/* each chain starts with malloc(chain[0]) and reallocs through the rest */
	static const size_t chains[][6] = {
		{ 24, 100, 40, 8, 1, 17 },                        /* small -> small */
		{ 100, 100 * KiB },                               /* small -> large */
		{ 48 * KiB, 200 * KiB, 1 * MiB, 40 * KiB },       /* large -> large */
		{ 1 * MiB, 3 * MiB },                             /* large -> huge */
		{ 3 * MiB, 64 * MiB },                            /* huge -> huge, grow */
		{ 64 * MiB, 5 * MiB, 9 * MiB },                   /* huge -> huge, shrink, grow */
		{ 5 * MiB, 200 },                                 /* huge -> small */
		{ 5 * MiB, 100 * KiB, 24 },                       /* huge -> large -> small */
		{ 30 * KiB, 33 * KiB, 31 * KiB, 16 * KiB },       /* the small/large edge */
		{ 2 * MiB, 2 * MiB + 1, 2 * MiB, 2 * MiB - 1 },   /* the large/huge edge */
		{ 1, 2, 3, 5, 9, 17 },                            /* tiny growth */
	};

	for (unsigned c = 0; c < sizeof(chains) / sizeof(chains[0]); c++) {
		size_t n = chains[c][0];
		uint64_t seed = 1000 + c;
		char *p = malloc(n);

		REQUIRE(p);
		test_fill_seed(p, n, seed);
		for (unsigned s = 1; s < 6 && chains[c][s]; s++) {
			size_t m = chains[c][s], keep = n < m ? n : m;
			char *q = realloc(p, m);

			if (!q) {
				fprintf(stderr, "realloc(%zu -> %zu) failed\n", n, m);
				test_failures++;
				break;
			}
			p = q;
			if (!test_intact_seed(p, keep, seed)) {
				fprintf(stderr, "realloc(%zu -> %zu) lost content\n", n, m);
				test_failures++;
			}
			if (malloc_usable_size(p) < m) {
				fprintf(stderr, "realloc(%zu -> %zu): usable %zu\n", n, m,
					malloc_usable_size(p));
				test_failures++;
			}
			/* the whole new size is ours: refill with a fresh pattern */
			seed = seed * 31 + s;
			test_fill_seed(p, m, seed);
			n = m;
		}
		free(p);
	}

	/* realloc(NULL, n) is malloc(n) */
	size_t ns[] = { 0, 1, 100, 40000, 3 * MiB };
	for (unsigned i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		char *p = realloc(NULL, ns[i]);
		CHECK(p != NULL);
		if (p) {
			CHECK(malloc_usable_size(p) >= ns[i]);
			memset(p, 0x33, ns[i]);
		}
		free(p);
	}

	/* realloc(p, 0) frees p and returns NULL (glibc) */
	for (unsigned i = 1; i < sizeof(ns) / sizeof(ns[0]); i++) {
		char *p = malloc(ns[i]);
		REQUIRE(p);
		CHECK(realloc(p, 0) == NULL);
	}
	{
		/* observable for a huge block: it leaves mallinfo2's mmap bytes */
		struct mallinfo2 before = mallinfo2();
		char *p = malloc(16 * MiB);
		REQUIRE(p);
		memset(p, 1, 16 * MiB);
		struct mallinfo2 mid = mallinfo2();
		CHECK(realloc(p, 0) == NULL);
		struct mallinfo2 after = mallinfo2();
		if (on_uslab || mid.hblkhd >= before.hblkhd + 16 * MiB) {
			CHECK(mid.hblkhd >= before.hblkhd + 16 * MiB);
			CHECK(after.hblkhd + 16 * MiB <= mid.hblkhd);
		}
	}

	/* many small reallocs of a live set, shuffled sizes, content kept */
	enum { M = 2000 };
	static char *blk[M];
	static size_t len[M];
	uint64_t rs = 42;
	for (int i = 0; i < M; i++) {
		len[i] = test_rand(&rs) % 300;
		blk[i] = malloc(len[i]);
		REQUIRE(blk[i]);
		test_fill_seed(blk[i], len[i], (uint64_t)i);
	}
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < M; i++) {
			size_t m = test_rand(&rs) % (round & 1 ? 5000 : 300);
			size_t keep = len[i] < m ? len[i] : m;
			char *q = realloc(blk[i], m ? m : 1);
			REQUIRE(q);
			if (test_first_bad_seed(q, keep, (uint64_t)i) != keep) {
				fprintf(stderr, "realloc(%zu -> %zu) lost content (round %d)\n", len[i], m, round);
				test_failures++;
			}
			blk[i] = q;
			len[i] = m;
			test_fill_seed(q, m, (uint64_t)i);
		}
	}
	for (int i = 0; i < M; i++) {
		CHECK_EQ(test_first_bad_seed(blk[i], len[i], (uint64_t)i), len[i]);
		free(blk[i]);
	}
}

/* ---- malloc_usable_size: every usable byte is the caller's ------------------------- */

static void test_usable_size(void)
{
	enum { N = 3000 };
	static char *p[N];
	static size_t u[N];
	uint64_t rs = 7;

	CHECK_EQ(malloc_usable_size(NULL), 0);
	for (int i = 0; i < N; i++) {
		size_t n;
		switch (i % 10) {
		case 0: n = 16 * KiB + test_rand(&rs) % (2 * MiB); break;   /* large */
		case 1: n = test_rand(&rs) % (32 * KiB); break;
		default: n = test_rand(&rs) % 600; break;
		}
		if (i % 500 == 7)
			n = 2 * MiB + test_rand(&rs) % (4 * MiB);                /* huge */
		p[i] = malloc(n);
		REQUIRE(p[i]);
		u[i] = malloc_usable_size(p[i]);
		if (u[i] < n) {
			fprintf(stderr, "malloc(%zu): usable size %zu\n", n, u[i]);
			test_failures++;
		}
		test_fill(p[i], u[i]);
	}
	for (int i = 0; i < N; i++) {
		if (!test_intact(p[i], u[i])) {
			fprintf(stderr, "block %p (usable %zu) overwritten by a neighbour\n", (void *)p[i], u[i]);
			test_failures++;
		}
		/* usable size does not change while the block lives */
		CHECK_EQ(malloc_usable_size(p[i]), u[i]);
	}
	for (int i = 0; i < N; i += 2)
		free(p[i]);
	for (int i = 1; i < N; i += 2) {
		CHECK(test_intact(p[i], u[i]));
		free(p[i]);
	}

	/* aligned blocks too */
	for (size_t a = 32; a <= 64 * KiB; a *= 4) {
		char *q[8];
		size_t qu[8];
		for (int i = 0; i < 8; i++) {
			q[i] = memalign(a, 1 + 700 * i);
			REQUIRE(q[i]);
			qu[i] = malloc_usable_size(q[i]);
			CHECK(qu[i] >= (size_t)(1 + 700 * i));
			test_fill(q[i], qu[i]);
		}
		for (int i = 0; i < 8; i++) {
			CHECK(test_intact(q[i], qu[i]));
			free(q[i]);
		}
	}
}

/* ---- calloc ---------------------------------------------------------------------- */

static void test_calloc(void)
{
	size_t sizes[] = { 0, 1, 8, 24, 100, 1000, 4096, 20000, 32 * KiB, 32 * KiB + 1, 40000,
			   300 * KiB, 1 * MiB, 2 * MiB, 2 * MiB + 1, 3 * MiB, 10 * MiB };
	enum { NS = sizeof(sizes) / sizeof(sizes[0]), K = 8 };

	for (unsigned i = 0; i < NS; i++) {
		size_t n = sizes[i];
		char *p[K];

		/* fresh, then the same memory dirtied and freed, twice */
		for (int round = 0; round < 3; round++) {
			for (int k = 0; k < K; k++) {
				p[k] = round & 1 ? calloc(1, n) : calloc(n, 1);
				REQUIRE(p[k]);
				if (!test_all_zero(p[k], n)) {
					fprintf(stderr, "calloc(%zu) round %d: memory not zero\n", n, round);
					test_failures++;
				}
			}
			for (int k = 0; k < K; k++) {
				memset(p[k], 0xA5, malloc_usable_size(p[k]));
				free(p[k]);
			}
		}
		/* calloc(nmemb, size) with both > 1 */
		if (n >= 8) {
			char *q = calloc(n / 8, 8);
			REQUIRE(q);
			CHECK(test_all_zero(q, n / 8 * 8));
			memset(q, 0x5A, n / 8 * 8);
			free(q);
		}
	}

	/* a large block shrunk by realloc gives its tail back; a calloc that
	 * gets that memory must still see zeros */
	for (int round = 0; round < 50; round++) {
		char *big = malloc(1 * MiB);
		REQUIRE(big);
		memset(big, 0xC3, 1 * MiB);
		char *small = realloc(big, 48 * KiB);
		REQUIRE(small);
		char *c = calloc(1, 512 * KiB);
		REQUIRE(c);
		if (!test_all_zero(c, 512 * KiB)) {
			fprintf(stderr, "calloc(512 KiB) after a realloc shrink: memory not zero\n");
			test_failures++;
		}
		free(c);
		free(small);
	}
}

/* ---- 100,000 live blocks: no overlap ---------------------------------------------- */

struct live {
	uintptr_t addr;
	size_t usable;
	size_t size;
};

static int cmp_live(const void *a, const void *b)
{
	const struct live *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void test_no_overlap(void)
{
	enum { N = 100000 };
	struct live *v = calloc(N, sizeof(*v));
	uint64_t rs = 12345;

	REQUIRE(v);
	for (int i = 0; i < N; i++) {
		size_t n;
		uint64_t r = test_rand(&rs);

		/* log-uniform over 1 B .. 64 KiB, plus a few huge blocks */
		if (i % 10000 == 5000)
			n = 2 * MiB + r % (6 * MiB);
		else
			n = ((size_t)1 << (r % 16)) + (size_t)((r >> 8) % ((size_t)1 << (r % 16)));
		char *p = malloc(n);
		REQUIRE(p);
		v[i].addr = (uintptr_t)p;
		v[i].size = n;
		v[i].usable = malloc_usable_size(p);
		CHECK(v[i].usable >= n);
		test_fill(p, n);
	}
	qsort(v, N, sizeof(*v), cmp_live);
	int overlaps = 0;
	for (int i = 1; i < N; i++) {
		if (v[i - 1].addr + v[i - 1].usable > v[i].addr) {
			if (overlaps++ < 10)
				fprintf(stderr, "overlap: [%#lx, +%zu) and [%#lx, +%zu)\n",
					(unsigned long)v[i - 1].addr, v[i - 1].usable,
					(unsigned long)v[i].addr, v[i].usable);
		}
	}
	CHECK_EQ(overlaps, 0);
	/* free in address order (a different order from allocation) */
	int bad = 0;
	for (int i = 0; i < N; i++) {
		void *p = (void *)v[i].addr;
		if (!test_intact(p, v[i].size) && bad++ < 10)
			fprintf(stderr, "block %p size %zu: content changed\n", p, v[i].size);
		free(p);
	}
	CHECK_EQ(bad, 0);
	free(v);
}

/* ---- trim, mallinfo2, malloc_stats ----------------------------------------------- */

static void test_trim_info_stats(void)
{
	enum { N = 20000 };
	static void *p[N];

	for (int i = 0; i < N; i++) {
		p[i] = malloc(16 + i % 2000);
		REQUIRE(p[i]);
		memset(p[i], 1, 16);
	}
	char *h = malloc(12 * MiB);
	REQUIRE(h);
	memset(h, 2, 12 * MiB);
	struct mallinfo2 mi = mallinfo2();
	CHECK(mi.arena > 0);
	CHECK(mi.uordblks >= (size_t)N * 16);
	if (on_uslab) {
		/* glibc's dynamic mmap threshold may serve 12 MiB from its heap */
		CHECK(mi.hblks >= 1);
		CHECK(mi.hblkhd >= 12 * MiB);
		CHECK(mi.arena >= mi.uordblks);
	}
	free(h);
	for (int i = 0; i < N; i++)
		free(p[i]);

	int r = malloc_trim(0);
	CHECK(r == 0 || r == 1);
	r = malloc_trim(1 * MiB);
	CHECK(r == 0 || r == 1);
	/* still usable afterwards, every kind */
	size_t sizes[] = { 1, 64, 5000, 32 * KiB, 100 * KiB, 3 * MiB };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (int k = 0; k < 100; k++) {
			p[k] = malloc(sizes[i]);
			REQUIRE(p[k]);
			test_fill_seed(p[k], sizes[i] < 256 ? sizes[i] : 256, k);
		}
		for (int k = 0; k < 100; k++) {
			size_t n = sizes[i] < 256 ? sizes[i] : 256;
			CHECK_EQ(test_first_bad_seed(p[k], n, k), n);
			free(p[k]);
		}
	}
	CHECK(malloc_trim(0) <= 1);

	/* malloc_stats writes its report to stderr: capture it */
	char path[] = "/tmp/uslab_malloc_stats_XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	unlink(path);
	fflush(stderr);
	int saved = dup(2);
	REQUIRE(saved >= 0);
	REQUIRE(dup2(fd, 2) == 2);
	malloc_stats();
	fflush(stderr);
	REQUIRE(dup2(saved, 2) == 2);
	close(saved);
	struct stat st;
	REQUIRE(fstat(fd, &st) == 0);
	CHECK(st.st_size > 0);
	close(fd);
}

/* ---- free_sized, free_aligned_sized, __libc_* ------------------------------------- */

static void test_sized_and_libc(void)
{
	if (on_uslab) {
		CHECK(free_sized != NULL);
		CHECK(free_aligned_sized != NULL);
	}
	if (free_sized) {
		size_t sizes[] = { 0, 1, 100, 5000, 100 * KiB, 3 * MiB };
		for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			for (int k = 0; k < 50; k++) {
				char *p = malloc(sizes[i]);
				REQUIRE(p);
				memset(p, 1, sizes[i]);
				free_sized(p, sizes[i]);
			}
		}
		free_sized(NULL, 0);
	}
	if (free_aligned_sized) {
		for (size_t a = 8; a <= 4 * MiB; a *= 4) {
			size_t n = a * 3;   /* aligned_alloc: size a multiple of the alignment */
			char *p = aligned_alloc(a, n);
			REQUIRE(p);
			CHECK(aligned(p, a));
			memset(p, 2, n);
			free_aligned_sized(p, a, n);
		}
		free_aligned_sized(NULL, 64, 0);
	}

	/* __libc_ names and the standard ones share one heap, both ways */
	char *a = __libc_malloc(100);
	REQUIRE(a);
	if (on_uslab)
		CHECK(malloc_usable_size(a) >= 100);   /* aborts if a is foreign */
	test_fill_seed(a, 100, 9);
	a = realloc(a, 5000);
	REQUIRE(a);
	CHECK_EQ(test_first_bad_seed(a, 100, 9), 100);
	free(a);

	char *b = malloc(200);
	REQUIRE(b);
	test_fill_seed(b, 200, 10);
	b = __libc_realloc(b, 70000);
	REQUIRE(b);
	CHECK_EQ(test_first_bad_seed(b, 200, 10), 200);
	__libc_free(b);

	char *c = __libc_calloc(300, 7);
	REQUIRE(c);
	CHECK(test_all_zero(c, 2100));
	free(c);

	for (size_t al = 16; al <= 1 * MiB; al *= 8) {
		char *d = __libc_memalign(al, 1000);
		REQUIRE(d);
		CHECK(aligned(d, al));
		if (on_uslab)
			CHECK(malloc_usable_size(d) >= 1000);
		memset(d, 3, 1000);
		__libc_free(d);
	}
	char *e = __libc_malloc(5 * MiB);
	REQUIRE(e);
	memset(e, 4, 5 * MiB);
	__libc_free(e);
	__libc_free(NULL);
	errno = 0;
	char *f = __libc_calloc(SIZE_MAX / 2 + 1, 4);
	CHECK(f == NULL && errno == ENOMEM);
}

int main(void)
{
	on_uslab = test_require_uslab();
	struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{ "malloc_free", test_malloc_free },
		{ "too_large", test_too_large },
		{ "posix_memalign_einval", test_posix_memalign_einval },
		{ "alignments", test_alignments },
		{ "aligned_huge_reuse", test_aligned_huge_reuse },
		{ "min_alignment", test_min_alignment },
		{ "realloc", test_realloc },
		{ "usable_size", test_usable_size },
		{ "calloc", test_calloc },
		{ "no_overlap", test_no_overlap },
		{ "trim_info_stats", test_trim_info_stats },
		{ "sized_and_libc", test_sized_and_libc },
	};

	for (unsigned i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		int before = test_failures;
		double t0 = test_now();

		tests[i].fn();
		printf("  %-24s %s (%.2f s)\n", tests[i].name,
		       test_failures == before ? "ok" : "FAILED", test_now() - t0);
		fflush(stdout);
	}
	return test_done("malloc_api");
}
