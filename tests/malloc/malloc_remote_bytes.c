/* SPDX-License-Identifier: MIT */
/*
 * malloc_remote_bytes.c - big blocks freed by another thread go back to
 * their owner soon. A thread that frees blocks of slabs another thread owns
 * sends them by message; a message that waited for 59 objects before it
 * went held 59 x 16 KiB of the owner's memory out of its reach (with many
 * threads, most of the process's memory). Here the owner allocates eight
 * 16 KiB blocks (two slabs, both still its own), another thread frees six
 * of them and stays alive (no flush), and the owner's next six allocations
 * must come mostly from those blocks rather than from new slabs.
 */
#define _GNU_SOURCE
#include "test.h"

#include <pthread.h>
#include <stdlib.h>

#define SIZE   (16u << 10)
#define OWNED  8
#define FREED  6

static void *blocks[OWNED];
static pthread_barrier_t step;

static void *freer(void *arg)
{
	(void)arg;
	free(malloc(100));   /* a heap of its own (ctest runs this without the start-up arena) */
	pthread_barrier_wait(&step);            /* it has a heap */
	pthread_barrier_wait(&step);            /* the owner has its blocks */
	for (int i = 0; i < FREED; i++)
		free(blocks[i]);
	pthread_barrier_wait(&step);            /* freed; stay alive, no flush */
	pthread_barrier_wait(&step);            /* the owner has looked */
	return NULL;
}

int main(void)
{
	pthread_t t;
	void *again[FREED];
	int reused = 0;

	REQUIRE(pthread_barrier_init(&step, NULL, 2) == 0);
	REQUIRE(pthread_create(&t, NULL, freer, NULL) == 0);
	pthread_barrier_wait(&step);
	for (int i = 0; i < OWNED; i++)
		REQUIRE(blocks[i] = malloc(SIZE));
	pthread_barrier_wait(&step);
	pthread_barrier_wait(&step);
	for (int i = 0; i < FREED; i++) {
		REQUIRE(again[i] = malloc(SIZE));
		for (int j = 0; j < FREED; j++)
			reused += again[i] == blocks[j];
	}
	pthread_barrier_wait(&step);
	pthread_join(t, NULL);
	printf("%d of %d new blocks were the ones the other thread freed\n", reused, FREED);
	CHECK(reused >= FREED / 2);
	for (int i = 0; i < FREED; i++)
		free(again[i]);
	for (int i = FREED; i < OWNED; i++)
		free(blocks[i]);
	return test_done("malloc_remote_bytes");
}
