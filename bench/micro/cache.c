/* SPDX-License-Identifier: MIT */
/*
 * cache.c - uslab's object-cache API (uslab_cache_alloc/free, always
 * uslab's own, linked statically): the slab core without malloc's size
 * classes in front. The same operations through malloc/free, which compare
 * allocators under LD_PRELOAD, are in malloc.c; only the remote-free pair
 * stays here, as it shares the ring:
 *
 *   BM_cache_pair/64        alloc then free of the same object, one thread
 *   BM_cache_lifo/64        1,000 allocs, then frees newest first (per item)
 *   BM_cache_fifo/64        1,000 allocs, then frees oldest first
 *   BM_cache_remote/64      2 threads: thread 0 allocates and hands over
 *   BM_malloc_remote/64     through a ring, thread 1 frees (remote frees)
 *
 * Items per second is the figure to compare; one item is one alloc+free.
 */
#include "bench.h"

#include "uslab.h"

#include <sched.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>

#define BATCH 1000
#define RING 1024   /* power of two */

/* The cache of this object size, made on first use. Locked: both threads of
 * a 2-thread benchmark ask at once, and two caches would make the consumer
 * free the producer's objects into the wrong one. */
static struct uslab_cache *cache_for(size_t size)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static struct uslab_cache *caches[8];
	static size_t sizes[8];
	struct uslab_cache *c = NULL;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < 8 && !c; i++) {
		if (!sizes[i]) {
			caches[i] = uslab_cache_create("bench", size, 0, 0, NULL);
			sizes[i] = size;
		}
		if (sizes[i] == size)
			c = caches[i];
	}
	pthread_mutex_unlock(&lock);
	if (!c)
		abort();
	return c;
}

/* ---- one thread ----------------------------------------------------------------- */

BENCH(BM_cache_pair, BENCH_ARGS(16, 64, 256, 1024), .arg_name = "size")
{
	struct uslab_cache *c = cache_for((size_t)bench_range(state, 0));

	while (bench_keep_running(state)) {
		void *p = uslab_cache_alloc(c);
		bench_do_not_optimize(p);
		uslab_cache_free(c, p);
	}
	bench_set_items_processed(state, bench_iterations(state));
}

static void batch_cache(bench_state *state, bool lifo)
{
	struct uslab_cache *c = cache_for((size_t)bench_range(state, 0));
	void *v[BATCH];

	while (bench_keep_running(state)) {
		for (int i = 0; i < BATCH; i++) {
			v[i] = uslab_cache_alloc(c);
			bench_do_not_optimize(v[i]);
		}
		for (int i = 0; i < BATCH; i++)
			uslab_cache_free(c, v[lifo ? BATCH - 1 - i : i]);
	}
	bench_set_items_processed(state, bench_iterations(state) * BATCH);
}

BENCH(BM_cache_lifo, BENCH_ARGS(64), .arg_name = "size") { batch_cache(state, true); }
BENCH(BM_cache_fifo, BENCH_ARGS(64), .arg_name = "size") { batch_cache(state, false); }

/* ---- producer -> consumer: remote frees ------------------------------------------ */

static struct {
	_Alignas(64) atomic_size_t head;   /* written by the producer */
	_Alignas(64) atomic_size_t tail;   /* written by the consumer */
	_Alignas(64) void *slot[RING];
} ring;

/* Wait politely: on a loaded 2-core machine the other side may be off-CPU. */
static void ring_wait(unsigned *spins)
{
	if (++*spins > 64) {
		sched_yield();
		*spins = 0;
	}
}

/*
 * Single-producer single-consumer ring in which each side keeps its own copy
 * of the other side's index and re-reads the shared one only when the copy
 * says the ring is full (producer) or empty (consumer). Re-reading it on
 * every item, as an earlier version did, made each handoff pull the other
 * core's cache line and measured that ping-pong far more than the
 * allocator (86 % of uslab's samples sat on those two loads); see
 * docs/bench.md. A stale copy is always safe: indices only grow, so a stale
 * tail understates the free room and a stale head the filled slots.
 */
static void remote(bench_state *state, struct uslab_cache *c, size_t size)
{
	unsigned spins = 0;
	bool producer = bench_thread_index(state) == 0;
	/* The other side's index as last seen; the ring's indices are equal
	 * whenever a run starts, since the previous run consumed everything. */
	size_t seen = atomic_load_explicit(producer ? &ring.tail : &ring.head,
					   memory_order_acquire);

	if (bench_threads(state) != 2) {
		bench_skip_with_error(state, "needs exactly 2 threads");
		return;
	}
	while (bench_keep_running(state)) {
		if (producer) {
			void *p = c ? uslab_cache_alloc(c) : malloc(size);
			size_t h = atomic_load_explicit(&ring.head, memory_order_relaxed);
			/* acquire: pairs with the consumer's release of tail */
			while (h - seen == RING) {
				seen = atomic_load_explicit(&ring.tail, memory_order_acquire);
				if (h - seen == RING)
					ring_wait(&spins);
			}
			ring.slot[h % RING] = p;
			atomic_store_explicit(&ring.head, h + 1, memory_order_release);
		} else {
			size_t t = atomic_load_explicit(&ring.tail, memory_order_relaxed);
			/* acquire: pairs with the producer's release of head */
			while (seen == t) {
				seen = atomic_load_explicit(&ring.head, memory_order_acquire);
				if (seen == t)
					ring_wait(&spins);
			}
			void *p = ring.slot[t % RING];
			atomic_store_explicit(&ring.tail, t + 1, memory_order_release);
			if (c)
				uslab_cache_free(c, p);
			else
				free(p);
		}
	}
	if (!producer)
		bench_set_items_processed(state, bench_iterations(state));
}

BENCH(BM_cache_remote, BENCH_ARGS(64), .arg_name = "size", BENCH_THREADS(2), .real_time = true)
{
	remote(state, cache_for((size_t)bench_range(state, 0)), 0);
}

BENCH(BM_malloc_remote, BENCH_ARGS(64), .arg_name = "size", BENCH_THREADS(2), .real_time = true)
{
	remote(state, NULL, (size_t)bench_range(state, 0));
}
