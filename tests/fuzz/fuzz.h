/* SPDX-License-Identifier: MIT */
/*
 * fuzz.h - what the libFuzzer fuzzers of tests/fuzz share: reading an input
 * as a stream of small decisions, block patterns, the failure report, and a
 * helper thread run in lockstep.
 *
 * An input is a program: each fuzzer reads an operation byte, then the
 * bytes its operands need, until the input ends (a short input reads
 * zeros). Every run starts from an empty shadow model and ends with every
 * block freed, so an input replays the same way alone or in a long run.
 *
 * A check that fails prints one line "<fuzzer>: <what>" on stderr and
 * aborts: libFuzzer saves the input as a crash file. The fuzzers link the
 * allocator's static library and call its uslab_ functions; libFuzzer and
 * the sanitizers keep the C library's malloc for themselves.
 */
#ifndef USLAB_FUZZ_H
#define USLAB_FUZZ_H

#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* ---- the input ------------------------------------------------------------------------ */

struct fuzz_in {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t in_u8(struct fuzz_in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint32_t in_u16(struct fuzz_in *in)
{
	uint32_t lo = in_u8(in);

	return lo | (uint32_t)in_u8(in) << 8;
}

static inline uint32_t in_u32(struct fuzz_in *in)
{
	uint32_t lo = in_u16(in);

	return lo | in_u16(in) << 16;
}

/* ---- the report ----------------------------------------------------------------------- */

static const char *fuzz_name = "fuzz";

__attribute__((noreturn, format(printf, 1, 2)))
static void fuzz_fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", fuzz_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

#define FUZZ_CHECK(cond, ...)                  \
	do {                                   \
		if (__builtin_expect(!(cond), 0)) \
			fuzz_fail(__VA_ARGS__); \
	} while (0)

/* ---- block patterns --------------------------------------------------------------------
 * Byte i of a block filled with seed s is byte i % 8 of pattern_word(s,
 * i / 8), so a block that moved, was handed out twice or was written
 * through a stale pointer shows. Blocks up to FULL_FILL bytes are filled
 * whole; bigger ones at their first and last 2 KiB and 16 bytes in every
 * 64 KiB (a huge block filled whole would be most of a run's time and
 * memory). The loops are left out of the coverage instrumentation: they
 * would only add noise to what the fuzzer learns from.
 */
#define FULL_FILL (16 * KiB)
#define FUZZ_NO_COVERAGE __attribute__((no_sanitize("coverage")))

static inline uint64_t pattern_word(uint64_t seed, size_t w)
{
	return (seed ^ w) * 0x9E3779B97F4A7C15ull;
}

static inline uint8_t pattern_byte(uint64_t seed, size_t i)
{
	return (uint8_t)(pattern_word(seed, i >> 3) >> (8 * (i & 7)));
}

/* The runs of a block of n bytes that hold the pattern: [*from, *to) is the
 * next one at or after i (empty when none is left). */
FUZZ_NO_COVERAGE
static inline void pattern_run(size_t i, size_t n, size_t *from, size_t *to)
{
	size_t tail = n > 2 * KiB ? n - 2 * KiB : 0;

	if (n <= FULL_FILL || i < 2 * KiB || i >= tail) {
		*from = i;
		*to = n <= FULL_FILL || i >= tail ? n : 2 * KiB;
		return;
	}
	size_t mark = i & ~(64 * KiB - 1);
	if (i >= mark + 16)
		mark += 64 * KiB;
	if (mark >= tail) {
		*from = tail;
		*to = n;
		return;
	}
	*from = i > mark ? i : mark;
	*to = mark + 16 < tail ? mark + 16 : tail;
}

/* fill the bytes of [start, end) that a block of n bytes keeps a pattern in */
FUZZ_NO_COVERAGE
static inline void pattern_fill_range(uint8_t *b, size_t start, size_t end, size_t n,
				      uint64_t seed)
{
	size_t from, to;

	for (size_t i = start; i < end; i = to) {
		pattern_run(i, n, &from, &to);
		if (from >= end)
			break;
		if (to > end)
			to = end;
		size_t k = from;
		for (; k < to && (k & 7); k++)
			b[k] = pattern_byte(seed, k);
		for (; k + 8 <= to; k += 8) {
			uint64_t w = pattern_word(seed, k >> 3);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
			w = __builtin_bswap64(w);
#endif
			memcpy(b + k, &w, 8);
		}
		for (; k < to; k++)
			b[k] = pattern_byte(seed, k);
	}
}

static inline void pattern_fill(void *p, size_t n, uint64_t seed)
{
	pattern_fill_range(p, 0, n, n, seed);
}

/* The first byte of [start, len) of a block of n bytes filled with seed
 * that differs, or len. */
FUZZ_NO_COVERAGE
static inline size_t pattern_check_from(const void *p, size_t start, size_t len, size_t n,
					uint64_t seed)
{
	const uint8_t *b = p;
	size_t from, to;

	for (size_t i = start; i < len; i = to) {
		pattern_run(i, n, &from, &to);
		if (from >= len)
			break;
		if (to > len)
			to = len;
		size_t k = from;
		for (; k + 8 <= to && !(k & 7); k += 8) {
			uint64_t w = pattern_word(seed, k >> 3), got;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
			w = __builtin_bswap64(w);
#endif
			memcpy(&got, b + k, 8);
			if (got != w)
				break;
		}
		for (; k < to; k++)
			if (b[k] != pattern_byte(seed, k))
				return k;
	}
	return len;
}

static inline size_t pattern_check(const void *p, size_t len, size_t n, uint64_t seed)
{
	return pattern_check_from(p, 0, len, n, seed);
}

FUZZ_NO_COVERAGE
static inline bool all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* ---- a helper thread in lockstep ----------------------------------------------------------
 * helper_run(fn, arg) runs fn(arg) on the helper thread and returns when it
 * has: an operation of another thread at a fixed point of the sequence, so
 * runs stay reproducible. Blocks it frees are remote frees; blocks it
 * allocates come from its own slabs.
 */
static struct {
	pthread_t thread;
	sem_t go, done;
	void (*fn)(void *);
	void *arg;
	bool started;
} helper;

static void *helper_main(void *unused)
{
	(void)unused;
	for (;;) {
		while (sem_wait(&helper.go) != 0)
			;
		helper.fn(helper.arg);
		sem_post(&helper.done);
	}
	return NULL;
}

static inline void helper_run(void (*fn)(void *), void *arg)
{
	if (!helper.started) {
		FUZZ_CHECK(sem_init(&helper.go, 0, 0) == 0 && sem_init(&helper.done, 0, 0) == 0,
			   "sem_init failed");
		FUZZ_CHECK(pthread_create(&helper.thread, NULL, helper_main, NULL) == 0,
			   "cannot start the helper thread");
		helper.started = true;
	}
	helper.fn = fn;
	helper.arg = arg;
	sem_post(&helper.go);
	while (sem_wait(&helper.done) != 0)
		;
}

#endif
