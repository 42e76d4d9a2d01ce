/* SPDX-License-Identifier: MIT */
/*
 * realloc_interleaved.c - several buffers grown by realloc side by side.
 *
 * Each thread grows PAIRS pairs of buffers together, in turn: in a pair, the
 * "step" buffer grows by 16 ... 64 bytes per realloc (a string or a log being
 * appended to) and the "doubling" buffer doubles whenever it is shorter than
 * its step buffer (a vector keeping up with it). When the step buffers pass a
 * limit (log-uniform over 256 KiB ... 2 MiB, so the doubling ones reach up
 * to 4 MiB) all are checked and freed, and a new cycle starts.
 *
 * `realloc_grow` grows one buffer at a time; here every buffer's neighbour is
 * another growing buffer, so growing in place works only if the allocator
 * leaves room or can move pages instead of bytes (mremap), and the copies of
 * an allocator that moves a large block on every step add up fast.
 * Word k of a buffer holds key ^ (k * constant). After a realloc that moved
 * the block, the old contents are checked (first and last word and one word
 * per 4 KiB page); after one that did not, the last old word.
 * One op = one realloc.
 */
#include "workload.h"

#define PAIRS     4
#define MIN_LIMIT (256u << 10)
#define MAX_LIMIT (2u << 20)

struct buf {
	uint64_t *p;
	size_t len;          /* bytes, a multiple of 8 */
	uint64_t key;
};

static inline uint64_t word_at(const struct buf *b, size_t k)
{
	return b->key ^ (k * 0x9e3779b97f4a7c15ull);
}

static void check_word(const struct buf *b, size_t k)
{
	if (b->p[k] != word_at(b, k))
		wl_fail("buffer word lost", b->p, b->len, k * 8);
}

/* The first and last word and one word per 4 KiB page of words [0, words). */
static void check_sampled(const struct buf *b, size_t words)
{
	for (size_t k = 0; k < words; k += 512)
		check_word(b, k);
	if (words)
		check_word(b, words - 1);
}

static void grow(struct buf *b, size_t len)
{
	size_t old = b->len / 8;
	uint64_t *p = realloc(b->p, len);
	if (!p)
		wl_fail("realloc returned NULL", b->p, len, 0);
	int moved = p != b->p;
	b->p = p;
	if (moved)
		check_sampled(b, old);
	else if (old)
		check_word(b, old - 1);
	b->len = len;
	for (size_t k = old; k < len / 8; k++)
		p[k] = word_at(b, k);
}

static void retire(struct buf *b)
{
	check_sampled(b, b->len / 8);
	free(b->p);
	b->p = NULL;
	b->len = 0;
}

static void *worker(void *arg)
{
	struct wl_worker *w = arg;
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	struct buf step[PAIRS] = { 0 }, dbl[PAIRS] = { 0 };
	uint64_t left = w->ops;
	while (left) {
		size_t limit = wl_logsize(&r, MIN_LIMIT, MAX_LIMIT + 1);
		for (unsigned j = 0; j < PAIRS; j++) {
			step[j].key = wl_rand(&r);
			dbl[j].key = wl_rand(&r);
		}
		while (left && step[0].len < limit) {
			for (unsigned j = 0; j < PAIRS && left; j++) {
				grow(&step[j], step[j].len + 16 + 8 * wl_below(&r, 7));
				left--;
				if (left && dbl[j].len < step[j].len) {
					grow(&dbl[j], dbl[j].len ? dbl[j].len * 2 : 64);
					left--;
				}
			}
		}
		for (unsigned j = 0; j < PAIRS; j++) {
			retire(&step[j]);
			retire(&dbl[j]);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"interleaved realloc: buffers grown side by side, by small steps and by doubling", 1000000);
	double secs = wl_run_workers(&o, worker);
	wl_report(o.work, secs, o.threads);
	return 0;
}
