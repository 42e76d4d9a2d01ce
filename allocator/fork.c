/* SPDX-License-Identifier: MIT */
/*
 * fork.c - process life: fork handlers over every layer's locks.
 *
 * prepare takes every allocator lock in the documented order (cache
 * registry, heaps, each cache's list_lock, huge table, segments, metadata,
 * dwcas stripes), so no lock is held at fork() by a thread that will not
 * exist in the child. parent and child release them in reverse; the child
 * then flushes the heaps of the threads that did not survive, so their
 * cached slabs are not stranded, and can allocate at once.
 */
#include "kmalloc.h"

#include <pthread.h>

static void fork_prepare(void)
{
	caches_lock_all();
	kmalloc_fork_prepare();
	segment_lock_all();
	dwcas_lock_all();
}

static void fork_release(void)
{
	dwcas_unlock_all();
	segment_unlock_all();
	kmalloc_fork_release();
	caches_unlock_all();
}

static void fork_child(void)
{
	fork_release();
	caches_reclaim_dead_heaps();
}

__attribute__((constructor)) static void uslab_process_init(void)
{
	dwcas_init();
	pthread_atfork(fork_prepare, fork_release, fork_child);
}
