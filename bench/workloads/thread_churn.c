/* SPDX-License-Identifier: MIT */
/*
 * thread_churn.c - thread create/exit churn.
 *
 * The main thread starts `threads` short-lived threads at a time, joins them
 * and starts the next ones, until WORK threads have run. Each one allocates
 * ALLOCS blocks (16 ... 1024 bytes), frees nine in ten of them and leaves the
 * rest — with the array that lists them — in a shared pool. The next thread
 * takes one such leftover set from the pool, checks it and frees it: memory
 * allocated by a thread that has exited since. This is what a server that
 * spawns a thread per request does to an allocator: per-thread caches are
 * set up and torn down all the time, and their leftovers must be reclaimed.
 * One op = one thread (ALLOCS mallocs, as many frees).
 */
#include "workload.h"

#include <stdatomic.h>

#define ALLOCS   300
#define KEEP_ONE 10    /* keep every 10th block for the next thread */
#define MIN_SIZE 16
#define MAX_SIZE 1024

struct leftover {
	struct leftover *next;
	unsigned n;
	void *p[ALLOCS / KEEP_ONE + 1];
	uint16_t size[ALLOCS / KEEP_ONE + 1];
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct leftover *pool;
static _Atomic uint64_t seq;     /* gives each thread its own random stream */

static void release(struct leftover *l)
{
	for (unsigned i = 0; i < l->n; i++) {
		wl_check(l->p[i], l->size[i]);
		free(l->p[i]);
	}
	free(l);
}

static void *short_lived(void *arg)
{
	struct wl_rng r = wl_rng_init(*(uint64_t *)arg, atomic_fetch_add_explicit(&seq, 1, memory_order_relaxed) + 1);
	pthread_mutex_lock(&pool_lock);
	struct leftover *old = pool;
	if (old)
		pool = old->next;
	pthread_mutex_unlock(&pool_lock);
	if (old)
		release(old);

	void *p[ALLOCS];
	uint16_t size[ALLOCS];
	for (unsigned i = 0; i < ALLOCS; i++) {
		size[i] = (uint16_t)(MIN_SIZE + wl_below(&r, MAX_SIZE - MIN_SIZE + 1));
		p[i] = wl_malloc(size[i]);
		wl_stamp(p[i], size[i]);
	}
	struct leftover *keep = wl_malloc(sizeof(*keep));
	keep->n = 0;
	for (unsigned i = 0; i < ALLOCS; i++) {
		if (i % KEEP_ONE == 0) {
			keep->p[keep->n] = p[i];
			keep->size[keep->n++] = size[i];
			continue;
		}
		wl_check(p[i], size[i]);
		free(p[i]);
	}
	pthread_mutex_lock(&pool_lock);
	keep->next = pool;
	pool = keep;
	pthread_mutex_unlock(&pool_lock);
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"thread churn: short-lived threads allocate, free most, leave some for the next",
		8000);
	pthread_t *tid = calloc(o.threads, sizeof(*tid));
	double t0 = wl_now();
	for (uint64_t done = 0; done < o.work; ) {
		unsigned n = o.work - done < o.threads ? (unsigned)(o.work - done) : o.threads;
		for (unsigned i = 0; i < n; i++) {
			int e = pthread_create(&tid[i], NULL, short_lived, &o.seed);
			if (e) {
				fprintf(stderr, "pthread_create: %s\n", strerror(e));
				return 1;
			}
		}
		for (unsigned i = 0; i < n; i++)
			pthread_join(tid[i], NULL);
		done += n;
	}
	double secs = wl_now() - t0;
	while (pool) {
		struct leftover *l = pool;
		pool = l->next;
		release(l);
	}
	free(tid);
	wl_report(o.work, secs, o.threads);
	return 0;
}
