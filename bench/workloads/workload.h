/* SPDX-License-Identifier: MIT */
/*
 * workload.h - what every workload program in bench/workloads/ shares.
 *
 * A workload is a plain C program linked against nothing but libc and
 * pthreads; the allocator under test is chosen at run time by LD_PRELOAD
 * (tools/bench), so the very same binary measures glibc, jemalloc, mimalloc,
 * tcmalloc and uslab.
 *
 * Command line, the same for all:  -t THREADS  -n WORK  -s SEED  -h
 *   WORK is the total amount of work (operations), split evenly over the
 *   threads: doubling the threads ideally halves the time.
 * Output, one line on stdout:  ops=<N> secs=<T> threads=<t>
 *   secs is the time of the measured phase only; tools/bench measures the
 *   whole process (wall time and peak RSS) itself.
 * Verification: every block a workload allocates is stamped with a pattern
 * derived from its address and size (wl_stamp) and checked before it is freed
 * (wl_check); any mismatch — two live blocks overlapping, a block handed out
 * twice, a realloc that lost data — prints what broke and exits with 1.
 */
#ifndef WORKLOAD_H
#define WORKLOAD_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct wl_opts {
	unsigned threads;
	uint64_t work;
	uint64_t seed;
};

static inline void wl_usage(const char *name, const char *what, uint64_t def_work)
{
	fprintf(stderr,
		"usage: %s [-t THREADS] [-n WORK] [-s SEED]\n"
		"  %s\n"
		"  -t THREADS  worker threads (default 1)\n"
		"  -n WORK     total work, split over the threads (default %" PRIu64 ")\n"
		"  -s SEED     random seed (default 1)\n"
		"Prints 'ops=<N> secs=<T> threads=<t>'; exits 1 if a block's contents are wrong.\n",
		name, what, def_work);
}

static inline uint64_t wl_parse_u64(const char *name, const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end || v == 0) {
		fprintf(stderr, "%s: bad number '%s'\n", name, s);
		exit(2);
	}
	return v;
}

/* Parse the common options; exits on -h or a bad argument. */
static inline struct wl_opts wl_parse(int argc, char **argv, const char *what, uint64_t def_work)
{
	struct wl_opts o = { 1, def_work, 1 };
	const char *name = argv[0];
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			wl_usage(name, what, def_work);
			exit(0);
		}
		if (i + 1 >= argc || a[0] != '-' || a[2]) {
			wl_usage(name, what, def_work);
			exit(2);
		}
		uint64_t v = wl_parse_u64(name, argv[++i]);
		switch (a[1]) {
		case 't': o.threads = v > 1024 ? 1024 : (unsigned)v; break;
		case 'n': o.work = v; break;
		case 's': o.seed = v; break;
		default: wl_usage(name, what, def_work); exit(2);
		}
	}
	return o;
}

/* ---- time and randomness ------------------------------------------------- */

static inline double wl_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline uint64_t wl_mix64(uint64_t x)
{
	x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27; x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* xorshift64*: one per thread, seeded from (seed, thread index). */
struct wl_rng { uint64_t s; };

static inline struct wl_rng wl_rng_init(uint64_t seed, uint64_t stream)
{
	struct wl_rng r = { wl_mix64(seed * 0x9e3779b97f4a7c15ull + stream + 1) | 1 };
	return r;
}

static inline uint64_t wl_rand(struct wl_rng *r)
{
	r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
	return r->s * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n). */
static inline uint64_t wl_below(struct wl_rng *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)wl_rand(r) * n) >> 64);
}

/* Log-uniform in [lo, hi): a power-of-two band chosen uniformly, then a
 * uniform size inside it — small sizes common, big ones rare. */
static inline size_t wl_logsize(struct wl_rng *r, size_t lo, size_t hi)
{
	unsigned blo = 63 - __builtin_clzll(lo), bhi = 63 - __builtin_clzll(hi - 1);
	unsigned b = blo + (unsigned)wl_below(r, bhi - blo + 1);
	size_t base = (size_t)1 << b, top = base << 1;
	if (base < lo) base = lo;
	if (top > hi) top = hi;
	return base + wl_below(r, top - base);
}

/* ---- block stamps ----------------------------------------------------------
 * A block of n >= 8 bytes carries tag(p, n) in its first word and ~tag in its
 * last (unaligned) word; blocks of a page or more also carry a word per 4 KiB
 * page, so large blocks are really touched as a program would touch them.
 */
static inline uint64_t wl_tag(const void *p, size_t n)
{
	return wl_mix64((uintptr_t)p ^ ((uint64_t)n << 48) ^ n);
}

static inline void wl_put(void *p, size_t off, uint64_t v) { memcpy((char *)p + off, &v, 8); }
static inline uint64_t wl_get(const void *p, size_t off)
{
	uint64_t v;
	memcpy(&v, (const char *)p + off, 8);
	return v;
}

static inline void wl_stamp(void *p, size_t n)
{
	uint64_t t = wl_tag(p, n);
	wl_put(p, 0, t);
	for (size_t off = 4096; off + 16 <= n; off += 4096)
		wl_put(p, off, t + off);
	if (n >= 16)
		wl_put(p, n - 8, ~t);
}

__attribute__((noinline, cold, noreturn, unused))
static void wl_fail(const char *what, const void *p, size_t n, size_t off)
{
	fprintf(stderr, "workload: corrupt block %p (%zu bytes) at offset %zu: %s\n", p, n, off, what);
	fflush(stderr);
	_exit(1);
}

static inline void wl_check(const void *p, size_t n)
{
	uint64_t t = wl_tag(p, n);
	if (wl_get(p, 0) != t)
		wl_fail("first word", p, n, 0);
	for (size_t off = 4096; off + 16 <= n; off += 4096)
		if (wl_get(p, off) != t + off)
			wl_fail("page word", p, n, off);
	if (n >= 16 && wl_get(p, n - 8) != ~t)
		wl_fail("last word", p, n, n - 8);
}

/* malloc that treats NULL as a failure of the allocator under test. */
static inline void *wl_malloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, "workload: malloc(%zu) returned NULL\n", n);
		_exit(1);
	}
	return p;
}

/* ---- threads and the result line -------------------------------------------- */

/* Run fn(arg_i) on `threads` threads, arg_i = base + i * stride; return secs. */
static inline double wl_run_threads(unsigned threads, void *(*fn)(void *), void *base, size_t stride)
{
	pthread_t *tid = calloc(threads, sizeof(*tid));
	if (!tid) {
		perror("calloc");
		exit(1);
	}
	double t0 = wl_now();
	for (unsigned i = 0; i < threads; i++) {
		int e = pthread_create(&tid[i], NULL, fn, (char *)base + i * stride);
		if (e) {
			fprintf(stderr, "pthread_create: %s\n", strerror(e));
			exit(1);
		}
	}
	for (unsigned i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	double secs = wl_now() - t0;
	free(tid);
	return secs;
}

/* Share of `work` for thread i of n (the first work % n get one more). */
static inline uint64_t wl_share(uint64_t work, unsigned n, unsigned i)
{
	return work / n + (i < work % n);
}

/* The usual worker: its share of the work, the run's seed and its index. */
struct wl_worker {
	uint64_t ops;
	uint64_t seed;
	unsigned idx;
};

/* fn on o->threads threads, each given a wl_worker with its share of
 * o->work; returns the seconds they took. */
static inline double wl_run_workers(const struct wl_opts *o, void *(*fn)(void *))
{
	struct wl_worker *w = calloc(o->threads, sizeof(*w));

	if (!w) {
		perror("calloc");
		exit(1);
	}
	for (unsigned i = 0; i < o->threads; i++)
		w[i] = (struct wl_worker){ wl_share(o->work, o->threads, i), o->seed, i };
	double secs = wl_run_threads(o->threads, fn, w, sizeof(*w));
	free(w);
	return secs;
}

static inline void wl_report(uint64_t ops, double secs, unsigned threads)
{
	printf("ops=%" PRIu64 " secs=%.6f threads=%u\n", ops, secs, threads);
	fflush(stdout);
}

#endif /* WORKLOAD_H */
