/* SPDX-License-Identifier: MIT */
/*
 * remote_ring.c - a ring of threads passing blocks over lock-free queues.
 *
 * Thread i allocates batches of BATCH blocks (16 ... 512 bytes), stamps them
 * and pushes each batch into a bounded single-producer/single-consumer ring
 * read by thread i+1, which checks and frees every block (and the batch): all
 * frees are remote. Unlike `xmalloc`, which passes batches under one mutex
 * and condition variable, the hand-over here costs two atomic stores, so
 * nearly all the time is the allocator's: what a remote free costs, and how
 * the freed memory gets back to the thread that allocates it. A thread that
 * finds nothing to do yields the CPU. At 1 thread the ring closes on itself
 * (the local-free baseline).
 * One op = one malloc + one remote free.
 */
#include "workload.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#define BATCH    64
#define RING     32      /* batches in flight per queue, a power of two */
#define MIN_SIZE 16
#define MAX_SIZE 512

struct batch {
	void *obj[BATCH];
	uint16_t size[BATCH];
};

/* head: next slot to read, written by the consumer only; tail: next slot to
 * write, written by the producer only. Each reads the other's index with
 * acquire, pairing with the release store made after the slot was filled
 * (tail) or emptied (head). */
struct queue {
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) struct batch *slot[RING];
};

struct worker {
	uint64_t batches;      /* to produce */
	uint64_t expect;       /* to receive */
	uint64_t seed;
	unsigned idx;
};

static struct queue *queues;   /* queues[i]: from thread i to thread i+1 */
static unsigned nthreads;

static struct batch *produce(struct wl_rng *r)
{
	struct batch *b = wl_malloc(sizeof(*b));
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
	for (unsigned i = 0; i < BATCH; i++) {
		wl_check(b->obj[i], b->size[i]);
		free(b->obj[i]);
	}
	free(b);
}

static bool try_push(struct queue *q, struct batch *b)
{
	uint64_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
	if (t - atomic_load_explicit(&q->head, memory_order_acquire) == RING)
		return false;
	q->slot[t % RING] = b;
	atomic_store_explicit(&q->tail, t + 1, memory_order_release);
	return true;
}

static struct batch *try_pop(struct queue *q)
{
	uint64_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
	if (h == atomic_load_explicit(&q->tail, memory_order_acquire))
		return NULL;
	struct batch *b = q->slot[h % RING];
	atomic_store_explicit(&q->head, h + 1, memory_order_release);
	return b;
}

static void *worker(void *arg)
{
	struct worker *w = arg;
	struct queue *out = &queues[w->idx], *in = &queues[(w->idx + nthreads - 1) % nthreads];
	struct wl_rng r = wl_rng_init(w->seed, w->idx + 1);
	uint64_t produced = 0, received = 0;
	struct batch *ready = NULL;        /* made, waiting for room in `out` */
	while (produced < w->batches || received < w->expect) {
		bool progress = false;
		struct batch *b;
		while ((b = try_pop(in))) {
			consume(b);
			received++;
			progress = true;
		}
		if (!ready && produced < w->batches)
			ready = produce(&r);
		if (ready && try_push(out, ready)) {
			ready = NULL;
			produced++;
			progress = true;
		}
		if (!progress)
			sched_yield();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"ring of threads: blocks passed over lock-free queues, freed by the next thread", 10000000);
	nthreads = o.threads;
	queues = aligned_alloc(64, nthreads * sizeof(*queues));
	if (!queues) {
		perror("aligned_alloc");
		return 1;
	}
	memset(queues, 0, nthreads * sizeof(*queues));
	uint64_t nbatches = (o.work + BATCH - 1) / BATCH;
	struct worker *w = calloc(nthreads, sizeof(*w));
	for (unsigned i = 0; i < nthreads; i++)
		w[i] = (struct worker){ wl_share(nbatches, nthreads, i), 0, o.seed, i };
	for (unsigned i = 0; i < nthreads; i++)
		w[(i + 1) % nthreads].expect = w[i].batches;
	double secs = wl_run_threads(nthreads, worker, w, sizeof(*w));
	free(w);
	free(queues);
	wl_report(nbatches * BATCH, secs, o.threads);
	return 0;
}
