/* SPDX-License-Identifier: MIT */
/*
 * larson_sized.c - larson's hand-off: slot arrays that outlive their threads,
 * random sizes, sized frees.
 *
 * Each of the `threads` chains owns an array of SLOTS blocks of random sizes
 * (uniform over MIN_SIZE ... MAX_SIZE). A thread replaces random slots (free
 * the old block, allocate a new one of a new random size) GENERATION times,
 * then starts a new thread, hands it the array and exits; the new thread goes
 * on replacing slots, so its first frees are of blocks a thread that has
 * exited allocated, of every size in the range. The main thread fills the
 * arrays before the start, so the first generation's frees are remote too.
 * This is the original larson server's life cycle (where `larson` shares one
 * table between threads that live for the whole run).
 *
 * Frees go through free_sized(p, n) when the process has one (from the C
 * library or from the allocator preloaded): the allocator may then skip
 * looking the size up. glibc 2.36 has none, so under it, and under an
 * allocator that does not export it, the frees are plain free(). The result
 * line says which: free=sized or free=plain.
 *
 * Built twice: larson_sized (16 ... 1,024 bytes, 2,048 slots per chain) and,
 * with -DLARSON_LARGE, larson_sized_large (1 KiB ... 32 KiB, 512 slots).
 * One op = one free + one malloc.
 */
#define _GNU_SOURCE           /* RTLD_DEFAULT */
#include "workload.h"

#include <dlfcn.h>

#ifdef LARSON_LARGE
#define MIN_SIZE   1024
#define MAX_SIZE   32768
#define SLOTS      512
#define GENERATION 20000
#define DEF_WORK   2000000
#define WHAT "larson hand-off: slot arrays of 1 KiB - 32 KiB blocks passed to new threads, sized frees"
#else
#define MIN_SIZE   16
#define MAX_SIZE   1024
#define SLOTS      2048
#define GENERATION 50000
#define DEF_WORK   6000000
#define WHAT "larson hand-off: slot arrays of 16 - 1,024 B blocks passed to new threads, sized frees"
#endif

/* C23's free_sized, when something in the process defines it: looked up at
 * run time, since a weak reference would be resolved (to nothing) when the
 * program is linked, before any allocator is preloaded. */
static void (*free_sized_fn)(void *p, size_t n);

struct chain {
	uint64_t left;        /* replacements still to do */
	struct wl_rng r;
	void *p[SLOTS];
	uint32_t size[SLOTS];
};

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static unsigned chains_done;
static pthread_attr_t detached;

static void release(void *p, size_t n)
{
	wl_check(p, n);
	if (free_sized_fn)
		free_sized_fn(p, n);
	else
		free(p);
}

static void fill(struct chain *c, unsigned k)
{
	size_t n = MIN_SIZE + wl_below(&c->r, MAX_SIZE - MIN_SIZE + 1);
	c->p[k] = wl_malloc(n);
	c->size[k] = (uint32_t)n;
	wl_stamp(c->p[k], n);
}

static void start(struct chain *c);

/* One thread's life: GENERATION replacements, then a successor. */
static void *generation(void *arg)
{
	struct chain *c = arg;
	uint64_t n = c->left < GENERATION ? c->left : GENERATION;
	for (uint64_t i = 0; i < n; i++) {
		unsigned k = (unsigned)wl_below(&c->r, SLOTS);
		release(c->p[k], c->size[k]);
		fill(c, k);
	}
	c->left -= n;
	if (c->left) {
		start(c);          /* the chain belongs to the successor from here */
		return NULL;
	}
	pthread_mutex_lock(&done_lock);
	chains_done++;
	pthread_cond_signal(&done_cond);
	pthread_mutex_unlock(&done_lock);
	return NULL;
}

static void start(struct chain *c)
{
	pthread_t t;
	int e = pthread_create(&t, &detached, generation, c);
	if (e) {
		fprintf(stderr, "pthread_create: %s\n", strerror(e));
		_exit(1);
	}
}

int main(int argc, char **argv)
{
	struct wl_opts o = wl_parse(argc, argv, WHAT, DEF_WORK);
	*(void **)&free_sized_fn = dlsym(RTLD_DEFAULT, "free_sized");
	pthread_attr_init(&detached);
	pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
	struct chain **c = wl_malloc(o.threads * sizeof(*c));
	for (unsigned i = 0; i < o.threads; i++) {
		c[i] = wl_malloc(sizeof(**c));
		c[i]->left = wl_share(o.work, o.threads, i);
		c[i]->r = wl_rng_init(o.seed, i + 1);
		for (unsigned k = 0; k < SLOTS; k++)
			fill(c[i], k);
	}

	double t0 = wl_now();
	unsigned started = 0;
	for (unsigned i = 0; i < o.threads; i++)
		if (c[i]->left) {
			start(c[i]);
			started++;
		}
	pthread_mutex_lock(&done_lock);
	while (chains_done < started)
		pthread_cond_wait(&done_cond, &done_lock);
	pthread_mutex_unlock(&done_lock);
	double secs = wl_now() - t0;

	for (unsigned i = 0; i < o.threads; i++) {
		for (unsigned k = 0; k < SLOTS; k++)
			release(c[i]->p[k], c[i]->size[k]);
		free(c[i]);
	}
	free(c);
	printf("ops=%" PRIu64 " secs=%.6f threads=%u free=%s\n",
	       o.work, secs, o.threads, free_sized_fn ? "sized" : "plain");
	fflush(stdout);
	return 0;
}
