/* SPDX-License-Identifier: MIT */
/*
 * malloc_double_free.c - a small block freed twice is reported wherever the
 * first free left it: its slab's owner-local list (deep, not the head), this
 * thread's cpu freelist as a foreign object, a message to the slab's owner,
 * the slab's shared freelist after a flush, or the slow path of a thread
 * with no heap. And no false alarm: blocks reused through every allocation
 * path (fast, slow, calloc, realloc, the aligned family) free cleanly, with
 * any data in their second word.
 */
#define _GNU_SOURCE
#include "test.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WANT "uslab: free(): double free 0x"

static void (*volatile vfree)(void *) = free;

/* ---- where the block waits ------------------------------------------------------------ */

/* a slab this thread owns: its local list, 60 frees deep */
static void owner_local_deep(void *arg)
{
	void *p[100];

	(void)arg;
	for (int i = 0; i < 100; i++)
		p[i] = malloc(64);
	for (int i = 0; i < 100; i++)
		vfree(p[i]);
	vfree(p[40]);
}

struct blocks {
	void *p[32];
	size_t size;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stage;
};

static void *make_blocks(void *arg)
{
	struct blocks *b = arg;

	for (int i = 0; i < 32; i++)
		b->p[i] = malloc(b->size);
	return NULL;
}

/* blocks of a thread that has exited: nobody owns their slab */
static void blocks_of_exited_thread(struct blocks *b, size_t size)
{
	pthread_t t;

	b->size = size;
	REQUIRE(pthread_create(&t, NULL, make_blocks, b) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
}

/* this thread's cpu freelist, as another slab's object */
static void foreign_cached(void *arg)
{
	struct blocks b;

	(void)arg;
	blocks_of_exited_thread(&b, 96);
	for (int i = 0; i < 8; i++)
		vfree(b.p[i]);
	vfree(b.p[2]);
}

/* the slab's own freelist, the cached frees given back by the flush */
static void slab_freelist(void *arg)
{
	struct blocks b;

	(void)arg;
	blocks_of_exited_thread(&b, 112);
	/* the preloaded library's, found at run time */
	void (*flush)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "uslab_thread_flush");

	REQUIRE(flush);
	for (int i = 0; i < 8; i++)
		vfree(b.p[i]);
	flush();
	vfree(b.p[5]);
}

/* a thread that owns its slab and waits: frees of its blocks go by message */
static void *owner_waits(void *arg)
{
	struct blocks *b = arg;

	make_blocks(b);
	pthread_mutex_lock(&b->lock);
	b->stage = 1;
	pthread_cond_broadcast(&b->cond);
	while (b->stage != 2)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

static void in_message(void *arg)
{
	struct blocks b = { .size = 80, .lock = PTHREAD_MUTEX_INITIALIZER,
			    .cond = PTHREAD_COND_INITIALIZER };
	pthread_t t;

	(void)arg;
	REQUIRE(pthread_create(&t, NULL, owner_waits, &b) == 0);
	pthread_mutex_lock(&b.lock);
	while (b.stage != 1)
		pthread_cond_wait(&b.cond, &b.lock);
	pthread_mutex_unlock(&b.lock);
	for (int i = 0; i < 6; i++)   /* into this thread's message to the owner */
		vfree(b.p[i]);
	vfree(b.p[1]);
}

/* a thread with no heap frees through the slow path */
static void *free_twice(void *arg)
{
	vfree(arg);
	vfree(arg);
	return NULL;
}

static void heapless_thread(void *arg)
{
	struct blocks b;
	pthread_t t;

	(void)arg;
	blocks_of_exited_thread(&b, 48);
	REQUIRE(pthread_create(&t, NULL, free_twice, b.p[7]) == 0);
	pthread_join(t, NULL);
}

/* ---- no false alarm --------------------------------------------------------------------- */

static void *(*volatile vmalloc)(size_t) = malloc;

/* Blocks of every small class, taken by each allocation path and freed,
 * over and over, so each path hands out blocks that were free (marked)
 * before; their second words are left as the allocation made them, or
 * filled with data. */
static void reuse_every_path(void)
{
	enum { N = 512 };
	static void *p[N];

	for (int round = 0; round < 6; round++) {
		for (int i = 0; i < N; i++) {
			size_t n = 16 + (size_t)(i * 37 + round * 101) % 4000;
			void *q = NULL;

			switch ((i + round) % 6) {
			case 0: q = vmalloc(n); break;
			case 1: q = calloc(1, n); break;
			case 2: q = realloc(vmalloc(n / 2 + 1), n); break;
			case 3: q = aligned_alloc(64, n); break;
			case 4: REQUIRE(posix_memalign(&q, 32, n) == 0); break;
			case 5: q = memalign(128, n); break;
			}
			REQUIRE(q);
			if (i % 3 == 0)
				memset(q, 0xA5, 16);   /* data in the second word */
			p[i] = q;
		}
		for (int i = 0; i < N; i++)
			free(p[(i * 7) % N]);
	}
}

/* Live blocks whose second word has the mark's low byte, and all of the
 * mark but one other bit: the inline free's one-byte test sends them to
 * the slow path, which finds no mark and frees them as the inline path
 * would have; and a second free of one is still caught (mark_byte_double). */
static uintptr_t the_mark(void)
{
	uintptr_t mark;
	void *p = vmalloc(64);

	vfree(p);
	memcpy(&mark, (char *)p + sizeof(void *), sizeof(mark));   /* a free block holds it */
	return mark;
}

static void mark_byte_in_data(void)
{
	uintptr_t mark = the_mark();
	enum { ROUNDS = 4000, SEEN = 512 };
	static void *seen[SEEN];
	unsigned distinct = 0;

	REQUIRE((mark & 1) && (mark & 0xff) >= 0x81 && (mark & 0xff) <= 0xef);
	for (unsigned i = 0; i < ROUNDS; i++) {
		void *q = vmalloc(64);
		uintptr_t near = mark ^ (uintptr_t)1 << (8 + i % (8 * sizeof(mark) - 8));
		unsigned k = 0;

		REQUIRE(q);
		while (k < distinct && seen[k] != q)
			k++;
		if (k == distinct && distinct < SEEN)
			seen[distinct++] = q;
		memcpy((char *)q + sizeof(void *), &near, sizeof(near));
		vfree(q);
	}
	/* freed, not lost, and where the inline path puts the owner's frees:
	 * the next malloc of the class takes the same block back */
	CHECK_EQ(distinct, 1);
}

static void mark_byte_double(void *arg)
{
	uintptr_t mark = the_mark() ^ (uintptr_t)1 << 40;
	void *q = vmalloc(64);

	(void)arg;
	memcpy((char *)q + sizeof(void *), &mark, sizeof(mark));
	vfree(q);
	vfree(q);
}

int main(void)
{
	reuse_every_path();
	mark_byte_in_data();
	test_expect_abort(mark_byte_double, NULL, WANT);
	test_expect_abort(owner_local_deep, NULL, WANT);
	test_expect_abort(foreign_cached, NULL, WANT);
	test_expect_abort(slab_freelist, NULL, WANT);
	test_expect_abort(in_message, NULL, WANT);
	test_expect_abort(heapless_thread, NULL, WANT);
	reuse_every_path();
	return test_done("malloc_double_free");
}
