/* SPDX-License-Identifier: MIT */
/*
 * realloc_grow.c - string and vector growth by realloc.
 *
 * Each thread keeps BUFS growing buffers. An op picks one and grows it with
 * realloc, the way programs build strings and vectors:
 *   string: + 1 ... 64 bytes per step (appends), up to a limit log-uniform
 *           over 32 B ... 64 KiB;
 *   vector: doubling from 16 bytes, up to a limit log-uniform over
 *           256 B ... 4 MiB;
 * writing the new bytes after each step. A buffer past its limit is checked
 * and freed and starts again, empty, in a random mode. Word k of a buffer holds
 * key ^ (k * constant); after each realloc the first and last word of the old
 * contents and one at random are checked, so a realloc that moved the block
 * without its data is caught at once.
 * One op = one realloc (the first is realloc(NULL, n)).
 */
#include "workload.h"

#define BUFS 64

struct buf {
	uint64_t *p;
	size_t len, limit;
	uint64_t key;
	int vector;
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

static void restart(struct buf *b, struct wl_rng *r)
{
	b->p = NULL;
	b->len = 0;
	b->vector = wl_below(r, 2);
	b->limit = b->vector ? wl_logsize(r, 256, 4 << 20) : wl_logsize(r, 32, 64 << 10);
	b->key = wl_rand(r);
}

static void grow(struct buf *b, struct wl_rng *r)
{
	size_t old = b->len / 8, len;
	if (b->vector)
		len = b->len ? b->len * 2 : 16;
	else
		len = b->len + 1 + wl_below(r, 64);
	uint64_t *p = realloc(b->p, len);
	if (!p)
		wl_fail("realloc returned NULL", b->p, len, 0);
	b->p = p;
	if (old) {
		check_word(b, 0);
		check_word(b, old - 1);
		check_word(b, wl_below(r, old));
	}
	b->len = len;
	for (size_t k = old; k < len / 8; k++)
		p[k] = word_at(b, k);
}

static void retire(struct buf *b)
{
	if (b->len >= 8) {
		check_word(b, 0);
		check_word(b, b->len / 8 - 1);
	}
	free(b->p);
}

static void *worker(void *arg)
{
	struct wl_worker *w = arg;
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	struct buf bufs[BUFS];
	for (unsigned i = 0; i < BUFS; i++)
		restart(&bufs[i], &r);
	for (uint64_t i = 0; i < w->ops; i++) {
		struct buf *b = &bufs[wl_below(&r, BUFS)];
		grow(b, &r);
		if (b->len >= b->limit) {
			retire(b);
			restart(b, &r);
		}
	}
	for (unsigned i = 0; i < BUFS; i++)
		retire(&bufs[i]);
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"realloc growth: strings (+1..64 bytes) and vectors (doubling)", 1000000);
	double secs = wl_run_workers(&o, worker);
	wl_report(o.work, secs, o.threads);
	return 0;
}
