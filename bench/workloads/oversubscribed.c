/* SPDX-License-Identifier: MIT */
/*
 * oversubscribed.c - producer/consumer pairs, many more threads than cores.
 *
 * The threads form pairs: the first of a pair allocates blocks, stamps them
 * and puts them in the pair's bounded queue (a mutex and two condition
 * variables, QUEUE blocks deep); the second takes them out, checks and frees
 * them. Sizes are log-uniform over 16 B ... 16 KiB, and one block in 32 is
 * 64 KiB ... 256 KiB, so large blocks are allocated and freed remotely too.
 * With an odd thread count the last thread is a pair on its own (it fills
 * its queue, then empties it).
 *
 * tools/bench runs it at 32 and 128 threads on whatever cores there are:
 * threads are preempted anywhere, holding an allocator's lock or halfway
 * through a remote free. An allocator that spins on a lock whose holder is
 * not running burns its time slice; one that sleeps in the kernel shows
 * system time; memory given back and faulted in again costs system time as
 * well. The report gives the kernel share, sys / (user + sys), per row.
 * One op = one malloc + one free (by the other thread of the pair).
 */
#include "workload.h"

#include <stdbool.h>

#define QUEUE    64
#define MIN_SIZE 16
#define MAX_SIZE (16u << 10)
#define BIG_MIN  (64u << 10)
#define BIG_MAX  (256u << 10)
#define BIG_ONE  32       /* one block in BIG_ONE is big */

struct item {
	void *p;
	size_t n;
};

struct pair {
	pthread_mutex_t lock;
	pthread_cond_t not_empty, not_full;
	unsigned head, count;        /* under lock */
	struct item q[QUEUE];
	uint64_t blocks;             /* to pass from producer to consumer */
	uint64_t seed;
	unsigned idx;
};

struct role {
	struct pair *pair;
	int part;                    /* 0 producer, 1 consumer, 2 both */
};

static struct item make(struct wl_rng *r)
{
	size_t n = wl_below(r, BIG_ONE) ? wl_logsize(r, MIN_SIZE, MAX_SIZE + 1)
					: wl_logsize(r, BIG_MIN, BIG_MAX + 1);
	struct item it = { wl_malloc(n), n };
	wl_stamp(it.p, n);
	return it;
}

static void consume(struct item it)
{
	wl_check(it.p, it.n);
	free(it.p);
}

/* Take what the queue holds into out[]; wait for something if `wait`. */
static unsigned take(struct pair *pr, struct item *out, bool wait)
{
	pthread_mutex_lock(&pr->lock);
	while (wait && !pr->count)
		pthread_cond_wait(&pr->not_empty, &pr->lock);
	unsigned n = pr->count;
	for (unsigned i = 0; i < n; i++)
		out[i] = pr->q[(pr->head + i) % QUEUE];
	pr->head = (pr->head + n) % QUEUE;
	pr->count = 0;
	if (n)
		pthread_cond_signal(&pr->not_full);
	pthread_mutex_unlock(&pr->lock);
	return n;
}

/* Put it in the queue; wait for room if `wait`, else fail when full. */
static bool put(struct pair *pr, struct item it, bool wait)
{
	pthread_mutex_lock(&pr->lock);
	while (pr->count == QUEUE) {
		if (!wait) {
			pthread_mutex_unlock(&pr->lock);
			return false;
		}
		pthread_cond_wait(&pr->not_full, &pr->lock);
	}
	pr->q[(pr->head + pr->count) % QUEUE] = it;
	if (pr->count++ == 0)
		pthread_cond_signal(&pr->not_empty);
	pthread_mutex_unlock(&pr->lock);
	return true;
}

static void *run(void *arg)
{
	struct role *ro = arg;
	struct pair *pr = ro->pair;
	struct wl_rng r = wl_rng_init(pr->seed, pr->idx + 1);
	struct item got[QUEUE];
	uint64_t made = 0, freed = 0;
	if (ro->part == 0) {
		for (; made < pr->blocks; made++)
			put(pr, make(&r), true);
	} else if (ro->part == 1) {
		while (freed < pr->blocks) {
			unsigned n = take(pr, got, true);
			for (unsigned i = 0; i < n; i++)
				consume(got[i]);
			freed += n;
		}
	} else {
		while (freed < pr->blocks) {
			while (made < pr->blocks) {
				struct item it = make(&r);
				if (!put(pr, it, false)) {
					consume(it);           /* full: free it here */
					freed++;
					made++;
					break;
				}
				made++;
			}
			unsigned n = take(pr, got, false);
			for (unsigned i = 0; i < n; i++)
				consume(got[i]);
			freed += n;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv,
		"producer/consumer pairs over mutex queues; meant for many more threads than cores", 250000);
	unsigned npairs = (o.threads + 1) / 2;
	struct pair *pairs = calloc(npairs, sizeof(*pairs));
	struct role *roles = calloc(o.threads, sizeof(*roles));
	if (!pairs || !roles) {
		perror("calloc");
		return 1;
	}
	for (unsigned i = 0; i < npairs; i++) {
		struct pair *pr = &pairs[i];
		pthread_mutex_init(&pr->lock, NULL);
		pthread_cond_init(&pr->not_empty, NULL);
		pthread_cond_init(&pr->not_full, NULL);
		pr->blocks = wl_share(o.work, npairs, i);
		pr->seed = o.seed;
		pr->idx = i;
	}
	for (unsigned t = 0; t < o.threads; t++) {
		bool alone = t == o.threads - 1 && o.threads % 2;
		roles[t] = (struct role){ &pairs[t / 2], alone ? 2 : (int)(t % 2) };
	}
	double secs = wl_run_threads(o.threads, run, roles, sizeof(*roles));
	for (unsigned i = 0; i < npairs; i++) {
		pthread_mutex_destroy(&pairs[i].lock);
		pthread_cond_destroy(&pairs[i].not_empty);
		pthread_cond_destroy(&pairs[i].not_full);
	}
	free(roles);
	free(pairs);
	wl_report(o.work, secs, o.threads);
	return 0;
}
