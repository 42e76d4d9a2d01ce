/* SPDX-License-Identifier: MIT */
/*
 * xmalloc.c - an xmalloc-style producer -> consumer remote-free test.
 *
 * The threads form a ring. Each one allocates batches of BATCH blocks
 * (16 ... 256 bytes), stamps them and hands every batch to the next thread,
 * which checks and frees the blocks: every free is a remote free of memory
 * another thread allocated, the pattern of a pipeline or of a
 * message-passing server. A thread waits only when its successor already has
 * LIMIT batches queued, so the memory in flight stays bounded.
 * At 1 thread the ring closes on itself: the batches come back to their
 * producer, which makes that row the local-free baseline of the same work.
 * One op = one malloc + one free (by the next thread).
 */
#include "workload.h"

#define BATCH    128
#define LIMIT    16
#define MIN_SIZE 16
#define MAX_SIZE 256

struct batch {
	struct batch *next;
	unsigned n;
	void *obj[BATCH];
	uint16_t size[BATCH];
};

struct worker {
	uint64_t batches;      /* to produce */
	uint64_t expect;       /* to receive from the predecessor */
	uint64_t seed;
	unsigned idx;
	/* protected by ring_lock */
	struct batch *inbox, **inbox_tail;
	unsigned queued;
};

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ring_cond = PTHREAD_COND_INITIALIZER;
static struct worker *workers;
static unsigned nworkers;

static struct batch *produce(struct wl_rng *r)
{
	struct batch *b = wl_malloc(sizeof(*b));
	b->next = NULL;
	b->n = BATCH;
	for (unsigned i = 0; i < BATCH; i++) {
		size_t n = MIN_SIZE + wl_below(r, MAX_SIZE - MIN_SIZE + 1);
		b->obj[i] = wl_malloc(n);
		b->size[i] = (uint16_t)n;
		wl_stamp(b->obj[i], n);
	}
	return b;
}

static void consume(struct batch *b)
{
	for (unsigned i = 0; i < b->n; i++) {
		wl_check(b->obj[i], b->size[i]);
		free(b->obj[i]);
	}
	free(b);
}

static void *worker(void *arg)
{
	struct worker *w = arg, *next = &workers[(w->idx + 1) % nworkers];
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	uint64_t produced = 0, received = 0;

	pthread_mutex_lock(&ring_lock);
	for (;;) {
		if (w->inbox) {                 /* consume everything queued for us */
			struct batch *list = w->inbox;
			w->inbox = NULL;
			w->inbox_tail = &w->inbox;
			w->queued = 0;
			pthread_cond_broadcast(&ring_cond);
			pthread_mutex_unlock(&ring_lock);
			while (list) {
				struct batch *b = list;
				list = b->next;
				consume(b);
				received++;
			}
			pthread_mutex_lock(&ring_lock);
			continue;
		}
		if (produced < w->batches && next->queued < LIMIT) {
			pthread_mutex_unlock(&ring_lock);
			struct batch *b = produce(&r);
			pthread_mutex_lock(&ring_lock);
			*next->inbox_tail = b;
			next->inbox_tail = &b->next;
			next->queued++;
			produced++;
			pthread_cond_broadcast(&ring_cond);
			continue;
		}
		if (produced == w->batches && received == w->expect)
			break;
		pthread_cond_wait(&ring_cond, &ring_lock);
	}
	pthread_mutex_unlock(&ring_lock);
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"xmalloc-style ring: each thread frees the blocks its predecessor allocated", 8000000);
	nworkers = o.threads;
	workers = calloc(nworkers, sizeof(*workers));
	uint64_t nbatches = (o.work + BATCH - 1) / BATCH;
	for (unsigned i = 0; i < nworkers; i++) {
		workers[i].batches = wl_share(nbatches, nworkers, i);
		workers[i].seed = o.seed;
		workers[i].idx = i;
		workers[i].inbox_tail = &workers[i].inbox;
	}
	for (unsigned i = 0; i < nworkers; i++)
		workers[(i + 1) % nworkers].expect = workers[i].batches;
	double secs = wl_run_threads(nworkers, worker, workers, sizeof(*workers));
	free(workers);
	wl_report(nbatches * BATCH, secs, o.threads);
	return 0;
}
