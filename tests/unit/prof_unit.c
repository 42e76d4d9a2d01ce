/* SPDX-License-Identifier: MIT */
/*
 * prof_unit.c - the heap profiler (USLAB_PROF=1, allocator/api/prof.c),
 * through the uslab_ malloc family. Each case runs in a child that this
 * program starts again with the case's environment (the options are read
 * at start-up), in a temporary directory for its profiles:
 *
 *   sites      two call sites allocate 3:1 in bytes (different sizes):
 *              the profile written by uslab_prof_dump, read back and
 *              unscaled as pprof does, gives both sites' bytes allocated
 *              and live within a statistical tolerance, each stack naming
 *              its site (dladdr: the test exports its symbols)
 *   blocks     USLAB_PROF_SAMPLE=1 samples every block: the malloc family
 *              behaves as without the profiler (contents, realloc's prefix,
 *              calloc zeroed, alignment, usable size, frees from another
 *              thread); the profile counts every block and none is live
 *              after they are freed
 *   misuse     a sampled block's interior pointer and its double free still
 *              abort as "invalid pointer"
 *   leak       at exit, the profile is written and the leak report on
 *              stderr names the site of three blocks never freed
 *   signal     USLAB_PROF_SIGNAL writes a profile at once (%n numbers
 *              them), also while another thread samples all the time (the
 *              handler then leaves it to the lock's holder)
 *   rates      at one sample per 64 KiB, the number of blocks sampled from
 *              small blocks only, from a mix of small and large ones, and
 *              from large and huge ones only, each as the sampling's law
 *              says (within five standard deviations): one Poisson
 *              process over the bytes asked for, whatever the mix
 *   threads    sampled blocks (with a header and recorded apart) freed by
 *              a thread that did not allocate them, and realloc'd; threads
 *              that exit while they sample: nothing lost (every cache
 *              validates), nothing left live
 *   streams    threads that allocate the same blocks in turn are sampled
 *              each by a stream of its own: their counts differ as
 *              independent draws do (all alike if the threads shared a
 *              seed)
 *   fork       a child forked while the profiler samples allocates, frees,
 *              validates and writes its own profile; so does the parent
 *   debug      USLAB_DEBUG=1 wins over USLAB_PROF=1, with a warning
 *   off        without USLAB_PROF, uslab_prof_dump says -EINVAL
 */
#define _GNU_SOURCE
#include "test.h"
#include "kmalloc_check.h"

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <uslab.h>

#define CASE_ENV "USLAB_TEST_PROF_CASE"
#define DIR_ENV  "USLAB_TEST_PROF_DIR"

static char dir[64];

/* ---- reading a profile ----------------------------------------------------------------------------- */

struct stack {
	double live_blocks, live_bytes, alloc_blocks, alloc_bytes;   /* unscaled */
	int depth;
	void *pc[64];
};

struct profile {
	long period;                 /* heap_v2/N; 1: "heapprofile" (no sampling) */
	double raw[4];               /* the header's four numbers */
	int nstacks;
	struct stack stacks[4096];
	bool maps;                   /* MAPPED_LIBRARIES: follows */
};

/* pprof's unscaling of a heap_v2 line: each sampled block stood for
 * 1 / (1 - exp(-mean size / period)). */
static void unscale(double *count, double *bytes, long period)
{
	if (*count == 0 || period <= 1)
		return;
	double scale = 1 / (1 - exp(-(*bytes / *count) / (double)period));

	*count *= scale;
	*bytes *= scale;
}

static bool read_profile(const char *path, struct profile *p)
{
	char *text = test_read_file(path), *line, *save = NULL;

	memset(p, 0, sizeof(*p));
	if (!text) {
		fprintf(stderr, "no profile at %s\n", path);
		return false;
	}
	line = strtok_r(text, "\n", &save);
	char type[64] = "";
	if (!line || sscanf(line, "heap profile: %lf: %lf [ %lf: %lf] @ %63s", &p->raw[0], &p->raw[1],
			    &p->raw[2], &p->raw[3], type) != 5) {
		fprintf(stderr, "%s: bad header \"%s\"\n", path, line ? line : "");
		free(text);
		return false;
	}
	p->period = strcmp(type, "heapprofile") == 0 ? 1 : strncmp(type, "heap_v2/", 8) == 0 ?
		    atol(type + 8) : -1;
	while ((line = strtok_r(NULL, "\n", &save))) {
		struct stack *s = &p->stacks[p->nstacks];
		int used = 0;

		if (!strcmp(line, "MAPPED_LIBRARIES:")) {
			p->maps = true;
			break;
		}
		if (p->nstacks == 4096 || sscanf(line, " %lf: %lf [ %lf: %lf] @%n", &s->live_blocks,
						 &s->live_bytes, &s->alloc_blocks, &s->alloc_bytes,
						 &used) != 4 || !used)
			continue;
		for (char *c = line + used; s->depth < 64 && sscanf(c, " %p%n", &s->pc[s->depth], &used) == 1;
		     c += used)
			s->depth++;
		unscale(&s->live_blocks, &s->live_bytes, p->period);
		unscale(&s->alloc_blocks, &s->alloc_bytes, p->period);
		p->nstacks++;
	}
	free(text);
	return true;
}

/* Does some frame of s lie in the function called name? */
static bool stack_names(const struct stack *s, const char *name)
{
	for (int i = 0; i < s->depth; i++) {
		Dl_info info;

		if (dladdr(s->pc[i], &info) && info.dli_sname && !strcmp(info.dli_sname, name))
			return true;
	}
	return false;
}

/* Everything the stacks naming name stand for: [0] live blocks, [1] live
 * bytes, [2] allocated blocks, [3] allocated bytes. */
static void site_totals(const struct profile *p, const char *name, double t[4])
{
	memset(t, 0, 4 * sizeof(double));
	for (int i = 0; i < p->nstacks; i++) {
		const struct stack *s = &p->stacks[i];

		if (!stack_names(s, name))
			continue;
		t[0] += s->live_blocks, t[1] += s->live_bytes;
		t[2] += s->alloc_blocks, t[3] += s->alloc_bytes;
	}
}

static bool near(double got, double want, double tolerance, const char *what)
{
	if (fabs(got - want) <= tolerance * want)
		return true;
	fprintf(stderr, "%s: %.0f, expected %.0f within %.0f %%\n", what, got, want, 100 * tolerance);
	return false;
}

static char *path_in_dir(const char *name, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s", getenv(DIR_ENV), name);
	return buf;
}

/* ---- the call sites (exported: the profile must name them) ------------------------------------------- */

#define SITE(name)                                                                      \
	__attribute__((__noinline__)) void *name(size_t n)                                \
	{                                                                               \
		void *p = uslab_malloc(n);                                              \
		REQUIRE(p != NULL);                                                     \
		__asm__ volatile("" ::: "memory");                                      \
		return p;                                                               \
	}
SITE(prof_site_a)
SITE(prof_site_b)
SITE(prof_leak_site)

/* called through these, so that no clone of them (constant size) has a name of its own */
static void *(*volatile site_a)(size_t) = prof_site_a;
static void *(*volatile site_b)(size_t) = prof_site_b;
static void *(*volatile leak_site)(size_t) = prof_leak_site;

/* ---- sites ---------------------------------------------------------------------------------------- */

/* Site A: 24 MiB in 512-byte blocks, every 8th kept (3 MiB live); site B:
 * 8 MiB in 8 KiB blocks, every 4th kept (2 MiB live). At 1 sample per
 * 16 KiB, about 1,500 and 400 samples: a few percent of spread, so 20 %
 * (30 and 40 % for the live bytes, from fewer samples) is never reached
 * by chance. */
static void case_sites(void)
{
	enum { A = 24 << 11, B = 8 << 7 };
	static void *keep_a[A / 8], *keep_b[B / 4];
	char path[128];
	static struct profile p;
	double a[4], b[4];

	for (int i = 0; i < B; i++) {   /* interleaved: A / B = 48 of A's per B */
		for (int j = i * (A / B); j < (i + 1) * (A / B); j++) {
			void *x = site_a(512);

			if (j % 8 == 0)
				keep_a[j / 8] = x;
			else
				uslab_free(x);
		}
		void *y = site_b(8192);

		if (i % 4 == 0)
			keep_b[i / 4] = y;
		else
			uslab_free(y);
	}
	CHECK_EQ(uslab_prof_dump(path_in_dir("sites.heap", path, sizeof(path))), 0);
	if (!read_profile(path, &p)) {
		test_failures++;
		return;
	}
	CHECK_EQ(p.period, 16 << 10);
	CHECK(p.maps);
	site_totals(&p, "prof_site_a", a);
	site_totals(&p, "prof_site_b", b);
	CHECK(near(a[3], 24 << 20, 0.2, "site A's bytes allocated"));
	CHECK(near(b[3], 8 << 20, 0.2, "site B's bytes allocated"));
	CHECK(near(a[2], A, 0.2, "site A's blocks allocated"));
	CHECK(near(b[2], B, 0.2, "site B's blocks allocated"));
	CHECK(near(a[1], 3 << 20, 0.3, "site A's bytes live"));
	CHECK(near(b[1], 2 << 20, 0.4, "site B's bytes live"));
	CHECK(b[3] > 0 && a[3] / b[3] > 2.2 && a[3] / b[3] < 4);
	for (int i = 0; i < p.nstacks; i++)   /* every stack is one site's or the other's */
		CHECK(stack_names(&p.stacks[i], "prof_site_a") != stack_names(&p.stacks[i], "prof_site_b"));
	for (size_t i = 0; i < A / 8; i++)
		uslab_free(keep_a[i]);
	for (size_t i = 0; i < B / 4; i++)
		uslab_free(keep_b[i]);
	CHECK_EQ(uslab_prof_dump(path), 0);
	CHECK(read_profile(path, &p) && p.raw[0] == 0 && p.raw[1] == 0);   /* none live */
}

/* ---- blocks ------------------------------------------------------------------------------------------ */

static void *free_all(void *arg)
{
	void **v = arg;

	for (int i = 0; v[i]; i++)
		uslab_free(v[i]);
	return NULL;
}

static void case_blocks(void)
{
	static const size_t sizes[] = { 0, 1, 15, 16, 100, 1024, 5000, 32768, 40000, 300000, 3 << 20 };
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	static struct profile p;
	void *v[N], *other[N + 1] = { 0 };
	char path[128];
	long allocs = 0;

	for (int i = 0; i < N; i++) {
		v[i] = uslab_malloc(sizes[i]), allocs++;
		REQUIRE(v[i] != NULL);
		CHECK(((uintptr_t)v[i] & 15) == 0 || sizes[i] < 16);
		CHECK(uslab_malloc_usable_size(v[i]) >= sizes[i]);
		test_fill(v[i], sizes[i]);
	}
	for (int i = 0; i < N; i++) {   /* grown, then shrunk: the prefix stays */
		uint64_t seed = test_block_seed(v[i], sizes[i]);
		size_t more = sizes[i] * 2 + 10;

		CHECK(test_intact(v[i], sizes[i]));
		v[i] = uslab_realloc(v[i], more);
		REQUIRE(v[i] != NULL);
		CHECK(uslab_malloc_usable_size(v[i]) >= more);
		CHECK(test_intact_seed(v[i], sizes[i], seed));
		v[i] = uslab_realloc(v[i], sizes[i] / 2 + 1);
		REQUIRE(v[i] != NULL);
		CHECK(test_intact_seed(v[i], sizes[i] / 2, seed));
	}
	for (int i = 0; i < N; i++) {
		size_t align = (size_t)32 << (i % 12);   /* 32 B ... 64 KiB */
		char *c = uslab_calloc(1, sizes[i]), *m = uslab_aligned_alloc(align, sizes[i] + 1);
		void *pm = NULL;

		allocs += 3;
		REQUIRE(c && m && uslab_posix_memalign(&pm, 64, sizes[i]) == 0);
		CHECK(test_all_zero(c, sizes[i]));
		CHECK(((uintptr_t)m & (align - 1)) == 0 && ((uintptr_t)pm & 63) == 0);
		memset(m, 0x5a, sizes[i] + 1);
		uslab_free_sized(c, sizes[i]);
		uslab_free(m);
		other[i] = pm;
	}
	for (int i = 0; i < N; i++)
		uslab_free(v[i]);
	pthread_t t;   /* freed by a thread that did not allocate them */
	REQUIRE(pthread_create(&t, NULL, free_all, other) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	uslab_free(NULL);

	CHECK_EQ(uslab_prof_dump(path_in_dir("blocks.%p.%n.heap", path, sizeof(path))), 0);
	char real[160];
	snprintf(real, sizeof(real), "%s/blocks.%d.0.heap", getenv(DIR_ENV), (int)getpid());
	if (!read_profile(real, &p)) {
		test_failures++;
		return;
	}
	CHECK_EQ(p.period, 1);          /* "heapprofile": every block counted as it is */
	CHECK_EQ(p.raw[0], 0);          /* none live */
	/* every one sampled; a realloc that moves a block is one more */
	CHECK(p.raw[2] >= allocs && p.raw[2] <= allocs + 2 * N);

	/* grown within the room of its block: where it is, counted at its new
	 * size (small: behind the header; large: the run as it is) */
	for (int i = 0; i < 2; i++) {
		size_t n = i ? 40000 : 100;
		char *g = uslab_malloc(n), *h;
		size_t room;

		REQUIRE(g != NULL);
		room = uslab_malloc_usable_size(g);
		test_fill(g, n);
		uint64_t seed = test_block_seed(g, n);
		CHECK(room > n);
		h = uslab_realloc(g, room);
		CHECK(h == g);
		CHECK(test_intact_seed(h, n, seed));
		CHECK_EQ(uslab_prof_dump(path_in_dir("grown.heap", path, sizeof(path))), 0);
		if (read_profile(path, &p)) {
			CHECK_EQ(p.raw[0], 1);             /* it alone is live ... */
			CHECK_EQ(p.raw[1], (double)room);  /* ... at its new size */
		} else {
			test_failures++;
		}
		uslab_free(h);
	}
}

/* ---- misuse ---------------------------------------------------------------------------------------- */

/* arg: 0 frees a sampled block's interior pointer, 1 a small sampled block
 * twice, 2 a large one twice */
static void free_wrongly(void *arg)
{
	int how = (int)(intptr_t)arg;
	char *p = uslab_malloc(how == 2 ? 100000 : 100);

	uslab_free(how == 0 ? p + 16 : p);
	if (how)
		uslab_free(p);
}

static void case_misuse(void)
{
	for (intptr_t how = 0; how < 3; how++)
		test_expect_abort(free_wrongly, (void *)how, "uslab: free(): invalid pointer 0x");
}

/* ---- leak ------------------------------------------------------------------------------------------- */

static void case_leak(void)
{
	for (int i = 0; i < 1000; i++)
		uslab_free(site_a(100));
	leak_site(1000);
	leak_site(2000);
	leak_site(3000);
	exit(0);   /* the profile and the report come at exit */
}

/* ---- signal ------------------------------------------------------------------------------------------ */

static atomic_int stop;   /* the main thread ends the sampler with it */

static void *sample_all_the_time(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		uslab_free(site_a(64));
	return NULL;
}

static bool profile_exists(int n)
{
	char path[160];

	snprintf(path, sizeof(path), "%s/sig.%d.heap", getenv(DIR_ENV), n);
	return access(path, F_OK) == 0;
}

static bool profile_whole(int n)
{
	char path[160];
	static struct profile p;

	snprintf(path, sizeof(path), "%s/sig.%d.heap", getenv(DIR_ENV), n);
	return read_profile(path, &p) && p.maps;
}

static void case_signal(void)
{
	void *keep = site_b(4096);
	pthread_t t;

	CHECK(raise(SIGUSR1) == 0);   /* written by the handler, before raise returns */
	CHECK(profile_whole(0));
	CHECK_EQ(uslab_prof_dump(NULL), 0);
	CHECK(profile_whole(1));
	/* now with the lock taken all the time, and the signal sent to its
	 * holder: every one is answered, and nothing hangs (alarm) */
	REQUIRE(pthread_create(&t, NULL, sample_all_the_time, NULL) == 0);
	for (int i = 2; i < 52; i++) {
		REQUIRE(pthread_kill(t, SIGUSR1) == 0);
		double until = test_now() + 5;
		while (!profile_exists(i) && test_now() < until)
			test_sleep_ms(1);
		CHECK(profile_whole(i));
	}
	atomic_store_explicit(&stop, 1, memory_order_relaxed);
	REQUIRE(pthread_join(t, NULL) == 0);
	uslab_free(keep);
}

/* ---- debug ------------------------------------------------------------------------------------------ */

static void case_debug(void)
{
	char *p = uslab_malloc(100);

	CHECK_EQ(uslab_prof_dump(NULL), -EINVAL);   /* the profiler is off */
	CHECK_EQ(uslab_malloc_usable_size(p), 100);  /* the debug mode's size */
	uslab_free(p);
}

/* ---- rates ----------------------------------------------------------------------------------------- */

#define RATE_MEAN (64 << 10)

/* Blocks sampled ever, from a profile written now. */
static double samples_now(const char *name)
{
	static struct profile p;
	char path[128];

	CHECK_EQ(uslab_prof_dump(path_in_dir(name, path, sizeof(path))), 0);
	if (!read_profile(path, &p)) {
		test_failures++;
		return 0;
	}
	return p.raw[2];
}

/* n blocks of sizes[i % nsizes] allocated and freed at once; the samples
 * they gave against the law's expectation: each block sampled with chance
 * 1 - exp(-size / mean). */
static void rate_mix(const char *what, const size_t *sizes, int nsizes, long n)
{
	double expect = 0, var = 0;
	double before = samples_now("rate.heap");

	for (long i = 0; i < n; i++) {
		size_t size = sizes[i % nsizes];
		char *p = uslab_malloc(size);
		double q = 1 - exp(-(double)size / RATE_MEAN);

		REQUIRE(p != NULL);
		p[size - 1] = 1;
		uslab_free(p);
		expect += q;
		var += q * (1 - q);
	}
	double got = samples_now("rate.heap") - before;
	/* the dump's own reading allocates nothing through uslab_ */
	if (fabs(got - expect) > 5 * sqrt(var) + 2) {
		fprintf(stderr, "%s: %.0f blocks sampled, %.0f +- %.0f expected\n", what, got, expect,
			sqrt(var));
		test_failures++;
	}
}

static void case_rates(void)
{
	static const size_t small[] = { 64 };
	static const size_t mixed[] = { 16, 48, 128, 320, 1024, 4096, 18432, 32768, 40000, 100000,
					16, 64, 256, 2304 };
	static const size_t big[] = { 40000, 65536, 150000, 300000, 1 << 20, 3 << 20 };

	rate_mix("small", small, 1, 1l << 20);     /* 64 MiB: about 1,000 samples */
	rate_mix("mixed", mixed, 14, 300000);      /* 63 GiB / 14: 4,000 */
	rate_mix("big", big, 6, 3000);             /* 2.3 GiB: 2,300 */
}

/* ---- threads ---------------------------------------------------------------------------------------- */

#define THREAD_BLOCKS 4000

static size_t thread_size(int i)
{
	static const size_t sizes[] = { 24, 100, 700, 3000, 20000, 50000, 2 << 20, 4 << 20 };

	return sizes[i % 8];
}

/* Allocates blocks into arg's array (one sample per 4 KiB: many of
 * them), frees half, and exits. */
static void *allocate_some(void *arg)
{
	void **v = arg;

	for (int i = 0; i < THREAD_BLOCKS; i++) {
		v[i] = uslab_malloc(thread_size(i));
		REQUIRE(v[i] != NULL);
		test_fill(v[i], thread_size(i) < 4096 ? thread_size(i) : 4096);
	}
	for (int i = 0; i < THREAD_BLOCKS; i += 2) {
		uslab_free(v[i]);
		v[i] = NULL;
	}
	return NULL;
}

/* Objects of malloc's classes that the slabs hold in use, less those on
 * the calling thread's own lists. */
static long classes_live(void)
{
	long n = 0;

	for (unsigned c = 0; c < NR_CLASSES; c++) {
		struct uslab_cache_info info;

		if (!kmalloc_unready(&kmalloc_store[c]) &&
		    uslab_cache_info(&kmalloc_store[c], &info) == 0)
			n += (long)info.live_objects;
	}
	return n;
}

static void case_threads(void)
{
	static void *v[THREAD_BLOCKS];
	static struct profile p;
	char path[128];
	long live = classes_live();

	for (int round = 0; round < 3; round++) {
		pthread_t t;

		REQUIRE(pthread_create(&t, NULL, allocate_some, v) == 0);
		REQUIRE(pthread_join(t, NULL) == 0);
		for (int i = 1; i < THREAD_BLOCKS; i += 2) {   /* theirs, here */
			size_t n = thread_size(i), k = n < 4096 ? n : 4096;

			CHECK(test_intact(v[i], k));
			if (i % 4 == 1) {   /* grown (moved or not), and its bytes kept */
				uint64_t seed = test_block_seed(v[i], k);

				v[i] = uslab_realloc(v[i], n + n / 2);
				REQUIRE(v[i] != NULL);
				CHECK(uslab_malloc_usable_size(v[i]) >= n + n / 2);
				CHECK(test_intact_seed(v[i], k, seed));
			}
			uslab_free(v[i]);
		}
	}
	CHECK_EQ(kmalloc_validate_all(), 0);
	/* the exited threads' frees went back */
	CHECK_EQ(classes_live(), live);
	CHECK_EQ(uslab_prof_dump(path_in_dir("threads.heap", path, sizeof(path))), 0);
	if (read_profile(path, &p)) {
		CHECK(p.raw[2] > 1000);   /* sampled: one per 4 KiB of some 300 MiB */
		CHECK_EQ(p.raw[0], 0);    /* and none live */
	} else {
		test_failures++;
	}
}

/* ---- streams ---------------------------------------------------------------------------------------- */

#define STREAM_THREADS 16
#define STREAM_BLOCKS  4096

/* depth more frames of its own above the allocations: each thread's stack
 * is of another length */
__attribute__((__noinline__)) static void stream_nest(int depth)
{
	if (depth > 0) {
		stream_nest(depth - 1);
		__asm__ volatile("" ::: "memory");   /* not a tail call: a frame per level */
		return;
	}
	for (int i = 0; i < STREAM_BLOCKS; i++)
		uslab_free(site_a(256));
}

static void *stream_thread(void *arg)
{
	stream_nest((int)(intptr_t)arg);
	return NULL;
}

/* 16 threads, one after another, each 1 MiB in 256-byte blocks at one
 * sample per 16 KiB: about 64 samples each, a spread of some 8. Threads
 * drawing from one seed would all take the same samples; independent ones
 * give 16 counts of which at least 4 differ, but with odds of about 1 in
 * 10^9 against. */
static void case_streams(void)
{
	static struct profile p;
	double counts[STREAM_THREADS];
	int depth_lo = 1 << 30, nsites = 0, distinct = 0;
	char path[128];

	for (int i = 0; i < STREAM_THREADS; i++) {
		pthread_t t;

		REQUIRE(pthread_create(&t, NULL, stream_thread, (void *)(intptr_t)i) == 0);
		REQUIRE(pthread_join(t, NULL) == 0);
	}
	CHECK_EQ(uslab_prof_dump(path_in_dir("streams.heap", path, sizeof(path))), 0);
	if (!read_profile(path, &p)) {
		test_failures++;
		return;
	}
	for (int i = 0; i < p.nstacks; i++)
		if (stack_names(&p.stacks[i], "prof_site_a") && p.stacks[i].depth < depth_lo)
			depth_lo = p.stacks[i].depth;
	memset(counts, 0, sizeof(counts));
	for (int i = 0; i < p.nstacks; i++) {
		const struct stack *s = &p.stacks[i];
		int k = s->depth - depth_lo;

		if (!stack_names(s, "prof_site_a"))
			continue;
		REQUIRE(k >= 0 && k < STREAM_THREADS);
		nsites += counts[k] == 0;
		counts[k] += s->alloc_blocks;
	}
	CHECK_EQ(nsites, STREAM_THREADS);   /* every thread sampled, at its own depth */
	for (int i = 0; i < STREAM_THREADS; i++) {
		bool seen = false;

		for (int j = 0; j < i; j++)
			seen |= counts[j] == counts[i];
		distinct += !seen;
	}
	if (distinct < 4) {
		fprintf(stderr, "%d threads' samples: only %d distinct counts\n", STREAM_THREADS, distinct);
		test_failures++;
	}
}

/* ---- fork ------------------------------------------------------------------------------------------- */

static void churn(int n)
{
	static void *keep[64];

	for (int i = 0; i < n; i++) {
		size_t size = (size_t)16 << (i % 13);   /* 16 B ... 64 KiB */

		uslab_free(keep[i % 64]);
		keep[i % 64] = uslab_malloc(size);
		REQUIRE(keep[i % 64] != NULL);
		memset(keep[i % 64], i, size);
	}
}

static void case_fork(void)
{
	char path[128];
	pthread_t t;
	static void *v[THREAD_BLOCKS];

	churn(20000);
	REQUIRE(pthread_create(&t, NULL, allocate_some, v) == 0);   /* sampling meanwhile */
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		/* no validate here: a slab the other thread was taking or giving
		 * up when the fork came stays frozen, owned by nobody, for good in
		 * the child, and validate reports it (docs/slab.md, "fork"); the parent
		 * validates after the join */
		churn(20000);
		_exit(uslab_prof_dump(path_in_dir("child.heap", path, sizeof(path))) != 0);
	}
	REQUIRE(pthread_join(t, NULL) == 0);
	churn(20000);
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ(kmalloc_validate_all(), 0);
	CHECK_EQ(uslab_prof_dump(path_in_dir("parent.heap", path, sizeof(path))), 0);
	static struct profile p;
	CHECK(read_profile(path_in_dir("child.heap", path, sizeof(path)), &p) && p.raw[2] > 0);
}

/* ---- the cases, each in a child with its environment -------------------------------------------- */

struct prof_case {
	const char *name;
	void (*run)(void);
	const char *env[6];
};

static const struct prof_case cases[] = {
	{ "sites", case_sites, { "USLAB_PROF=1", "USLAB_PROF_SAMPLE=16k", "USLAB_PROF_TOP=0",
				 "USLAB_PROF_FILE=@/exit.%p.heap" } },
	{ "blocks", case_blocks, { "USLAB_PROF=1", "USLAB_PROF_SAMPLE=1", "USLAB_PROF_TOP=0",
				 "USLAB_PROF_FILE=@/exit.%p.heap" } },
	{ "misuse", case_misuse, { "USLAB_PROF=1", "USLAB_PROF_SAMPLE=1", "USLAB_PROF_TOP=0",
				 "USLAB_PROF_FILE=@/exit.%p.heap" } },
	{ "leak", case_leak, { "USLAB_PROF=1", "USLAB_PROF_SAMPLE=1", "USLAB_PROF_TOP=3",
			       "USLAB_PROF_FILE=@/leak.%p.heap" } },
	{ "signal", case_signal, { "USLAB_PROF=1", "USLAB_PROF_SAMPLE=1", "USLAB_PROF_TOP=0",
				   "USLAB_PROF_SIGNAL=USR1", "USLAB_PROF_FILE=@/sig.%n.heap" } },
	{ "rates", case_rates, { "USLAB_PROF=1", "USLAB_PROF_SAMPLE=64k", "USLAB_PROF_TOP=0",
				 "USLAB_PROF_FILE=@/exit.%p.heap" } },
	{ "threads", case_threads, { "USLAB_PROF=1", "USLAB_PROF_SAMPLE=4k", "USLAB_PROF_TOP=0",
				 "USLAB_PROF_FILE=@/exit.%p.heap" } },
	{ "streams", case_streams, { "USLAB_PROF=1", "USLAB_PROF_SAMPLE=16k", "USLAB_PROF_TOP=0",
				     "USLAB_PROF_FILE=@/exit.%p.heap" } },
	{ "fork", case_fork, { "USLAB_PROF=1", "USLAB_PROF_SAMPLE=4k", "USLAB_PROF_TOP=0",
				 "USLAB_PROF_FILE=@/exit.%p.heap" } },
	{ "debug", case_debug, { "USLAB_PROF=1", "USLAB_DEBUG=1" } },
};

static void start_case(void *arg)
{
	const struct prof_case *c = arg;
	char buf[6][160];

	setenv(CASE_ENV, c->name, 1);
	setenv(DIR_ENV, dir, 1);
	for (int i = 0; c->env[i]; i++) {   /* '@' stands for the directory */
		const char *at = strchr(c->env[i], '@');

		if (at)
			snprintf(buf[i], sizeof(buf[i]), "%.*s%s%s", (int)(at - c->env[i]), c->env[i],
				 dir, at + 1);
		else
			snprintf(buf[i], sizeof(buf[i]), "%s", c->env[i]);
		putenv(buf[i]);
	}
	execl("/proc/self/exe", "prof_unit", (char *)NULL);
	perror("exec");
	_exit(1);
}

static bool child_ok(const struct prof_case *c, const struct test_child *r)
{
	if (WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0)
		return true;
	char how[64];
	fprintf(stderr, "case %s %s; its stderr:\n%s\n", c->name, test_child_outcome(r, how, sizeof(how)),
		r->err);
	test_failures++;
	return false;
}

static void check_leak(const struct test_child *r)
{
	char path[160];
	static struct profile p;

	if (!strstr(r->err, "uslab: prof: leaks: 5.9 KiB in 3 blocks live at exit (estimated from 3 "
			    "sampled), by allocation site:") ||
	    !strstr(r->err, "5.9 KiB 100.0 %           3 blocks  prof_unit(prof_leak_site+0x")) {
		fprintf(stderr, "no leak report naming 3 blocks of prof_leak_site: %s\n", r->err);
		test_failures++;
	}
	if (!strstr(r->err, "the top allocation sites by bytes allocated (estimated):")) {
		fprintf(stderr, "no summary of the allocation sites: %s\n", r->err);
		test_failures++;
	}
	/* the exit's profile: named in the report, three blocks live */
	const char *in = strstr(r->err, "heap profile in ");
	if (!in || sscanf(in, "heap profile in %159s", path) != 1 || !read_profile(path, &p)) {
		fprintf(stderr, "no profile named at exit: %s\n", r->err);
		test_failures++;
		return;
	}
	CHECK_EQ(p.raw[0], 3);
	CHECK_EQ(p.raw[1], 6000);
	CHECK_EQ(p.raw[2], 1003);
}

static void remove_dir(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[400];

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

int main(void)
{
	const char *name = getenv(CASE_ENV);

	if (name) {   /* a case, in its child */
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			if (!strcmp(name, cases[i].name))
				cases[i].run();
		return test_done(name);
	}
	if (getenv("USLAB_PROF")) {
		fprintf(stderr, "prof_unit sets USLAB_PROF for its cases itself\n");
		return 1;
	}
	CHECK_EQ(uslab_prof_dump(NULL), -EINVAL);   /* off */
	snprintf(dir, sizeof(dir), "/tmp/prof_unit.XXXXXX");
	REQUIRE(mkdtemp(dir) != NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct prof_case *c = &cases[i];
		struct test_child r;

		test_run_child(start_case, (void *)c, &r);
		if (!strcmp(c->name, "debug")) {   /* the debug mode wins, and says so */
			if (!strstr(r.err, "uslab: warning: option 'USLAB_PROF=1' ignored: USLAB_DEBUG=1 "
					   "is on")) {
				fprintf(stderr, "no warning that the debug mode wins: %s\n", r.err);
				test_failures++;
			}
		}
		if (child_ok(c, &r) && !strcmp(c->name, "leak"))
			check_leak(&r);
		else if (r.err[0] && test_failures)
			fprintf(stderr, "(case %s)\n", c->name);
	}
	remove_dir();
	return test_done("prof_unit");
}
